//! Running the reference bridge plugin (Debian's 1.1.1, copied into /opt/cni/lab-bin by
//! `make setup`) beside academy: the lock every such test holds, and the guard of the
//! reference's own bridge and of the host-wide switches it flips.

use std::path::Path;
use std::sync::Mutex;

use super::process::run;

/// The reference plugins: bridge, host-local, loopback, portmap.
pub const REFERENCE_BIN: &str = "/opt/cni/lab-bin";

/// Held by every test that runs the reference bridge. With isGateway the reference
/// turns on forwarding host-wide (net.ipv6.conf.all.forwarding); [`ReferenceBridge`]
/// puts the old value back before academy's run, and no other reference run may flip
/// it while academy's bridge sysctls are read.
static REFERENCE: Mutex<()> = Mutex::new(());

pub fn reference_lock() -> std::sync::MutexGuard<'static, ()> {
    REFERENCE.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unreadable ({e})"))
}

pub fn write_sysctl(path: &str, value: &str) {
    if read_trimmed(path) != value {
        let _ = std::fs::write(path, value);
    }
}

/// The reference's own bridge, deleted when the reference run ends (or the test
/// panics), and the host-wide forwarding switches the reference may have turned on put
/// back as they were.
pub struct ReferenceBridge {
    pub name: String,
    forwarding: Vec<(&'static str, String)>,
}

const FORWARDING: [&str; 2] = [
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv6/conf/all/forwarding",
];

impl ReferenceBridge {
    /// The bridge `name` (one of the test's lab names), removed now if a killed run
    /// left it.
    pub fn new(name: String) -> ReferenceBridge {
        let b = ReferenceBridge {
            name,
            forwarding: FORWARDING.iter().map(|p| (*p, read_trimmed(p))).collect(),
        };
        b.remove();
        b
    }

    pub fn remove(&self) {
        if Path::new("/sys/class/net").join(&self.name).exists() {
            let _ = run("ip", &["link", "del", &self.name], &[]);
        }
        for (path, value) in &self.forwarding {
            write_sysctl(path, value);
        }
    }
}

impl Drop for ReferenceBridge {
    fn drop(&mut self) {
        self.remove();
    }
}
