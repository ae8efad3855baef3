//! A network's own nf_tables objects (its masquerade rule and sets, its MAC filter's
//! rule, map and sets) and its bridge's (the hairpin, isolation and loopback guard
//! elements, the FORWARD accepts) are made by the ADD that finds them missing, and
//! outlive the network's last attachment by `releaseUnusedAfter` seconds (60 by
//! default): a network's only container stopped and started again meanwhile (`podman
//! run --rm`, a CI job) pays what a steady one does, not the objects' creation and
//! deletion (each batch that makes or deletes a set or a rule costs its socket's close an
//! RCU grace period, 8-11 ms). Without the release, every network a node ever had would
//! leave a rule in academy's postrouting chain, which every new outbound connection then
//! walks.
//!
//! Two owners, two questions. A network's own objects go once the network has no
//! attachment: no reservation in its store and no port on its bridge that is its own (a
//! port labelled for another network is that one's). An object keyed on a bridge is
//! owned by every network that uses the bridge, and goes only when none does: the bridge
//! has no port, and no ADD is under way on it.
//!
//! The last DEL (or GC, reclaim, a failed first ADD) that finds the network unused
//! writes its record (records.rs): what the release needs, so the release needs no
//! config of it (`podman network rm` never tells a plugin). Every invocation then reads
//! its node's hint, the earliest due time of the node's records (one readlink), and once
//! one is due lists the records (a readdir: the due time is in a marker's name) and
//! releases the due ones of its own node, in one nf_tables batch per table
//! (`release_expired`). A record of a node that is gone is dropped by a GC or `academy
//! restore` (`look_at_every_record`). With `releaseUnusedAfter` 0 the last attachment's
//! removal releases at once.
//!
//! Locks (locks.rs). ADD holds the network's lock shared from before it reserves until
//! its batch is in (`InUse`), and the release holds it exclusively (never waiting: a held
//! share is an ADD or a restore in flight) while it looks and deletes: it either sees the
//! ADD's reservation, or runs wholly before the ADD, which then makes the objects again.
//! ADD also holds its bridge's lock shared, and the release deletes the bridge's objects
//! only under that lock held exclusively (never waiting: a held share is an ADD on the
//! bridge, perhaps another network's first, which found the objects in place and made
//! none), after seeing the bridge with no port. A removal that finds the network's lock
//! busy writes the record all the same: whoever holds the lock (a restore) finishes, and
//! the next invocation releases what is then unused.
//!
//! ADD removes its network's record; one that describes another network of the same
//! name (re-created on another bridge, with other keys or ranges) is released first, so
//! the old bridge's objects do not outlive it and the new network's first ADD makes its
//! objects as a first ADD does (no "repaired" line for a config change).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Releasing;
use super::KINDS;
use crate::addressing::open_store;
use crate::attachment::owner;
use crate::cni::Result;
use crate::config::Config;
use crate::ipam::store::files::{self, FileLock};
use crate::netlink::{Link, LinkKind, Netlink, NftablesOnDemand, Object};

mod hints;
mod locks;
mod nodes;
mod records;

use hints::Hint;
pub use locks::no_removal_now;
use locks::Wait;
pub(crate) use records::{node, write_atomically};
use records::{Entry, Marker, Record};

/// The host's lock on repairs of academy's NAT (any network): a repair is rare and takes
/// a millisecond. Best effort: without /run, or after 5 s, ADD goes on unlocked (at
/// worst a network gets two identical rules, which the next repair makes one).
pub fn repair_lock() -> Option<FileLock> {
    files::host_lock(REPAIR_LOCK, Duration::from_secs(5))
}

const REPAIR_LOCK: &str = "/run/academy-nat.lock";

pub(super) const LOCK_DIR: &str = "/run/academy/networks";
/// Where the release records and their `.due` markers are (`academy watch` watches it).
pub const RECORDS_DIR: &str = LOCK_DIR;

/// ADD's (or the restore's) share of its network's lock and of its bridge's, released
/// when dropped.
pub struct InUse {
    _network: Option<FileLock>,
    _bridge: Option<FileLock>,
}

/// Takes the network's lock shared, then its bridge's, for an ADD or a restore. Best
/// effort: without /run (or after 5 s, when a release is stuck) it goes on unlocked.
/// The network's record, if any, goes first (one failed open when there is none).
pub fn in_use(conf: &Config) -> InUse {
    let node = node();
    if let Some(node) = node {
        taken_back(conf, node);
    }
    InUse {
        _network: locks::network(&conf.name, Wait::Shared).ok(),
        _bridge: node.and_then(|n| locks::bridge(&conf.bridge, n, Wait::Shared).ok()),
    }
}

