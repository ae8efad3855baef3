//! A reservation's content written before it has a name, then linked under its address
//! in one step, so that a kill never leaves an empty or holderless reservation. A child of
//! the store.

use std::fs::File;
use std::io::{self, Write};
use std::net::IpAddr;
use std::sync::atomic::Ordering;

use nix::sys::stat::FileStat;

use super::files::Dir;
use super::{holder_tmp_name, is_errno, not_found, Store};
use crate::ipam::Holder;

/// A reservation's content waiting to be linked under an address name. An O_TMPFILE that
/// failed to link (EEXIST) is still unnamed, so it is reused for the next candidate.
pub(super) enum Pending<'a> {
    Unnamed(File),
    Named(TempName<'a>),
    /// An O_TMPFILE linked: its file went to the store's record (`Linked`).
    Spent,
}

fn pending_identity(f: &File) -> io::Result<FileStat> {
    nix::sys::stat::fstat(f).map_err(io::Error::from)
}

impl Pending<'_> {
    /// The inode the reservation will have once linked.
    pub(super) fn identity(&self) -> io::Result<FileStat> {
        match self {
            Pending::Unnamed(f) => pending_identity(f),
            Pending::Named(TempName { dir, name }) => dir
                .stat(name)?
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)),
            Pending::Spent => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
    }
}

/// A named temp file's name, unlinked when dropped (linked under an address or not).
pub(super) struct TempName<'a> {
    dir: &'a Dir,
    name: String,
}

impl Drop for TempName<'_> {
    fn drop(&mut self) {
        // Leftovers are swept by GC or the holder's DEL; a failed unlink costs only disk.
        let _ = self.dir.unlink(&self.name);
    }
}

impl Store {
    /// Creates a file in `dir` that already holds `content` but has no visible name yet:
    /// O_TMPFILE where supported, else the temp file `tmp`.
    pub(super) fn pending<'a>(
        &'a self,
        dir: &'a Dir,
        content: &[u8],
        tmp: &str,
    ) -> io::Result<Pending<'a>> {
        if !self.no_tmpfile.load(Ordering::Relaxed) {
            match dir.create_unnamed() {
                Ok(mut f) => {
                    f.write_all(content)?;
                    return Ok(Pending::Unnamed(f));
                }
                Err(e)
                    if [libc::EOPNOTSUPP, libc::EISDIR, libc::EINVAL]
                        .iter()
                        .any(|&n| is_errno(&e, n)) =>
                {
                    self.no_tmpfile.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        self.pending_named(dir, content, tmp)
    }

    pub(super) fn pending_named<'a>(
        &'a self,
        dir: &'a Dir,
        content: &[u8],
        tmp: &str,
    ) -> io::Result<Pending<'a>> {
        let mut f = self.create_holder_tmp(dir, tmp)?;
        // From here the guard owns the name, so a failed write still unlinks it.
        let pending = Pending::Named(TempName {
            dir,
            name: tmp.to_string(),
        });
        f.write_all(content)?;
        Ok(pending)
    }

    /// Gives `pending` the name `name`; EEXIST when someone holds it already. Exclusive
    /// because linkat(2) never replaces an existing name. Records what it linked: an
    /// O_TMPFILE's file itself, kept open (its inode is read only if an undo needs it,
    /// and ADD's last check locks it there, with no open of its name); a named temp
    /// file's inode, read before linking, so a failure there leaves nothing linked.
    pub(super) fn link<'a>(
        &'a self,
        pending: &mut Pending<'a>,
        name: &str,
        holder: &Holder,
    ) -> io::Result<()> {
        if let Pending::Unnamed(f) = pending {
            match self.dir.link_unnamed(f, name) {
                Ok(()) => {
                    let Pending::Unnamed(file) = std::mem::replace(pending, Pending::Spent) else {
                        unreachable!("matched as unnamed just above")
                    };
                    self.record_link(holder, name, Inode::Open(file));
                    return Ok(());
                }
                // No /proc (or no magic links there): switch to a named temp for good.
                Err(e) if not_found(&e) => {
                    self.no_tmpfile.store(true, Ordering::Relaxed);
                    let content = holder.file_content();
                    *pending = self.pending_named(
                        &self.dir,
                        content.as_bytes(),
                        &holder_tmp_name(holder),
                    )?;
                }
                Err(e) => return Err(e),
            }
        }
        let identity = pending.identity()?;
        let Pending::Named(TempName { name: from, .. }) = pending else {
            unreachable!("an unnamed pending file either linked, failed or was replaced")
        };
        self.dir.link(from, name)?;
        self.record_link(holder, name, Inode::Stat(identity));
        Ok(())
    }

    fn record_link(&self, holder: &Holder, name: &str, inode: Inode) {
        let addr = name
            .parse()
            .expect("reservations are named by their address");
        self.linked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Linked {
                key: holder.key(),
                addr,
                inode,
            });
    }
}

/// A reservation a Store linked, for its undo and ADD's last check: whose (the holder's
/// key), which address, and its inode.
#[derive(Debug)]
pub(super) struct Linked {
    pub key: String,
    pub addr: IpAddr,
    pub inode: Inode,
}

#[derive(Debug)]
pub(super) enum Inode {
    /// Linked from an O_TMPFILE: that file, still open. Its one name is the address
    /// (linkat gave it that one; nothing in a store renames or links a reservation
    /// again, removers only unlink), so while it has a link the address is its.
    Open(File),
    /// Linked from a named temp file: its identity, read before the link.
    Stat(FileStat),
}

impl Inode {
    /// Its identity, as a remover compares it with what the name holds.
    pub fn identity(&self) -> io::Result<FileStat> {
        match self {
            Inode::Open(f) => pending_identity(f),
            Inode::Stat(st) => Ok(*st),
        }
    }
}
