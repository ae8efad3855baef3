//! CHECK: compare the kernel with what ADD reported (prevResult) and name every
//! difference. Read-only: it changes nothing.

use crate::addressing;
use crate::attachment::Attachment;
use crate::attachment::{self, Ownership};
use crate::cni::env::Env;
use crate::cni::result::{format_mac, CniResult, IpConfig, RouteEntry};
use crate::cni::{code, Error, Result};
use crate::config::{Config, Mtu};
use crate::firewall::{self, Checking, Diff, KINDS};
use crate::netlink::{LinkKind, Netlink, NftablesOnDemand, Route, RouteAttrs, MAIN_TABLE};
use crate::netns::{Netns, OpenError};
use crate::wire::kind_name;
use crate::wire::mtu::Auto;
use crate::wire::port;

pub fn check(env: &Env, conf: &Config) -> Result<()> {
    let prev = conf.prev_result.as_ref().ok_or_else(|| {
        Error::config("CHECK needs prevResult (the result of ADD) in the network config")
    })?;
    let prev = CniResult::from_json(prev)?;
    let netns = match Netns::open(&env.netns) {
        Ok(ns) => ns,
        Err(OpenError::Missing) => {
            return Err(Error::new(
                code::CHECK_MISMATCH,
                format!("CNI_NETNS {} does not exist any more", env.netns),
            ))
        }
        Err(OpenError::Unusable(e)) => return Err(e),
    };
    let (index, container) = prev
        .interfaces
        .iter()
        .enumerate()
        .find(|(_, i)| i.name == env.ifname && (i.sandbox.is_empty() || i.sandbox == env.netns))
        .ok_or_else(|| {
            Error::config(format!(
                "prevResult has no interface {} in sandbox {}",
                env.ifname, env.netns
            ))
        })?;
    let ips: Vec<&IpConfig> = prev
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none_or(|i| i == index))
        .collect();

    let mut diffs = Vec::new();
    let mut mtu = check_host(conf, env, &ips, &mut diffs)?;
    // Every kind of nf_tables state, on one socket; remembered apart, since the remedy
    // follows from which differences the restore command can repair.
    let addresses: Vec<_> = ips.iter().map(|ip| ip.address).collect();
    let who = Attachment::of(env, conf);
    let mut nft = NftablesOnDemand::default();
    let mut checking = Checking {
        conf,
        nft: &mut nft,
        who: &who,
        addresses: &addresses,
        mac: &container.mac,
    };
    let mut firewall_diffs: Vec<Diff> = Vec::new();
    for kind in KINDS {
        firewall_diffs.extend(kind.check(&mut checking)?);
    }
    drop(nft);
    let inside = netns.run(|| look_inside(&env.ifname))?;
    match inside {
        None => diffs.push(format!("{} is missing from {}", env.ifname, env.netns)),
        Some(found) => {
            if let Some(m) = &mut mtu {
                m.compare(&env.ifname, found.mtu);
            }
            // disableContainerInterface: ADD left it down on purpose.
            if found.up == conf.disable_container_interface {
                diffs.push(format!(
                    "{} is {} but ADD left it {}",
                    env.ifname,
                    if found.up { "up" } else { "down" },
                    if found.up { "down" } else { "up" },
                ));
            }
            if !container.mac.is_empty() && !found.mac.eq_ignore_ascii_case(&container.mac) {
                diffs.push(format!(
                    "{} has MAC {} but ADD reported {}",
                    env.ifname, found.mac, container.mac
                ));
            }
            for ip in &ips {
                if !found.addresses.contains(&ip.address) {
                    diffs.push(format!(
                        "address {} is missing from {} (it has {})",
                        ip.address,
                        env.ifname,
                        list(&found.addresses)
                    ));
                }
            }
            // Only routes through this interface's subnets are academy's to check: a
            // later plugin in the chain may add others, which the spec allows.
            let ours = prev.routes.iter().filter(|r| {
                r.gw.is_none_or(|gw| ips.iter().any(|ip| ip.address.contains(gw)))
            });
            for route in ours {
                let route = &with_config_attrs(conf, route);
                if !found.routes.iter().any(|r| same_route(route, r)) {
                    diffs.push(format!(
                        "route {} is missing from {}",
                        describe(route),
                        env.netns
                    ));
                }
            }
        }
    }
    diffs.extend(mtu.and_then(|m| m.diff(container.mtu)));
    // What an admin's flush or a reload takes while the container runs, academy rebuilds
    // from its store and the links without touching the container; anything else needs
    // the attachment made again.
    let restorable = diffs.is_empty() && firewall_diffs.iter().all(|d| d.restorable);
    diffs.extend(firewall_diffs.into_iter().map(|d| d.text));
    if diffs.is_empty() {
        return Ok(());
    }
    let details = if restorable {
        format!(
            "academy's packet-path state (nf_tables, traffic control) is not as ADD left it: {}",
            firewall::RESTORE_HINT
        )
    } else {
        "the attachment is not as ADD left it; DEL and ADD it again to repair it".to_string()
    };
    Err(Error::new(
        code::CHECK_MISMATCH,
        format!(
            "CHECK found {} difference(s): {}",
            diffs.len(),
            diffs.join("; ")
        ),
    )
    .details(details))
}

