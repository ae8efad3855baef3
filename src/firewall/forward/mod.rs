//! Forwarding on a host whose iptables FORWARD policy drops (as with Docker installed):
//! ADD makes sure the network's bridge is accepted there, in both families, so the
//! `firewall` plugin is not needed in academy's chain. No wider than that plugin: to the
//! bridge only replies (RELATED,ESTABLISHED) and DNATed traffic (published ports), from
//! it everything. Without such a policy nothing is written. The rules are the bridge's,
//! shared by its containers like the bridge itself: they go with the network's last
//! attachment (network.rs), and an iptables flush or reload that dropped them is
//! reported by CHECK and STATUS and repaired by the restore command; a reload that
//! re-made them (`iptables-save | iptables-restore`) leaves them recognised by their
//! comment (nft.rs).

use super::network::repair_lock;
use super::{Adding, Checking, Diff, Looking, Releasing};
use crate::cni::Result;
use crate::config::Config;
use crate::netlink::{Family, Nftables, Object};

mod nft;

pub use nft::forward_drops;
use nft::{accept_forwarding, forward_incomplete, forward_missing, forward_rules};

/// ADD, once the container is wired: the accepts of a network the host routes for.
pub fn add(a: &mut Adding) -> Result<()> {
    match routed(a.conf) {
        true => accept(a.nft.get()?, a.conf).map(drop),
        false => Ok(()),
    }
}

/// Where FORWARD drops, the bridge's accepts are there once each. The common case
/// (all there) is one chain lookup and one dump per family; a change is made under the
/// host's repair lock after a second look, so concurrent first ADDs append them once.
pub fn accept(nft: &mut Nftables, conf: &Config) -> Result<Vec<String>> {
    let mut changed = Vec::new();
    for family in [Family::V4, Family::V6] {
        if !forward_drops(nft, family)? {
            continue;
        }
        for name in conf.forwarded_interfaces() {
            if !forward_incomplete(nft, family, &name)? {
                continue;
            }
            let _lock = repair_lock();
            let done = accept_forwarding(nft, family, &name)?;
            if !done.is_empty() {
                crate::log::debug(format_args!(
                    "iptables' {} FORWARD policy drops: {name}'s accepts there: {}",
                    table(family),
                    done.join(", ")
                ));
            }
            changed.extend(done);
        }
    }
    Ok(changed)
}

/// Whether the network routes for its containers (so a dropping FORWARD concerns it).
fn routed(conf: &Config) -> bool {
    conf.is_gateway || conf.ip_masq || conf.publishes_ports
}

fn table(family: Family) -> &'static str {
    match family {
        Family::V4 => "ip filter",
        Family::V6 => "ip6 filter",
    }
}

/// Per family whose FORWARD policy drops, the bridge's accepts missing there, in words.
fn lacking(nft: &mut Nftables, conf: &Config) -> Result<Vec<String>> {
    let mut lacking = Vec::new();
    if !routed(conf) {
        return Ok(lacking);
    }
    for family in [Family::V4, Family::V6] {
        if !forward_drops(nft, family)? {
            continue;
        }
        for name in conf.forwarded_interfaces() {
            let missing = forward_missing(nft, family, &name)?;
            if !missing.is_empty() {
                let quoted: Vec<String> = missing.iter().map(|c| format!("{c:?}")).collect();
                lacking.push(format!(
                    "the accepts {} of {} {name} in iptables' {} FORWARD chain, whose policy drops",
                    quoted.join(", "),
                    if name == conf.bridge {
                        "bridge"
                    } else {
                        "VLAN gateway"
                    },
                    table(family)
                ));
            }
        }
    }
    Ok(lacking)
}

/// CHECK: where FORWARD drops, the bridge's accepts are there.
pub fn check(c: &mut Checking) -> Result<Vec<Diff>> {
    if !routed(c.conf) {
        return Ok(Vec::new());
    }
    Ok(lacking(c.nft.get()?, c.conf)?
        .into_iter()
        .map(|words| Diff {
            text: format!("{words} are missing"),
            restorable: true,
        })
        .collect())
}

/// STATUS: the same, for a network with wired attachments.
pub fn missing(l: &mut Looking) -> Result<Vec<String>> {
    if !l.wired.bridge_in_use || !routed(l.conf) {
        return Ok(Vec::new());
    }
    lacking(l.nft.get()?, l.conf)
}

/// The restore command: what is missing put back, outdated accepts and second copies
/// deleted (both say what they did).
pub fn restore(l: &mut Looking) -> Result<Vec<String>> {
    if !l.wired.bridge_in_use || !routed(l.conf) {
        return Ok(Vec::new());
    }
    accept(l.nft.get()?, l.conf)
}

/// The bridge's accept rules, in both families (outdated ones and copies included).
pub fn objects(r: &mut Releasing) -> Result<Vec<Object>> {
    let (conf, nft) = (r.conf, r.nft.get()?);
    let mut objects = Vec::new();
    for family in [Family::V4, Family::V6] {
        for name in conf.forwarded_interfaces() {
            objects.extend(
                forward_rules(nft, family, &name)?
                    .into_iter()
                    .map(Object::Rule),
            );
        }
    }
    Ok(objects)
}
