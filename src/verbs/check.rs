//! CHECK: compare the kernel with what ADD reported (prevResult) and name every
//! difference. Read-only: it changes nothing.

use crate::addressing;
use crate::attachment::Attachment;
use crate::attachment::{self, Ownership};
use crate::cni::env::Env;
use crate::cni::result::{format_mac, CniResult, IpConfig, RouteEntry};
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::firewall::macspoof;
use crate::firewall::masquerade;
use crate::firewall::nat;
use crate::firewall::ports;
use crate::netlink::{LinkKind, Netlink, Route, RouteAttrs, MAIN_TABLE};
use crate::netns::{Netns, OpenError};
use crate::wire::kind_name;
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
    check_host(conf, env, &ips, &mut diffs)?;
    if conf.mac_spoof_check {
        macspoof::check(conf, &Attachment::of(env, conf), &container.mac, &mut diffs)?;
    }
    let inside = netns.run(|| look_inside(&env.ifname))?;
    match inside {
        None => diffs.push(format!("{} is missing from {}", env.ifname, env.netns)),
        Some(found) => {
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
    if diffs.is_empty() {
        return Ok(());
    }
    // Only the masquerade is lost to an admin's flush while the container runs; academy
    // can rebuild that from its store without touching the container.
    let nat_only = diffs.iter().all(|d| d.contains("nf_tables"));
    let details = if nat_only {
        format!(
            "the outbound NAT is not as ADD left it: {}",
            nat::RESTORE_HINT
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

/// The bridge, the host veth, the masquerade and the store, from the host.
fn check_host(conf: &Config, env: &Env, ips: &[&IpConfig], diffs: &mut Vec<String>) -> Result<()> {
    let mut nl = Netlink::open()?;
    let bridge = nl.link(&conf.bridge)?;
    match &bridge {
        None => diffs.push(format!("bridge {} is missing", conf.bridge)),
        Some(b) if b.kind != LinkKind::Bridge => diffs.push(format!(
            "{} is {}, not a bridge",
            conf.bridge,
            kind_name(&b.kind)
        )),
        Some(_) => {}
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
    let addresses: Vec<_> = ips.iter().map(|ip| ip.address).collect();
    if conf.ip_masq {
        masquerade::check(conf, &who.holder(), &addresses, diffs)?;
    }
    ports::check(conf, &who, &addresses, diffs)?;
    addressing::check(env, conf, ips, diffs)
}

struct Inside {
    up: bool,
    mac: String,
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
