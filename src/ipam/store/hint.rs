//! The round-robin hint, `last_reserved_ip.<range set>`: where the next search for a
//! free address starts, so a freed address is not handed out again at once. Only a
//! hint: anything unreadable is none, and a failed write fails no ADD.

use std::fs::File;
use std::net::IpAddr;

use super::{files, Store};
use crate::ipam::Pool;

const HINT_PREFIX: &str = "last_reserved_ip.";
const MAX_HINT: usize = 64;

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
    pub(super) fn open_hint(&self, pool: &Pool) -> (Option<IpAddr>, Option<File>) {
        let name = format!("{HINT_PREFIX}{}", pool.range_set());
        let Ok(Some(mut opened)) = self.dir.open_rw(&name) else {
            return (None, None);
        };
        let hint = files::read_capped(&mut opened.file, MAX_HINT)
            .ok()
            .and_then(|bytes| parse_hint(&bytes));
        (hint, Some(opened.file))
    }

    /// Writes the hint into `file` (the one `open_hint` read) or, without one, by name.
    pub(super) fn write_hint(&self, pool: &Pool, addr: IpAddr, file: Option<&mut File>) {
        // Plain overwrite: a torn or racing write only yields a hint that reads as garbage
        // or points elsewhere, and either just moves where the next search starts. Failing
        // an ADD that already holds its address over a hint would be worse.
        let text = addr.to_string();
        if let Some(file) = file {
            let _ = files::overwrite_file(file, text.as_bytes());
            return;
        }
        let name = format!("{HINT_PREFIX}{}", pool.range_set());
        let _ = self.dir.overwrite(&name, text.as_bytes());
    }
}
