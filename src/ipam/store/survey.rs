//! The store seen whole, for what looks for leaks (`academy list`, `academy reclaim`, an
//! ADD that found its pool exhausted), and the removal of a reservation only while a
//! condition still holds.
//!
//! These work beside `Store` through the same file plumbing (files.rs: no symlink
//! followed, every name resolved from the directory's fd, only regular files read), and
//! follow the same locking rule as every remover there: lock the reservation file that
//! was read (flock on its inode), decide, and unlink only while the name still points at
//! that inode. ADD's last check takes the
//! same lock ([`confirm_held`]), so a decision made under it, such as "this attachment has
//! no host veth", cannot be overtaken by an ADD that is just wiring the attachment: either
//! the ADD's check comes first (its veth exists by then, so the reclaimer keeps it), or the
//! reclaimer's removal does (and the ADD finds its address gone and fails with code 11).

use std::cell::OnceCell;
use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::stat::FileStat;

use super::files::{self, Dir, DirStamp, Opened};
use super::runtime::Runtime;
use crate::cni::{code, Error, Result};
use crate::ipam::{FileHolder, Holder};

const HOLDERS: &str = "holders";
/// As the store: a reservation is `id\r\nifname`, far below this.
const MAX_RESERVATION: usize = 4096;
const MAX_INDEX: usize = 64 * 1024;

/// One reservation file as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub address: IpAddr,
    pub container_id: String,
    /// None for a legacy file that names the container only.
    pub ifname: Option<String>,
    /// When the reservation was made: its content is written once, before it is linked
    /// under the address, and never rewritten.
    pub made: SystemTime,
}

impl Reservation {
    pub fn holder(&self) -> Option<Holder> {
        self.ifname
            .as_ref()
            .map(|ifname| Holder::new(self.container_id.clone(), ifname.clone()))
    }

    pub fn age(&self, now: SystemTime) -> Duration {
        now.duration_since(self.made).unwrap_or_default()
    }
}

/// What a store's directories looked like at one moment. Reservations are written
/// before they are linked under their address and never rewritten, and holder indexes
/// are replaced by rename, so while neither directory's stamp moves the store holds
/// the same reservations and indexes: a long-running reader (the watch's scrapes) may
/// keep what it read after a stamp taken before the reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreStamp {
    store: DirStamp,
    holders: Option<DirStamp>,
}

/// A directory's mtime comes from a coarse clock: a change in the same tick as the
/// last one keeps the stamp, so only a stamp at least this old vouches for the reading.
const SETTLED: Duration = Duration::from_secs(1);

impl StoreStamp {
    pub fn settled(&self, now: SystemTime) -> bool {
        [Some(self.store), self.holders].iter().flatten().all(|d| {
            now.duration_since(d.changed)
                .is_ok_and(|age| age >= SETTLED)
        })
    }
}

/// An open store directory `<dataDir>/<network>/`, through the store's own file
/// plumbing (files.rs): every name resolved from its fd, no symlink followed, nothing but
/// regular files read.
pub struct StoreDir {
    dir: Dir,
    /// `holders/`, opened at its first use and kept (a survey of a thousand
    /// reservations reads a thousand indexes).
    holders: OnceCell<Dir>,
}

