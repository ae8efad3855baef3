//! Forwarding on for the families a gateway serves, as the reference plugin does, without
//! the node losing what its IPv6 routers advertise.
//!
//! With forwarding on, the kernel takes the node for a router: an interface whose
//! `accept_ra` is 1 (the kernel's default) ignores router advertisements, and the switch
//! itself deletes every default route learned from one. Only `accept_ra` 2 keeps an
//! interface listening while forwarding. A node whose uplink learns its IPv6 default
//! route by SLAAC would lose IPv6 egress at the first IPv6 gateway ADD, for good. So
//! before academy writes `net.ipv6.conf.all.forwarding` (once per node: only the first
//! turn-on pays), each interface that has learned from advertisements and has
//! `accept_ra` 1 gets 2. Nothing else changes:
//!
//! - `accept_ra` 0 or 2 is left as it is: 0 is an operator's choice, or systemd-networkd
//!   and NetworkManager handling advertisements in user space, unaffected by forwarding.
//! - A port (of a bridge, a bond) takes no IPv6 of its own; its master is the one that
//!   listens, and is looked at like any interface.
//! - The gateway's own link (academy's bridge, or a VLAN's gateway interface): containers
//!   are on it, and a container's advertisement must never steer the node's routes.
//! - An interface that has learned nothing from advertisements (no route of protocol
//!   `ra`, no address with a lifetime): most of all another plugin's container-facing
//!   links, where 2 would let a container advertise itself as the node's router. The
//!   cost: an uplink whose first advertisement has not come yet when forwarding goes on
//!   does not learn; `academy status` cannot name it either (docs/operations.md).
//! - `conf/default/accept_ra` stays: it is copied into every interface created later,
//!   every container's host end among them, the links above where 2 is unsafe. A node's
//!   uplink that appears later is the node's network manager's to configure.
//!
//! What academy raised is recorded under /run/academy, one small file per node netns
//! (`RECORD_DIR`/<netns inode>), and `academy status` shows it, beside any interface
//! that learned from advertisements and ignores them now (whoever turned forwarding on).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::cni::Result;
use crate::ipam::store::files;
use crate::netlink::{Link, Netlink};
use crate::netns::node;

const IPV4_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";
const IPV6_FORWARD: &str = "/proc/sys/net/ipv6/conf/all/forwarding";

/// Where the records of what academy raised are, one per node netns.
pub const RECORD_DIR: &str = "/run/academy/accept-ra";

/// Taken by a first IPv6 turn-on: concurrent first ADDs wait, then find forwarding on.
const LOCK: &str = "/run/academy-accept-ra.lock";

/// A record holds a line per interface; anything larger was not written by academy.
const MAX_RECORD: usize = 64 * 1024;

/// Forwarding on for the families of `gateways`, which are on link `gateway_link`.
/// Written only when off: a write to IPv6's `all/forwarding` walks every interface, and
/// an ADD where it is on already pays one read per family.
pub fn enable(nl: &mut Netlink, gateways: &[IpNetwork], gateway_link: u32) -> Result<()> {
    if gateways.iter().any(IpNetwork::is_ipv4) && is_off(IPV4_FORWARD) {
        turn_on(IPV4_FORWARD);
    }
    if gateways.iter().any(IpNetwork::is_ipv6) && is_off(IPV6_FORWARD) {
        enable_ipv6(nl, gateway_link)?;
    }
    Ok(())
}

fn is_off(path: &str) -> bool {
    read_flag(path).is_some_and(|v| v == b"0")
}

/// A one-number sysctl's value, trimmed (3 syscalls, on every ADD).
fn read_flag(path: &str) -> Option<Vec<u8>> {
    Some(files::read_host_file(path, 32).ok()?.trim_ascii().to_vec())
}

fn turn_on(path: &str) {
    if let Err(e) = std::fs::write(path, "1") {
        eprintln!("academy: cannot turn on forwarding in {path}: {e}");
    }
}

