//! Running the reference bridge plugin (Debian's 1.1.1, copied into /opt/cni/lab-bin by
//! `make setup`) beside academy: the lock every such test holds, and the guard of the
//! reference's own bridge.

use std::path::Path;
use std::sync::Mutex;

use super::process::run;

/// The reference plugins: bridge, host-local, loopback, portmap.
pub const REFERENCE_BIN: &str = "/opt/cni/lab-bin";

/// Held by every test that runs the reference bridge, so that one reference run's
/// bridge and sysctls are read beside academy's and not beside another reference run's.
static REFERENCE: Mutex<()> = Mutex::new(());

pub fn reference_lock() -> std::sync::MutexGuard<'static, ()> {
    REFERENCE.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unreadable ({e})"))
}

/// The reference's own bridge, deleted when the reference run ends (or the test
/// panics).
///
/// The host-wide forwarding switches the reference turns on (ip_forward,
/// ipv6/conf/all/forwarding) stay on: academy turns them on too, and every other test
/// running beside this one forwards through them. Putting back a 0 found at the start
/// cut IPv6 forwarding under a parallel test's published port.
pub struct ReferenceBridge {
    pub name: String,
}

impl ReferenceBridge {
    /// The bridge `name` (one of the test's lab names), removed now if a killed run
    /// left it.
    pub fn new(name: String) -> ReferenceBridge {
        let b = ReferenceBridge { name };
        b.remove();
        b
    }

    pub fn remove(&self) {
        if Path::new("/sys/class/net").join(&self.name).exists() {
            let _ = run("ip", &["link", "del", &self.name], &[]);
        }
    }
}

impl Drop for ReferenceBridge {
    fn drop(&mut self) {
        self.remove();
    }
}