/// The bridge, the host veth, the masquerade and the store, from the host. Returns the
/// MTU comparison, for the container's interface to join.
fn check_host(
    conf: &Config,
    env: &Env,
    ips: &[&IpConfig],
    diffs: &mut Vec<String>,
) -> Result<Option<MtuCheck>> {
    let mut nl = Netlink::open()?;
    let mut mtu = MtuCheck::new(&mut nl, conf.mtu)?;
    let bridge = nl.link(&conf.bridge)?;
    match &bridge {
        None => diffs.push(format!("bridge {} is missing", conf.bridge)),
        Some(b) if b.kind != LinkKind::Bridge => diffs.push(format!(
            "{} is {}, not a bridge",
            conf.bridge,
            kind_name(&b.kind)
        )),
        Some(b) => {
            if let Some(m) = mtu.as_mut().filter(|m| m.auto.is_some()) {
                m.compare(&format!("bridge {}", conf.bridge), b.mtu);
                m.bridge_held = b.mtu.is_some_and(|got| got < m.want);
            }
        }
    }
    let who = Attachment::of(env, conf);
    let host_name = who.host_name();
    match nl.link(&host_name)? {
        None => diffs.push(format!("host veth {host_name} is missing")),
        Some(veth) => {
            if attachment::ownership(&veth, &who.alias()) != Ownership::Ours {
                diffs.push(format!(
                    "host veth {host_name} is not labelled as this attachment's"
                ));
            }
            if !veth.up {
                diffs.push(format!("host veth {host_name} is down"));
            }
            if let Some(m) = &mut mtu {
                m.compare(&format!("host veth {host_name}"), veth.mtu);
            }
            let bridge_index = bridge.as_ref().map(|b| b.index);
            if veth.controller.is_none() || veth.controller != bridge_index {
                diffs.push(format!(
                    "host veth {host_name} is not attached to bridge {}",
                    conf.bridge
                ));
            } else {
                port::check(&mut nl, &veth, &conf.port, diffs)?;
            }
        }
    }
    if let (Some(b), true) = (&bridge, conf.port.vlan_filtering()) {
        if nl.vlan_filtering(b.index)? != Some(true) {
            diffs.push(format!("bridge {} does not filter by VLAN", conf.bridge));
        }
    }
    addressing::check(env, conf, ips, diffs)?;
    Ok(mtu)
}

/// The MTU the config asks of both veth ends (and of the bridge with `"auto"`, which ADD
/// sets on it), and each interface found with another.
struct MtuCheck {
    want: u32,
    /// With `"auto"`, recomputed now: why the node gives `want` (its default routes).
    auto: Option<String>,
    /// "host veth NAME" (or the bridge, or the ifname), and its MTU.
    wrong: Vec<(String, u32)>,
    /// With `"auto"`, the bridge is below what the node gives now: ADD raises it only
    /// once none of its ports has a lower MTU (wire/mtu.rs, `fit_bridge`).
    bridge_held: bool,
}

impl MtuCheck {
    /// None when the config leaves the MTU to the kernel: nothing to compare.
    fn new(nl: &mut Netlink, mtu: Mtu) -> Result<Option<MtuCheck>> {
        let (want, auto) = match mtu {
            Mtu::Kernel => return Ok(None),
            Mtu::Fixed(m) => (m, None),
            Mtu::Auto => {
                let auto = Auto::read(nl)?;
                (auto.mtu, Some(auto.reason()))
            }
        };
        Ok(Some(MtuCheck {
            want,
            auto,
            wrong: Vec::new(),
            bridge_held: false,
        }))
    }

