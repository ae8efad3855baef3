//! The sweeps over a whole store: GC (free what the runtime no longer lists, and old temp
//! files) and STATUS (can ADD be served). A child of store.rs: it uses the same file
//! plumbing and removal rules, and DEL's O(1) path never comes here.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::files::Dir;
use super::{not_found, unique_tmp_name, Store, STALE_TMP, TMP_PREFIX};
use crate::cni::{code, Error, Result};
use crate::ipam::{FileHolder, Holder, Pool};

/// What [`Store::gc`] did. The sweep never stops at an error; they are all collected.
#[derive(Debug, Default)]
pub struct GcReport {
    /// Freed addresses with their former holder (`id:ifname`, or the bare id of a legacy file).
    pub released: Vec<(IpAddr, String)>,
    pub errors: Vec<Error>,
}

impl Store {
    /// Every holder with an index: the attachments academy reserved for on this store
    /// (GC removes the ones the runtime no longer lists, whole).
    pub fn indexed_holders(&self) -> Result<Vec<Holder>> {
        let names = self
            .holders
            .list()
            .map_err(|e| self.io_err_in(&self.holders, "list", ".", &e))?;
        Ok(names
            .into_iter()
            .filter(|(name, regular)| *regular && !name.starts_with(TMP_PREFIX))
            .filter_map(|(name, _)| {
                let (id, ifname) = name.split_once(':')?;
                Some(Holder::new(id, ifname))
            })
            .collect())
    }

    /// Frees every reservation whose holder is not in `valid` (pairs of containerID and
    /// ifname; a legacy id-only file is kept if its id appears with any ifname), drops the
    /// indexes of invalid holders, and sweeps abandoned temp files. An empty set frees all.
    /// Only regular files whose names parse as addresses are reservations: the hint, a
    /// host-local `lock` and anything else are left alone.
    pub fn gc(&self, valid: &HashSet<(String, String)>) -> GcReport {
        let valid_ids: HashSet<&str> = valid.iter().map(|(id, _)| id.as_str()).collect();
        let mut report = GcReport::default();
        let now = SystemTime::now();

        for (name, regular) in self.list(&self.dir, &mut report) {
            if !regular {
                continue;
            }
            if name.starts_with(TMP_PREFIX) {
                self.sweep_tmp(&self.dir, &name, now, &mut report);
                continue;
            }
            let Ok(addr) = name.parse::<IpAddr>() else {
                continue;
            };
            let stale = |content: &[u8]| match FileHolder::parse(content) {
                FileHolder::Full { id, ifname } => !valid.contains(&(id, ifname)),
                FileHolder::Legacy(id) => !valid_ids.contains(id.as_str()),
            };
            match self.remove_reservation(&name, None, stale) {
                Ok(Some(content)) => report
                    .released
                    .push((addr, FileHolder::parse(&content).describe())),
                Ok(None) => {}
                Err(e) => report
                    .errors
                    .push(self.io_err("remove reservation", &name, &e)),
            }
        }

        for (name, regular) in self.list(&self.holders, &mut report) {
            if !regular {
                continue;
            }
            if name.starts_with(TMP_PREFIX) {
                self.sweep_tmp(&self.holders, &name, now, &mut report);
                continue;
            }
            // Names without ':' were not written by us; leave them.
            let Some((id, ifname)) = name.split_once(':') else {
                continue;
            };
            if valid.contains(&(id.to_string(), ifname.to_string())) {
                continue;
            }
            match self.holders.unlink(&name) {
                Ok(()) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => report.errors.push(self.io_err_in(
                    &self.holders,
                    "remove holder index",
                    &name,
                    &e,
                )),
            }
        }
        let listed = |id: &str, ifname: &str| valid.contains(&(id.to_string(), ifname.to_string()));
        self.sweep_records(listed, now, &mut report);
        report
    }

    /// STATUS: the store can be written (else code 5) and every pool has at least one
    /// free address (else code 110). The STATUS verb says what that means to the runtime.
    pub fn status(&self, pools: &[Pool]) -> Result<()> {
        for dir in [&self.dir, &self.holders] {
            if let Err(e) = self.pending(dir, b"", &unique_tmp_name()) {
                return Err(Error::new(
                    code::IO_FAILURE,
                    format!(
                        "network {}: IPAM store {} is not writable: {e}",
                        self.network,
                        dir.path().display()
                    ),
                )
                .details(
                    "check the file system (full, read-only) and the directory's permissions",
                ));
            }
        }
        for pool in pools {
            let mut held = 0u128;
            let mut free = false;
            for cand in pool.candidates(self.read_hint(pool)) {
                let name = cand.to_string();
                let exists = self
                    .dir
                    .stat(&name)
                    .map_err(|e| self.io_err("check reservation", &name, &e))?;
                if exists.is_none() {
                    free = true;
                    break;
                }
                held += 1;
            }
            if !free {
                return Err(self.exhausted(pool, held));
            }
        }
        Ok(())
    }

    /// Entries of `dir` as (name, is a regular file), for GC only.
    fn list(&self, dir: &Dir, report: &mut GcReport) -> Vec<(String, bool)> {
        dir.list().unwrap_or_else(|e| {
            report.errors.push(self.io_err_in(dir, "list", ".", &e));
            Vec::new()
        })
    }

    pub(super) fn sweep_tmp(&self, dir: &Dir, name: &str, now: SystemTime, report: &mut GcReport) {
        let modified = dir.stat(name).map(|st| {
            st.map(|st| UNIX_EPOCH + Duration::new(st.st_mtime as u64, st.st_mtime_nsec as u32))
        });
        match modified {
            Ok(Some(t)) if now.duration_since(t).unwrap_or_default() > STALE_TMP => {
                if let Err(e) = dir.unlink(name) {
                    if !not_found(&e) {
                        report
                            .errors
                            .push(self.io_err_in(dir, "remove stale temp file", name, &e));
                    }
                }
            }
            Ok(_) => {}
            Err(e) => report
                .errors
                .push(self.io_err_in(dir, "stat temp file", name, &e)),
        }
    }
}

/// STATUS for a network without an open store.
pub fn status(data_dir: &Path, network: &str, pools: &[Pool]) -> Result<()> {
    Store::open(data_dir, network)?.status(pools)
}
