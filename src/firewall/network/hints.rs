//! Each node's next due time, so that an invocation lists the records' folder only when
//! something of its node is due: `/run/academy/networks/@<node>.next`, a symlink whose
//! target is the earliest due time (ms since the epoch) of the node's markers, or `none`
//! when the node has none, then `:` and its writer's stamp (pid and time, ns). A
//! symlink, so reading it is one readlink, whatever the number of networks waiting on
//! the host (a listing of the folder read 4 entries per waiting network, of every node).
//!
//! The hint may be early, never late: an early one costs one listing, which writes it
//! again; a late one would hold a release back. So:
//!
//! - a missing or unreadable hint means "list" (a node's first invocation, an older
//!   release's records, a marker dated earlier by hand: remove the hint);
//! - whoever adds a marker (records::write) lowers the hint to its due time first, then
//!   makes the marker, both under the hints' lock: a reader woken by the marker (`academy
//!   watch`) finds the hint already lowered;
//! - a listing (`Listing`) lists under that lock, so it sees every marker whose hint
//!   was lowered before it, then releases without the lock (milliseconds of nf_tables,
//!   which a node's last DEL must not wait for), and writes the hint it found only if
//!   no marker was added meanwhile: every lowering writes the hint again with its own
//!   stamp, even when its time does not change, so another target says one was, and the
//!   listing then keeps the earlier of both. (Not the symlink's inode: tmpfs gives a
//!   freed inode number to the next file, as a test of this found.) Killed before its
//!   write, a listing leaves the old hint, which made it list: the next one lists again.
//!
//! One lock for the host, held for a listing's readdir or a symlink's replacement.
//! Best effort as the other locks: without it (after 5 s) a writer goes on unlocked.

use std::time::Duration;

use super::LOCK_DIR;
use crate::ipam::store::files::{self, FileLock};

/// What a node's hint says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hint {
    /// No hint, or one that does not read: the folder must be listed.
    Unknown,
    /// The node has no marker.
    Nothing,
    /// Its earliest marker is due then (ms since the epoch), or later.
    At(u64),
}

const NOTHING: &str = "none";
const SUFFIX: &str = ".next";
/// Names with `@` first are no network's: a network name is never empty.
const LOCK: &str = "/run/academy/networks/@hints.lock";

pub(super) fn path(node: u64) -> String {
    format!("{LOCK_DIR}/@{node}{SUFFIX}")
}

/// The node of a hint's file name, `@<node>.next`.
pub(super) fn node_of(file: &str) -> Option<u64> {
    file.strip_prefix('@')?.strip_suffix(SUFFIX)?.parse().ok()
}

/// The node's hint: one readlink.
pub(super) fn read(node: u64) -> Hint {
    target(node).map_or(Hint::Unknown, |t| parse(&t))
}

/// The hint's whole target, its writer's stamp with it.
fn target(node: u64) -> Option<String> {
    std::fs::read_link(path(node))
        .ok()?
        .into_os_string()
        .into_string()
        .ok()
}

fn parse(target: &str) -> Hint {
    match target.split_once(':').map_or(target, |(hint, _stamp)| hint) {
        NOTHING => Hint::Nothing,
        ms => ms.parse().map_or(Hint::Unknown, Hint::At),
    }
}

/// The earlier of two due times, a missing one being none.
pub(super) fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn lock() -> Option<FileLock> {
    files::host_lock(LOCK, Duration::from_secs(5))
}

/// Replaces the hint (a new symlink renamed over it: a reader sees the old or the new),
/// stamped so that no two writes leave the same target.
fn write(node: u64, hint: Option<u64>) -> std::io::Result<()> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let hint = hint.map_or(NOTHING.to_string(), |ms| ms.to_string());
    let target = format!("{hint}:{}.{stamp}", std::process::id());
    let path = path(node);
    let tmp = format!("{LOCK_DIR}/.@{node}{SUFFIX}.{}.tmp", std::process::id());
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&target, &tmp)?;
    std::fs::rename(&tmp, &path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A hint's temporary file (`write`'s `.@<node>.next.<pid>.tmp`), left behind only by a
