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
//! none), after seeing the bridge with no port. GC judges the unlabelled veths on the
//! bridge under that lock too (`no_add_on_bridge`): an ADD's pair is unlabelled for a
//! moment, whatever its network. A removal that finds the network's lock
//! busy writes the record all the same: whoever holds the lock (a restore) finishes, and
//! the next invocation releases what is then unused.
//!
//! ADD removes its network's record; one that describes another network of the same
//! name (re-created on another bridge, with other keys or ranges) is released first, so
//! the old bridge's objects do not outlive it and the new network's first ADD makes its
//! objects as a first ADD does (no "repaired" line for a config change).

use std::time::Duration;

use crate::config::Config;
use crate::ipam::store::files::{self, FileLock};

mod due;
mod gone;
mod hints;
mod locks;
mod nodes;
mod records;
mod release;

pub use due::{look_at_every_record, release_expired, unused_since};
pub use locks::no_removal_now;
use locks::Wait;
pub(crate) use records::{node, write_atomically};
pub use release::release_if_unused;

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
        release::taken_back(conf, node);
    }
    InUse {
        _network: locks::network(&conf.name, Wait::Shared).ok(),
        _bridge: node.and_then(|n| locks::bridge(&conf.bridge, n, Wait::Shared).ok()),
    }
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

/// The bridge's lock held whole, for GC's sweep of the unlabelled veths on it. Every ADD
/// on the bridge, whatever its network, holds a share from before it creates its pair
/// until its last check, so while this is held an unlabelled veth there is a killed
/// ADD's, never one in the making. Unlocked, the GC of a bridge-mate network listed an
/// ADD's pair before its label and deleted it after that ADD had succeeded (the soak,
/// seed 38). Never waits: Err while an ADD is on the bridge (a later GC sweeps);
/// Ok(None) without /run (unlocked, as everywhere).
pub fn no_add_on_bridge(conf: &Config) -> std::result::Result<Option<FileLock>, AddOnBridge> {
    let Some(node) = node() else {
        return Ok(None);
    };
    match locks::bridge(&conf.bridge, node, Wait::No) {
        Ok(lock) => Ok(Some(lock)),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Err(AddOnBridge),
        Err(_) => Ok(None),
    }
}

/// An ADD (or a restore) holds a share of the bridge's lock (`no_add_on_bridge`).
#[derive(Debug)]
pub struct AddOnBridge;

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
