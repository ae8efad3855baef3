//! A network's own nf_tables objects (its masquerade rule and sets, its MAC filter's
//! rule, map and sets, its bridge's hairpin and isolation elements and FORWARD accepts)
//! are made by the ADD that finds them missing, and outlive the network's last
//! attachment by `releaseUnusedAfter` seconds (60 by default): a network's only container
//! stopped and started again meanwhile (`podman run --rm`, a CI job) pays what a steady
//! one does, not the objects' creation and deletion (each batch that makes or deletes a
//! set or a rule costs its socket's close an RCU grace period, 8-11 ms). Without the
//! release, every network a node ever had would leave a rule in academy's postrouting
//! chain, which every new outbound connection then walks.
//!
//! "No attachment" is: no reservation in the network's store (academy's IPAM) and no
//! port on its bridge. The last DEL (or GC, reclaim, a failed first ADD) that finds the
//! network so writes its record, `/run/academy/networks/<name>.unused`: what the release
//! needs (names, bridge, keys, store) and when the network became unused, so the release
//! needs no config of it (`podman network rm` never tells a plugin). Every invocation
//! then looks at the records (a readdir, a time compare: `release_expired`), and releases
//! the expired ones of its own node, in one nf_tables batch per table. ADD removes its
//! network's record. With `releaseUnusedAfter` 0 the last attachment's removal releases
//! at once.
//!
//! A concurrent first ADD must never lose its rule, so ADD holds the network's lock
//! shared from before it reserves until its batch is in (`InUse`), and the release holds
//! it exclusively (never waiting: a held share is an ADD in flight) while it looks and
//! deletes: it either sees the ADD's reservation (or finds the record gone), or runs
//! wholly before the ADD, which then makes the objects again (its batch re-creates what
//! is missing).

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::Releasing;
use super::KINDS;
use crate::addressing::open_store;
use crate::cni::Result;
use crate::config::{Builtin, Config, Ipam};
use crate::ipam::store::files;
use crate::netlink::{LinkKind, Netlink, NftablesOnDemand, Object};

/// The host's lock on repairs of academy's NAT (any network): a repair is rare and takes
/// a millisecond. Best effort: without /run, or after 5 s, ADD goes on unlocked (at
/// worst a network gets two identical rules, which the next repair makes one).
pub fn repair_lock() -> Option<Flock<File>> {
    files::host_lock(REPAIR_LOCK, Duration::from_secs(5))
}

const REPAIR_LOCK: &str = "/run/academy-nat.lock";

pub(super) const LOCK_DIR: &str = "/run/academy/networks";

/// ADD's share of its network's lock, released when dropped.
pub struct InUse(#[allow(dead_code)] Option<Flock<File>>);

/// Takes the network's lock shared for an ADD. Best effort: without /run (or after 5 s,
/// when a release is stuck) ADD goes on unlocked.
pub fn in_use(conf: &Config) -> InUse {
    let lock = lock(conf, Wait::Shared).ok();
    // In use again: no release is due (one syscall when there is no record).
    let _ = std::fs::remove_file(record_path(&conf.name));
    InUse(lock)
}

/// Takes the network's lock shared for a restore, as ADD does, but the record stays: a
/// restore is no attachment, and a pending release (its grace running) is not undone.
pub fn restoring(conf: &Config) -> InUse {
    InUse(lock(conf, Wait::Shared).ok())
}

/// The network's lock held whole, for a sweep that judges ownership by the store
/// (`academy install` after a rollback): ADD holds a share from before its reservation
/// until its last nf_tables step, so while this is held an element whose owner has no
/// reservation is no ADD's in the making. Waits up to 5 s for the ADDs in flight; None
/// when they outlast that, or without /run.
pub fn without_adds_in_flight(conf: &Config) -> Option<Flock<File>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match lock(conf, Wait::No) {
            Ok(held) => return Some(held),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(_) => return None,
        }
    }
}

/// Once the network has no attachment left: records it as unused, for a release after
/// `releaseUnusedAfter`, or (0, or the record cannot be written) deletes its own objects
/// at once. Returns what it deleted, in words (nothing when the network is in use or
/// only recorded).
pub fn release_if_unused(conf: &Config) -> Result<Vec<String>> {
    // Cheap look first, unlocked: a network with attachments (the usual DEL) costs no
    // lock and no nf_tables request.
    let mut nl = Netlink::open()?;
    if !unused(conf, &mut nl)? {
        return Ok(Vec::new());
    }
    // Never waited for: a held share is an ADD in flight, so the network is in use
    // (DEL and GC must not stand behind a burst of ADDs). Without /run the objects stay.
    let Ok(_lock) = lock(conf, Wait::No) else {
        return Ok(Vec::new());
    };
    if !unused(conf, &mut nl)? {
        return Ok(Vec::new());
    }
    if conf.release_unused_after > 0 && mark_unused(conf).is_ok() {
        return Ok(Vec::new());
    }
    let _ = std::fs::remove_file(record_path(&conf.name));
    let mut nft = NftablesOnDemand::default();
    let Some(objects) = objects_of(conf, &mut nft)? else {
        return Ok(Vec::new());
    };
    if !objects.is_empty() {
        nft.get()?.delete_objects(&objects)?;
    }
    Ok(objects.iter().map(describe).collect())
}

