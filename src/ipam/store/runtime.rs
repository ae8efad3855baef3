//! An attachment's record of what its runtime asked for that the kernel cannot give
//! back (port mappings, bandwidth rates: config/recorded.rs encodes them), kept so that
//! `academy restore` and `academy watch` can rebuild published ports after a flush.
//! A child of the store.
//!
//! - `runtime/<containerID>:<ifname>`: the record, one small JSON object, written only
//!   when there is something to record (an attachment without ports or rates costs no
//!   file), through `runtime/.tmp.<containerID>:<ifname>` and a rename, so a reader sees
//!   a whole record or none. ADD writes it once its addresses are reserved, before its
//!   nf_tables batch: no published port exists without its record.
//! - the holder index's line `runtime recorded` or `runtime none`, written with the
//!   index before any reservation: whether this attachment's record is in runtime/, or
//!   it had nothing to record. An index without such a line was written by an academy
//!   older than records; the restore names those attachments instead of guessing. DEL
//!   reads the index anyway, so it looks in runtime/ only when the line says so.
//!
//! A record goes wherever its index goes (DEL, GC, reclaim, a failed ADD's undo); GC
//! also sweeps the records whose holder it does not list (a kill between a record and
//! its index).

use std::io::{self, Write};

use super::files::Dir;
use super::sweep::GcReport;
use super::{holder_tmp_name, not_found, Store, TMP_PREFIX};
use crate::cni::Result;
use crate::ipam::Holder;

pub(super) const RUNTIME: &str = "runtime";
const LINE_PREFIX: &str = "runtime ";
const RECORDED: &str = "recorded";
const NOTHING: &str = "none";
/// 65,535 mappings are about 4.5 MiB of JSON; anything far larger is not academy's.
const MAX_RECORD: usize = 16 * 1024 * 1024;

/// What an index says of its attachment's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    Recorded,
    Nothing,
}

impl Marker {
    pub(super) fn line(self) -> String {
        let word = match self {
            Marker::Recorded => RECORDED,
            Marker::Nothing => NOTHING,
        };
        format!("{LINE_PREFIX}{word}\n")
    }
}

/// The marker of an index's content; None for an index of an older academy.
pub(super) fn marker_of(index: &[u8]) -> Option<Marker> {
    String::from_utf8_lossy(index)
        .lines()
        .find_map(|l| match l.strip_prefix(LINE_PREFIX)?.trim() {
            RECORDED => Some(Marker::Recorded),
            NOTHING => Some(Marker::Nothing),
            _ => None,
        })
}

/// One attachment's record as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// Its index predates records: what the runtime asked for is unknown.
    Unrecorded,
    /// Recorded: there was nothing to record (or ADD stopped before it wrote it, so
    /// before it published anything).
    Nothing,
    /// The record's bytes.
    Record(Vec<u8>),
}

