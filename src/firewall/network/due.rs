//! The releases that are due: every invocation reads its node's hint and, once one of
//! its node's records is due, lists them and releases those networks; GC and `academy
//! restore` list them whatever the hint says.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::gone::drop_what_gone_nodes_left;
use super::hints::{self, Hint};
use super::locks::{self, Wait};
use super::records::{self, node, Entry, Marker, Record};
use super::release::{collect, describe, Batch, Found};
use super::LOCK_DIR;
use crate::netlink::{Netlink, NftablesOnDemand};

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
    crate::firewall::hold_for_test("ACADEMY_TEST_HOLD_LISTING");
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