impl StoreDir {
    /// Opens an existing store; None when there is none (nothing was ever reserved).
    /// Refused as Store::open refuses it when someone else could have forged its content.
    pub fn open(path: &Path) -> Result<Option<StoreDir>> {
        let dir = match Dir::open(path) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(
                    Error::io(format!("cannot open IPAM store {}", path.display()), &e)
                        .details("it must be a real directory, not a symlink"),
                )
            }
        };
        if let Err((what, fix)) = dir.check_private() {
            return Err(Error::new(
                code::IO_FAILURE,
                format!("IPAM store {} {what}", path.display()),
            )
            .details(fix));
        }
        Ok(Some(StoreDir {
            dir,
            holders: OnceCell::new(),
        }))
    }

    /// `holders/`, once opened; None when the store has none (looked for again at the
    /// next call: a concurrent first ADD may make it). An error is not kept either.
    fn holders(&self) -> Result<Option<&Dir>> {
        if let Some(opened) = self.holders.get() {
            return Ok(Some(opened));
        }
        match self.dir.subdir(HOLDERS) {
            Ok(d) => Ok(Some(self.holders.get_or_init(|| d))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io_err("open", HOLDERS, &e)),
        }
    }

    fn io_err(&self, what: &str, name: &str, e: &io::Error) -> Error {
        io_err(&self.dir, what, name, e)
    }

    fn open_reservation(&self, name: &str) -> io::Result<Option<Opened>> {
        open_reservation(&self.dir, name)
    }

    /// Whether the store holds any reservation: one listing, no file read (a network's
    /// last DEL asks, and a store of 32,000 addresses must not be read for it).
    pub fn holds_any(&self) -> Result<bool> {
        let entries = self.dir.list().map_err(|e| self.io_err("list", ".", &e))?;
        Ok(entries
            .iter()
            .any(|(name, regular)| *regular && name.parse::<IpAddr>().is_ok()))
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn stamp(&self) -> Result<StoreStamp> {
        let store = self.dir.stamp().map_err(|e| self.io_err("stat", ".", &e))?;
        let holders = match self.holders()? {
            Some(d) => Some(d.stamp().map_err(|e| self.io_err("stat", HOLDERS, &e))?),
            None => None,
        };
        Ok(StoreStamp { store, holders })
    }

    /// Every reservation of the store, sorted by address. Names that are not addresses
    /// (holders/, the hint, temp files, a host-local `lock`) are not reservations; a file
    /// that vanishes while being read was freed meanwhile and is skipped.
    pub fn reservations(&self) -> Result<Vec<Reservation>> {
        let entries = self.dir.list().map_err(|e| self.io_err("list", ".", &e))?;
        let mut found = Vec::new();
        for (name, regular) in entries {
            let Ok(address) = name.parse::<IpAddr>() else {
                continue;
            };
            if !regular {
                continue;
            }
            match self.read_reservation(&name, address) {
                Ok(Some(r)) => found.push(r),
                Ok(None) => {}
                Err(e) => return Err(self.io_err("read reservation", &name, &e)),
            }
        }
        found.sort_by_key(|r| r.address);
        Ok(found)
    }

    fn read_reservation(&self, name: &str, address: IpAddr) -> io::Result<Option<Reservation>> {
        let Some(mut opened) = self.open_reservation(name)? else {
            return Ok(None);
        };
        let Ok(content) = files::read_capped(&mut opened.file, MAX_RESERVATION) else {
            return Ok(None); // far larger than any reservation: not one academy wrote
        };
        let made = made(&opened);
        Ok(Some(match FileHolder::parse(&content) {
            FileHolder::Full { id, ifname } => Reservation {
                address,
                container_id: id,
                ifname: Some(ifname),
                made,
            },
            FileHolder::Legacy(id) => Reservation {
                address,
                container_id: id,
                ifname: None,
                made,
            },
        }))
    }

    /// Locks the reservation of `address` and keeps it locked if `decide`, called with
    /// its content and when it was made, says so. None when it is gone, is not academy's
    /// kind of file, or `decide` declines. While the returned lock lives, no ADD can
    /// confirm the address (ADD's last check takes the same lock) and no other remover
    /// can decide on it; [`Locked::remove`] then unlinks it.
    pub fn lock_if(
        &self,
        address: IpAddr,
        decide: impl FnOnce(&[u8], SystemTime) -> bool,
    ) -> Result<Option<Locked<'_>>> {
        let name = address.to_string();
        self.try_lock(&name, decide)
            .map_err(|e| reservation_err(&self.dir, "lock reservation", &name, &e))
    }

    fn try_lock(
        &self,
        name: &str,
        decide: impl FnOnce(&[u8], SystemTime) -> bool,
    ) -> io::Result<Option<Locked<'_>>> {
        let Some(opened) = self.open_reservation(name)? else {
            return Ok(None);
        };
        let made = made(&opened);
        let read = opened.stat;
        let mut lock = files::lock_exclusive(opened.file, LOCK_WAIT)?;
        let Ok(content) = files::read_capped(&mut lock, MAX_RESERVATION) else {
            return Ok(None);
        };
        if !decide(&content, made) || !self.still_names(name, &read)? {
            return Ok(None);
        }
        Ok(Some(Locked {
            store: self,
            name: name.to_string(),
            read,
            _lock: lock,
        }))
    }

    fn still_names(&self, name: &str, read: &FileStat) -> io::Result<bool> {
        still_names(&self.dir, name, read)
    }

    /// Whether academy's holder index of the reservation's holder names its address:
    /// the reservation is then academy's attachment's, not another IPAM's (host-local
    /// writes the same file content but keeps no index). Some(the netns the index
    /// records, if it does) when it is academy's.
    pub fn index_of(&self, r: &Reservation) -> Result<Option<Option<String>>> {
        let Some(holder) = r.holder() else {
            return Ok(None);
        };
        let key = holder.key();
        let Some(holders) = self.holders()? else {
            return Ok(None);
        };
        match holders.read(&key, MAX_INDEX) {
            Ok(Some(listed)) => Ok(String::from_utf8_lossy(&listed)
                .lines()
                .any(|l| l.trim().parse::<IpAddr>().ok() == Some(r.address))
                .then(|| super::recorded_netns(&listed))),
            Ok(None) => Ok(None),
            Err(e) if files::is_not_regular(&e) => Ok(None),
            Err(e) => Err(self.io_err("read holder index", &key, &e)),
        }
    }

    /// Removes `holder`'s index once it names nothing the holder still holds, so DEL of
    /// this attachment later has nothing to find. An index still naming a held address is
    /// kept (an ADD of the same attachment may be under way).
    pub fn drop_index_if_unused(&self, holder: &Holder) -> Result<()> {
        let key = holder.key();
        let Some(holders) = self.holders()? else {
            return Ok(());
        };
        let listed = match holders.read(&key, MAX_INDEX) {
            Ok(Some(content)) => content,
            Ok(None) => return Ok(()),
            // Not academy's index (a FIFO, a symlink): left alone, as DEL leaves it.
            Err(e) if files::is_not_regular(&e) => return Ok(()),
            Err(e) => return Err(self.io_err("read holder index", &key, &e)),
        };
        for line in String::from_utf8_lossy(&listed).lines() {
            let Ok(addr) = line.trim().parse::<IpAddr>() else {
                continue;
            };
            let name = addr.to_string();
            match self.read_reservation(&name, addr) {
                Ok(Some(r)) if r.holder().as_ref() == Some(holder) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(self.io_err("read reservation", &name, &e)),
            }
        }
        // The record first: an index left behind still leads a retry to it.
        super::runtime::remove_record(&self.dir, &key)
            .map_err(|e| self.io_err("remove the runtime record of", &key, &e))?;
        match holders.unlink(&key) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io_err("remove holder index", &key, &e)),
        }
    }

    /// What `holder`'s runtime record says (the restore: published ports and rates the
    /// kernel lost). An index that is not a regular file reads as none.
    pub fn runtime_of(&self, holder: &Holder) -> Result<Runtime> {
        let key = holder.key();
        let index = match self.holders()? {
            Some(holders) => match holders.read(&key, MAX_INDEX) {
                Ok(index) => index,
                Err(e) if files::is_not_regular(&e) => None,
                Err(e) => return Err(self.io_err("read holder index", &key, &e)),
            },
            None => None,
        };
        super::runtime::read_record(&self.dir, &key, index.as_deref()).map_err(|e| {
            self.io_err(
                "read the runtime record",
                &format!("{}/{key}", super::runtime::RUNTIME),
                &e,
            )
        })
    }
}

