//! A put-back must not bring back the state of an attachment being removed. A restore
//! (or an ADD putting back the ports a flush took) reads the wired attachments, then
//! adds what it finds missing; a removal (DEL, a failed ADD's undo, GC, reclaim) that
//! took the attachment's elements in between would see them put back after it, owned
//! by an attachment with no reservation left (found by the soak: seeds 321409782,
//! 2026, 38).
//!
//! So a removal holds the network's removal lock shared from before its nf_tables step
//! until its reservations are freed, and a put-back holds it whole from its look at the
//! wired attachments until its last batch is in: a removal either finished before the
//! look (its attachment is not wired: nothing put back for it) or starts after the
//! put-back (and removes what was put back). A put-back killed halfway leaves only
//! state of attachments wired at its look, which their own removal takes; a take-back
//! after the fact could not promise that. A removal waits only while a put-back runs
//! (milliseconds). Best effort, as the network lock: without /run, or after 5 s, each
//! goes on unlocked.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::network::LOCK_DIR;
use crate::config::Config;

/// A removal's share of its network's removal lock, released when dropped.
pub struct Removal(#[allow(dead_code)] Option<Flock<File>>);

/// Taken by the one removal before its nf_tables step, held until its reservations are
/// freed.
pub fn removal(conf: &Config) -> Removal {
    Removal(lock(&conf.name, FlockArg::LockSharedNonblock).ok())
}

/// The network's removal lock held whole, for a put-back from its look at the wired
/// attachments to its last batch. Waits out the removals in flight (5 s at most).
pub fn no_removal_in_flight(network: &str) -> Option<Flock<File>> {
    lock(network, FlockArg::LockExclusiveNonblock).ok()
}

/// The lock, waited for 5 s at most (a removal waits out a put-back; a put-back waits out
/// the removals in flight).
fn lock(network: &str, arg: FlockArg) -> std::io::Result<Flock<File>> {
    // A folder of their own: a network's name may end in anything a suffix could be.
    let dir = format!("{LOCK_DIR}/removals");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(format!("{dir}/{network}.lock"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Flock::lock(file, arg) {
            Ok(locked) => return Ok(locked),
            Err((f, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                file = f;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((_, e)) => return Err(e.into()),
        }
    }
}
