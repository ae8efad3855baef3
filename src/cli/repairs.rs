//! The last repair `academy watch` made to each network, kept in one small file per
//! network under the run dir (`/run/academy/watch/<network>.last-repair`, JSON), so
//! that `academy status`, another process, can say it without reading the watch's log.
//! /run is a tmpfs: a reboot forgets the record with the state it described.
//!
//! Written beside its final name and renamed over it, so a reader sees the old record
//! or the new one, never half of one.

use crate::ipam::store::files;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// Where the watch keeps its records.
pub const RUN_DIR: &str = "/run/academy/watch";

/// A record is a few hundred bytes; anything larger was not written by the watch.
const MAX_RECORD: u64 = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRepair {
    pub at: SystemTime,
    /// The kinds put back (network_view::kind_slug's words).
    pub kinds: Vec<String>,
    /// What set the repair off, as the watch's log line says it.
    pub trigger: String,
}

impl LastRepair {
    pub fn unix_seconds(&self) -> u64 {
        self.at
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    }

    fn to_json(&self) -> Value {
        json!({"at": self.unix_seconds(), "kinds": self.kinds, "trigger": self.trigger})
    }

    fn from_json(v: &Value) -> Option<LastRepair> {
        Some(LastRepair {
            at: UNIX_EPOCH + Duration::from_secs(v.get("at")?.as_u64()?),
            kinds: v
                .get("kinds")?
                .as_array()?
                .iter()
                .map(|k| k.as_str().map(str::to_string))
                .collect::<Option<_>>()?,
            trigger: v.get("trigger")?.as_str()?.to_string(),
        })
    }
}

fn record_path(dir: &Path, network: &str) -> PathBuf {
    dir.join(format!("{network}.last-repair"))
}

/// Records `repair` as the network's last. The directory is made (0700) if needed.
pub fn record(dir: &Path, network: &str, repair: &LastRepair) -> Result<(), String> {
    let failed =
        |e: std::io::Error| format!("cannot record the last repair in {}: {e}", dir.display());
    let path = record_path(dir, network);
    files::replace_host_file(&path, repair.to_json().to_string().as_bytes()).map_err(failed)
}

/// The network's last recorded repair; None when the watch never made one (since boot).
pub fn last(dir: &Path, network: &str) -> Result<Option<LastRepair>, String> {
    use std::io::Read as _;
    let path = record_path(dir, network);
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_RECORD)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not a repair record: {e}", path.display()))?;
    LastRepair::from_json(&value)
        .map(Some)
        .ok_or_else(|| format!("{} is not a repair record", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_repair_reads_back_and_the_next_replaces_it() {
        let dir = std::env::temp_dir().join(format!("academy-repairs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(last(&dir, "n1"), Ok(None), "no record, no error");
        let first = LastRepair {
            at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            kinds: vec!["outbound_nat".into()],
            trigger: "start".into(),
        };
        record(&dir, "n1", &first).unwrap();
        assert_eq!(last(&dir, "n1"), Ok(Some(first.clone())));
        let second = LastRepair {
            kinds: vec!["mac_filter".into(), "forward_accepts".into()],
            trigger: "3 change(s) in 1 transaction(s) by nft (pid 9)".into(),
            ..first
        };
        record(&dir, "n1", &second).unwrap();
        assert_eq!(last(&dir, "n1"), Ok(Some(second)));
        assert_eq!(last(&dir, "n2"), Ok(None), "per network");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temp file left: {names:?}");
        std::fs::write(record_path(&dir, "n3"), "garbage").unwrap();
        assert!(last(&dir, "n3").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
