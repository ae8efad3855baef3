//! `macspoofchk`: frames entering the bridge from a container's host veth whose source
//! MAC is not the one academy gave the container's interface are dropped. What academy
//! creates in nf_tables (table `bridge academy`) is described in
//! nft.rs, names.rs and create.rs; this module decides what goes in and names the owners.
//!
//! A guarded port's elements carry its attachment's owner comment, the identity GC's
//! valid list is matched against. ADD adds them right after the veth pair exists,
//! before the container's interface has an address; the one removal (removal.rs) takes
//! them by that identity before the veth goes. The network's rule, map and sets go with
//! its last attachment (network.rs).

use super::{Adding, Checking, Diff, Looking, Releasing, Removing, Sweeping, Wired};
use crate::attachment::Attachment;
use crate::cni::result::format_mac;
use crate::cni::Result;
use crate::config::Config;
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::{Netlink, Nftables, Object};

mod create;
mod filter;
mod names;
mod nft;
mod unmapped;

use filter::{guard_rule, guard_set_exists, has_guard_rule};
pub use names::{guard_sets, GuardedPort};
use nft::{guard_port, guarded_port, guarded_ports, port_allows, port_guarded, unguard_ports};

/// Guards the attachment's host veth: only `mac` may be a source on it.
pub fn add(a: &mut Adding) -> Result<()> {
    let (Some((_, mac)), true) = (&a.host, a.conf.mac_spoof_check) else {
        return Ok(());
    };
    guard(a.nft.get()?, a.conf, a.who, *mac)
}

/// The port guarded for `mac`.
fn guard(nft: &mut Nftables, conf: &Config, who: &Attachment, mac: [u8; 6]) -> Result<()> {
    let port = GuardedPort {
        port: who.host_name(),
        mac,
        comment: who.owner(),
    };
    match guard_port(nft, &conf.name, &port) {
        // The port is guarded with another MAC: elements of an earlier pair under this
        // name (a killed ADD of this attachment, whose pair create_pair just replaced).
        // The name is this attachment's, so they are too.
        Err(e) if e.is(libc::EBUSY) || e.is(libc::EEXIST) => {
            if let Some(old) = guarded_port(nft, &conf.name, &port.port)? {
                eprintln!(
                    "academy: replacing the stale MAC filter of {} ({}, {})",
                    old.port,
                    format_mac(old.mac),
                    old.comment
                );
                unguard_ports(nft, &conf.name, &[old])?;
            }
            guard_port(nft, &conf.name, &port)?;
        }
        other => other?,
    }
    Ok(())
}

/// Removes the attachment's elements if they name it, and only then: a port name whose
/// elements name another attachment is not this removal's to take. Whatever the config
/// says (macspoofchk taken out since ADD): one lookup, answered at once without the map.
pub fn remove(r: &mut Removing) -> Result<()> {
    let (conf, nft) = (r.conf, r.nft.get()?);
    match guarded_port(nft, &conf.name, &r.who.host_name())? {
        Some(port) if r.who.owns(&port.comment) => Ok(unguard_ports(nft, &conf.name, &[port])?),
        Some(port) => {
            eprintln!(
                "academy: the MAC filter of {} on network {} belongs to {:?}, not {}; left alone",
                port.port,
                conf.name,
                port.comment,
                r.who.owner()
            );
            Ok(())
        }
        // Not in the map: its set elements may still be there, the map lost (only
        // looked for where the key is set: an extra lookup on every other DEL).
        None if conf.mac_spoof_check => Ok(unmapped::remove_unmapped(nft, &conf.name, &r.who)?),
        None => Ok(()),
    }
}

/// CHECK: the network's rule is in the chain, and the host veth is guarded for this
/// attachment with the container's MAC (`mac`, as ADD reported it) in the map and both
/// sets. What a flush took (the rule, the elements) the restore command puts back.
pub fn check(c: &mut Checking) -> Result<Vec<Diff>> {
    if !c.conf.mac_spoof_check {
        return Ok(Vec::new());
    }
    let (nft, conf, who, mac) = (c.nft.get()?, c.conf, c.who, c.mac);
    let mut diffs = Vec::new();
    let mut diff = |text: String, restorable: bool| diffs.push(Diff { text, restorable });
    if !has_guard_rule(nft, &conf.name)? {
        diff(format!(
            "the macspoofchk rule of network {} is missing from nf_tables chain bridge academy prerouting",
            conf.name
        ), true);
    }
    let name = who.host_name();
    let Some(port) = guarded_port(nft, &conf.name, &name)? else {
        diff(format!(
            "host veth {name} is not in nf_tables map bridge academy {}-ports: its source MACs are not checked",
            conf.name
        ), true);
        return Ok(diffs);
    };
    if !who.owns(&port.comment) {
        diff(
            format!(
                "the MAC filter of host veth {name} names {:?}, not {}",
                port.comment,
                who.owner()
            ),
            false,
        );
    }
    let allowed = format_mac(port.mac);
    if !mac.is_empty() && !allowed.eq_ignore_ascii_case(mac) {
        diff(
            format!(
                "host veth {name} lets MAC {allowed} through, but ADD gave {} MAC {mac}",
                who.ifname
            ),
            false,
        );
    }
    if !port_guarded(nft, &conf.name, &name)? {
        diff(format!(
            "host veth {name} is missing from nf_tables set bridge academy {}-guarded: its source MACs are not checked",
            conf.name
        ), true);
    }
    if !port_allows(nft, &conf.name, &name, port.mac)? {
        diff(format!(
            "{name} . {allowed} is missing from nf_tables set bridge academy {}-allowed: every frame from it is dropped",
            conf.name
        ), true);
    }
    Ok(diffs)
}