/// The network's own objects, every kind's; None while elements of one remain.
fn objects_of(conf: &Config, nft: &mut NftablesOnDemand) -> Result<Option<Vec<Object>>> {
    let mut releasing = Releasing { conf, nft };
    let mut objects: Vec<Object> = Vec::new();
    let mut errors = Vec::new();
    for kind in KINDS {
        match kind.release(&mut releasing) {
            Ok(Some(found)) => objects.extend(found),
            // Elements of another remain: the network's objects are still in use.
            Ok(None) => return Ok(None),
            Err(e) => errors.push(e),
        }
    }
    super::first_of(errors)?;
    Ok(Some(objects))
}

/// What the release of an unused network needs, written when it became unused.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
struct Record {
    name: String,
    bridge: String,
    /// The built-in store's dataDir; None for a delegated IPAM or none (no store).
    data_dir: Option<PathBuf>,
    ip_masq: bool,
    mac_spoof_check: bool,
    same_bridge_ingress: bool,
    publishes_ports: bool,
    is_gateway: bool,
    /// `releaseUnusedAfter`, seconds.
    release_after: u64,
    /// When the network was found with no attachment, ms since the epoch.
    unused_since_ms: u64,
    /// The node: the network namespace's inode (a record in /run is seen from every
    /// netns; a node netns releases only its own networks).
    node: u64,
}

impl Record {
    fn of(conf: &Config, unused_since_ms: u64) -> Option<Record> {
        Some(Record {
            name: conf.name.clone(),
            bridge: conf.bridge.clone(),
            data_dir: conf.builtin().map(|b| b.data_dir.clone()),
            ip_masq: conf.ip_masq,
            mac_spoof_check: conf.mac_spoof_check,
            same_bridge_ingress: conf.same_bridge_ingress,
            publishes_ports: conf.publishes_ports,
            is_gateway: conf.is_gateway,
            release_after: conf.release_unused_after,
            unused_since_ms,
            node: node()?,
        })
    }

    fn expires_ms(&self) -> u64 {
        self.unused_since_ms
            .saturating_add(self.release_after.saturating_mul(1000))
    }

    /// The config the kinds' release reads: the record's keys, nothing else.
    fn config(&self) -> Option<Config> {
        let base = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": self.name,
            "type": "academy",
            "bridge": self.bridge,
        });
        let mut conf = Config::where_things_are(base.to_string().as_bytes())?;
        conf.ipam = match &self.data_dir {
            Some(data_dir) => Ipam::Builtin(Builtin {
                range_sets: Vec::new(),
                routes: Vec::new(),
                data_dir: data_dir.clone(),
                resolv_conf: None,
            }),
            None => Ipam::None,
        };
        conf.ip_masq = self.ip_masq;
        conf.mac_spoof_check = self.mac_spoof_check;
        conf.same_bridge_ingress = self.same_bridge_ingress;
        conf.publishes_ports = self.publishes_ports;
        conf.is_gateway = self.is_gateway;
        conf.release_unused_after = self.release_after;
        Some(conf)
    }
}

const RECORD_SUFFIX: &str = ".unused";