/// A reservation locked by [`StoreDir::lock_if`], decided on and not yet removed.
pub struct Locked<'a> {
    store: &'a StoreDir,
    name: String,
    read: FileStat,
    _lock: files::FileLock,
}

impl<'a> Locked<'a> {
    pub fn address(&self) -> IpAddr {
        self.name.parse().expect("locked by address")
    }

    pub fn store(&self) -> &'a StoreDir {
        self.store
    }

    /// Unlinks the reservation, unless the name meanwhile points at another file (it
    /// cannot while locked by academy, but a hand-made rename can). True when removed.
    pub fn remove(self) -> Result<bool> {
        let dir = &self.store.dir;
        let removed = match still_names(dir, &self.name, &self.read) {
            Ok(false) => Ok(false),
            Ok(true) => match dir.unlink(&self.name) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        removed.map_err(|e| reservation_err(dir, "remove reservation", &self.name, &e))
    }
}

fn io_err(dir: &Dir, what: &str, name: &str, e: &io::Error) -> Error {
    Error::io(format!("cannot {what} {}", dir.path_of(name).display()), e)
}

/// The regular file `name`; None when it is gone or is not academy's (not a regular
/// file: a FIFO, a symlink, a directory).
fn open_reservation(dir: &Dir, name: &str) -> io::Result<Option<Opened>> {
    match dir.open_read(name) {
        Err(e) if files::is_not_regular(&e) => Ok(None),
        other => other,
    }
}

