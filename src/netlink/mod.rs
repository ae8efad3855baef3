//! Netlink, the only way academy talks to the kernel's network stack.
//!
//! - `socket`: one blocking netlink socket of any protocol, with the request/ack loop
//!   shared by every protocol: sequence numbers, acks, dumps, batches, and the kernel's
//!   own error text.
//! - `route`: rtnetlink (links, addresses, routes), with `decode` reading its replies.
//! - `bridge`: bridge VLAN filtering, a port's VLAN entries and its isolated flag
//!   (rtnetlink's AF_BRIDGE family). With `route` and `decode`, the only users of
//!   netlink-packet-route, whose API breaks in almost every minor release.
//! - `nftables`: nf_tables over NETLINK_NETFILTER, the masquerade of `ipMasq` and the
//!   published ports of `portMappings`. Its
//!   messages are encoded here by hand (no crate covers nf_tables).
//! - `conntrack`: ctnetlink on the same socket protocol, encoded the same way: the UDP
//!   entries a newly published port must not keep (port mapping's ADD).
//!
//! Everything outside this folder speaks in the plain types re-exported here; the layer
//! knows nothing of CNI (src/cni/kernel.rs turns a refused request into a CNI error).

mod bridge;
mod conntrack;
mod decode;
mod nftables;
mod route;
mod socket;

pub use bridge::VlanEntry;
pub use conntrack::{flush_udp as flush_udp_conntrack, Flushed, UdpDestination};
pub use nftables::GuardedPort;
pub use nftables::{
    key_text, set_name as nftables_set_name, stored_comment, Family, MasqElement, MasqNetwork,
    MasqRule, NatChange, Nftables, NftablesOnDemand, PortElement, PortKey, SetElement, SetShape,
};
pub use nftables::{Expr, IptablesRemoval, IptablesRule, Verdict};
pub use route::{Link, LinkKind, Netlink, Route, RouteAttrs, VethPair, MAIN_TABLE};
pub use socket::NlError;