/// GC: removes the guarded ports of this network whose owner is not live.
pub fn sweep(s: &mut Sweeping) {
    let (conf, live, errors) = (s.conf, s.live, &mut *s.errors);
    let nft = match s.nft.get() {
        Ok(nft) => nft,
        Err(e) => return errors.push(e.into()),
    };
    let stale: Vec<GuardedPort> = match guarded_ports(nft, &conf.name) {
        Ok(all) => all.into_iter().filter(|p| !live.owns(&p.comment)).collect(),
        Err(e) => return errors.push(e.into()),
    };
    if stale.is_empty() {
        return;
    }
    match unguard_ports(nft, &conf.name, &stale) {
        Ok(()) => stale.iter().for_each(|p| {
            crate::log::debug(format_args!(
                "GC removed the MAC filter of {} ({}, held by {})",
                p.port,
                format_mac(p.mac),
                p.comment
            ));
            s.removed
                .push(format!("MAC filter of {} ({})", p.port, p.comment));
        }),
        Err(e) => errors.push(e.into()),
    }
}

/// What an admin's flush took of the filter of the network's wired attachments: the
/// rule (without it no frame is checked), and each attachment's guard.
pub fn missing(l: &mut Looking) -> Result<Vec<String>> {
    let (conf, wired) = (l.conf, l.wired);
    if !conf.mac_spoof_check || wired.attachments.is_empty() {
        return Ok(Vec::new());
    }
    let nft = l.nft.get()?;
    let mut missing = Vec::new();
    if !has_guard_rule(nft, &conf.name)? {
        missing.push(format!(
            "the macspoofchk rule of network {} (every guarded port accepts any source MAC)",
            conf.name
        ));
    }
    let unguarded = unguarded(nft, conf, wired)?;
    if !unguarded.is_empty() {
        missing.push(format!(
            "the MAC filter of {} wired container(s)",
            unguarded.len()
        ));
    }
    Ok(missing)
}

/// The host veths of wired attachments whose guard is not complete.
fn unguarded(nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for a in &wired.attachments {
        let veth = a.who(conf).host_name();
        let complete = match guarded_port(nft, &conf.name, &veth)? {
            Some(p) => {
                port_guarded(nft, &conf.name, &veth)? && port_allows(nft, &conf.name, &veth, p.mac)?
            }
            None => false,
        };
        if !complete {
            found.push(veth);
        }
    }
    Ok(found)
}

/// Puts the rule and the wired attachments' guards back. Whatever of the network's
/// map, sets and rule is missing is made again in place (filter.rs): the elements
/// still there stay, so an ADD running beside the restore keeps its guard. The MAC a
/// port may send is the container interface's, read over netlink through the veth's
/// peer (no netns is entered).
pub fn restore(l: &mut Looking) -> Result<Vec<String>> {
    let missing = missing(l)?;
    if missing.is_empty() {
        return Ok(missing);
    }
    let (conf, wired, nft) = (l.conf, l.wired, l.nft.get()?);
    filter::complete_guard(nft, &conf.name)?;
    let veths = unguarded(nft, conf, wired)?;
    let mut nl = Netlink::open()?;
    for a in &wired.attachments {
        let who = a.who(conf);
        if !veths.contains(&who.host_name()) {
            continue;
        }
        let Some(mac) = nl.peer_mac(&who.host_name())? else {
            eprintln!(
                "academy: cannot read the MAC of {}'s interface {}: its MAC filter is not restored",
                a.container_id, a.ifname
            );
            continue;
        };
        if let Some(old) = guarded_port(nft, &conf.name, &who.host_name())? {
            unguard_ports(nft, &conf.name, &[old])?;
        }
        guard(nft, conf, &who, mac)?;
    }
    Ok(missing)
}

/// The network's rule, map and sets in `bridge academy`, once no port is guarded;
/// looked for whether or not macspoofchk is still set (it may have been taken out since
/// ADD). Without the map there is nothing: the rule and the sets are made with it.
pub fn objects(r: &mut Releasing) -> Result<Option<Vec<Object>>> {
    let conf = r.conf;
    let nft = r.nft.get()?;
    if !guarded_ports(nft, &conf.name)?.is_empty() {
        return Ok(None);
    }
    let mut objects: Vec<Object> = guard_rule(nft, &conf.name)?
        .into_iter()
        .map(Object::Rule)
        .collect();
    // Only those there: a network that never had the key has none to report deleted.
    for set in guard_sets(&conf.name) {
        if guard_set_exists(nft, &set)? {
            objects.push(Object::Set(ACADEMY_BRIDGE, set));
        }
    }
    Ok(Some(objects))
}
