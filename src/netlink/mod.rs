//! Netlink, the only way academy talks to the kernel's network stack.
//!
//! - `socket`: one blocking netlink socket of any protocol, with the request/ack loop
//!   shared by every protocol: sequence numbers, acks, dumps, batches, and the kernel's
//!   own error text.
//! - `route`: rtnetlink (links, addresses, routes). The only user of
//!   netlink-packet-route, whose API breaks in almost every minor release.
//! - `nftables`: nf_tables over NETLINK_NETFILTER, the masquerade of `ipMasq` and the
//!   published ports of `portMappings`. Its
//!   messages are encoded here by hand (no crate covers nf_tables).
//!
//! Everything outside this folder speaks in the plain types re-exported here.

mod nftables;
mod route;
mod socket;

pub use nftables::{
    key_text, set_name as nftables_set_name, stored_comment, Family, MasqElement, MasqNetwork,
    Nftables, PortElement, PortKey,
};
pub use route::{Link, LinkKind, LinkRef, Netlink, VethPair};
pub use socket::NlError;

use crate::cni::{code, Error};

/// A refused request as the user sees it: what academy asked, the kernel's answer, and
/// what to do about the answers that have a remedy.
impl From<NlError> for Error {
    fn from(e: NlError) -> Error {
        let hint = match e.errno {
            libc::EPERM | libc::EACCES => "academy must run as root (CAP_NET_ADMIN)",
            libc::ENOMEM | libc::ENOBUFS => "the node is short of memory; try again later",
            libc::EOPNOTSUPP | libc::EAFNOSUPPORT if e.request.contains("nf_tables") => {
                "the kernel lacks nf_tables NAT (nf_tables, nft_masq); load those modules or set ipMasq to false"
            }
            _ => "",
        };
        Error::new(code::KERNEL_REFUSED, format!("kernel refused to {e}")).details(hint)
    }
}
