//! What must stay exactly as it was after a failed invocation: a [`Snapshot`] of the
//! lab's part of the host, and the differences between two.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use super::kernel::{host_links, ip_json};
use super::lab::Lab;
use super::process::run;

/// academy's default store: no test may create it (every lab names its own dataDir).
const DEFAULT_STORE: &str = "/var/lib/cni/academy";

impl Lab {
    /// Everything a plugin run could change that belongs to this lab (see [`Snapshot`]).
    pub fn snapshot(&self) -> Snapshot {
        // Kind, up, IPv4 addresses: carrier and IPv6 link-local come and go on their own.
        let bridge = host_links()
            .into_iter()
            .find(|l| l["ifname"].as_str() == Some(self.bridge.as_str()))
            .map(|l| {
                let addrs = ip_json(&["-4", "addr", "show", "dev", &self.bridge]);
                let addrs: Vec<String> = addrs[0]["addr_info"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or("?"), a["prefixlen"]))
                    .collect();
                let up = l["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "UP"));
                format!(
                    "kind={} up={up} addrs={addrs:?}",
                    l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
                )
            });
        // The lab's netns and its extras ("<netns>-<suffix>"), nobody else's.
        let ns_prefix = format!("{}-", self.netns);
        let mut netns = BTreeMap::new();
        for entry in std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == self.netns || name.starts_with(&ns_prefix) {
                let state = format!(
                    "{}{}{}",
                    run("ip", &["-n", &name, "-br", "link"], &[]).stdout,
                    run("ip", &["-n", &name, "-4", "-br", "addr"], &[]).stdout,
                    run("ip", &["-n", &name, "route", "show", "table", "all"], &[]).stdout
                );
                netns.insert(name, state);
            }
        }
        let mut files = BTreeSet::new();
        walk(&self.data_dir, &self.data_dir, &mut files);
        Snapshot {
            bridge,
            links: self.lab_links(),
            netns,
            files,
            cached_results: self.cached_results(),
            default_store_exists: Path::new(DEFAULT_STORE).exists(),
            masquerade: super::nft::elements(&self.network),
            mac_filter: super::nft_bridge::mac_filter(&self.network),
        }
    }
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        out.insert(
            p.strip_prefix(base)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned(),
        );
        if p.is_dir() && !p.is_symlink() {
            walk(base, &p, out);
        }
    }
}

/// What a failed invocation must leave exactly as it was. Scoped to the lab (its bridge,
/// the links labelled with its network or attached to its bridge, its netns and what is
/// inside them, its data dir, cnitool's cache for its network), because other tests
/// change the rest of the host concurrently; plus the default store's existence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub bridge: Option<String>,
    pub links: BTreeSet<String>,
    pub netns: BTreeMap<String, String>,
    pub files: BTreeSet<String>,
    pub cached_results: BTreeSet<String>,
    pub default_store_exists: bool,
    /// The network's masquerade set elements (nf_tables).
    pub masquerade: BTreeSet<String>,
    /// The network's MAC filter elements (macspoofchk, nf_tables).
    pub mac_filter: BTreeSet<String>,
}

impl Snapshot {
    /// The differences from `before`, one line each; empty when equal.
    pub fn diff(&self, before: &Snapshot) -> String {
        self.diff_with(before, false)
    }

    /// As [`Snapshot::diff`], but the store's housekeeping (the network folder, the
    /// holders/ and runtime/ folders, the last_reserved_ip.* hint) may appear: an ADD that fails after
    /// reserving (name in use, kernel refusal) releases its reservation but not those.
    /// Reservations themselves (address files, holder indexes, runtime records) are still
    /// compared.
    pub fn diff_allowing_store_housekeeping(&self, before: &Snapshot) -> String {
        self.diff_with(before, true)
    }

    fn diff_with(&self, before: &Snapshot, allow_housekeeping: bool) -> String {
        let housekeeping = |f: &&String| {
            let last = f.rsplit('/').next().unwrap_or(f);
            !f.contains('/')
                || last == "holders"
                || last == "runtime"
                || last.starts_with("last_reserved_ip.")
        };
        let files = |s: &Snapshot| -> BTreeSet<String> {
            s.files
                .iter()
                .filter(|f| !(allow_housekeeping && housekeeping(f)))
                .cloned()
                .collect()
        };
        let (files_before, files_after) = (files(before), files(self));
        let mut d = String::new();
        if self.bridge != before.bridge {
            let _ = writeln!(d, "bridge: {:?} -> {:?}", before.bridge, self.bridge);
        }
        if self.links != before.links {
            let _ = writeln!(d, "links: {:?} -> {:?}", before.links, self.links);
        }
        if self.netns != before.netns {
            let _ = writeln!(d, "netns: {:?} -> {:?}", before.netns, self.netns);
        }
        if files_after != files_before {
            let _ = writeln!(d, "store files: {files_before:?} -> {files_after:?}");
        }
        if self.cached_results != before.cached_results {
            let _ = writeln!(
                d,
                "cnitool cache: {:?} -> {:?}",
                before.cached_results, self.cached_results
            );
        }
        if self.masquerade != before.masquerade {
            let _ = writeln!(
                d,
                "masquerade elements: {:?} -> {:?}",
                before.masquerade, self.masquerade
            );
        }
        if self.mac_filter != before.mac_filter {
            let _ = writeln!(
                d,
                "MAC filter elements: {:?} -> {:?}",
                before.mac_filter, self.mac_filter
            );
        }
        if self.default_store_exists != before.default_store_exists {
            let _ = writeln!(d, "{DEFAULT_STORE} appeared or vanished");
        }
        d
    }
}

/// The lab's snapshot without what the kernel adds on its own after an interface comes
/// up: IPv6 link-local addresses and their routes appear in a netns some time after an ADD
/// (`fe80::`, `ff00::/8`), so two snapshots of a live container would differ by them.
pub fn settled_snapshot(lab: &Lab) -> Snapshot {
    let mut s = lab.snapshot();
    for state in s.netns.values_mut() {
        *state = state
            .lines()
            .filter(|l| !l.contains("fe80") && !l.contains("ff00::"))
            .map(|l| format!("{l}\n"))
            .collect();
    }
    s
}

/// [`settled_snapshot`] without `.tmp.*` leftovers, for comparing after a kill.
pub fn snapshot_without_tmp(lab: &Lab) -> Snapshot {
    let mut s = settled_snapshot(lab);
    s.files.retain(|f| !f.contains("/.tmp."));
    s
}