/// writer killed between making it and renaming it over the hint.
pub(super) fn is_temporary(file: &str) -> bool {
    file.starts_with(".@") && file.ends_with(".tmp") && file.contains(SUFFIX)
}

/// A temporary file this old is abandoned: a write takes microseconds.
pub(super) const ABANDONED: Duration = Duration::from_secs(60);

/// Makes the marker (`make`) of a record of `node` due at `due_ms`, the hint lowered to
/// it first. The hint is replaced even when it is early enough already (a listing in
/// flight learns so that a marker came), and a missing one is replaced by 0 (list): this
/// writer does not know the node's other markers.
pub(super) fn adding_marker(
    node: u64,
    due_ms: u64,
    make: impl FnOnce() -> std::io::Result<()>,
) -> std::io::Result<()> {
    let _lock = lock();
    let lowered = match read(node) {
        Hint::At(ms) => ms.min(due_ms),
        Hint::Nothing => due_ms,
        Hint::Unknown => 0,
    };
    // Not written: the hint stays as it was, too late perhaps; without it, no marker
    // either (the record alone is found by the network's next ADD or last DEL).
    write(node, Some(lowered))?;
    make()
}

/// A listing of the folder for one node, from its readdir (under the lock) to the
/// hint it writes once its releases are done.
pub(super) struct Listing {
    node: u64,
    /// The hint's target when the listing began (None: no hint).
    seen: Option<String>,
    lock: Option<FileLock>,
}

impl Listing {
    /// Takes the lock for the readdir that follows (`listed` lets it go).
    pub fn start(node: u64) -> Listing {
        let lock = lock();
        Listing {
            node,
            seen: target(node),
            lock,
        }
    }

    /// The readdir is done: markers made from now on lower the hint themselves.
    pub fn listed(&mut self) {
        self.lock = None;
    }

    /// Writes the node's hint: `next`, the earliest due time of the markers listed that
    /// are left, unless a marker was added since the listing began (then the earlier of
    /// `next` and the hint that marker's writer left).
    pub fn finish(self, next: Option<u64>) {
        let _lock = lock();
        let hint = if target(self.node) == self.seen {
            next
        } else {
            match read(self.node) {
                Hint::At(ms) => earliest(Some(ms), next),
                Hint::Nothing => next,
                Hint::Unknown => Some(0),
            }
        };
        if let Err(e) = write(self.node, hint) {
            crate::log::debug(format_args!("the next release's time: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_reads_from_its_target_and_names_its_node() {
        assert_eq!(parse("none:4242.1733000000123456789"), Hint::Nothing);
        assert_eq!(
            parse("1700000000123:4242.1733000000123456789"),
            Hint::At(1700000000123)
        );
        assert_eq!(parse("1700000000123"), Hint::At(1700000000123));
        for unreadable in ["", "x", "-1", "12 ", ":1.2"] {
            assert_eq!(parse(unreadable), Hint::Unknown, "{unreadable:?}");
        }
        assert_eq!(path(7), format!("{LOCK_DIR}/@7.next"));
        assert!(is_temporary(".@4026532842.next.4242.tmp"));
        assert!(!is_temporary("@4026532842.next"));
        assert!(!is_temporary(".tmp.c1:eth0"));
        assert_eq!(node_of("@4026532842.next"), Some(4026532842));
        for other in [
            "web@4026532842.unused",
            "@hints.lock",
            "@x.next",
            "4026532842.next",
        ] {
            assert_eq!(node_of(other), None, "{other}");
        }
    }

    #[test]
    fn the_earlier_of_two_times_a_missing_one_being_none() {
        assert_eq!(earliest(Some(5), Some(3)), Some(3));
        assert_eq!(earliest(None, Some(3)), Some(3));
        assert_eq!(earliest(Some(5), None), Some(5));
        assert_eq!(earliest(None, None), None);
    }
}
