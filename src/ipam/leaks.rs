//! The store seen whole, for what looks for leaks (`academy list`, `academy reclaim`, an
//! ADD that found its pool exhausted), and the removal of a reservation only while a
//! condition still holds.
//!
//! These work beside `Store` without changing it: they open the same directory (no
//! symlink, every name resolved from its fd) and follow the same locking rule as every
//! remover there: lock the reservation file that was read (flock on its inode), decide,
//! and unlink only while the name still points at that inode. ADD's last check takes the
//! same lock ([`confirm_held`]), so a decision made under it, such as "this attachment has
//! no host veth", cannot be overtaken by an ADD that is just wiring the attachment: either
//! the ADD's check comes first (its veth exists by then, so the reclaimer keeps it), or the
//! reclaimer's removal does (and the ADD finds its address gone and fails with code 11).

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{FileHolder, Holder};
use crate::cni::{code, Error, Result};

const HOLDERS: &str = "holders";
/// As the store: a reservation is `id\r\nifname`, far below this.
const MAX_RESERVATION: u64 = 4096;
const MAX_INDEX: u64 = 64 * 1024;

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

/// An open store directory `<dataDir>/<network>/`.
pub struct StoreDir {
    path: PathBuf,
    dir: File,
}

fn cname(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in file name"))
}

