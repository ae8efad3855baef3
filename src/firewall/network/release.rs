//! The release of one network: what it owns of nf_tables and, once no network uses its
//! bridge, what the bridge had, deleted in one batch per table under the network's lock
//! (and the bridge's); and the look that says a network (or its bridge) is unused.

use super::locks::{self, Wait};
use super::records::{self, Record};
use crate::addressing::open_store;
use crate::attachment::owner;
use crate::cni::Result;
use crate::config::Config;
use crate::firewall::{Releasing, KINDS};
use crate::ipam::store::files::FileLock;
use crate::netlink::{Link, LinkKind, Netlink, NftablesOnDemand, Object};

/// Once the network has no attachment left: records it as unused, for a release after
/// `releaseUnusedAfter`, or (0, or the record cannot be written) deletes its objects at
/// once. Returns what it deleted, in words (nothing when the network is in use or only
/// recorded).
pub fn release_if_unused(conf: &Config) -> Result<Vec<String>> {
    // Cheap look first, unlocked: a network with attachments (the usual DEL) costs no
    // lock and no nf_tables request, and when its store holds an address (the usual
    // DEL of a network of academy's IPAM) no rtnetlink socket either (5 syscalls to
    // open, one to close).
    if held_in_store(conf)? {
        return Ok(Vec::new());
    }
    let mut nl = Netlink::open()?;
    if has_ports_of_its_own(conf, &mut nl)? {
        return Ok(Vec::new());
    }
    // Never waited for: a held share is an ADD or a restore in flight (DEL and GC must
    // not stand behind a burst of ADDs). The record is written all the same, so the
    // release is not lost when the holder is a restore (which adds no attachment): the
    // next invocation looks again, and finds the network in use (an ADD) or releases it.
    let Ok(_lock) = locks::network(&conf.name, Wait::No) else {
        let _ = records::mark_unused(conf);
        return Ok(Vec::new());
    };
    if !unused(conf, &mut nl)? {
        return Ok(Vec::new());
    }
    if conf.release_unused_after > 0 && records::mark_unused(conf).is_ok() {
        return Ok(Vec::new());
    }
    let Some(record) = Record::of(conf, records::now_ms()) else {
        return Ok(Vec::new());
    };
    records::remove(&record);
    let mut nft = NftablesOnDemand::default();
    let mut batch = Batch::default();
    match collect(&record, &mut nl, &mut nft, &mut batch)? {
        Found::Releasable => {
            batch.delete(&mut nft)?;
            Ok(batch.words())
        }
        Found::InUse | Found::Elements => Ok(Vec::new()),
    }
}

/// What a release found of one network.
pub(super) enum Found {
    /// Its objects (and its bridge's, when free) are in the batch.
    Releasable,
    /// It has an attachment.
    InUse,
    /// Elements of another attachment remain in its sets (GC sweeps them first).
    Elements,
}

/// The objects of a release, and the bridge locks held until they are deleted.
#[derive(Default)]
pub(super) struct Batch {
    pub objects: Vec<Object>,
    bridges: Vec<FileLock>,
}

impl Batch {
    pub fn delete(&mut self, nft: &mut NftablesOnDemand) -> Result<()> {
        self.objects.dedup();
        if !self.objects.is_empty() {
            nft.get()?.delete_objects(&self.objects)?;
        }
        Ok(())
    }

    pub fn words(&self) -> Vec<String> {
        self.objects.iter().map(describe).collect()
    }
}

/// Adds to `batch` what the record's network releases, under its lock (held by the
/// caller): its own objects when it has no attachment, and its bridge's when the bridge
/// has no port and its lock is free (taken, and held in the batch until the deletion).
pub(super) fn collect(
    record: &Record,
    nl: &mut Netlink,
    nft: &mut NftablesOnDemand,
    batch: &mut Batch,
) -> Result<Found> {
    let Some(conf) = record.config() else {
        return Ok(Found::Elements);
    };
    if !unused(&conf, nl)? {
        return Ok(Found::InUse);
    }
    let Some((own, bridged)) = objects_of(&conf, nft)? else {
        return Ok(Found::Elements);
    };
    batch.objects.extend(own);
    if bridged.is_empty() {
        return Ok(Found::Releasable);
    }
    // Looked at under the bridge's lock: an ADD on the bridge holds it from before its
    // first look at the bridge's objects until its port is on the bridge.
    if let Ok(lock) = locks::bridge(&conf.bridge, record.node, Wait::No) {
        if bridge_free(&conf, &nl.links()?) {
            batch.objects.extend(bridged);
            batch.bridges.push(lock);
        }
    }
    Ok(Found::Releasable)
}

