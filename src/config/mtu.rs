//! The `mtu` key: a number (the reference's meaning), `"auto"` (academy's own: the MTU
//! of the interface the node's default route leaves by, chosen at each ADD), or absent.

use ipnetwork::IpNetwork;

use super::Fields;
use crate::cni::{Error, Result};

/// IPv6's minimum link MTU (RFC 8200, section 5). The kernel takes every IPv6 address
/// off a link set below it and refuses to add one there.
pub const IPV6_MINIMUM: u32 = 1280;

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

impl Mtu {
    /// A number below IPv6's minimum on a network with an IPv6 range, refused as the
    /// config is read: such an ADD could only fail, after setting the bridge below it
    /// (which takes its IPv6 gateway from every running container).
    pub(super) fn refuse_below_ipv6_minimum(self, ipv6_range: Option<IpNetwork>) -> Result<()> {
        match (self, ipv6_range) {
            (Mtu::Fixed(m), Some(range)) if m < IPV6_MINIMUM => Err(below_ipv6_minimum(
                format!("mtu {m} is"),
                &format!("the IPv6 range {range}"),
            )),
            _ => Ok(()),
        }
    }
}

/// The refusal of an MTU below IPv6's minimum: `what` says the MTU and where it came
/// from ("mtu 1279 is"), `ipv6` what makes the network one of IPv6 (its range, an
/// address IPAM gave).
pub fn below_ipv6_minimum(what: String, ipv6: &str) -> Error {
    Error::config(format!(
        "{what} below {IPV6_MINIMUM}, IPv6's minimum MTU, and the network has {ipv6}"
    ))
    .details(format!(
        "the kernel takes every IPv6 address off a link below {IPV6_MINIMUM}, the bridge's IPv6 gateway too: give the network an MTU of {IPV6_MINIMUM} or more (with \"auto\", raise the uplink's or set a number), or no IPv6 range"
    ))
}
