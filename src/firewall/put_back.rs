//! A restore must not put back the state of an attachment being removed. The restore
//! reads the network's wired attachments, then each kind adds what it finds missing; a
//! removal (DEL, a failed ADD's undo, GC, reclaim) that takes the attachment's elements
//! in between would see them put back after it, owned by an attachment with no
//! reservation left: a masquerade element, a published port (found by the soak, seed
//! 321409782: a killed ADD's attachment DELed beside a restore).
//!
//! So a removal holds the network's removal lock shared from before its nf_tables step
//! until its reservations are freed, and a restore that put anything back takes it
//! whole afterwards, reads the attachments again and takes back the state of those
//! gone since its first look. A removal that took the lock before the restore's take-back
//! is over when the take-back looks (its attachment is gone: taken back); one that takes
//! it after removes what the restore added, which was in before. The removal waits only
//! while a take-back runs (a read of the store and the links: milliseconds); a restore
//! that put nothing back takes no lock. Best effort, as the network lock: without /run,
//! or after 5 s of removals in flight, each goes on unlocked.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::network::LOCK_DIR;
use super::wired::WiredAttachment;
use super::{Removing, Wired, KINDS};
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::netlink::{Netlink, NftablesOnDemand};

/// A removal's share of its network's removal lock, released when dropped.
pub struct Removal(#[allow(dead_code)] Option<Flock<File>>);

/// Taken by the one removal before its nf_tables step, held until its reservations are
/// freed.
pub fn removal(conf: &Config) -> Removal {
    Removal(lock(&conf.name, FlockArg::LockSharedNonblock).ok())
}

/// The network's removal lock held whole, so no removal of it is between its nf_tables
/// step and the freeing of its reservations: what another's put-back (ADD's, of ports a
/// flush took: ports/wants.rs) added for an attachment is then either still wanted or
/// to be taken back, as the restore's take-back does. Waits out removals (5 s at most).
pub fn no_removal_in_flight(network: &str) -> Option<Flock<File>> {
    lock(network, FlockArg::LockExclusiveNonblock).ok()
}

/// After a restore that put something back: the state of the attachments `before`
/// named that are no longer wired (removed meanwhile) is removed again, by owner, as
/// the removal does. Returns them, "cid/ifname".
pub(super) fn take_back(
    conf: &Config,
    before: &Wired,
    nft: &mut NftablesOnDemand,
) -> Result<Vec<String>> {
    let _whole = lock(&conf.name, FlockArg::LockExclusiveNonblock).ok();
    let after = Wired::read(conf)?;
    let same = |a: &WiredAttachment, b: &WiredAttachment| {
        a.container_id == b.container_id && a.ifname == b.ifname
    };
    let gone: Vec<&WiredAttachment> = before
        .attachments
        .iter()
        .filter(|a| !after.attachments.iter().any(|b| same(a, b)))
        .collect();
    if gone.is_empty() {
        return Ok(Vec::new());
    }
    let mut nl = Netlink::open().ok();
    let mut errors: Vec<Error> = Vec::new();
    let mut taken = Vec::new();
    for a in gone {
        let mut removing = Removing {
            conf,
            nft,
            nl: nl.as_mut(),
            who: a.who(conf),
            addresses: &a.addresses,
            address_state: true,
            // Found by the restore's look, not by a runtime's call: by owner.
            traced: true,
        };
        for kind in KINDS {
            errors.extend(kind.remove(&mut removing).err());
        }
        taken.push(format!("{}/{}", a.container_id, a.ifname));
    }
    super::first_of(errors)?;
    Ok(taken)
}

/// The lock, waited for 5 s at most (a removal waits out a take-back; a take-back waits
/// out the removals in flight).
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
