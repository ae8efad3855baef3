//! The MTU of the bridge and both veth ends: what the config's `mtu` asks for, and for
//! `"auto"` the MTU of the interface the node's default route leaves by, read over
//! rtnetlink (the main table's default routes, then their output links) at each ADD
//! and again at each CHECK.

use crate::cni::Result;
use crate::config::{below_ipv6_minimum, Mtu, IPV6_MINIMUM};
use crate::netlink::{Link, Netlink};

/// The kernel's default MTU for a bridge or a veth (ETH_DATA_LEN): what `"auto"` uses on
/// a node without a default route.
pub const KERNEL_DEFAULT: u32 = 1500;

/// The interface one family's default route leaves by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uplink {
    pub family: &'static str,
    pub name: String,
    pub mtu: u32,
}

/// What `"auto"` found on the node: each family's uplink, and the MTU they give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auto {
    pub uplinks: Vec<Uplink>,
    pub mtu: u32,
}

impl Auto {
    /// Reads the node's default routes. Per family, the route the kernel uses is the
    /// lowest metric's; several at that metric (a multipath route's next hops, or IPv4
    /// routes of equal metric, of which the kernel may pick any) give the lowest MTU of
    /// their interfaces, since traffic may leave by any of them. With both families
    /// routed by default, the lower of the two: one MTU serves the container's IPv4 and
    /// IPv6 alike. No default route at all: the kernel's default, 1500 (a lab or an
    /// isolated node has none, and refusing ADD there would help nobody).
    pub fn read(nl: &mut Netlink) -> Result<Auto> {
        let mut uplinks = Vec::new();
        for (ipv6, family) in [(false, "IPv4"), (true, "IPv6")] {
            uplinks.extend(uplink(nl, ipv6, family)?);
        }
        let mtu = uplinks
            .iter()
            .map(|u| u.mtu)
            .min()
            .unwrap_or(KERNEL_DEFAULT);
        Ok(Auto { uplinks, mtu })
    }

    /// Why this MTU, for a log line or CHECK's diff: "the node's IPv4 default route
    /// leaves by eth0 with MTU 1460".
    pub fn reason(&self) -> String {
        let each: Vec<String> = self
            .uplinks
            .iter()
            .map(|u| {
                format!(
                    "{} default route leaves by {} with MTU {}",
                    u.family, u.name, u.mtu
                )
            })
            .collect();
        match each.as_slice() {
            [] => {
                format!("the node has no default route, so the kernel's default {KERNEL_DEFAULT}")
            }
            [one] => format!("the node's {one}"),
            [v4, v6] => format!("the node's {v4} and its {v6}, the lower of the two"),
            _ => unreachable!("one uplink per family"),
        }
    }
}

fn uplink(nl: &mut Netlink, ipv6: bool, family: &'static str) -> Result<Option<Uplink>> {
    let routes = nl.default_routes(ipv6)?;
    // IPv4 routes without a metric have 0.
    let Some(lowest) = routes.iter().map(|r| r.priority.unwrap_or(0)).min() else {
        return Ok(None);
    };
    let mut best: Option<Uplink> = None;
    for route in routes.iter().filter(|r| r.priority.unwrap_or(0) == lowest) {
        let Some(oif) = route.oif else { continue };
        // Gone since the dump, or without an MTU: not a way out.
        let Some(Link {
            name,
            mtu: Some(mtu),
            ..
        }) = nl.link_at(oif)?
        else {
            continue;
        };
        if best.as_ref().is_none_or(|b| mtu < b.mtu) {
            best = Some(Uplink { family, name, mtu });
        }
    }
    Ok(best)
}

/// The MTU ADD gives the bridge and both veth ends.
pub struct Chosen {
    /// None: the kernel's default (the key is absent). With `"auto"`, once `fit_bridge`
    /// has run, the bridge's: lower than the node's while older ports hold the bridge.
    pub mtu: Option<u32>,
    /// `"auto"`: what the node's default routes give, and why.
    auto: Option<Auto>,
}

impl Chosen {
    /// The config's number, or for `"auto"` what the node's default routes give (with a
    /// line on stderr when the node has none).
    pub fn for_add(nl: &mut Netlink, mtu: Mtu) -> Result<Chosen> {
        Ok(match mtu {
            Mtu::Kernel => Chosen {
                mtu: None,
                auto: None,
            },
            Mtu::Fixed(m) => Chosen {
                mtu: Some(m),
                auto: None,
            },
            Mtu::Auto => {
                let auto = Auto::read(nl)?;
                if auto.uplinks.is_empty() {
                    eprintln!("academy: mtu \"auto\": {}", auto.reason());
                }
                Chosen {
                    mtu: Some(auto.mtu),
                    auto: Some(auto),
                }
            }
        })
    }

    /// An MTU below IPv6's minimum on a network with IPv6 (`ipv6` names its range or
    /// address) is refused before anything is set: the kernel would take every IPv6
    /// address off the bridge, and each later ADD would fail on its own.
    pub fn refuse_below_ipv6_minimum(&self, ipv6: &str) -> Result<()> {
        let Some(mtu) = self.mtu.filter(|m| *m < IPV6_MINIMUM) else {
            return Ok(());
        };
        let what = match &self.auto {
            Some(auto) => format!("mtu \"auto\" gives {mtu} ({}), which is", auto.reason()),
            None => format!("mtu {mtu} is"),
        };
        Err(below_ipv6_minimum(what, ipv6))
    }

    /// With `"auto"`, the bridge takes the MTU the node gives, but never above its
    /// smallest port's: the bridge sends a port no frame larger than the bridge's MTU,
    /// and the kernel drops one larger than the port's at the port, without an ICMP to
    /// say so. So a bridge whose uplink rose stays at its older ports' MTU until they
    /// are gone (the new container gets that MTU too, and CHECK says what the node gives
    /// now), and one whose uplink fell goes down at once. A bridge without ports takes
    /// the node's; `replaced`, this attachment's host veth (a stale pair ADD is about to
    /// delete), is not counted as one. A number leaves an existing bridge as it is, as
    /// the reference does.
    pub fn fit_bridge(
        &mut self,
        nl: &mut Netlink,
        mut bridge: Link,
        replaced: &str,
    ) -> Result<Link> {
        let Some(auto) = &self.auto else {
            return Ok(bridge);
        };
        let smallest = nl
            .ports(bridge.index)?
            .into_iter()
            .filter(|port| port.name != replaced)
            .filter_map(|port| Some((port.mtu?, port.name)))
            .min();
        let mtu = match smallest {
            Some((port_mtu, port)) if port_mtu < auto.mtu => {
                eprintln!(
                    "academy: mtu \"auto\" gives {} ({}), but bridge {} is held at {port_mtu}, the MTU of its port {port}, and this container gets {port_mtu} too: the bridge rises at the first ADD once none of its ports has a lower MTU",
                    auto.mtu,
                    auto.reason(),
                    bridge.name
                );
                port_mtu
            }
            _ => auto.mtu,
        };
        if bridge.mtu != Some(mtu) {
            nl.set_mtu(bridge.index, mtu)?;
            bridge.mtu = Some(mtu);
        }
        self.mtu = Some(mtu);
        Ok(bridge)
    }
}
