//! STATUS (CNI 1.1): can ADD be served? Written with the IPAM store.

use crate::cni::{Error, Result};
use crate::config::Config;

pub fn status(_conf: &Config) -> Result<()> {
    Err(Error::new(
        crate::cni::code::NOT_AVAILABLE,
        "STATUS is not implemented yet",
    ))
}