impl StoreDir {
    /// Opens an existing store; None when there is none (nothing was ever reserved).
    pub fn open(path: &Path) -> Result<Option<StoreDir>> {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(dir) => {
                // As Store::open: anyone could have forged what a world-writable store holds.
                let mode = dir
                    .metadata()
                    .map_err(|e| {
                        Error::io(format!("cannot stat IPAM store {}", path.display()), &e)
                    })?
                    .mode();
                if mode & 0o002 != 0 {
                    return Err(Error::new(
                        code::IO_FAILURE,
                        format!(
                            "IPAM store {} is world-writable (mode {:o})",
                            path.display(),
                            mode & 0o7777
                        ),
                    )
                    .details(format!(
                        "its reservations cannot be trusted; run chmod 0700 {}",
                        path.display()
                    )));
                }
                Ok(Some(StoreDir {
                    path: path.to_path_buf(),
                    dir,
                }))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(
                Error::io(format!("cannot open IPAM store {}", path.display()), &e)
                    .details("it must be a real directory, not a symlink"),
            ),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io_err(&self, what: &str, name: &str, e: &io::Error) -> Error {
        Error::io(
            format!("cannot {what} {}", self.path.join(name).display()),
            e,
        )
    }

    fn openat(&self, name: &str) -> io::Result<File> {
        let c = cname(name)?;
        // SAFETY: a plain openat on a directory fd this struct owns.
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: openat just returned this fd and nothing else owns it.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// (device, inode) the name points at now; None when it is gone.
    fn inode_of(&self, name: &str) -> io::Result<Option<(u64, u64)>> {
        let c = cname(name)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstatat fills `st` on success, the only case in which it is read.
        let r = unsafe {
            libc::fstatat(
                self.dir.as_raw_fd(),
                c.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::NotFound {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let st = unsafe { st.assume_init() };
        Ok(Some((st.st_dev, st.st_ino)))
    }

    fn unlink(&self, name: &str) -> io::Result<()> {
        let c = cname(name)?;
        // SAFETY: a plain unlinkat relative to a directory fd this struct owns.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Every reservation of the store, sorted by address. Names that are not addresses
    /// (holders/, the hint, temp files, a host-local `lock`) are not reservations; a file
    /// that vanishes while being read was freed meanwhile and is skipped.
    pub fn reservations(&self) -> Result<Vec<Reservation>> {
        let entries = std::fs::read_dir(&self.path).map_err(|e| self.io_err("list", ".", &e))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io_err("list", ".", &e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let Ok(address) = name.parse::<IpAddr>() else {
                continue;
            };
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
        let mut file = match self.openat(name) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        if meta.len() > MAX_RESERVATION {
            return Ok(None);
        }
        // One read of the size fstat gave: a store's worth of files (a full /16 is 65,534)
        // is read here, and a second read only to see end-of-file would cost a fifth more.
        let mut content = vec![0u8; meta.len() as usize];
        let mut filled = 0;
        while filled < content.len() {
            match file.read(&mut content[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        content.truncate(filled);
        let made = UNIX_EPOCH + Duration::new(meta.mtime().max(0) as u64, meta.mtime_nsec() as u32);
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

    /// Removes the reservation of `address` if `decide`, called with the file locked and
    /// given its content and when it was made, says so. True when it was removed; false
    /// when it is gone, kept, or was replaced by another reservation meanwhile.
    pub fn remove_if(
        &self,
        address: IpAddr,
        decide: impl FnOnce(&[u8], SystemTime) -> bool,
    ) -> Result<bool> {
        let name = address.to_string();
        self.try_remove(&name, decide)
            .map_err(|e| reservation_err(self, "remove reservation", &name, &e))
    }

    fn try_remove(
        &self,
        name: &str,
        decide: impl FnOnce(&[u8], SystemTime) -> bool,
    ) -> io::Result<bool> {
        let mut file = match self.openat(name) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        lock(&file, libc::LOCK_EX)?;
        let mut content = Vec::new();
        (&mut file)
            .take(MAX_RESERVATION + 1)
            .read_to_end(&mut content)?;
        let meta = file.metadata()?;
        let made = meta.modified()?;
        if content.len() as u64 > MAX_RESERVATION || !decide(&content, made) {
            return Ok(false);
        }
        if self.inode_of(name)? != Some((meta.dev(), meta.ino())) {
            return Ok(false);
        }
        match self.unlink(name) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes `holder`'s index once it names nothing the holder still holds, so DEL of
    /// this attachment later has nothing to find. An index still naming a held address is
    /// kept (an ADD of the same attachment may be under way).
    pub fn drop_index_if_unused(&self, holder: &Holder) -> Result<()> {
        let index = format!("{HOLDERS}/{}", holder.key());
        let listed = match self.openat(&index) {
            Ok(f) => {
                let mut content = Vec::new();
                f.take(MAX_INDEX)
                    .read_to_end(&mut content)
                    .map_err(|e| self.io_err("read holder index", &index, &e))?;
                content
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(self.io_err("read holder index", &index, &e)),
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
        match self.unlink(&index) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io_err("remove holder index", &index, &e)),
        }
    }
}

/// academy holds a reservation's lock for well under a millisecond (a read and, for a
/// reclaimer, one netlink lookup); a process holding it longer is not academy, and
/// waiting on it would hang ADD or the reclaimer behind it.
const LOCK_WAIT: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_secs(5)
};

/// flock `how` (LOCK_EX or LOCK_SH) tried without blocking until LOCK_WAIT has passed;
/// then WouldBlock.
fn lock(file: &File, how: libc::c_int) -> io::Result<()> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: flock on an fd owned by `file`; released when it is closed.
        if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => return Err(e),
        }
    }
}

/// An I/O error on a reservation, code 11 when its lock stayed taken (retrying may work).
fn reservation_err(dir: &StoreDir, what: &str, name: &str, e: &io::Error) -> Error {
    let err = dir.io_err(what, name, e);
    if e.kind() != io::ErrorKind::WouldBlock {
        return err;
    }
    Error::new(code::TRY_AGAIN_LATER, err.msg).details(format!(
        "another process has held its lock for over {:?}; nothing was changed, retry",
        LOCK_WAIT
    ))
}

/// ADD's last check of its addresses: each is still reserved for `holder`, checked with
/// the reservation locked as removers lock it (see the module comment for why). Returns
/// the first address that is not.
pub fn confirm_held(
    store_dir: &Path,
    holder: &Holder,
    addresses: &[IpAddr],
) -> Result<Option<IpAddr>> {
    let Some(dir) = StoreDir::open(store_dir)? else {
        return Ok(addresses.first().copied());
    };
    for &address in addresses {
        let name = address.to_string();
        let held = dir
            .confirm_one(&name, holder)
            .map_err(|e| reservation_err(&dir, "read reservation", &name, &e))?;
        if !held {
            return Ok(Some(address));
        }
    }
    Ok(None)
}

impl StoreDir {
    fn confirm_one(&self, name: &str, holder: &Holder) -> io::Result<bool> {
        let mut file = match self.openat(name) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        lock(&file, libc::LOCK_SH)?;
        let mut content = Vec::new();
        (&mut file)
            .take(MAX_RESERVATION + 1)
            .read_to_end(&mut content)?;
        let meta = file.metadata()?;
        // A remover that got the lock first may have unlinked the name meanwhile.
        Ok(holder.matches(&content) && self.inode_of(name)? == Some((meta.dev(), meta.ino())))
    }
}

#[cfg(test)]
mod tests {
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
        assert!(e.msg.contains("world-writable"), "{e}");
        std::fs::remove_dir_all(&data).unwrap();
    }

    #[test]
    fn remove_if_decides_under_the_lock_and_drops_the_unused_index() {
        let data = tmp("remove");
        let store = Store::open(&data, "net").unwrap();
        let holder = Holder::new("a", "eth0");
        let addr = store.reserve(&holder, &pool()).unwrap();
        let dir = StoreDir::open(store.dir()).unwrap().unwrap();

        assert!(!dir.remove_if(addr, |_, _| false).unwrap());
        assert_eq!(confirm_held(store.dir(), &holder, &[addr]).unwrap(), None);
        dir.drop_index_if_unused(&holder).unwrap();
        assert_eq!(
            store.held_by(&holder).unwrap(),
            vec![addr],
            "index kept while held"
        );

        // A lock held by someone who is not academy: code 11 after LOCK_WAIT, nothing removed.
        let squatter = File::open(store.dir().join(addr.to_string())).unwrap();
        lock(&squatter, libc::LOCK_EX).unwrap();
        let e = dir.remove_if(addr, |_, _| true).unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e}");
        let e = confirm_held(store.dir(), &holder, &[addr]).unwrap_err();
        assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e}");
        drop(squatter);
        assert!(dir.remove_if(addr, |c, _| holder.matches(c)).unwrap());
        assert!(!dir.remove_if(addr, |_, _| true).unwrap(), "already gone");
        assert_eq!(
            confirm_held(store.dir(), &holder, &[addr]).unwrap(),
            Some(addr)
        );
        dir.drop_index_if_unused(&holder).unwrap();
        assert!(!store.dir().join("holders/a:eth0").exists());
        std::fs::remove_dir_all(&data).unwrap();
    }
}