/// The node's first IPv6 turn-on: the listening interfaces raised first, since the
/// switch deletes the default routes of every interface left at 1. An interface that
/// cannot be raised leaves forwarding off (said on stderr): the node's egress comes
/// before the containers' IPv6 beyond the bridge, and the next ADD tries again.
fn enable_ipv6(nl: &mut Netlink, gateway_link: u32) -> Result<()> {
    // Best effort, as the other host locks: without /run two first ADDs may both raise
    // (the same writes) and both record (merged).
    let _lock = files::host_lock(LOCK, Duration::from_secs(5));
    if !is_off(IPV6_FORWARD) {
        return Ok(());
    }
    let learned = nl.ra_learned_links()?;
    let links = nl.links()?;
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut raised = Vec::new();
    let mut refused = None;
    for link in to_raise(&links, &learned, gateway_link, accept_ra) {
        match std::fs::write(conf_path(&link.name, "accept_ra"), "2") {
            Ok(()) => raised.push(Raised {
                interface: link.name.clone(),
                index: link.index,
                from: 1,
                to: 2,
                at,
            }),
            Err(e) => {
                refused = Some(format!("cannot raise accept_ra of {}: {e}", link.name));
                break;
            }
        }
    }
    if !raised.is_empty() {
        let names: Vec<&str> = raised.iter().map(|r| r.interface.as_str()).collect();
        crate::log::debug(format_args!(
            "accept_ra 1 -> 2 on {} before IPv6 forwarding goes on, so they keep their router advertisements",
            names.join(", ")
        ));
        if let Err(e) = record(&raised) {
            eprintln!(
                "academy: raised accept_ra to 2 on {} but cannot record it in {RECORD_DIR}: {e}",
                names.join(", ")
            );
        }
    }
    match refused {
        None => turn_on(IPV6_FORWARD),
        Some(why) => eprintln!(
            "academy: IPv6 forwarding left off: an interface learns its routes from router advertisements, which it would ignore with forwarding on, and {why}; set its accept_ra to 2 (or forwarding on) by hand"
        ),
    }
    Ok(())
}

/// The interfaces whose `accept_ra` goes from 1 to 2 (the module's comment says why
/// these and no others): not a port, not the gateway's link, with something learned
/// from advertisements, and `accept_ra` 1.
fn to_raise<'a>(
    links: &'a [Link],
    learned: &BTreeSet<u32>,
    gateway_link: u32,
    accept_ra: impl Fn(&str) -> Option<i32>,
) -> Vec<&'a Link> {
    links
        .iter()
        .filter(|l| l.controller.is_none() && l.index != gateway_link)
        .filter(|l| learned.contains(&l.index))
        .filter(|l| accept_ra(&l.name) == Some(1))
        .collect()
}

/// `/proc/sys/net/ipv6/conf/<ifname>/<key>` of the calling thread's netns. The name comes
/// from a link dump: never a `/`, and `.` (a VLAN's eth0.100) is literal here.
fn conf_path(ifname: &str, key: &str) -> String {
    format!("/proc/sys/net/ipv6/conf/{ifname}/{key}")
}

fn conf_value(ifname: &str, key: &str) -> Option<i32> {
    std::fs::read_to_string(conf_path(ifname, key))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn accept_ra(ifname: &str) -> Option<i32> {
    conf_value(ifname, "accept_ra")
}

/// The interfaces that learned from router advertisements and ignore them now: their
/// forwarding on, their `accept_ra` 1 (whoever did it). Their learned default route is
/// gone; their addresses and prefixes go when their lifetimes run out.
pub fn ignoring_advertisements(nl: &mut Netlink) -> Result<Vec<String>> {
    let learned = nl.ra_learned_links()?;
    Ok(nl
        .links()?
        .into_iter()
        .filter(|l| l.controller.is_none() && learned.contains(&l.index))
        .filter(|l| conf_value(&l.name, "forwarding") == Some(1) && accept_ra(&l.name) == Some(1))
        .map(|l| l.name)
        .collect())
}

/// One interface academy changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Raised {
    pub interface: String,
    pub index: u32,
    /// `accept_ra` before and after.
    pub from: i32,
    pub to: i32,
    /// When, in seconds since the epoch.
    pub at: u64,
}

