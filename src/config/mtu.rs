//! The `mtu` key: a number (the reference's meaning), `"auto"` (academy's own: the MTU
//! of the interface the node's default route leaves by, chosen at each ADD), or absent.

use super::Fields;
use crate::cni::{Error, Result};

/// What `mtu` asks of the bridge and both veth ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mtu {
    /// Absent (or 0, as the reference reads it): the kernel's default, 1500.
    #[default]
    Kernel,
    /// A number: the veth ends, and the bridge when ADD creates it.
    Fixed(u32),
    /// `"auto"`: the MTU of the node's default route's interface, per family the lower;
    /// the bridge is set to it too when it already exists with another, but never above
    /// its smallest port's.
    Auto,
}

impl Mtu {
    pub(super) fn parse(f: &Fields) -> Result<Mtu> {
        let Some(value) = f.get("mtu") else {
            return Ok(Mtu::Kernel);
        };
        if value.as_str() == Some("auto") {
            return Ok(Mtu::Auto);
        }
        let Some(m) = value.as_u64() else {
            return Err(Error::config(format!(
                "mtu must be a whole number or \"auto\", got {value}"
            )));
        };
        match m {
            // The reference plugin reads 0 as "the kernel's default".
            0 => Ok(Mtu::Kernel),
            68..=65535 => Ok(Mtu::Fixed(m as u32)),
            _ => Err(Error::config(format!(
                "mtu {m} is out of range (68 to 65535)"
            ))),
        }
    }
}