/// Removes `key`'s record and a killed write's temp file from the network folder's
/// runtime/, if there is one. Nothing there is success.
pub(super) fn remove_record(net: &Dir, key: &str) -> io::Result<()> {
    let dir = match net.subdir(RUNTIME) {
        Ok(dir) => dir,
        Err(e) if not_found(&e) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in [key.to_string(), format!("{TMP_PREFIX}{key}")] {
        // Looked up first: unlinking a missing name on a read-only file system is EROFS.
        if dir.stat(&name)?.is_some() {
            match dir.unlink(&name) {
                Err(e) if !not_found(&e) => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// The record named by `index` (the holder index's content, None without one).
pub(super) fn read_record(net: &Dir, key: &str, index: Option<&[u8]>) -> io::Result<Runtime> {
    let Some(index) = index else {
        return Ok(Runtime::Unrecorded);
    };
    match marker_of(index) {
        None => Ok(Runtime::Unrecorded),
        Some(Marker::Nothing) => Ok(Runtime::Nothing),
        Some(Marker::Recorded) => {
            let dir = match net.subdir(RUNTIME) {
                Ok(dir) => dir,
                Err(e) if not_found(&e) => return Ok(Runtime::Nothing),
                Err(e) => return Err(e),
            };
            Ok(match dir.read(key, MAX_RECORD)? {
                Some(bytes) => Runtime::Record(bytes),
                None => Runtime::Nothing,
            })
        }
    }
}

impl Store {
    /// Records `record` (config::Recorded's bytes; None: nothing to record) for the
    /// holder whose index this Store writes (ADD's).
    pub fn recording(mut self, record: Option<Vec<u8>>) -> Store {
        self.record = record;
        self
    }

    /// The marker the indexes this Store writes carry.
    pub(super) fn marker(&self) -> Marker {
        match self.record {
            Some(_) => Marker::Recorded,
            None => Marker::Nothing,
        }
    }

    /// ADD, once its addresses are reserved and before its nf_tables batch: writes the
    /// holder's record, if it has one. runtime/ is made (0700) on the first record.
    pub fn write_record(&self, holder: &Holder) -> Result<()> {
        let Some(bytes) = &self.record else {
            return Ok(());
        };
        let key = holder.key();
        let dir = self.runtime_dir()?;
        let tmp = holder_tmp_name(holder);
        let written = self.create_holder_tmp(&dir, &tmp).and_then(|mut f| {
            f.write_all(bytes)?;
            dir.rename(&tmp, &key)
        });
        if written.is_err() {
            let _ = dir.unlink(&tmp);
        }
        written.map_err(|e| self.io_err_in(&dir, "write the runtime record", &key, &e))
    }

    fn runtime_dir(&self) -> Result<Dir> {
        // Opened first: it exists on every ADD with ports but the network's first, and a
        // mkdir that fails with EEXIST still costs a syscall.
        let dir = match self.dir.subdir(RUNTIME) {
            Err(e) if not_found(&e) => {
                match self.dir.mkdir(RUNTIME, 0o700) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                        return Err(self.io_err("create", RUNTIME, &e))
                    }
                    _ => {}
                }
                self.dir.subdir(RUNTIME)
            }
            other => other,
        }
        .map_err(|e| self.io_err("open", RUNTIME, &e))?;
        dir.check_private().map_err(|(problem, details)| {
            super::errors::refuse_dir(&self.dir.path_of(RUNTIME), problem, &details)
        })?;
        Ok(dir)
    }

    /// A holder that already holds its address (an ADD repeated, or the first ADD by
    /// this academy of an attachment an older one made): its index is rewritten when
    /// its marker is not this ADD's, and a record this ADD no longer has goes first (an
    /// index saying "recorded" without a record reads as nothing recorded).
    pub(super) fn keep_marked(&self, holder: &Holder, original: Option<&[u8]>) -> Result<()> {
        let Some(index) = original else {
            return Ok(());
        };
        let now = marker_of(index);
        if now == Some(self.marker()) {
            return Ok(());
        }
        if self.record.is_none() && now == Some(Marker::Recorded) {
            remove_record(&self.dir, &holder.key())
                .map_err(|e| self.io_err("remove the runtime record of", &holder.key(), &e))?;
        }
        self.write_index(holder, &super::parse_index(index))
    }

    /// The release's part: the holder's record, when its index says it has one or this
    /// Store wrote one (an undo whose index is gone).
    pub(super) fn release_record(&self, holder: &Holder, index: Option<&[u8]>) -> Result<()> {
        let recorded = index.and_then(marker_of) == Some(Marker::Recorded);
        if !recorded && self.record.is_none() {
            return Ok(());
        }
        let key = holder.key();
        remove_record(&self.dir, &key).map_err(|e| {
            self.io_err_in(
                &self.dir,
                "remove the runtime record",
                &format!("{RUNTIME}/{key}"),
                &e,
            )
        })
    }

    /// GC's part: the records of holders not `listed`, and abandoned temp files.
    pub(super) fn sweep_records(
        &self,
        listed: impl Fn(&str, &str) -> bool,
        now: std::time::SystemTime,
        report: &mut GcReport,
    ) {
        let dir = match self.dir.subdir(RUNTIME) {
            Ok(dir) => dir,
            Err(e) if not_found(&e) => return,
            Err(e) => return report.errors.push(self.io_err("open", RUNTIME, &e)),
        };
        let names = match dir.list() {
            Ok(names) => names,
            Err(e) => return report.errors.push(self.io_err_in(&dir, "list", ".", &e)),
        };
        for (name, regular) in names {
            if !regular {
                continue;
            }
            if name.starts_with(TMP_PREFIX) {
                self.sweep_tmp(&dir, &name, now, report);
                continue;
            }
            // Names without ':' were not written by us; leave them.
            let Some((id, ifname)) = name.split_once(':') else {
                continue;
            };
            if listed(id, ifname) {
                continue;
            }
            match dir.unlink(&name) {
                Err(e) if !not_found(&e) => {
                    report
                        .errors
                        .push(self.io_err_in(&dir, "remove the runtime record", &name, &e))
                }
                _ => {}
            }
        }
    }
}
