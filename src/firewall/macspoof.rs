//! `macspoofchk`: frames entering the bridge from a container's host veth whose source
//! MAC is not the one academy gave the container's interface are dropped. What academy
//! creates in nf_tables (table `bridge academy`) is described in
//! netlink/nftables/macspoof.rs; this module decides what goes in and names the owners.
//!
//! A guarded port's elements carry its attachment's holder key (`<container id>:<ifname>`)
//! as comment, the identity GC's valid list is matched against. ADD adds them right after
//! the veth pair exists, before the container's interface has an address; the one
//! removal (removal.rs) takes them by that identity before the veth goes.

use std::collections::HashSet;

use crate::attachment::Attachment;
use crate::cni::result::format_mac;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::netlink::{stored_comment, GuardedPort, Nftables};

/// Guards the attachment's host veth: only `mac` may be a source on it.
pub fn add(nft: &mut Nftables, conf: &Config, who: &Attachment, mac: [u8; 6]) -> Result<()> {
    let port = GuardedPort {
        port: who.host_name(),
        mac,
        comment: who.holder().key(),
    };
    match nft.guard_port(&conf.name, &port) {
        // The port is guarded with another MAC: elements of an earlier pair under this
        // name (a killed ADD of this attachment, whose pair create_pair just replaced).
        // The name is this attachment's, so they are too.
        Err(e) if e.is(libc::EBUSY) || e.is(libc::EEXIST) => {
            if let Some(old) = nft.guarded_port(&conf.name, &port.port)? {
                eprintln!(
                    "academy: replacing the stale MAC filter of {} ({}, {})",
                    old.port,
                    format_mac(old.mac),
                    old.comment
                );
                nft.unguard_ports(&conf.name, &[old])?;
            }
            nft.guard_port(&conf.name, &port)?;
        }
        other => other?,
    }
    Ok(())
}

/// Removes the attachment's elements if they name it, and only then: a port name whose
/// elements name another attachment is not this removal's to take.
pub fn remove_owned(nft: &mut Nftables, conf: &Config, who: &Attachment) -> Result<()> {
    let key = who.holder().key();
    match nft.guarded_port(&conf.name, &who.host_name())? {
        Some(port) if port.comment == stored_comment(&key) => {
            Ok(nft.unguard_ports(&conf.name, &[port])?)
        }
        Some(port) => {
            eprintln!(
                "academy: the MAC filter of {} on network {} belongs to {:?}, not {key}; left alone",
                port.port, conf.name, port.comment
            );
            Ok(())
        }
        None => Ok(()),
    }
}

/// CHECK: the network's rule is in the chain, and the host veth is guarded for this
/// attachment with the container's MAC (`mac`, as ADD reported it) in the map and both
/// sets.
pub fn check(conf: &Config, who: &Attachment, mac: &str, diffs: &mut Vec<String>) -> Result<()> {
    let mut nft = Nftables::open()?;
    if !nft.has_guard_rule(&conf.name)? {
        diffs.push(format!(
            "the macspoofchk rule of network {} is missing from nf_tables chain bridge academy prerouting",
            conf.name
        ));
    }
    let name = who.host_name();
    let Some(port) = nft.guarded_port(&conf.name, &name)? else {
        diffs.push(format!(
            "host veth {name} is not in nf_tables map bridge academy {}-ports: its source MACs are not checked",
            conf.name
        ));
        return Ok(());
    };
    let key = who.holder().key();
    if port.comment != stored_comment(&key) {
        diffs.push(format!(
            "the MAC filter of host veth {name} names {:?}, not {key}",
            port.comment
        ));
    }
    let allowed = format_mac(port.mac);
    if !mac.is_empty() && !allowed.eq_ignore_ascii_case(mac) {
        diffs.push(format!(
            "host veth {name} lets MAC {allowed} through, but ADD gave {} MAC {mac}",
            who.ifname
        ));
    }
    if !nft.port_guarded(&conf.name, &name)? {
        diffs.push(format!(
            "host veth {name} is missing from nf_tables set bridge academy {}-guarded: its source MACs are not checked",
            conf.name
        ));
    }
    if !nft.port_allows(&conf.name, &name, port.mac)? {
        diffs.push(format!(
            "{name} . {allowed} is missing from nf_tables set bridge academy {}-allowed: every frame from it is dropped",
            conf.name
        ));
    }
    Ok(())
}

/// GC: removes the guarded ports of this network whose comment is no valid attachment's
/// holder key.
pub fn gc(nft: &mut Nftables, conf: &Config, live: &HashSet<String>, errors: &mut Vec<Error>) {
    crate::verbs::gc::sweep(
        nft.guarded_ports(&conf.name),
        live,
        |p: &GuardedPort| &p.comment,
        |stale| nft.unguard_ports(&conf.name, stale),
        |p| {
            format!(
                "removed the MAC filter of {} ({}, held by {})",
                p.port,
                format_mac(p.mac),
                p.comment
            )
        },
        errors,
    );
}
