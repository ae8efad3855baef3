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

/// The reference firewall plugin's chains in the host's filter tables: its first ADD
/// on a host makes CNI-FORWARD (jumped to from FORWARD) and CNI-ADMIN, and no DEL ever
/// removes them. A test that runs the plugin in the host's netns holds this guard: such
/// tests are serialised by its lock (taken after any other test lock), and the chains
/// go when the guard drops, also on failure, if they were not there before it and hold
/// nothing but the plugin's own jumps (an admin's rules, or another network's, keep
/// them).
pub struct FirewallChains {
    existed: [bool; 2],
    _lock: Flock<fs::File>,
}

const FIREWALL_LOCK: &str = "/run/academy-firewall-chains-test.lock";
const TOOLS: [&str; 2] = ["iptables", "ip6tables"];

impl FirewallChains {
    pub fn hold() -> FirewallChains {
        let lock = lock_file(FIREWALL_LOCK);
        FirewallChains {
            existed: TOOLS
                .map(|tool| run_quiet(tool, &["-S", "CNI-FORWARD"]).is_some_and(|o| o.code == 0)),
            _lock: lock,
        }
    }
}

impl Drop for FirewallChains {
    fn drop(&mut self) {
        for (tool, existed) in TOOLS.into_iter().zip(self.existed) {
            if existed {
                continue;
            }
            let lines = |chain: &str| -> Option<Vec<String>> {
                let out = run_quiet(tool, &["-S", chain]).filter(|o| o.code == 0)?;
                Some(
                    out.stdout
                        .lines()
                        .filter(|l| !l.starts_with("-N "))
                        .map(str::to_string)
                        .collect(),
                )
            };
            let (Some(forward), Some(admin)) = (lines("CNI-FORWARD"), lines("CNI-ADMIN")) else {
                continue;
            };
            let own = "-A CNI-FORWARD -m comment --comment \"CNI firewall plugin admin overrides\" -j CNI-ADMIN";
            if !admin.is_empty() || forward.iter().any(|l| l != own) {
                continue;
            }
            let jump = [
                "-D",
                "FORWARD",
                "-m",
                "comment",
                "--comment",
                "CNI firewall plugin rules",
                "-j",
                "CNI-FORWARD",
            ];
            let _ = run_quiet(tool, &jump);
            for args in [
                ["-F", "CNI-FORWARD"],
                ["-F", "CNI-ADMIN"],
                ["-X", "CNI-FORWARD"],
                ["-X", "CNI-ADMIN"],
            ] {
                let _ = run_quiet(tool, &args);
            }
        }
    }
}
