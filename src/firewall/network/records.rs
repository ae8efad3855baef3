//! The release records of unused networks, in /run/academy/networks:
//!
//! - `<name>@<node>.unused`: what the release needs (names, bridge, keys, store) and
//!   when the network became unused, as JSON, one per network per node (the netns's
//!   inode: one host may run a network of the same name in several node netns, each
//!   with its own nf_tables);
//! - `<name>@<node>.<due ms>.due`: empty, its due time in its name, so that a listing
//!   learns which records are due from one readdir and opens only those. A record's ADD
//!   removes the record alone (one unlink, as before markers); the marker left behind
//!   is dropped by the listing that finds it due and its record gone, or dated later;
//! - `@<node>.next`: the node's hint, the earliest due time of its markers, so that an
//!   invocation lists the folder only when one of its node is due (hints.rs).
//!
//! A network name is `[A-Za-z0-9_.-]` (never `@`), so both names parse from the right.
//! v0.5.0's form, `<name>.unused` (one per name for the whole host), is read and turned
//! into this one by the first listing that finds it: a node's first invocation, one
//! whose hint is due, a GC or `academy restore` (no hint announces such a record). A rollback to v0.5.0 does not
//! see records of this form: the networks unused at that moment keep their objects until
//! their next use and last DEL (v0.5.0 then writes its own record), as their objects are
//! never another's to lose.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use super::{hints, LOCK_DIR};
use crate::config::{Builtin, Config, Ipam};
use crate::ipam::store::files;

/// What the release of an unused network needs, written when it became unused.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub name: String,
    pub bridge: String,
    /// The built-in store's dataDir; None for a delegated IPAM or none (no store).
    pub data_dir: Option<PathBuf>,
    pub ip_masq: bool,
    pub mac_spoof_check: bool,
    pub same_bridge_ingress: bool,
    pub publishes_ports: bool,
    pub is_gateway: bool,
    /// `releaseUnusedAfter`, seconds.
    pub release_after: u64,
    /// When the network was found with no attachment, ms since the epoch.
    pub unused_since_ms: u64,
    /// The node: the network namespace's inode (a record in /run is seen from every
    /// netns; a node netns releases only its own networks).
    pub node: u64,
    /// The subnets of academy's ranges and the nonMasqueradeCIDRs (what the masquerade
    /// rule is made for): with the bridge and the keys, what tells a network re-created
    /// under the same name apart (absent from v0.5.0's records).
    #[serde(default)]
    pub subnets: Vec<IpNetwork>,
    #[serde(default)]
    pub non_masquerade: Vec<IpNetwork>,
}

impl Record {
    pub fn of(conf: &Config, unused_since_ms: u64) -> Option<Record> {
        Some(Record {
            name: conf.name.clone(),
            bridge: conf.bridge.clone(),
            data_dir: conf.builtin().map(|b| b.data_dir.clone()),
            ip_masq: conf.ip_masq,
            mac_spoof_check: conf.mac_spoof_check,
            same_bridge_ingress: conf.same_bridge_ingress,
            publishes_ports: conf.publishes_ports,
            is_gateway: conf.is_gateway,
            release_after: conf.release_unused_after,
            unused_since_ms,
            node: node()?,
            subnets: conf.builtin().map(Builtin::subnets).unwrap_or_default(),
            non_masquerade: conf.non_masquerade_cidrs.clone(),
        })
    }

    pub fn expires_ms(&self) -> u64 {
        self.unused_since_ms
            .saturating_add(self.release_after.saturating_mul(1000))
    }

    /// Whether `conf` asks for the same objects as the network this record describes:
    /// the same bridge, store, keys and masquerade ranges (its times aside).
    pub fn same_network(&self, conf: &Config) -> bool {
        Record::of(conf, self.unused_since_ms).is_some_and(|now| {
            Record {
                release_after: self.release_after,
                ..now
            } == *self
        })
    }

    /// The config the kinds' release reads: the record's keys, nothing else.
    pub fn config(&self) -> Option<Config> {
        let base = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": self.name,
            "type": "academy",
            "bridge": self.bridge,
        });
        let mut conf = Config::where_things_are(base.to_string().as_bytes())?;
        conf.ipam = match &self.data_dir {
            Some(data_dir) => Ipam::Builtin(Builtin {
                range_sets: Vec::new(),
                routes: Vec::new(),
                data_dir: data_dir.clone(),
                resolv_conf: None,
            }),
            None => Ipam::None,
        };
        conf.ip_masq = self.ip_masq;
        conf.mac_spoof_check = self.mac_spoof_check;
        conf.same_bridge_ingress = self.same_bridge_ingress;
        conf.publishes_ports = self.publishes_ports;
        conf.is_gateway = self.is_gateway;
        conf.release_unused_after = self.release_after;
        Some(conf)
    }

    pub fn path(&self) -> String {
        record_path(&self.name, self.node)
    }

    pub fn marker(&self) -> String {
        marker_path(&self.name, self.node, self.expires_ms())
    }
}