/// Whether `name` still points at the inode that was read (a remover that got the lock
/// first may have unlinked it, and an ADD reserved the address anew).
fn still_names(dir: &Dir, name: &str, read: &FileStat) -> io::Result<bool> {
    Ok(dir
        .stat(name)?
        .is_some_and(|now| files::same_inode(&now, read)))
}

/// ADD's check of one address, under the lock removers take.
pub(super) fn confirm_one(dir: &Dir, name: &str, holder: &Holder) -> io::Result<bool> {
    let Some(opened) = open_reservation(dir, name)? else {
        return Ok(false);
    };
    let read = opened.stat;
    let mut locked = files::lock_exclusive(opened.file, LOCK_WAIT)?;
    let content = files::read_capped(&mut locked, MAX_RESERVATION)?;
    Ok(holder.matches(&content) && still_names(dir, name, &read)?)
}

/// ADD's check of a reservation it linked from an O_TMPFILE and kept open (`file`), under
/// the lock removers take, taken on that file and kept with it: still held while the
/// inode has a link, its one name being the address. A remover that unlinked it first
/// leaves it none (an ADD that reserved the address anew made another inode).
pub(super) fn confirm_linked(file: &File) -> io::Result<bool> {
    files::lock_exclusive_in_place(file, LOCK_WAIT)?;
    let st = nix::sys::stat::fstat(file).map_err(io::Error::from)?;
    Ok(st.st_nlink > 0)
}

/// When a reservation was made: its content is written once, before it is linked under
/// the address, and never rewritten.
fn made(opened: &Opened) -> SystemTime {
    let st = &opened.stat;
    UNIX_EPOCH + Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32)
}

/// academy holds a reservation's lock for well under a millisecond (a read and, for a
/// reclaimer, one netlink lookup); a process holding it longer is not academy, and
/// waiting on it would hang ADD or the reclaimer behind it.
const LOCK_WAIT: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_secs(5)
};

