//! CHECK: compare the kernel with what ADD reported (prevResult) and name every
//! difference. Read-only: it changes nothing.

use crate::addressing;
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::result::{format_mac, CniResult, IpConfig, RouteEntry};
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::hostveth::{self, Ownership};
use crate::masquerade;
use crate::netlink::{LinkKind, Netlink};
use crate::netns::{Netns, OpenError};
use crate::portmap;
use crate::wire::kind_name;

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
    let inside = netns.run(|| look_inside(&env.ifname))?;
    match inside {
        None => diffs.push(format!("{} is missing from {}", env.ifname, env.netns)),
        Some(found) => {
            if !found.up {
                diffs.push(format!("{} is down", env.ifname));
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
                if !found.routes.iter().any(|r| r == route) {
                    diffs.push(format!(
                        "route {} via {} is missing from {}",
                        route.dst,
                        route.gw.map(|g| g.to_string()).unwrap_or("-".into()),
                        env.netns
                    ));
                }
            }
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            code::CHECK_MISMATCH,
            format!(
                "CHECK found {} difference(s): {}",
                diffs.len(),
                diffs.join("; ")
            ),
        )
        .details("the attachment is not as ADD left it; DEL and ADD it again to repair it"))
    }
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
            if hostveth::ownership(&veth, &who.alias()) != Ownership::Ours {
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
            }
        }
    }
    let addresses: Vec<_> = ips.iter().map(|ip| ip.address).collect();
    if conf.ip_masq {
        masquerade::check(conf, &addresses, diffs)?;
    }
    portmap::check(conf, &who, &addresses, diffs)?;
    addressing::check(env, conf, ips, diffs)
}

struct Inside {
    up: bool,
    mac: String,
    addresses: Vec<ipnetwork::IpNetwork>,
    routes: Vec<RouteEntry>,
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
                .filter(|r| r.oif == Some(link.index))
                .map(|r| RouteEntry {
                    dst: r.dst,
                    gw: r.gateway,
                }),
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
