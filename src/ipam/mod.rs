//! Built-in IPAM: a file-backed address allocator in the host-local tradition, where the
//! file system is the lock (an exclusive create wins an address) and DEL frees by holder.
//!
//! # API
//!
//! ```text
//! Holder { container_id, ifname }           Holder::new, key(), file_content(), validate()
//! Pool::new(subnet, gateway, rangeStart, rangeEnd) -> Result<Pool>     (code 7 on bad config)
//!     .with_range_set(n)  subnet()  gateway()  first()  last()  size()  contains(ip)  candidates(hint)
//! Store::open(data_dir, network) -> Result<Store>                      (creates <data_dir>/<network>/)
//!     dir()  network()
//!     reserve(&holder, &pool) -> Result<IpAddr>                        (110 when full)
//!     reserve_requested(&holder, &pool, ip) -> Result<IpAddr>          (111 when unavailable)
//!     release(&holder) -> Result<Vec<IpAddr>>                          (idempotent, O(1) in store size)
//!     held_by(&holder) -> Result<Vec<IpAddr>>
//!     confirm_held(&holder, &[addr]) -> Result<Option<IpAddr>>         (ADD's last check, locked)
//!     gc(&valid (containerID, ifname) set) -> GcReport { released, errors }
//!     status(&[pool]) -> Result<()>                                    (50 when unusable or full)
//!     recording(record bytes) -> Store    write_record(&holder)        (ADD's runtime record)
//! status(data_dir, network, &[pool]) -> Result<()>                     (open + status, open errors as 50)
//! store::StoreDir::open(store dir) -> Result<Option<StoreDir>>         (None: no store yet; never creates)
//!     reservations() -> Vec<Reservation { address, container_id, ifname, made }>
//!     remove_if(addr, |content, made| decide) -> Result<bool>          (decided under the removers' lock)
//!     drop_index_if_unused(&holder)                                    (its runtime record too)
//!     runtime_of(&holder) -> Result<Runtime>                           (Unrecorded, Nothing, Record(bytes))
//! ```
//!
//! I/O failures are code 5 with the path and errno in the message.
//! `has_index(&holder)` tells ADD's last check a vanished index from a released address.
//!
//! # On disk, under `<dataDir>/<network>/` (mode 0700)
//!
//! - `<address>` (e.g. `10.98.0.2`, `fd00::2`), mode 0600: one reservation, content
//!   `containerID\r\nifname` (host-local's format; a bare `containerID` from older writers
//!   is also understood). It appears atomically with its content (O_TMPFILE + linkat, or a
//!   named temp + link), so a kill never leaves an empty or holderless reservation.
//! - `holders/<containerID>:<ifname>`: the addresses this holder holds or is about to hold,
//!   one per line. It is written (temp + rename) *before* the reservation is linked, so DEL
//!   can always clean up by reading this one file, whatever instant a previous ADD died at.
//!   It may name addresses someone else won; release checks the reservation's content.
//!   Its last line is `runtime recorded` or `runtime none` (absent from an older academy's).
//! - `runtime/<containerID>:<ifname>`: the attachment's runtime record (JSON: its port
//!   mappings and rates), only when it has one; see store/runtime.rs.
//! - `last_reserved_ip.<rangeSet>`: round-robin hint, the last address handed out (host-local).
//! - `.tmp.<containerID>:<ifname>` (in any of the three directories): a holder's temp file. A killed
//!   write's leftover is replaced by the holder's next write and removed by its release;
//!   GC also sweeps any `.tmp.*` older than 60 s.
//!
//! The folder and holders/ must be real directories owned by the running user and not
//! writable by group or others. Only regular files are academy's: anything else by a
//! store name is never opened blocking, followed, read, written or removed (files.rs).
//!
//! Two concurrent reserves for the *same* holder are not serialised (the runtime never issues
//! them); the worst outcome is an address missing from the index, which GC recovers.

mod allocator;
pub mod store;

pub use allocator::Pool;
pub use store::{status, Store};

use crate::cni::error::cut_short;
use crate::cni::{Error, Result};

/// Who holds an address: the runtime's container ID and the interface inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    pub container_id: String,
    pub ifname: String,
}

/// The index file is named by the key and its temp file by ".tmp." + key, within NAME_MAX.
const MAX_KEY_LEN: usize = 250;

impl Holder {
    pub fn new(container_id: impl Into<String>, ifname: impl Into<String>) -> Holder {
        Holder {
            container_id: container_id.into(),
            ifname: ifname.into(),
        }
    }

    /// Name of this holder's index file. ':' is refused in both parts, so it splits back
    /// unambiguously.
    pub fn key(&self) -> String {
        format!("{}:{}", self.container_id, self.ifname)
    }

    /// What a reservation file held by this holder contains.
    pub fn file_content(&self) -> String {
        format!("{}\r\n{}", self.container_id, self.ifname)
    }

