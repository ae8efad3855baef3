//! The round-robin hint, `last_reserved_ip.<range set>`: where the next search for a
//! free address starts, so a freed address is not handed out again at once. Only a
//! hint: anything unreadable is none, and a failed write fails no ADD.

use std::fs::File;
use std::net::IpAddr;

use super::{files, Store};
use crate::ipam::Pool;

const HINT_PREFIX: &str = "last_reserved_ip.";
const MAX_HINT: usize = 64;

/// The hint's file, open from its read to its write, and how long it was then.
pub(super) struct HintFile {
    file: File,
    len: u64,
}

impl HintFile {
    pub(super) fn into_file(self) -> File {
        self.file
    }
}

fn parse_hint(bytes: &[u8]) -> Option<IpAddr> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

impl Store {
    /// The round-robin hint; anything unreadable (missing, garbage, a FIFO) is no hint.
    pub(super) fn read_hint(&self, pool: &Pool) -> Option<IpAddr> {
        let name = format!("{HINT_PREFIX}{}", pool.range_set());
        parse_hint(&self.dir.read(&name, MAX_HINT).ok()??)
    }

    /// The hint, and its file kept open for `write_hint`: an ADD reads it and rewrites
    /// it, and one open serves both (an open, an fstat and a close fewer).
    pub(super) fn open_hint(&self, pool: &Pool) -> (Option<IpAddr>, Option<HintFile>) {
        let name = format!("{HINT_PREFIX}{}", pool.range_set());
        let Ok(Some(mut opened)) = self.dir.open_rw(&name) else {
            return (None, None);
        };
        let read = files::read_capped(&mut opened.file, MAX_HINT);
        // What it held, as far as academy knows; unreadable, its size at the open.
        let len = match &read {
            Ok(bytes) => bytes.len() as u64,
            Err(_) => u64::try_from(opened.stat.st_size).unwrap_or(u64::MAX),
        };
        let hint = read.ok().and_then(|bytes| parse_hint(&bytes));
        let file = HintFile {
            file: opened.file,
            len,
        };
        (hint, Some(file))
    }

    /// Writes the hint into `file` (the one `open_hint` read) or, without one, by name.
    pub(super) fn write_hint(&self, pool: &Pool, addr: IpAddr, file: Option<&mut HintFile>) {
        // Plain overwrite: a torn or racing write only yields a hint that reads as garbage
        // or points elsewhere, and either just moves where the next search starts. Failing
        // an ADD that already holds its address over a hint would be worse.
        let text = addr.to_string();
        if let Some(HintFile { file, len }) = file {
            // Cut to length only when the new hint is shorter than what was read: the
            // same length, or longer, covers it all (the usual case, an ftruncate fewer).
            // A racing writer's longer hint may leave a tail, read as garbage or as
            // another address: as with any race on the hint (see above).
            let _ = if text.len() as u64 >= *len {
                files::write_from_start(file, text.as_bytes())
            } else {
                files::overwrite_file(file, text.as_bytes())
            };
            return;
        }
        let name = format!("{HINT_PREFIX}{}", pool.range_set());
        let _ = self.dir.overwrite(&name, text.as_bytes());
    }
}
