//! A request the kernel refused, as the user sees it: the CNI code for it, what academy
//! asked, the kernel's answer, and what to do about the answers that have a remedy.

use super::{code, Error};
use crate::netlink::{NlError, Subsystem};

impl From<NlError> for Error {
    fn from(e: NlError) -> Error {
        let hint = match e.errno {
            libc::EPERM | libc::EACCES => "academy must run as root (CAP_NET_ADMIN)",
            libc::ENOMEM | libc::ENOBUFS => "the node is short of memory; try again later",
            libc::EOPNOTSUPP | libc::EAFNOSUPPORT if e.subsystem == Some(Subsystem::NfTables) => {
                "the kernel lacks nf_tables NAT (nf_tables, nft_masq); load those modules or set ipMasq to false"
            }
            _ => "",
        };
        Error::new(code::KERNEL_REFUSED, format!("kernel refused to {e}")).details(hint)
    }
}
