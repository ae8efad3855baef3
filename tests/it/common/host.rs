//! What tests share with other processes on the machine: file locks that serialise a
//! test against its own runs elsewhere, and mounts a runtime leaves under a test folder.

use std::fs;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use super::process::run_quiet;

/// An exclusive flock on `path` (created if missing), held until the value drops. Two
/// holders in one process exclude each other too: each opens its own file description.
pub fn lock_file(path: &str) -> Flock<fs::File> {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
    Flock::lock(file, FlockArg::LockExclusive).unwrap_or_else(|(_, e)| panic!("flock {path}: {e}"))
}

/// Lazily unmounts every mount point under `dir`, deepest first (a runtime's shm or
/// rootfs of a killed container). Never panics: it runs from Drop guards.
pub fn unmount_below(dir: &Path) {
    let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|m| Path::new(m).starts_with(dir))
        .collect();
    points.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in points {
        let _ = run_quiet("umount", &["-l", m]);
    }
}
