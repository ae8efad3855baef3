//! A holder's index file, `holders/<containerID>:<ifname>`: the addresses the attachment
//! holds or is about to hold, one per line, replaced atomically through the holder's own
//! temp file. A child of store.rs.

use std::fs::File;
use std::io::{self, Write};
use std::net::IpAddr;

use super::files::Dir;
use super::runtime::Marker;
use super::{holder_tmp_name, Store, MAX_INDEX};
use crate::cni::Result;
use crate::ipam::Holder;

pub(super) fn parse_index(content: &[u8]) -> Vec<IpAddr> {
    // Unparseable lines cannot name a reservation, so skipping them loses nothing.
    String::from_utf8_lossy(content)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The index's content: its addresses, then the container's netns when ADD knew it and
/// whether its runtime record exists (runtime.rs): lines that are no address, so
/// readers that know only addresses skip them.
pub(super) fn index_bytes(addrs: &[IpAddr], netns: Option<&str>, marker: Marker) -> Vec<u8> {
    let mut out = String::new();
    for a in addrs {
        out.push_str(&a.to_string());
        out.push('\n');
    }
    if let Some(netns) = netns.filter(|n| !n.contains('\n')) {
        out.push_str(NETNS_PREFIX);
        out.push_str(netns);
        out.push('\n');
    }
    out.push_str(&marker.line());
    out.into_bytes()
}

const NETNS_PREFIX: &str = "netns ";

/// The netns an index records, if any.
pub(crate) fn recorded_netns(content: &[u8]) -> Option<String> {
    String::from_utf8_lossy(content)
        .lines()
        .find_map(|l| l.strip_prefix(NETNS_PREFIX).map(str::to_string))
}

impl Store {
    /// Whether `holder` has a holder index (ADD's last check tells a vanished index from
    /// a released address with it).
    pub fn has_index(&self, holder: &Holder) -> Result<bool> {
        holder.validate()?;
        let key = holder.key();
        self.holders
            .stat(&key)
            .map(|st| st.is_some())
            .map_err(|e| self.io_err_in(&self.holders, "check holder index", &key, &e))
    }

    /// The holder's index; None when it has none. Anything but a regular file there is
    /// an error (code 5): academy cannot record what it reserves.
    pub(super) fn read_index(&self, holder: &Holder) -> Result<Option<Vec<u8>>> {
        let key = holder.key();
        self.holders
            .read(&key, MAX_INDEX)
            .map_err(|e| self.io_err_in(&self.holders, "read holder index", &key, &e))
    }

    /// Atomically replaces the holder's index (its temp file, then rename), so readers see
    /// the old or the new content, never a torn one.
    pub(super) fn write_index(&self, holder: &Holder, addrs: &[IpAddr]) -> Result<()> {
        let key = holder.key();
        let tmp = holder_tmp_name(holder);
        let written = self
            .create_holder_tmp(&self.holders, &tmp)
            .and_then(|mut f| {
                f.write_all(&index_bytes(addrs, self.netns.as_deref(), self.marker()))?;
                self.holders.rename(&tmp, &key)?;
                self.done_with(f);
                Ok(())
            });
        if written.is_err() {
            let _ = self.holders.unlink(&tmp);
        }
        written.map_err(|e| self.io_err_in(&self.holders, "write holder index", &key, &e))
    }

    /// Creates the holder's temp file in `dir`; a leftover of a killed run of the same
    /// holder is replaced.
    pub(super) fn create_holder_tmp(&self, dir: &Dir, tmp: &str) -> io::Result<File> {
        match dir.create_new(tmp) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                dir.unlink(tmp)?;
                dir.create_new(tmp)
            }
            other => other,
        }
    }

    /// Puts an index back as it was before a failed reserve, best-effort: an index that
    /// still names a candidate is harmless, release checks the reservation's content.
    pub(super) fn restore_index(&self, holder: &Holder, original: Option<&[u8]>) {
        match original {
            Some(bytes) => {
                let _ = self.write_index(holder, &parse_index(bytes));
            }
            None => {
                let _ = self.holders.unlink(&holder.key());
            }
        }
    }
}