const RECORD_SUFFIX: &str = ".unused";
const MARKER_SUFFIX: &str = ".due";

pub(super) fn record_path(name: &str, node: u64) -> String {
    format!("{LOCK_DIR}/{name}@{node}{RECORD_SUFFIX}")
}

pub(super) fn marker_path(name: &str, node: u64, due_ms: u64) -> String {
    format!("{LOCK_DIR}/{name}@{node}.{due_ms}{MARKER_SUFFIX}")
}

/// A due marker, as its file name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Marker {
    pub name: String,
    pub node: u64,
    pub due_ms: u64,
}

impl Marker {
    pub fn path(&self) -> String {
        marker_path(&self.name, self.node, self.due_ms)
    }

    pub fn record(&self) -> String {
        record_path(&self.name, self.node)
    }
}

/// What one readdir of the folder says about the records.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry {
    Marker(Marker),
    /// v0.5.0's `<name>.unused`.
    Old(String),
    Other,
}

pub(super) fn entry(file: &str) -> Entry {
    if let Some(rest) = file.strip_suffix(MARKER_SUFFIX) {
        let marker = rest.rsplit_once('.').and_then(|(who, due)| {
            let (name, node) = who.rsplit_once('@')?;
            Some(Marker {
                name: name.to_string(),
                node: node.parse().ok()?,
                due_ms: due.parse().ok()?,
            })
        });
        return marker.map_or(Entry::Other, Entry::Marker);
    }
    match file.strip_suffix(RECORD_SUFFIX) {
        Some(name) if !name.contains('@') && !name.is_empty() => Entry::Old(name.to_string()),
        _ => Entry::Other,
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) use crate::netns::node;

pub(super) fn read(path: &str) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes the record, then its marker: a reader that finds the marker finds the record,
/// and the node's hint is lowered before the marker is made (hints.rs).
pub(super) fn write(record: &Record) -> std::io::Result<()> {
    let text = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    write_atomically(&record.path(), &text)?;
    hints::adding_marker(record.node, record.expires_ms(), || {
        std::fs::write(record.marker(), b"")
    })
}

/// Removes the record and its marker (either may be gone already).
pub(super) fn remove(record: &Record) {
    let _ = std::fs::remove_file(record.path());
    let _ = std::fs::remove_file(record.marker());
}

/// Records the network as unused since now, unless a record is there already (the
/// network has been unused since that one's time).
pub(super) fn mark_unused(conf: &Config) -> std::io::Result<()> {
    let record = Record::of(conf, now_ms()).ok_or(std::io::ErrorKind::NotFound)?;
    if read(&record.path()).is_some() {
        return Ok(());
    }
    write(&record)
}

/// v0.5.0's record `<name>.unused`, in this form (read once, then removed).
pub(super) fn convert_old(name: &str) {
    let old = format!("{LOCK_DIR}/{name}{RECORD_SUFFIX}");
    if let Some(record) = read(&old) {
        if read(&record.path()).is_none() && write(&record).is_err() {
            return;
        }
    }
    let _ = std::fs::remove_file(old);
}

/// Writes a record of academy's under /run/academy/networks whole or not at all: a
/// reader sees the old one or the new one, never a half-written one.
pub(crate) fn write_atomically(path: &str, text: &[u8]) -> std::io::Result<()> {
    files::replace_host_file(path.as_ref(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_old_records_read_from_their_names() {
        assert_eq!(
            entry("web-1.x@4026532842.1700000000123.due"),
            Entry::Marker(Marker {
                name: "web-1.x".into(),
                node: 4026532842,
                due_ms: 1700000000123
            })
        );
        assert!(matches!(entry("web-1.x.unused"), Entry::Old(n) if n == "web-1.x"));
        for other in [
            "web@4026532842.unused",
            "web.lock",
            "web.4026532842.state",
            "web@x.12.due",
            "web@1.x.due",
            "web.12.due",
            "web.unused.123.tmp",
        ] {
            assert!(matches!(entry(other), Entry::Other), "{other}");
        }
    }

    #[test]
    fn a_record_s_marker_names_its_due_time() {
        let record = Record {
            name: "n".into(),
            bridge: "b".into(),
            data_dir: None,
            ip_masq: true,
            mac_spoof_check: false,
            same_bridge_ingress: false,
            publishes_ports: false,
            is_gateway: true,
            release_after: 60,
            unused_since_ms: 1000,
            node: 7,
            subnets: Vec::new(),
            non_masquerade: Vec::new(),
        };
        assert_eq!(record.path(), format!("{LOCK_DIR}/n@7.unused"));
        assert_eq!(record.marker(), format!("{LOCK_DIR}/n@7.61000.due"));
        // v0.5.0's record reads (it has no subnets).
        let old = r#"{"name":"n","bridge":"b","data_dir":null,"ip_masq":true,"mac_spoof_check":false,"same_bridge_ingress":false,"publishes_ports":false,"is_gateway":true,"release_after":60,"unused_since_ms":1000,"node":7}"#;
        assert_eq!(serde_json::from_str::<Record>(old).unwrap(), record);
    }
}
