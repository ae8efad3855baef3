//! A network's own nf_tables objects (its masquerade rule and sets, its MAC filter's
//! rule, map and sets, its bridge's hairpin and isolation elements and FORWARD accepts)
//! live as long as the network has attachments: ADD makes them with the first, and they are deleted once
//! the last one is removed (DEL, GC, reclaim) or GC finds the network with none. Without
//! this, every network a node ever had leaves a rule in academy's postrouting chain, which
//! every new outbound connection then walks.
//!
//! "No attachment" is: no reservation in the network's store (academy's IPAM) and no
//! port on its bridge. A concurrent first ADD must never lose its rule, so ADD holds the
//! network's lock shared from before it reserves until its batch is in (`InUse`), and
//! the release holds it exclusively while it looks and deletes: it either sees the ADD's
//! reservation, or runs wholly before the ADD, which then makes the objects again (its
//! batch re-creates what is missing).

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::Releasing;
use super::KINDS;
use crate::addressing::open_store;
use crate::cni::Result;
use crate::config::Config;
use crate::ipam::store::files;
use crate::netlink::{LinkKind, Netlink, NftablesOnDemand, Object};

/// The host's lock on repairs of academy's NAT (any network): a repair is rare and takes
/// a millisecond. Best effort: without /run, or after 5 s, ADD goes on unlocked (at
/// worst a network gets two identical rules, which the next repair makes one).
pub fn repair_lock() -> Option<Flock<File>> {
    files::host_lock(REPAIR_LOCK, Duration::from_secs(5))
}

const REPAIR_LOCK: &str = "/run/academy-nat.lock";

const LOCK_DIR: &str = "/run/academy/networks";

/// ADD's share of its network's lock, released when dropped.
pub struct InUse(#[allow(dead_code)] Option<Flock<File>>);

/// Takes the network's lock shared for an ADD. Best effort: without /run (or after 5 s,
/// when a release is stuck) ADD goes on unlocked.
pub fn in_use(conf: &Config) -> InUse {
    InUse(lock(conf, Wait::Shared).ok())
}

/// Deletes the network's own objects if it has no attachment left. Returns what it
/// deleted, in words (nothing when the network is in use).
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
    let mut nft = NftablesOnDemand::default();
    let mut releasing = Releasing {
        conf,
        nft: &mut nft,
    };
    let mut objects: Vec<Object> = Vec::new();
    let mut errors = Vec::new();
    for kind in KINDS {
        match kind.release(&mut releasing) {
            Ok(Some(found)) => objects.extend(found),
            // Elements of another remain: the network's objects are still in use.
            Ok(None) => return Ok(Vec::new()),
            Err(e) => errors.push(e),
        }
    }
    if !objects.is_empty() {
        nft.get()?.delete_objects(&objects)?;
    }
    super::first_of(errors)?;
    Ok(objects.iter().map(describe).collect())
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
