//! The locks of a network's lifetime: the network's (ADD and the restore hold it shared,
//! a release exclusively) and its bridge's (every ADD on the bridge holds it shared; a
//! release of the bridge's objects, and GC's sweep of the unlabelled veths on it,
//! exclusively). Lock files are never removed (a removal
//! racing a locker would let two hold "the" lock): one per network name and one per
//! bridge of a node, a few bytes of /run each, gone with a reboot.
//!
//! Order: a holder takes the network's lock, then the bridge's; a release never waits
//! for either (it skips what is busy), so no two holders can wait on each other.

use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::LOCK_DIR;
use crate::ipam::store::files::{self, FileLock, Share};

/// Where the bridges' locks are, one per bridge of a node: `<bridge>@<node>.lock` (a
/// bridge name is per netns, as its objects are).
pub(super) const BRIDGE_LOCK_DIR: &str = "/run/academy/bridges";

/// How a lock is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Shared, waiting out a release (milliseconds; 5 s at most).
    Shared,
    /// Exclusive, waiting out the holders (5 s at most): an ADD's look at a record its
    /// network left on another bridge, before it holds anything.
    Exclusive,
    /// Exclusive, only if free.
    No,
}

/// The network's removal lock (its own folder: a network's name may end in anything a
/// suffix could be). A removal holds it shared from before its nf_tables step until its
/// reservations are freed; a put-back (the restore's, an ADD's of the ports a flush
/// took) holds it whole from its look at the attachments to its last batch: see
/// `network::no_removal_in_flight`.
pub(super) fn removals(name: &str, how: Wait) -> std::io::Result<FileLock> {
    take(
        REMOVAL_LOCK_DIR,
        &format!("{REMOVAL_LOCK_DIR}/{name}.lock"),
        how,
    )
}

const REMOVAL_LOCK_DIR: &str = "/run/academy/networks/removals";

/// As `network::no_removal_in_flight`, without waiting, for a put-back that may leave the others'
/// state to the restore (an ADD holding the host's publish lock must not wait on a
/// restore holding this one and waiting for that): Err while a removal is in flight;
/// Ok(None) when there is no lock to take (no /run: unlocked, as everywhere).
pub fn no_removal_now(network: &str) -> std::result::Result<Option<FileLock>, RemovalInFlight> {
    match removals(network, Wait::No) {
        Ok(lock) => Ok(Some(lock)),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Err(RemovalInFlight),
        Err(_) => Ok(None),
    }
}

/// A removal of the network holds its removal lock (`no_removal_now`).
#[derive(Debug)]
pub struct RemovalInFlight;

/// The network's lock.
pub(super) fn network(name: &str, how: Wait) -> std::io::Result<FileLock> {
    take(LOCK_DIR, &format!("{LOCK_DIR}/{name}.lock"), how)
}

/// The lock of bridge `bridge` of node `node`.
pub(super) fn bridge(bridge: &str, node: u64, how: Wait) -> std::io::Result<FileLock> {
    take(
        BRIDGE_LOCK_DIR,
        &format!("{BRIDGE_LOCK_DIR}/{bridge}@{node}.lock"),
        how,
    )
}

fn take(dir: &str, path: &str, how: Wait) -> std::io::Result<FileLock> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    let mut file = files::open_making_dir(dir, open)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let share = match how {
        Wait::Shared => Share::Shared,
        Wait::Exclusive | Wait::No => Share::Exclusive,
    };
    loop {
        match FileLock::take(file, share) {
            Ok(locked) => return Ok(locked),
            Err((f, Errno::EWOULDBLOCK)) if how != Wait::No && Instant::now() < deadline => {
                file = f;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((_, e)) => return Err(e.into()),
        }
    }
}
