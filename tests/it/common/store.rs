//! What the plugin's store holds, read straight from its files (the lab's data dir):
//! reservations, holders, and the leftovers of interrupted writes.

use std::net::IpAddr;
use std::path::PathBuf;

use super::lab::Lab;

impl Lab {
    /// The IPAM store's live entries: address files (IPv4 and IPv6), holder index
    /// files and runtime records. Empty when nothing is reserved (the hint files and
    /// empty folders are not reservations).
    pub fn reservations(&self) -> Vec<String> {
        let dir = self.data_dir.join(&self.network);
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<IpAddr>().is_ok())
            .collect();
        found.extend(
            std::fs::read_dir(dir.join("holders"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| format!("holders/{}", e.file_name().to_string_lossy())),
        );
        found.extend(
            std::fs::read_dir(dir.join("runtime"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| format!("runtime/{}", e.file_name().to_string_lossy())),
        );
        found.sort();
        found
    }
}

/// The folder of the lab's network in its data dir.
pub fn store_dir(lab: &Lab) -> PathBuf {
    lab.data_dir.join(&lab.network)
}

/// Leftovers of an interrupted write (`.tmp.*`, in the store, holders/ or runtime/):
/// not reservations; GC sweeps them once older than 60 s.
pub fn tmp_files(lab: &Lab) -> Vec<String> {
    let dir = store_dir(lab);
    let mut found = Vec::new();
    for sub in ["", "holders", "runtime"] {
        for e in std::fs::read_dir(dir.join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp.") {
                found.push(if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                });
            }
        }
    }
    found.sort();
    found
}

/// Reservations and holder indexes, without the `.tmp.*` leftovers.
pub fn live_reservations(lab: &Lab) -> Vec<String> {
    lab.reservations()
        .into_iter()
        .filter(|r| !r.contains("/.tmp.") && !r.starts_with(".tmp."))
        .collect()
}

/// The address files alone.
pub fn address_files(lab: &Lab) -> Vec<String> {
    lab.reservations()
        .into_iter()
        .filter(|r| !r.contains('/'))
        .collect()
}

/// Who holds `addr` in the store ("cid\r\nifname"), if anyone.
pub fn holder_of(lab: &Lab, addr: &str) -> Option<String> {
    std::fs::read_to_string(store_dir(lab).join(addr)).ok()
}
