//! The conf dir's changes, by inotify: a conflist written, renamed into place, linked
//! or removed sets off a restore, so a key turned on for live containers (macspoofchk,
//! ipMasq, a published port's network) is put in place for them at once, not only after
//! the next flush or the network's next ADD. What the restore puts back follows the
//! conflist as it is now; a key turned off is not taken from live containers (their DEL
//! takes it).
//!
//! A dir that is not there yet (the installer makes it), or one removed while watched,
//! is looked for again at the watch's next wake-up (an nf_tables change, a release
//! falling due, a retry): until then its files' changes wait for such a wake-up.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

pub(super) struct ConfDir {
    inotify: Inotify,
    watching: bool,
    /// The names that count as a change.
    wanted: fn(&OsStr) -> bool,
}

/// What a conflist's writer does to put a new one in place: write it (close after
/// writing), rename or link it in, remove or rename it away.
fn events() -> AddWatchFlags {
    AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_ONLYDIR
}

impl ConfDir {
    /// The conf dir's watch: network files as libcni reads them.
    pub(super) fn open() -> nix::Result<ConfDir> {
        ConfDir::of(network_file)
    }

    /// The release records' folder: a `.due` marker made there by another invocation (a
    /// last DEL) wakes the watch, which then learns when to release; without it the
    /// watch, asleep with nothing pending, missed a record written after its last
    /// wake-up (the soak, seed 289689798: three networks never released).
    pub(super) fn release_records() -> nix::Result<ConfDir> {
        ConfDir::of(|name| name.as_encoded_bytes().ends_with(b".due"))
    }

    fn of(wanted: fn(&OsStr) -> bool) -> nix::Result<ConfDir> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        Ok(ConfDir {
            inotify,
            watching: false,
            wanted,
        })
    }

    /// Watches `dir` unless it is already; whether it is watched.
    pub(super) fn watch(&mut self, dir: &Path) -> bool {
        if !self.watching {
            self.watching = self.inotify.add_watch(dir, events()).is_ok();
        }
        self.watching
    }

    /// The network files that changed since the last call (names as libcni reads them:
    /// *.conf, *.conflist, *.json), without repeats; a lost event (the queue overflowed)
    /// is a change of "(events lost)".
    pub(super) fn changed(&mut self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            for e in events {
                if e.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The dir went (or its filesystem): look for it again later.
                    self.watching = false;
                }
                let name = match (&e.name, e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)) {
                    (_, true) => "(events lost)".to_string(),
                    (Some(n), false) if (self.wanted)(n) => n.to_string_lossy().into_owned(),
                    _ => continue,
                };
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }
}

impl AsFd for ConfDir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

/// A network file as libcni reads them, or the `..data` link the kubelet swaps when it
/// updates a ConfigMap mounted as the conf dir (its files are links through it, and
/// change with no event of their own).
fn network_file(name: &OsStr) -> bool {
    let ext = Path::new(name).extension().and_then(OsStr::to_str);
    matches!(ext, Some("conf" | "conflist" | "json")) || name == "..data"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conflist written, renamed in and removed are each seen; an editor's swap file
    /// and a dir's removal are not network files.
    #[test]
    fn a_conflist_written_renamed_in_or_removed_is_a_change() {
        let dir = std::env::temp_dir().join(format!("academy-confdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = ConfDir::open().unwrap();
        assert!(c.watch(&dir));
        assert!(c.changed().is_empty());
        std::fs::write(dir.join("10-a.conflist"), "{}").unwrap();
        std::fs::write(dir.join(".10-b.conflist.swp"), "x").unwrap();
        assert_eq!(c.changed(), ["10-a.conflist"]);
        // The kubelet's update of a ConfigMap volume: a new ..data link renamed over.
        std::os::unix::fs::symlink("..2026_12_03", dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        assert_eq!(c.changed(), ["..data"]);
        std::fs::remove_file(dir.join("..data")).unwrap();
        assert_eq!(c.changed(), ["..data"]);
        std::fs::write(dir.join("tmp"), "{}").unwrap();
        std::fs::rename(dir.join("tmp"), dir.join("20-b.conf")).unwrap();
        std::fs::remove_file(dir.join("10-a.conflist")).unwrap();
        assert_eq!(c.changed(), ["20-b.conf", "10-a.conflist"]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c.changed(), ["20-b.conf"]);
        assert!(!c.watching, "the removed dir is looked for again");
        std::fs::create_dir_all(&dir).unwrap();
        assert!(c.watch(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
