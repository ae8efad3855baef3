//! Network isolation (`"ingressPolicy": "same-bridge"`, as podman's `network create
//! --opt isolate=true` asks the reference firewall plugin for): what is forwarded between
//! two networks that both set it is dropped, either way; the node, the outside, a
//! network's own bridge and the networks without the key are not touched. The state is
//! the network's, not an attachment's: the bridge's element in the shared set of
//! isolated bridges, looked up by one shared rule (nft.rs). ADD
//! makes sure of both before the container is wired; CHECK and STATUS report what a
//! flush took, the restore command puts it back, and the network's last attachment takes
//! the element with it (network.rs). Where the reference leaves its per-bridge rules
//! behind for good (its DEL cannot know whether the bridge is still in use), academy's
//! release runs once nothing is attached.

use super::{Adding, Checking, Diff, Looking, Releasing};
use crate::cni::Result;
use crate::config::Config;
use crate::netlink::{Nftables, Object};

mod nft;

pub use nft::isolated_object;
use nft::{ensure_isolation, is_isolated, isolation_rule_missing};

/// ADD's step, before the pair: nothing without `ingressPolicy` same-bridge.
pub fn add(a: &mut Adding) -> Result<()> {
    match a.conf.same_bridge_ingress {
        true => ensure(a.nft.get()?, a.conf),
        false => Ok(()),
    }
}

/// The rule and the bridge's element (one dump and one batch; the host's repair lock
/// only when the rule must be written).
fn ensure(nft: &mut Nftables, conf: &Config) -> Result<()> {
    let lock = super::network::repair_lock;
    // A release deleting the table between the look and the batch: look again.
    for name in conf.forwarded_interfaces() {
        match ensure_isolation(nft, &name, lock) {
            Err(e) if e.is(libc::ENOENT) => ensure_isolation(nft, &name, lock).map(drop)?,
            other => other.map(drop)?,
        }
    }
    Ok(())
}

/// What of the network's isolation nf_tables lacks, in words; nothing for a network
/// without the key.
fn lacking(nft: &mut Nftables, conf: &Config) -> Result<Vec<String>> {
    let mut lacking = Vec::new();
    if !conf.same_bridge_ingress {
        return Ok(lacking);
    }
    let open = format!(
        "bridge {} (ingressPolicy same-bridge) is reachable from the other isolated networks",
        conf.bridge
    );
    if isolation_rule_missing(nft)? {
        lacking.push(format!(
            "the isolation rule is missing from nf_tables chain inet academy forward: {open}"
        ));
    }
    for b in conf.forwarded_interfaces() {
        if !is_isolated(nft, &b)? {
            lacking.push(format!(
                "{b} . {b} is missing from nf_tables set inet academy _isolated: {open}"
            ));
        }
    }
    Ok(lacking)
}

/// CHECK: the rule and the bridge's element are there; each lack is what a flush takes.
pub fn check(c: &mut Checking) -> Result<Vec<Diff>> {
    if !c.conf.same_bridge_ingress {
        return Ok(Vec::new());
    }
    Ok(lacking(c.nft.get()?, c.conf)?
        .into_iter()
        .map(|text| Diff {
            text,
            restorable: true,
        })
        .collect())
}

/// STATUS: the same, for a network with wired attachments.
pub fn missing(l: &mut Looking) -> Result<Vec<String>> {
    if !l.wired.bridge_in_use || !l.conf.same_bridge_ingress {
        return Ok(Vec::new());
    }
    lacking(l.nft.get()?, l.conf)
}

/// Puts back what `missing` names; returns it.
pub fn restore(l: &mut Looking) -> Result<Vec<String>> {
    let missing = missing(l)?;
    if !missing.is_empty() {
        ensure(l.nft.get()?, l.conf)?;
    }
    Ok(missing)
}

/// The bridge's element, once the network has no attachment left. Looked up when the
/// config no longer sets the key (an admin took it out of a live network's conflist):
/// left behind, it would isolate whatever network used the bridge next.
pub fn objects(r: &mut Releasing) -> Result<Vec<Object>> {
    let (conf, nft) = (r.conf, r.nft.get()?);
    let mut objects = Vec::new();
    for name in conf.forwarded_interfaces() {
        if conf.same_bridge_ingress || is_isolated(nft, &name)? {
            objects.push(isolated_object(&name));
        }
    }
    Ok(objects)
}