    /// Refuses what would make the key an unsafe file name or the file content ambiguous.
    /// Code 4: both parts come from CNI_CONTAINERID and CNI_IFNAME.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: &str| {
            s.is_empty()
                || s.chars()
                    .any(|c| matches!(c, '/' | ':' | '\0') || c.is_whitespace())
        };
        if bad(&self.container_id) || self.container_id.starts_with('.') {
            return Err(Error::env(format!(
                "container ID {:?} cannot name an address holder",
                self.container_id
            ))
            .details("it must be non-empty, not start with '.', and contain no '/', ':', NUL or whitespace"));
        }
        if bad(&self.ifname) {
            return Err(Error::env(format!(
                "interface name {:?} cannot name an address holder",
                self.ifname
            ))
            .details("it must be non-empty and contain no '/', ':', NUL or whitespace"));
        }
        if self.key().len() > MAX_KEY_LEN {
            return Err(Error::env(format!(
                "container ID and interface name are {} bytes together, too long for a file name (max {MAX_KEY_LEN})",
                self.key().len()
            )));
        }
        Ok(())
    }

    /// Whether a reservation file's content names this holder. Legacy content (the ID
    /// alone) matches on the ID, as host-local's release does; whitespace around the whole
    /// content is ignored, also as host-local does.
    pub(crate) fn matches(&self, content: &[u8]) -> bool {
        match FileHolder::parse(content) {
            FileHolder::Full { id, ifname } => id == self.container_id && ifname == self.ifname,
            FileHolder::Legacy(id) => id == self.container_id,
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "container {} (interface {})",
            self.container_id, self.ifname
        )
    }
}

/// A reservation file's content, as found on disk.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FileHolder {
    Full { id: String, ifname: String },
    Legacy(String),
}

impl FileHolder {
    pub(crate) fn parse(content: &[u8]) -> FileHolder {
        let text = String::from_utf8_lossy(content);
        let text = text.trim();
        match text.split_once("\r\n") {
            Some((id, ifname)) => FileHolder::Full {
                id: id.to_string(),
                ifname: ifname.to_string(),
            },
            None => FileHolder::Legacy(text.to_string()),
        }
    }

    /// `id:ifname`, or the bare id for legacy content, escaped and capped (see [`shown`]).
    pub(crate) fn describe(&self) -> String {
        match self {
            FileHolder::Full { id, ifname } => format!("{}:{}", shown(id), shown(ifname)),
            FileHolder::Legacy(id) => shown(id),
        }
    }
}

/// Text read from a file in the store, made fit for a message: control characters
/// escaped (a terminal or a log must not interpret them) and cut after 64 characters
/// (a garbage file may hold up to 4 KiB).
pub(crate) fn shown(text: &str) -> String {
    let mut out = String::new();
    for c in cut_short(text, 64).chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::code;

    #[test]
    fn holder_key_content_and_matching() {
        let h = Holder::new("abc", "eth0");
        assert_eq!(h.key(), "abc:eth0");
        assert_eq!(h.file_content(), "abc\r\neth0");
        assert!(h.matches(b"abc\r\neth0"));
        assert!(h.matches(b"abc\r\neth0\n"));
        assert!(h.matches(b"abc"));
        assert!(!h.matches(b"abc\r\neth1"));
        assert!(!h.matches(b"abcd"));
        assert!(!h.matches(b""));
    }

    #[test]
    fn holder_validation() {
        assert!(Holder::new("abc-1.x_y", "eth0").validate().is_ok());
        for (id, ifname) in [
            ("", "eth0"),
            ("a/b", "eth0"),
            ("a:b", "eth0"),
            ("..", "eth0"),
            (".tmp.1", "eth0"),
            ("a\r\nb", "eth0"),
            ("abc", ""),
            ("abc", "e:th0"),
            ("abc", "e/th0"),
        ] {
            let e = Holder::new(id, ifname).validate().unwrap_err();
            assert_eq!(e.code, code::INVALID_ENVIRONMENT, "{id:?} {ifname:?}");
        }
        assert!(Holder::new("a".repeat(300), "eth0").validate().is_err());
        // Its temp file, ".tmp." + key, must fit in NAME_MAX too.
        assert!(Holder::new("a".repeat(246), "eth0").validate().is_err());
        assert!(Holder::new("a".repeat(200), "eth0").validate().is_ok());
    }

    #[test]
    fn shown_escapes_and_caps() {
        assert_eq!(shown("abc"), "abc");
        assert_eq!(shown("a\x1b[31mb\n"), "a\\u{1b}[31mb\\n");
        let long = shown(&"x".repeat(5000));
        assert_eq!(long.len(), 67);
        assert!(FileHolder::parse(b"\x07id\r\neth0").describe() == "\\u{7}id:eth0");
    }
}