#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// The netns inode, as in the file's name.
    node: u64,
    raised: Vec<Raised>,
}

fn record_path(node: u64) -> String {
    format!("{RECORD_DIR}/{node}")
}

/// What academy raised on this node, as recorded.
pub fn recorded() -> Vec<Raised> {
    node()
        .and_then(|n| read_record(&record_path(n)))
        .map_or(Vec::new(), |r| r.raised)
}

fn read_record(path: &str) -> Option<Record> {
    let mut file = std::fs::File::open(path).ok()?;
    serde_json::from_slice(&files::read_capped(&mut file, MAX_RECORD).ok()?).ok()
}

/// Adds `raised` to the node's record, written whole or not at all (a reader sees the
/// old record or the new one).
fn record(raised: &[Raised]) -> std::io::Result<()> {
    let node = node().ok_or(std::io::ErrorKind::NotFound)?;
    let path = record_path(node);
    let old = read_record(&path).map_or(Vec::new(), |r| r.raised);
    let record = Record {
        node,
        raised: merged(old, raised),
    };
    let text = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
    files::replace_host_file(path.as_ref(), &text)
}

/// The older entries, each replaced by a newer one of the same interface (it was set
/// back to 1 and raised again).
fn merged(old: Vec<Raised>, new: &[Raised]) -> Vec<Raised> {
    let mut all: Vec<Raised> = old
        .into_iter()
        .filter(|o| !new.iter().any(|n| n.interface == o.interface))
        .collect();
    all.extend_from_slice(new);
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::LinkKind;

    fn link(index: u32, name: &str, controller: Option<u32>) -> Link {
        Link {
            index,
            name: name.into(),
            kind: LinkKind::None,
            mac: None,
            mtu: None,
            up: true,
            promisc: false,
            controller,
            alias: None,
            group: 0,
        }
    }

    /// Only a listening interface (accept_ra 1, something learned) is raised: 0 and 2
    /// stay, and so do ports, the gateway's bridge and links that learned nothing.
    #[test]
    fn only_listening_interfaces_that_learned_are_raised() {
        let links = [
            link(1, "lo", None),
            link(2, "uplink", None),
            link(3, "off", None),
            link(4, "already", None),
            link(5, "port", Some(9)),
            link(6, "gwbridge", None),
            link(7, "calixyz", None),
            link(8, "uplink2", None),
        ];
        let learned: BTreeSet<u32> = [2, 3, 4, 5, 6, 8].into();
        let accept_ra = |name: &str| match name {
            "off" => Some(0),
            "already" => Some(2),
            "uplink2" => None, // vanished since the dump
            _ => Some(1),
        };
        let names: Vec<&str> = to_raise(&links, &learned, 6, accept_ra)
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        assert_eq!(names, ["uplink"]);
    }

    fn raised(name: &str, at: u64) -> Raised {
        Raised {
            interface: name.into(),
            index: 2,
            from: 1,
            to: 2,
            at,
        }
    }

    #[test]
    fn a_later_raise_of_the_same_interface_replaces_its_entry() {
        let all = merged(
            vec![raised("eth0", 1), raised("eth1", 1)],
            &[raised("eth0", 5)],
        );
        assert_eq!(all, [raised("eth1", 1), raised("eth0", 5)]);
    }

    #[test]
    fn the_record_reads_back() {
        let r = Record {
            node: 4026531840,
            raised: vec![raised("eth0", 7)],
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"node":4026531840,"raised":[{"interface":"eth0","index":2,"from":1,"to":2,"at":7}]}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
    }
}
