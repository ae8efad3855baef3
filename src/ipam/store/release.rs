//! Freeing: an attachment's addresses by its holder index (DEL, a failed ADD's undo,
//! GC, reclaim), and the one removal of a reservation file every remover goes through,
//! under the lock on the inode it read.

use std::io;
use std::net::IpAddr;

use nix::sys::stat::FileStat;

use super::files::{self, is_not_regular};
use super::index::parse_index;
use super::{holder_tmp_name, not_found, Store, MAX_INDEX, MAX_RESERVATION};
use crate::cni::Result;
use crate::ipam::Holder;

impl Store {
    /// Frees every address `holder` holds, reading only its index: no directory scan, so
    /// DEL stays O(1) in the size of the store. Also frees what this Store linked for the
    /// holder itself, should its index have vanished meanwhile (the undo of an ADD that
    /// lost its index to a racing GC or DEL). Idempotent; an unknown holder frees nothing.
    pub fn release(&self, holder: &Holder) -> Result<Vec<IpAddr>> {
        holder.validate()?;
        let key = holder.key();
        let index = match self.holders.read(&key, MAX_INDEX) {
            Ok(index) => index,
            // Not academy's file: nothing of ours is recorded there, and a DEL that could
            // never succeed would wedge the container. Leave it, say so.
            Err(e) if is_not_regular(&e) => {
                let e = self.io_err_in(&self.holders, "read holder index", &key, &e);
                eprintln!("academy: {e}; left alone");
                None
            }
            Err(e) => return Err(self.io_err_in(&self.holders, "read holder index", &key, &e)),
        };
        let mut targets: Vec<(IpAddr, Option<FileStat>)> =
            parse_index(index.as_deref().unwrap_or_default())
                .into_iter()
                .map(|a| (a, None))
                .collect();
        {
            let mut linked = self.linked.lock().unwrap_or_else(|p| p.into_inner());
            let (mine, others): (Vec<_>, Vec<_>) = linked.drain(..).partition(|l| l.key == key);
            *linked = others;
            // Each kept file closes here, before its removal below: a lock ADD's last
            // check took on it goes with it. An inode that cannot be read is freed by
            // content alone, as a reservation the index names.
            targets.extend(mine.into_iter().map(|l| (l.addr, l.inode.identity().ok())));
        }
        if index.is_none() && targets.is_empty() {
            // No index: the attachment is not academy's, or host-local reserved for it on
            // this shared store (same file content, no index). Found by content, so the
            // DEL that follows a switch of `type` frees what the reference gave; only then
            // is the store scanned, so academy's own DEL stays O(1).
            targets.extend(
                self.reserved_by_content(holder)?
                    .into_iter()
                    .map(|a| (a, None)),
            );
        }
        let mut freed = Vec::new();
        let mut first_err = None;
        for (addr, ours) in targets {
            let name = addr.to_string();
            // The index may list a candidate another container won; only our own files go.
            match self.remove_reservation(&name, ours.as_ref(), |c| holder.matches(c)) {
                Ok(Some(_)) => freed.push(addr),
                Ok(None) => {}
                Err(e) => {
                    first_err.get_or_insert(self.io_err("remove reservation", &name, &e));
                }
            }
        }
        // A killed run's temp files go with the attachment. Looked up first: unlinking a
        // missing name fails with EROFS, not ENOENT, on a read-only file system.
        let tmp = holder_tmp_name(holder);
        for dir in [&self.holders, &self.dir] {
            let removed = match dir.stat(&tmp) {
                Ok(Some(_)) => dir.unlink(&tmp),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = removed {
                if !not_found(&e) {
                    first_err.get_or_insert(self.io_err_in(dir, "remove temp file", &tmp, &e));
                }
            }
        }
        if let Err(e) = self.release_record(holder, index.as_deref()) {
            first_err.get_or_insert(e);
        }
        // Keep the index when something could not be freed, so a retried DEL finds it.
        if let Some(e) = first_err {
            return Err(e);
        }
        // Only an index that was there: unlinking a missing name on a read-only file
        // system is EROFS, not ENOENT, and would fail (or warn in an undo) for nothing.
        if index.is_some() {
            match self.holders.unlink(&key) {
                Ok(()) => {}
                Err(e) if not_found(&e) => {}
                Err(e) => {
                    return Err(self.io_err_in(&self.holders, "remove holder index", &key, &e))
                }
            }
        }
        Ok(freed)
    }

    /// Removes the reservation `name` if `release_it` says so of its content (and, when
    /// `ours` is given, it is still that inode), and returns that content; None when it
    /// is gone, kept, or not a regular file (not academy's: left alone).
    ///
    /// Deciding and unlinking cannot be one syscall, and the name may meanwhile have been
    /// freed by another remover and re-reserved by another attachment (two runtimes
    /// sharing a network: one's GC, the other's DEL). Every remover therefore locks the
    /// file it read (flock on that inode) and unlinks only while the name still points
    /// at it: a second remover of the same inode waits, then finds the name moved on.
    /// Creators never need the lock: linkat cannot replace a name.
    pub(super) fn remove_reservation(
        &self,
        name: &str,
        ours: Option<&FileStat>,
        release_it: impl FnOnce(&[u8]) -> bool,
    ) -> io::Result<Option<Vec<u8>>> {
        let opened = match self.dir.open_read(name) {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(None),
            Err(e) if is_not_regular(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if ours.is_some_and(|st| !files::same_inode(st, &opened.stat)) {
            return Ok(None);
        }
        let read = opened.stat;
        let mut locked = files::lock_exclusive(opened.file, self.lock_wait)?;
        let content = match files::read_capped(&mut locked, MAX_RESERVATION) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Ok(None),
            Err(e) => return Err(e),
        };
        if !release_it(&content) {
            return Ok(None);
        }
        match self.dir.stat(name)? {
            Some(now) if files::same_inode(&now, &read) => {}
            _ => return Ok(None),
        }
        match self.dir.unlink(name) {
            Ok(()) => Ok(Some(content)),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
