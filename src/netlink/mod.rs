//! Netlink, the only way academy talks to the kernel's network stack.
//!
//! - `socket`: one blocking netlink socket of any protocol, with the request/ack loop
//!   shared by every protocol: sequence numbers, acks, dumps, batches, and the kernel's
//!   own error text.
//! - `route`: rtnetlink (links, addresses, routes), with `decode` holding the address and
//!   route types and reading its replies into them.
//! - `bridge`: bridge VLAN filtering, a port's VLAN entries and its isolated flag
//!   (rtnetlink's AF_BRIDGE family).
//! - `tc`: traffic control (the bandwidth capability's TBF qdiscs, the ingress qdisc and
//!   its mirred redirect to an ifb) and the ifb links. With `route`, `bridge` and
//!   `decode`, the only users of netlink-packet-route, whose API breaks in almost every
//!   minor release.
//! - `nftables`: nf_tables over NETLINK_NETFILTER, encoded here by hand (no crate covers
//!   it): tables, chains, sets, elements, rules and their expressions, batches, dumps,
//!   and the change notifications `academy watch` reads. What academy keeps in them is
//!   src/firewall/'s.
//! - `conntrack`: ctnetlink on the same socket protocol, encoded the same way: the UDP
//!   entries a newly published port must not keep (port mapping's ADD).
//! - `nfnetlink`: what those two share, the attributes written and the messages of
//!   NETLINK_NETFILTER and the address family they address.
//! - `attributes`: netlink attributes read in place, by everything decoded here by hand
//!   (nf_tables, ctnetlink, and rtnetlink's links).
//!
//! Everything outside this folder speaks in the plain types re-exported here; the layer
//! knows nothing of CNI (src/cni/kernel.rs turns a refused request into a CNI error).

mod attributes;
mod bridge;
mod conntrack;
mod decode;
mod nfnetlink;
pub mod nftables;
mod route;
mod socket;
mod tc;

pub use bridge::VlanEntry;
pub use conntrack::{flush_udp as flush_udp_conntrack, Flushed, UdpDestination};
pub use decode::Route;
pub use nfnetlink::Family;
pub use nftables::{stored_comment, Nftables, NftablesOnDemand, Object, Step, Table, TableRule};
pub use nftables::{CmpOp, Expr, IptablesRemoval, IptablesRule, PayloadBase, Verdict};
pub use nftables::{Commit as NftCommit, Monitor as NftMonitor, Notice as NftNotice};
pub use route::{Link, LinkKind, Netlink, RouteAttrs, VethPair, MAIN_TABLE};
pub use socket::{NlError, NlResult, Subsystem};
pub use tc::Tbf;
