//! GC (CNI 1.1): release everything of this network that the runtime's valid list does
//! not name. Written with the IPAM store.

use crate::cni::{Error, Result};
use crate::config::Config;

pub fn gc(_conf: &Config) -> Result<()> {
    Err(Error::new(
        crate::cni::code::TRY_AGAIN_LATER,
        "GC is not implemented yet",
    ))
}