/// The network's own objects and its bridge's, every kind's; None while elements of one
/// remain.
#[allow(clippy::type_complexity)]
fn objects_of(
    conf: &Config,
    nft: &mut NftablesOnDemand,
) -> Result<Option<(Vec<Object>, Vec<Object>)>> {
    let mut releasing = Releasing { conf, nft };
    let (mut own, mut bridged) = (Vec::new(), Vec::new());
    let mut errors = Vec::new();
    for kind in KINDS {
        match kind.release(&mut releasing) {
            Ok(Some(found)) if kind.keyed_on_bridge() => bridged.extend(found),
            Ok(Some(found)) => own.extend(found),
            // Elements of another remain: the network's objects are still in use.
            Ok(None) => return Ok(None),
            Err(e) => errors.push(e),
        }
    }
    crate::firewall::first_of(errors)?;
    Ok(Some((own, bridged)))
}

/// The network is in use again: its record goes. A record of another network under this
/// name (another bridge, other keys or ranges) is released first, as it would have been
/// at its due time: that network is gone, and its objects are nobody's.
pub(super) fn taken_back(conf: &Config, node: u64) {
    let path = records::record_path(&conf.name, node);
    let Some(record) = records::read(&path) else {
        return;
    };
    if record.same_network(conf) {
        let _ = std::fs::remove_file(&path);
        return;
    }
    // Before this ADD holds anything: waits out the ADDs and restores of the network.
    let Ok(lock) = locks::network(&conf.name, Wait::Exclusive) else {
        return;
    };
    let Some(record) = records::read(&path) else {
        return;
    };
    let (Ok(mut nl), mut nft) = (Netlink::open(), NftablesOnDemand::default()) else {
        return;
    };
    let mut batch = Batch::default();
    match collect(&record, &mut nl, &mut nft, &mut batch) {
        Ok(Found::Releasable) => {
            crate::log::debug(format_args!(
                "network {} is back with another config: releasing what it had ({})",
                conf.name,
                batch.words().join(", ")
            ));
            if batch.delete(&mut nft).is_ok() {
                records::remove(&record);
            }
        }
        // In use already (an ADD of the new config came first), or another's elements
        // remain: the record is this network's no more.
        Ok(Found::InUse | Found::Elements) => records::remove(&record),
        Err(e) => crate::log::debug(format_args!("network {}: {e}", conf.name)),
    }
    drop(lock);
}

pub(super) fn describe(object: &Object) -> String {
    match object {
        Object::Rule(r) => format!("rule {:?} of {} {}", r.comment, r.table, r.chain),
        other => other.describe(),
    }
}

/// The network has no attachment: no reservation in its store, and no port on its
/// bridge that may be its own (any port but one labelled for another network).
///
/// With academy's store, an unlabelled port is never this network's attachment: an ADD
/// reserves before it makes its pair, so one of this network's in flight holds a
/// reservation (and its lock's share); the port is another network's ADD on a shared
/// bridge, and counting it would leave this network with no release at all (found by
/// the soak, seed 2027). Without the store, an unlabelled port may be its own.
fn unused(conf: &Config, nl: &mut Netlink) -> Result<bool> {
    // The node's links only once the store holds nothing: every DEL but a network's last
    // then dumps none (beside 1,000 pods the dump was 105 more receives and about half
    // of a DEL's time).
    Ok(!held_in_store(conf)? && !has_ports_of_its_own(conf, nl)?)
}

/// The network's store (academy's IPAM) holds an address.
fn held_in_store(conf: &Config) -> Result<bool> {
    if conf.builtin().is_none() {
        return Ok(false);
    }
    match open_store(conf)? {
        Some(store) => Ok(store.holds_any()?),
        None => Ok(false),
    }
}

/// A port of the network's bridge may be one of its attachments: its alias names the
/// network, or (a delegated IPAM, which keeps no store to ask) it has no owner's alias.
fn has_ports_of_its_own(conf: &Config, nl: &mut Netlink) -> Result<bool> {
    let by_store = conf.builtin().is_some();
    let links = nl.links()?;
    let may_be_its_own = |l: &Link| match l.alias.as_deref().and_then(owner) {
        Some((network, _, _)) => network == conf.name,
        None => !by_store,
    };
    let in_use = ports(conf, &links).any(may_be_its_own);
    Ok(in_use)
}

/// No network uses the bridge: it has no port (or is not there).
fn bridge_free(conf: &Config, links: &[Link]) -> bool {
    ports(conf, links).next().is_none()
}

/// The ports of the network's bridge.
fn ports<'l>(conf: &Config, links: &'l [Link]) -> impl Iterator<Item = &'l Link> {
    let bridge = links
        .iter()
        .find(|l| l.name == conf.bridge && l.kind == LinkKind::Bridge)
        .map(|b| b.index);
    links
        .iter()
        .filter(move |l| bridge.is_some() && l.controller == bridge)
}