/// The network is in use again: its record goes. A record of another network under this
/// name (another bridge, other keys or ranges) is released first, as it would have been
/// at its due time: that network is gone, and its objects are nobody's.
fn taken_back(conf: &Config, node: u64) {
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

/// Takes the network's lock shared for a restore, as ADD does, but the record stays: a
/// restore is no attachment, and a pending release (its grace running) is not undone.
pub fn restoring(conf: &Config) -> InUse {
    let node = node();
    InUse {
        _network: locks::network(&conf.name, Wait::Shared).ok(),
        _bridge: node.and_then(|n| locks::bridge(&conf.bridge, n, Wait::Shared).ok()),
    }
}

/// The network's lock held whole, for a sweep that judges ownership by the store
/// (`academy install` after a rollback): ADD holds a share from before its reservation
/// until its last nf_tables step, so while this is held an element whose owner has no
/// reservation is no ADD's in the making. Waits up to 5 s for the ADDs in flight; None
/// when they outlast that, or without /run.
pub fn without_adds_in_flight(conf: &Config) -> Option<FileLock> {
    locks::network(&conf.name, Wait::Exclusive).ok()
}

/// A removal's share of its network's removal lock, released when dropped.
pub struct Removal(#[allow(dead_code)] Option<FileLock>);

/// A put-back must not bring back the state of an attachment being removed. A restore
/// (or an ADD putting back the ports a flush took) reads the wired attachments, then
/// adds what it finds missing; a removal (DEL, a failed ADD's undo, GC, reclaim) that
/// took the attachment's elements in between would see them put back after it, owned
/// by an attachment with no reservation left (found by the soak: seeds 321409782,
/// 2026, 38).
///
/// So a removal holds the network's removal lock shared from before its nf_tables step
/// until its reservations are freed, and a put-back holds it whole from its look at the
/// wired attachments until its last batch is in: a removal either finished before the
/// look (its attachment is not wired: nothing put back for it) or starts after the
/// put-back (and removes what was put back). A put-back killed halfway leaves only
/// state of attachments wired at its look, which their own removal takes; a take-back
/// after the fact could not promise that. A removal waits only while a put-back runs
/// (milliseconds). Best effort, as the network lock: without /run, or after 5 s, each
/// goes on unlocked.
///
/// Taken by the one removal before its nf_tables step, held until its reservations are
/// freed.
pub fn removal(conf: &Config) -> Removal {
    Removal(locks::removals(&conf.name, Wait::Shared).ok())
}

/// The network's removal lock held whole, for a put-back from its look at the wired
/// attachments to its last batch (see `removal`). Waits out the removals in flight (5 s
/// at most).
pub fn no_removal_in_flight(network: &str) -> Option<FileLock> {
    locks::removals(network, Wait::Exclusive).ok()
}

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
enum Found {
    /// Its objects (and its bridge's, when free) are in the batch.
    Releasable,
    /// It has an attachment.
    InUse,
    /// Elements of another attachment remain in its sets (GC sweeps them first).
    Elements,
}

/// The objects of a release, and the bridge locks held until they are deleted.
#[derive(Default)]
struct Batch {
    objects: Vec<Object>,
    bridges: Vec<FileLock>,
}

impl Batch {
    fn delete(&mut self, nft: &mut NftablesOnDemand) -> Result<()> {
        self.objects.dedup();
        if !self.objects.is_empty() {
            nft.get()?.delete_objects(&self.objects)?;
        }
        Ok(())
    }

    fn words(&self) -> Vec<String> {
        self.objects.iter().map(describe).collect()
    }
}

/// Adds to `batch` what the record's network releases, under its lock (held by the
/// caller): its own objects when it has no attachment, and its bridge's when the bridge
/// has no port and its lock is free (taken, and held in the batch until the deletion).
fn collect(
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
    super::first_of(errors)?;
    Ok(Some((own, bridged)))
}

/// When the network of this node became unused, while it waits for its release.
pub fn unused_since(name: &str) -> Option<SystemTime> {
    let record = records::read(&records::record_path(name, node()?))?;
    Some(UNIX_EPOCH + Duration::from_millis(record.unused_since_ms))
}

/// The release of every network of this node whose record is due: each under its lock
/// (taken exclusively, never waited for: a held share is an ADD in flight), each checked
/// again for attachments, all their objects deleted in one batch per table. Run by every
/// invocation: one readlink of the node's hint (hints.rs) while nothing of its node is
/// due, whatever the number of records waiting on the host; the folder is listed only
/// once one is (or the hint is missing). Best effort: what fails stays recorded, and the
/// hint says so to the next invocation. Returns when the next record of this node is
/// due, if one is waiting.
pub fn release_expired() -> Option<SystemTime> {
    let here = node()?;
    match hints::read(here) {
        Hint::Nothing => None,
        Hint::At(ms) if ms > records::now_ms() => Some(at(ms)),
        Hint::At(_) | Hint::Unknown => release_listed(here),
    }
}

/// GC's and `academy restore`'s look at every record, whatever the hint says: this
/// node's due ones released and its hint written again, v0.5.0's records converted (no
/// hint announces them), and what nodes that are gone left dropped (no invocation of
/// another node lists them). Returns how many files of gone nodes went.
pub fn look_at_every_record() -> usize {
    if let Some(here) = node() {
        release_listed(here);
    }
    drop_what_gone_nodes_left()
}

/// The listing: one readdir, the due markers of this node released, the others' left to
/// their own node, and the node's hint written from what is left.
fn release_listed(here: u64) -> Option<SystemTime> {
    let mut listing = hints::Listing::start(here);
    let dir = std::fs::read_dir(LOCK_DIR).ok()?;
    let now = records::now_ms();
    let (mut due, mut old) = (Vec::new(), Vec::new());
    let mut next: Option<u64> = None;
    for entry in dir.flatten() {
        let Some(file) = entry.file_name().to_str().map(records::entry) else {
            continue;
        };
        match file {
            Entry::Marker(m) if m.node == here && m.due_ms <= now => due.push(m),
            Entry::Marker(m) if m.node == here => next = hints::earliest(next, Some(m.due_ms)),
            Entry::Marker(_) | Entry::Other => {}
            Entry::Old(name) => old.push(name),
        }
    }
    // A marker made from here on lowers the hint itself (the conversions' too).
    listing.listed();
    super::hold_for_test("ACADEMY_TEST_HOLD_LISTING");
    for name in old {
        records::convert_old(&name);
    }
    let left = if due.is_empty() {
        None
    } else {
        release_due(due)
    };
    let next = hints::earliest(next, left);
    listing.finish(next);
    next.map(at)
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Releases what the due markers name; returns the earliest due time of those it left
/// in place (a network's lock busy, an error), for the hint: the next invocation tries
/// them again.
fn release_due(due: Vec<Marker>) -> Option<u64> {
    let Ok(mut nl) = Netlink::open() else {
        return due.iter().map(|m| m.due_ms).min();
    };
    let mut nft = NftablesOnDemand::default();
    let mut held = Vec::new();
    let mut batch = Batch::default();
    let mut left: Option<u64> = None;
    for marker in due {
        // The marker of a record its ADD took, or of one since written again: dropped.
        let due = |r: &Record| r.expires_ms() <= records::now_ms();
        if !records::read(&marker.record()).is_some_and(|r| due(&r)) {
            let _ = std::fs::remove_file(marker.path());
            continue;
        }
        let Ok(lock) = locks::network(&marker.name, Wait::No) else {
            left = hints::earliest(left, Some(marker.due_ms));
            continue;
        };
        // Looked at again under the lock: an ADD may have come (and gone) meanwhile.
        let Some(record) = records::read(&marker.record()).filter(due) else {
            let _ = std::fs::remove_file(marker.path());
            continue;
        };
        if record.marker() != marker.path() {
            let _ = std::fs::remove_file(marker.path());
        }
        let before = batch.objects.len();
        match collect(&record, &mut nl, &mut nft, &mut batch) {
            Ok(Found::Releasable) => {
                crate::log::debug(format_args!(
                    "network {} unused for {}s: releasing {}",
                    record.name,
                    record.release_after,
                    batch.objects[before..]
                        .iter()
                        .map(describe)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                held.push((lock, record));
            }
            Ok(Found::InUse) => records::remove(&record),
            // Another's elements remain (GC sweeps them): tried again after another
            // grace, not by every invocation (the new marker lowers the hint).
            Ok(Found::Elements) => {
                let again = Record {
                    unused_since_ms: records::now_ms(),
                    ..record.clone()
                };
                if records::write(&again).is_ok() {
                    let _ = std::fs::remove_file(record.marker());
                } else {
                    left = hints::earliest(left, Some(record.expires_ms()));
                }
            }
            Err(e) => {
                crate::log::debug(format_args!("network {}: {e}", record.name));
                left = hints::earliest(left, Some(record.expires_ms()));
            }
        }
    }
    if let Err(e) = batch.delete(&mut nft) {
        crate::log::debug(format_args!("releasing unused networks: {e}"));
        let kept = held.iter().map(|(_, r)| r.expires_ms()).min();
        return hints::earliest(left, kept);
    }
    for (_lock, record) in &held {
        records::remove(record);
    }
    left
}

/// What nodes that are gone left on the host: their networks' state versions
/// (`<name>.<node>.state`, upgrade.rs), release records, markers and hints, and their
/// bridges' locks. A node netns goes with everything of academy's in it but these files
/// in /run, which nothing would ever read again. Asked by GC and the restore (one read
/// of mountinfo; /proc only for a node no mount holds), never on ADD's path. Also any
/// node's hint temporary a minute old (a writer killed before its rename). Returns how
/// many files went.
fn drop_what_gone_nodes_left() -> usize {
    let Some(here) = node() else {
        return 0;
    };
    // Other nodes' files, found by name; mountinfo is read only if there are some (a
    // host that runs one node never pays for it), /proc only if one of their nodes is
    // not bind-mounted (gone, or held by a process alone).
    let mut theirs: Vec<(std::path::PathBuf, u64)> = Vec::new();
    // And any node's hint temporaries that a killed writer left (hints.rs), by age.
    let mut abandoned = 0;
    for (dir, node_of) in [
        (LOCK_DIR, node_of_record as fn(&str) -> Option<u64>),
        (locks::BRIDGE_LOCK_DIR, node_of_bridge_lock),
    ] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let file = entry.file_name();
            let Some(file) = file.to_str() else { continue };
            if hints::is_temporary(file) {
                let age = entry.metadata().ok().and_then(|m| m.modified().ok());
                let old = age.and_then(|t| t.elapsed().ok()) > Some(hints::ABANDONED);
                if old && std::fs::remove_file(entry.path()).is_ok() {
                    abandoned += 1;
                }
            } else if let Some(n) = node_of(file).filter(|&n| n != here) {
                theirs.push((entry.path(), n));
            }
        }
    }
    if theirs.is_empty() {
        return abandoned;
    }
    let Some(alive) = nodes::alive(&theirs.iter().map(|(_, n)| *n).collect()) else {
        return abandoned;
    };
    let dropped = theirs
        .iter()
        .filter(|(path, n)| !alive.contains(n) && std::fs::remove_file(path).is_ok())
        .count();
    if dropped > 0 {
        crate::log::debug(format_args!(
            "dropped {dropped} record(s) and lock(s) of node netns that are gone"
        ));
    }
    dropped + abandoned
}

/// The node a file of the records' folder belongs to: `<name>.<node>.state`,
/// `<name>@<node>.unused`, `<name>@<node>.<due ms>.due` or `@<node>.next`; None for the
/// network locks (no node in their names) and anything else.
fn node_of_record(file: &str) -> Option<u64> {
    if let Some(node) = hints::node_of(file) {
        return Some(node);
    }
    if let Some(rest) = file.strip_suffix(".state") {
        return rest.rsplit_once('.')?.1.parse().ok();
    }
    match records::entry(file) {
        Entry::Marker(m) => Some(m.node),
        _ => file
            .strip_suffix(".unused")?
            .rsplit_once('@')?
            .1
            .parse()
            .ok(),
    }
}

/// The node of a bridge lock, `<bridge>@<node>.lock`.
fn node_of_bridge_lock(file: &str) -> Option<u64> {
    file.strip_suffix(".lock")?.rsplit_once('@')?.1.parse().ok()
}

fn describe(object: &Object) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_s_node_is_read_from_its_name() {
        assert_eq!(node_of_record("web.x.4026532842.state"), Some(4026532842));
        assert_eq!(node_of_record("web.x@4026532842.unused"), Some(4026532842));
        assert_eq!(
            node_of_record("web.x@4026532842.1700000000123.due"),
            Some(4026532842)
        );
        // A network's lock and an older release's record name no node.
        assert_eq!(node_of_record("@4026532842.next"), Some(4026532842));
        assert_eq!(node_of_record("@hints.lock"), None);
        assert_eq!(node_of_record("web.x.lock"), None);
        assert_eq!(node_of_record("web.x.unused"), None);
        assert_eq!(node_of_bridge_lock("br0@4026532842.lock"), Some(4026532842));
        assert_eq!(node_of_bridge_lock("removals"), None);
    }
}