fn record_path(name: &str) -> String {
    format!("{LOCK_DIR}/{name}{RECORD_SUFFIX}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// This process's network namespace, by inode.
pub(super) fn node() -> Option<u64> {
    std::fs::metadata("/proc/self/ns/net").ok().map(|m| m.ino())
}

/// When the network of this node became unused, while it waits for its release.
pub fn unused_since(name: &str) -> Option<SystemTime> {
    let record = read_record(&record_path(name))?;
    (Some(record.node) == node())
        .then(|| UNIX_EPOCH + Duration::from_millis(record.unused_since_ms))
}

fn read_record(path: &str) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes the network's record (atomically: a reader sees the old one or the new one),
/// unless one is there already: the network has been unused since that one's time.
/// Called with the network's lock held exclusively.
fn mark_unused(conf: &Config) -> std::io::Result<()> {
    let path = record_path(&conf.name);
    if read_record(&path).is_some() {
        return Ok(());
    }
    write_record(
        &path,
        &Record::of(conf, now_ms()).ok_or(std::io::ErrorKind::NotFound)?,
    )
}

fn write_record(path: &str, record: &Record) -> std::io::Result<()> {
    let text = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    write_atomically(path, &text)
}

/// Writes a record of academy's under /run/academy/networks whole or not at all: a
/// reader sees the old one or the new one, never a half-written one.
pub(super) fn write_atomically(path: &str, text: &[u8]) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(LOCK_DIR)?;
    let tmp = format!("{path}.{}.tmp", std::process::id());
    files::replace_host_file(path.as_ref(), tmp.as_ref(), text)
}

/// The release of every network of this node whose record has expired: each under its
/// lock (taken exclusively, never waited for: a held share is an ADD in flight, which
/// removes the record), each checked again for attachments, all their objects deleted
/// in one batch per table. Run by every invocation (a readdir and a time compare when
/// nothing is due). Best effort: what fails stays recorded and is tried by the next one.
/// Returns when the next record expires, if one is waiting.
pub fn release_expired() -> Option<SystemTime> {
    let dir = std::fs::read_dir(LOCK_DIR).ok()?;
    let now = now_ms();
    let mut due = Vec::new();
    let mut next: Option<u64> = None;
    for entry in dir.flatten() {
        let file = entry.file_name();
        let Some(name) = file.to_str().and_then(|f| f.strip_suffix(RECORD_SUFFIX)) else {
            continue;
        };
        let Some(record) = read_record(&record_path(name)) else {
            continue;
        };
        match record.expires_ms() {
            at if at <= now => due.push(record),
            at => next = Some(next.map_or(at, |n| n.min(at))),
        }
    }
    if !due.is_empty() {
        let here = node();
        due.retain(|r| Some(r.node) == here);
    }
    if !due.is_empty() {
        release_due(due);
    }
    next.map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
}

fn release_due(due: Vec<Record>) {
    let Ok(mut nl) = Netlink::open() else {
        return;
    };
    let mut nft = NftablesOnDemand::default();
    let mut held = Vec::new();
    let mut objects: Vec<Object> = Vec::new();
    for record in due {
        let Some(conf) = record.config() else {
            continue;
        };
        let Ok(lock) = lock(&conf, Wait::No) else {
            continue;
        };
        // Looked at again under the lock: an ADD may have come (and gone) meanwhile.
        let path = record_path(&conf.name);
        if read_record(&path).is_none_or(|r| r.expires_ms() > now_ms()) {
            continue;
        }
        match unused(&conf, &mut nl) {
            Ok(true) => {}
            Ok(false) => {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            Err(_) => continue,
        }
        match objects_of(&conf, &mut nft) {
            Ok(Some(found)) => {
                crate::log::debug(format_args!(
                    "network {} unused for {}s: releasing {}",
                    conf.name,
                    record.release_after,
                    found.iter().map(describe).collect::<Vec<_>>().join(", ")
                ));
                objects.extend(found);
                held.push((lock, path));
            }
            // Another's elements remain (GC sweeps them): tried again after another
            // grace, not by every invocation.
            Ok(None) => {
                let _ = write_record(
                    &path,
                    &Record {
                        unused_since_ms: now_ms(),
                        ..record
                    },
                );
            }
            Err(e) => crate::log::debug(format_args!("network {}: {e}", conf.name)),
        }
    }
    objects.dedup();
    if !objects.is_empty() {
        if let Err(e) = nft.get().and_then(|n| n.delete_objects(&objects)) {
            crate::log::debug(format_args!("releasing unused networks: {e}"));
            return;
        }
    }
    for (_lock, path) in &held {
        let _ = std::fs::remove_file(path);
    }
}

fn describe(object: &Object) -> String {
    match object {
        Object::Rule(r) => format!("rule {:?} of {} {}", r.comment, r.table, r.chain),
        other => other.describe(),
    }
}

/// No reservation in the store and no port on the bridge.
fn unused(conf: &Config, nl: &mut Netlink) -> Result<bool> {
    if conf.builtin().is_some() {
        if let Some(store) = open_store(conf)? {
            if store.holds_any()? {
                return Ok(false);
            }
        }
    }
    let links = nl.links()?;
    let Some(bridge) = links
        .iter()
        .find(|l| l.name == conf.bridge && l.kind == LinkKind::Bridge)
    else {
        return Ok(true);
    };
    Ok(!links.iter().any(|l| l.controller == Some(bridge.index)))
}

/// How the lock is taken: shared, waiting out a release (milliseconds); or exclusive,
/// only if free.
enum Wait {
    Shared,
    No,
}

fn lock(conf: &Config, how: Wait) -> std::io::Result<Flock<File>> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(LOCK_DIR)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(format!("{LOCK_DIR}/{}.lock", conf.name))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let arg = match how {
        Wait::Shared => FlockArg::LockSharedNonblock,
        Wait::No => FlockArg::LockExclusiveNonblock,
    };
    loop {
        match Flock::lock(file, arg) {
            Ok(locked) => return Ok(locked),
            Err((f, Errno::EWOULDBLOCK))
                if matches!(how, Wait::Shared) && Instant::now() < deadline =>
            {
                file = f;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((_, e)) => return Err(e.into()),
        }
    }
}