/// An I/O error on a reservation, code 11 when its lock stayed taken (retrying may work).
pub(super) fn reservation_err(dir: &Dir, what: &str, name: &str, e: &io::Error) -> Error {
    let err = io_err(dir, what, name, e);
    if e.kind() != io::ErrorKind::WouldBlock {
        return err;
    }
    Error::new(code::TRY_AGAIN_LATER, err.msg).details(format!(
        "another process has held its lock for over {:?}; nothing was changed, retry",
        LOCK_WAIT
    ))
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::path::PathBuf;

    use super::*;
    use crate::ipam::{Pool, Store};

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("academy-leaks-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn pool() -> Pool {
        Pool::new(
            "10.9.0.0/29".parse().unwrap(),
            Some("10.9.0.1".parse().unwrap()),
            None,
            None,
        )
        .unwrap()
    }

    #[test]
    fn lists_reservations_with_holder_and_age_and_nothing_else() {
        let data = tmp("list");
        let store = Store::open(&data, "net").unwrap();
        let a = store.reserve(&Holder::new("a", "eth0"), &pool()).unwrap();
        let b = store.reserve(&Holder::new("b", "net1"), &pool()).unwrap();
        std::fs::write(store.dir().join("10.9.0.6"), "legacy-id").unwrap();
        std::fs::write(store.dir().join("lock"), "").unwrap();
        let dir = StoreDir::open(store.dir()).unwrap().unwrap();
        let found = dir.reservations().unwrap();
        let got: Vec<(String, String, Option<String>)> = found
            .iter()
            .map(|r| {
                (
                    r.address.to_string(),
                    r.container_id.clone(),
                    r.ifname.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (a.to_string(), "a".into(), Some("eth0".into())),
                (b.to_string(), "b".into(), Some("net1".into())),
                ("10.9.0.6".into(), "legacy-id".into(), None),
            ]
        );
        assert!(found[0].age(SystemTime::now()) < Duration::from_secs(60));
        assert!(StoreDir::open(&data.join("absent")).unwrap().is_none());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(store.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = StoreDir::open(store.dir())
            .err()
            .expect("world-writable refused");
        assert!(e.msg.contains("writable by group or others"), "{e}");
        std::fs::remove_dir_all(&data).unwrap();
    }

    #[test]
    fn a_kept_reservation_is_confirmed_only_while_its_name_is_its_own() {
        let data = tmp("kept");
        let store = Store::open(&data, "net").unwrap();
        let (a, b) = (Holder::new("a", "eth0"), Holder::new("b", "eth0"));
        let first = store.reserve(&a, &pool()).unwrap();
        let second = store.reserve(&b, &pool()).unwrap();
        let path = |addr: IpAddr| store.dir().join(addr.to_string());
        // Freed by a remover (unlinked), then reserved anew by someone else: both lost.
        std::fs::remove_file(path(first)).unwrap();
        assert_eq!(store.confirm_held(&a, &[first]).unwrap(), Some(first));
        std::fs::remove_file(path(second)).unwrap();
        std::fs::write(path(second), "z\r\neth0").unwrap();
        assert_eq!(store.confirm_held(&b, &[second]).unwrap(), Some(second));
        // The undo frees only what is still the holder's own.
        assert_eq!(store.release(&b).unwrap(), Vec::<IpAddr>::new());
        assert!(path(second).exists());
        // Confirmed (and locked on its kept file), then undone: the undo is not kept
        // waiting on its own Store's lock.
        let c = Holder::new("c", "eth0");
        let third = store.reserve(&c, &pool()).unwrap();
        assert_eq!(store.confirm_held(&c, &[third]).unwrap(), None);
        let started = std::time::Instant::now();
        assert_eq!(store.release(&c).unwrap(), vec![third]);
        assert!(started.elapsed() < Duration::from_millis(100));
        std::fs::remove_dir_all(&data).unwrap();
    }

    #[test]
    fn lock_if_decides_under_the_lock_and_drops_the_unused_index() {
        let data = tmp("remove");
        let store = Store::open(&data, "net").unwrap();
        let holder = Holder::new("a", "eth0");
        let addr = store.reserve(&holder, &pool()).unwrap();
        let dir = StoreDir::open(store.dir()).unwrap().unwrap();

        assert!(dir.lock_if(addr, |_, _| false).unwrap().is_none());
        assert_eq!(store.confirm_held(&holder, &[addr]).unwrap(), None);
        // The Store that linked it keeps the lock of its check on the file it kept.
        let other = File::open(store.dir().join(addr.to_string())).unwrap();
        assert!(files::lock_exclusive(other, Duration::ZERO).is_err());
        drop(store);
        let store = Store::open(&data, "net").unwrap();
        assert_eq!(store.confirm_held(&holder, &[addr]).unwrap(), None);
        dir.drop_index_if_unused(&holder).unwrap();
        assert_eq!(
            store.held_by(&holder).unwrap(),
            vec![addr],
            "index kept while held"
        );

        // A lock held by someone who is not academy: code 11 after LOCK_WAIT, nothing removed.
        let squatter = File::open(store.dir().join(addr.to_string())).unwrap();
        let squatter = files::lock_exclusive(squatter, Duration::ZERO).unwrap();
        let e = dir
            .lock_if(addr, |_, _| true)
            .err()
            .expect("lock held elsewhere");
        assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e}");
        let e = store.confirm_held(&holder, &[addr]).unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e}");
        drop(squatter);
        let locked = dir.lock_if(addr, |c, _| holder.matches(c)).unwrap();
        let locked = locked.expect("decided under the lock");
        assert_eq!(locked.address(), addr);
        assert!(locked.remove().unwrap());
        assert!(
            dir.lock_if(addr, |_, _| true).unwrap().is_none(),
            "already gone"
        );
        assert_eq!(store.confirm_held(&holder, &[addr]).unwrap(), Some(addr));
        dir.drop_index_if_unused(&holder).unwrap();
        assert!(!store.dir().join("holders/a:eth0").exists());
        std::fs::remove_dir_all(&data).unwrap();
    }
}