    fn compare(&mut self, what: &str, got: Option<u32>) {
        if let Some(got) = got.filter(|m| *m != self.want) {
            self.wrong.push((what.to_string(), got));
        }
    }

    /// One difference naming each interface and, with `"auto"`, what the node's default
    /// routes give now and why (and what ADD chose, when the result reports it).
    fn diff(self, reported: Option<u32>) -> Option<String> {
        let found: Vec<String> = self
            .wrong
            .iter()
            .map(|(what, got)| format!("{what} has MTU {got}"))
            .collect();
        let found = match found.split_last()? {
            (last, []) => last.clone(),
            (last, rest) => format!("{} and {last}", rest.join(", ")),
        };
        let want = self.want;
        Some(match self.auto {
            None => format!("{found}, but the config's mtu is {want}"),
            Some(why) => {
                let chose = match reported {
                    Some(m) if m != want => format!(" (ADD chose {m})"),
                    _ => String::new(),
                };
                let held = match self.bridge_held {
                    true => format!(
                        "; the bridge rises to {want} at the first ADD once none of its ports has a lower MTU"
                    ),
                    false => String::new(),
                };
                format!("{found}, but mtu \"auto\" gives {want} now: {why}{chose}{held}")
            }
        })
    }
}

struct Inside {
    up: bool,
    mac: String,
    mtu: Option<u32>,
    addresses: Vec<ipnetwork::IpNetwork>,
    /// The routes through the interface, of every table.
    routes: Vec<Route>,
}

fn look_inside(ifname: &str) -> Result<Option<Inside>> {
    let mut nl = Netlink::open()?;
    let Some(link) = nl.link(ifname)? else {
        return Ok(None);
    };
    let addresses = nl.addresses(link.index)?;
    let mut routes = Vec::new();
    for ipv6 in [false, true] {
        routes.extend(
            nl.routes(ipv6)?
                .into_iter()
                .filter(|r| r.oif == Some(link.index)),
        );
    }
    Ok(Some(Inside {
        up: link.up,
        mac: link.mac.map(format_mac).unwrap_or_default(),
        mtu: link.mtu,
        addresses,
        routes,
    }))
}

fn list(items: &[ipnetwork::IpNetwork]) -> String {
    if items.is_empty() {
        return "none".into();
    }
    items
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A runtime built on libcni before 1.2 (podman 4, containerd 1.6/1.7, cnitool 1.1)
/// re-encodes the result with routes of dst and gw only, so the prevResult it sends may
/// have lost what ADD applied: the config's route of the same destination and gateway
/// says it then.
fn with_config_attrs(conf: &Config, route: &RouteEntry) -> RouteEntry {
    let mut route = route.clone();
    if route.attrs != RouteAttrs::default() {
        return route;
    }
    let asked = conf
        .builtin()
        .into_iter()
        .flat_map(|b| &b.routes)
        .find(|r| r.dst == route.dst && (r.gw.is_none() || r.gw == route.gw));
    if let Some(r) = asked {
        route.attrs = r.attrs;
    }
    route
}

/// The kernel's route is the one ADD reported: destination, gateway (when the result
/// names one), table, and each attribute the result sets (one it leaves unset is the
/// kernel's to choose, e.g. IPv6's metric 1024). A second network's route of the same
/// destination sits beside this one in the kernel (as with the reference plugin), so
/// each network's CHECK finds its own through its own interface.
fn same_route(want: &RouteEntry, got: &Route) -> bool {
    let a = &want.attrs;
    let matches = |want: Option<u32>, got: Option<u32>| want.is_none() || want == got;
    want.dst == got.dst
        && want.gw.is_none_or(|gw| got.gateway == Some(gw))
        && a.table.unwrap_or(MAIN_TABLE) == got.table
        && a.scope.is_none_or(|s| s == got.scope)
        && matches(a.priority, got.priority)
        && matches(a.mtu, got.mtu)
        && matches(a.advmss, got.advmss)
}

fn describe(r: &RouteEntry) -> String {
    let mut text = format!(
        "{} via {}",
        r.dst,
        r.gw.map(|g| g.to_string()).unwrap_or("-".into())
    );
    let a = &r.attrs;
    for (key, value) in [
        ("table", a.table),
        ("priority", a.priority),
        ("scope", a.scope.map(u32::from)),
        ("mtu", a.mtu),
        ("advmss", a.advmss),
    ] {
        if let Some(v) = value {
            text.push_str(&format!(" {key} {v}"));
        }
    }
    text
}
