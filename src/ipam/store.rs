//! The file system side of the IPAM: reservation files, holder indexes, the hint, GC.
//!
//! Every name is resolved relative to one directory fd held for the Store's lifetime, so a
//! rename or symlink swap of the path after `open` cannot redirect writes elsewhere.

use std::collections::HashSet;
use std::ffi::CString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{FileHolder, Holder, Pool};
use crate::cni::{code, Error, Result};

const HOLDERS: &str = "holders";
const TMP_PREFIX: &str = ".tmp.";
const HINT_PREFIX: &str = "last_reserved_ip.";
/// An interrupted write's temp file is only swept once surely abandoned.
const STALE_TMP: Duration = Duration::from_secs(60);
/// Upper bounds on what we read, so a garbage file cannot make us allocate without limit.
const MAX_RESERVATION: usize = 4096;
const MAX_INDEX: usize = 64 * 1024;
const MAX_HINT: usize = 64;

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// One network's allocation state, `<dataDir>/<network>/`.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    network: String,
    dirfd: OwnedFd,
    /// Set once O_TMPFILE (or linking it via /proc) is found unusable, to stop retrying it.
    no_tmpfile: AtomicBool,
}

/// What [`Store::gc`] did. The sweep never stops at an error; they are all collected.
#[derive(Debug, Default)]
pub struct GcReport {
    /// Freed addresses with their former holder (`id:ifname`, or the bare id of a legacy file).
    pub released: Vec<(IpAddr, String)>,
    pub errors: Vec<Error>,
}

/// A reservation's content waiting to be linked under an address name. An O_TMPFILE that
/// failed to link (EEXIST) is still unnamed, so it is reused for the next candidate.
enum Pending<'a> {
    Unnamed(File),
    Named { store: &'a Store, name: String },
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Pending::Named { store, name } = self {
            // Leftovers are swept by GC, so a failed unlink only costs disk space.
            let _ = store.unlink(name);
        }
    }
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cname(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in file name"))
}

fn is_errno(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

fn tmp_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // pid + time alone can collide between threads of one process.
    let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{TMP_PREFIX}{}.{nanos}.{seq}", std::process::id())
}

fn parse_index(content: &[u8]) -> Vec<IpAddr> {
    // Unparseable lines cannot name a reservation, so skipping them loses nothing.
    String::from_utf8_lossy(content)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn index_bytes(addrs: &[IpAddr]) -> Vec<u8> {
    let mut out = String::new();
    for a in addrs {
        out.push_str(&a.to_string());
        out.push('\n');
    }
    out.into_bytes()
}

fn index_name(holder: &Holder) -> String {
    format!("{HOLDERS}/{}", holder.key())
}

fn validate_network(network: &str) -> Result<()> {
    if network.is_empty() || network == "." || network == ".." || network.contains(['/', '\0']) {
        return Err(Error::config(format!(
            "network name {network:?} cannot be used as a directory name for the IPAM store"
        ))
        .details("the network name must be a single path component: not empty, '.', '..', and without '/' or NUL"));
    }
    Ok(())
}

impl Store {
    /// Opens (creating on demand) `<data_dir>/<network>/`. The network directory is created
    /// 0700 and refused if it is a symlink or world-writable: anyone who can write there can
    /// steal or free addresses.
    pub fn open(data_dir: &Path, network: &str) -> Result<Store> {
        validate_network(network)?;
        let dir = data_dir.join(network);
        let open = || {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(&dir)
        };
        // The store exists on every ADD but the network's first: open it first, and only
        // create what is missing (a mkdir that fails with EEXIST still costs a syscall).
        let file = match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Self::create(data_dir, &dir)?;
                open()
            }
            other => other,
        }
        .map_err(|e| {
            Error::io(format!("cannot open IPAM store {}", dir.display()), &e)
                .details("it must be a real directory, not a symlink")
        })?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io(format!("cannot stat IPAM store {}", dir.display()), &e))?;
        if meta.mode() & 0o002 != 0 {
            return Err(Error::new(
                code::IO_FAILURE,
                format!(
                    "IPAM store {} is world-writable (mode {:o})",
                    dir.display(),
                    meta.mode() & 0o7777
                ),
            )
            .details(format!(
                "anyone could forge or delete reservations; run chmod 0700 {}",
                dir.display()
            )));
        }
        let store = Store {
            dir,
            network: network.to_string(),
            dirfd: OwnedFd::from(file),
            no_tmpfile: AtomicBool::new(false),
        };
        let holders = cname(HOLDERS).expect("constant has no NUL");
        if let Err(e) = cvt(unsafe { libc::mkdirat(store.fd(), holders.as_ptr(), 0o700) }) {
            if !is_errno(&e, libc::EEXIST) {
                return Err(store.io_err("create", HOLDERS, &e));
            }
        }
        Ok(store)
    }

    fn create(data_dir: &Path, dir: &Path) -> Result<()> {
        fs::create_dir_all(data_dir).map_err(|e| {
            Error::io(
                format!("cannot create IPAM data directory {}", data_dir.display()),
                &e,
            )
            .details("check dataDir in the network config and that the plugin runs as root")
        })?;
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::io(
                format!("cannot create IPAM store {}", dir.display()),
                &e,
            )),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reserves a free address of `pool` for `holder`, round-robin after the last one
    /// handed out. If the holder already holds an address of this pool (an ADD retried
    /// after a kill), that address is returned instead of a second one.
    pub fn reserve(&self, holder: &Holder, pool: &Pool) -> Result<IpAddr> {
        holder.validate()?;
        let index = index_name(holder);
        let original = self
            .read(&index, MAX_INDEX)
            .map_err(|e| self.io_err("read holder index", &index, &e))?;
        let mut kept = Vec::new();
        for addr in parse_index(original.as_deref().unwrap_or_default()) {
            if !pool.contains(addr) {
                kept.push(addr);
            } else if self.holds(holder, addr)? {
                return Ok(addr);
            }
            // Otherwise a candidate lost to someone else (or never linked): dropped below.
        }

        let hint = self.read_hint(pool);
        let mut index_touched = false;
        let outcome = self.reserve_from(holder, &index, pool, hint, &kept, &mut index_touched);
        match outcome {
            Ok(Ok(addr)) => {
                self.write_hint(pool, addr);
                Ok(addr)
            }
            Ok(Err(held)) => {
                if index_touched {
                    self.restore_index(&index, original.as_deref());
                }
                Err(self.exhausted(pool, held))
            }
            Err(e) => {
                if index_touched {
                    self.restore_index(&index, original.as_deref());
                }
                Err(e)
            }
        }
    }

    /// The candidate loop of `reserve`: `Ok(Err(held))` means every candidate was taken.
    fn reserve_from(
        &self,
        holder: &Holder,
        index: &str,
        pool: &Pool,
        hint: Option<IpAddr>,
        kept: &[IpAddr],
        index_touched: &mut bool,
    ) -> Result<std::result::Result<IpAddr, u128>> {
        let mut pending: Option<Pending> = None;
        let mut held = 0u128;
        let mut lines = kept.to_vec();
        for cand in pool.candidates(hint) {
            let name = cand.to_string();
            if self
                .exists(&name)
                .map_err(|e| self.io_err("check reservation", &name, &e))?
            {
                held += 1;
                continue;
            }
            // The index must name the candidate before the reservation can exist, so that
            // a kill between the two leaves something DEL can find.
            lines.truncate(kept.len());
            lines.push(cand);
            self.write_file(index, &index_bytes(&lines))
                .map_err(|e| self.io_err("write holder index", index, &e))?;
            *index_touched = true;
            let p = match &mut pending {
                Some(p) => p,
                None => pending.insert(
                    self.pending(".", holder.file_content().as_bytes())
                        .map_err(|e| self.io_err("create reservation for", &name, &e))?,
                ),
            };
            match self.link(p, &name, holder) {
                Ok(()) => return Ok(Ok(cand)),
                Err(e) if is_errno(&e, libc::EEXIST) => {
                    // Lost the race for this one since the probe.
                    held += 1;
                    continue;
                }
                Err(e) => return Err(self.io_err("create reservation", &name, &e)),
            }
        }
        Ok(Err(held))
    }

    /// Reserves exactly `addr` (a static or requested address). Held by this holder already
    /// is success; held by anyone else, or not allocatable in `pool`, is code 111.
    pub fn reserve_requested(&self, holder: &Holder, pool: &Pool, addr: IpAddr) -> Result<IpAddr> {
        holder.validate()?;
        if let Err(why) = pool.check(addr) {
            return Err(Error::new(
                code::ADDRESS_UNAVAILABLE,
                format!(
                    "network {}: requested address {addr} cannot be assigned: {why}",
                    self.network
                ),
            )
            .details(format!(
                "request an address in {} excluding the gateway",
                pool.range_text()
            )));
        }
        let name = addr.to_string();
        let index = index_name(holder);
        let original = self
            .read(&index, MAX_INDEX)
            .map_err(|e| self.io_err("read holder index", &index, &e))?;
        let mut lines = parse_index(original.as_deref().unwrap_or_default());
        let listed = lines.contains(&addr);

        if let Some(content) = self
            .read(&name, MAX_RESERVATION)
            .map_err(|e| self.io_err("read reservation", &name, &e))?
        {
            if !holder.matches(&content) {
                return Err(self.taken(addr, &content));
            }
            if !listed {
                // Held by us but unknown to the index (written by an older version or by
                // host-local): record it so DEL finds it.
                lines.push(addr);
                self.write_file(&index, &index_bytes(&lines))
                    .map_err(|e| self.io_err("write holder index", &index, &e))?;
            }
            return Ok(addr);
        }

        if !listed {
            lines.push(addr);
            self.write_file(&index, &index_bytes(&lines))
                .map_err(|e| self.io_err("write holder index", &index, &e))?;
        }
        let linked = self
            .pending(".", holder.file_content().as_bytes())
            .and_then(|mut p| self.link(&mut p, &name, holder));
        match linked {
            Ok(()) => Ok(addr),
            Err(e) if is_errno(&e, libc::EEXIST) => {
                let content = self.read(&name, MAX_RESERVATION).ok().flatten();
                match content {
                    Some(c) if holder.matches(&c) => Ok(addr),
                    other => {
                        if !listed {
                            self.restore_index(&index, original.as_deref());
                        }
                        Err(self.taken(addr, other.as_deref().unwrap_or_default()))
                    }
                }
            }
            Err(e) => {
                if !listed {
                    self.restore_index(&index, original.as_deref());
                }
                Err(self.io_err("create reservation", &name, &e))
            }
        }
    }

    /// Frees every address `holder` holds, reading only its index: no directory scan, so
    /// DEL stays O(1) in the size of the store. Idempotent; an unknown holder frees nothing.
    pub fn release(&self, holder: &Holder) -> Result<Vec<IpAddr>> {
        let (index, listed) = self.index_of(holder)?;
        let mut freed = Vec::new();
        let mut first_err = None;
        for addr in listed {
            let name = addr.to_string();
            // The index may list a candidate another container won; only our own files go.
            let res = match self.remove_reservation(&name, |c| holder.matches(c)) {
                Ok(Some(_)) => {
                    freed.push(addr);
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(e) => Err(self.io_err("remove reservation", &name, &e)),
            };
            if let Err(e) = res {
                first_err.get_or_insert(e);
            }
        }
        // Keep the index when something could not be freed, so a retried DEL finds it.
        if let Some(e) = first_err {
            return Err(e);
        }
        match self.unlink(&index) {
            Ok(()) => Ok(freed),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(freed),
            Err(e) => Err(self.io_err("remove holder index", &index, &e)),
        }
    }

    /// The holder's index file name and the addresses it lists (none when it has none).
    fn index_of(&self, holder: &Holder) -> Result<(String, Vec<IpAddr>)> {
        holder.validate()?;
        let index = index_name(holder);
        let listed = self
            .read(&index, MAX_INDEX)
            .map_err(|e| self.io_err("read holder index", &index, &e))?
            .map(|content| parse_index(&content))
            .unwrap_or_default();
        Ok((index, listed))
    }

    /// The addresses `holder` actually holds (listed in its index and held on disk).
    pub fn held_by(&self, holder: &Holder) -> Result<Vec<IpAddr>> {
        let (_, listed) = self.index_of(holder)?;
        let mut held = Vec::new();
        for addr in listed {
            if self.holds(holder, addr)? {
                held.push(addr);
            }
        }
        Ok(held)
    }

    /// Frees every reservation whose holder is not in `valid` (pairs of containerID and
    /// ifname; a legacy id-only file is kept if its id appears with any ifname), drops the
    /// indexes of invalid holders, and sweeps abandoned temp files. An empty set frees all.
    /// Only names that parse as addresses are reservations: the hint, a host-local `lock`
    /// and anything else are left alone.
    pub fn gc(&self, valid: &HashSet<(String, String)>) -> GcReport {
        let valid_ids: HashSet<&str> = valid.iter().map(|(id, _)| id.as_str()).collect();
        let mut report = GcReport::default();
        let now = SystemTime::now();

        for (name, is_file) in self.list(".", &mut report) {
            if name.starts_with(TMP_PREFIX) {
                self.sweep_tmp(&name, now, &mut report);
                continue;
            }
            let Ok(addr) = name.parse::<IpAddr>() else {
                continue;
            };
            if !is_file {
                continue;
            }
            let stale = |content: &[u8]| match FileHolder::parse(content) {
                FileHolder::Full { id, ifname } => !valid.contains(&(id, ifname)),
                FileHolder::Legacy(id) => !valid_ids.contains(id.as_str()),
            };
            match self.remove_reservation(&name, stale) {
                Ok(Some(content)) => report
                    .released
                    .push((addr, FileHolder::parse(&content).describe())),
                Ok(None) => {}
                Err(e) => report
                    .errors
                    .push(self.io_err("remove reservation", &name, &e)),
            }
        }

        for (name, _) in self.list(HOLDERS, &mut report) {
            let path = format!("{HOLDERS}/{name}");
            if name.starts_with(TMP_PREFIX) {
                self.sweep_tmp(&path, now, &mut report);
                continue;
            }
            // Names without ':' were not written by us; leave them.
            let Some((id, ifname)) = name.split_once(':') else {
                continue;
            };
            if valid.contains(&(id.to_string(), ifname.to_string())) {
                continue;
            }
            match self.unlink(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => report
                    .errors
                    .push(self.io_err("remove holder index", &path, &e)),
            }
        }
        report
    }

    /// STATUS: the store can be written and every pool has at least one free address.
    /// Failures are code 50, so the runtime holds off ADDs instead of failing each one.
    pub fn status(&self, pools: &[Pool]) -> Result<()> {
        for dir in [".", HOLDERS] {
            if let Err(e) = self.pending(dir, b"") {
                let path = self.path(dir);
                return Err(Error::new(
                    code::NOT_AVAILABLE,
                    format!(
                        "network {}: IPAM store {} is not writable: {e}",
                        self.network,
                        path.display()
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
                let exists = self.exists(&name).map_err(|e| {
                    let mut err = self.io_err("check reservation", &name, &e);
                    err.code = code::NOT_AVAILABLE;
                    err
                })?;
                if !exists {
                    free = true;
                    break;
                }
                held += 1;
            }
            if !free {
                let mut err = self.exhausted(pool, held);
                err.code = code::NOT_AVAILABLE;
                return Err(err);
            }
        }
        Ok(())
    }

    fn exhausted(&self, pool: &Pool, held: u128) -> Error {
        Error::new(
            code::ADDRESS_EXHAUSTED,
            format!(
                "network {}: no free address in {} ({held} of {} held)",
                self.network,
                pool.subnet(),
                pool.size()
            ),
        )
        .details(format!(
            "every allocatable address of {}{} is reserved; free the addresses of containers that are gone (DEL, or GC with the live list), or widen the subnet or rangeStart/rangeEnd",
            pool.range_text(),
            pool.gateway()
                .filter(|g| (pool.first()..=pool.last()).contains(g))
                .map(|g| format!(" except the gateway {g}"))
                .unwrap_or_default()
        ))
    }

    fn taken(&self, addr: IpAddr, content: &[u8]) -> Error {
        let who = match FileHolder::parse(content) {
            FileHolder::Full { id, ifname } => format!("container {id} (interface {ifname})"),
            FileHolder::Legacy(id) => format!("container {id}"),
        };
        Error::new(
            code::ADDRESS_UNAVAILABLE,
            format!(
                "network {}: requested address {addr} is already held by {who}",
                self.network
            ),
        )
        .details("request another address, or free this one with DEL of that container (or GC if it is gone)")
    }

    fn io_err(&self, what: &str, name: &str, e: &io::Error) -> Error {
        Error::io(
            format!(
                "network {}: cannot {what} {}",
                self.network,
                self.path(name).display()
            ),
            e,
        )
    }

    fn path(&self, name: &str) -> PathBuf {
        if name == "." {
            self.dir.clone()
        } else {
            self.dir.join(name)
        }
    }

    fn fd(&self) -> libc::c_int {
        self.dirfd.as_raw_fd()
    }

    /// Whether `addr` is reserved by `holder`.
    fn holds(&self, holder: &Holder, addr: IpAddr) -> Result<bool> {
        let name = addr.to_string();
        let content = self
            .read(&name, MAX_RESERVATION)
            .map_err(|e| self.io_err("read reservation", &name, &e))?;
        Ok(content.is_some_and(|c| holder.matches(&c)))
    }

    fn read_hint(&self, pool: &Pool) -> Option<IpAddr> {
        let name = format!("{HINT_PREFIX}{}", pool.range_set());
        let bytes = self.read(&name, MAX_HINT).ok()??;
        std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
    }

    fn write_hint(&self, pool: &Pool, addr: IpAddr) {
        let name = format!("{HINT_PREFIX}{}", pool.range_set());
        // Plain overwrite: a torn or racing write only yields a hint that reads as garbage
        // or points elsewhere, and either just moves where the next search starts. Failing
        // an ADD that already holds its address over a hint would be worse.
        let _ = self
            .openat(&name, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o600)
            .and_then(|mut f| f.write_all(addr.to_string().as_bytes()));
    }

    fn openat(&self, name: &str, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
        let c = cname(name)?;
        let fd = cvt(unsafe {
            libc::openat(
                self.fd(),
                c.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                libc::c_uint::from(mode),
            )
        })?;
        // SAFETY: openat just returned this fd and nothing else owns it.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Reads a small file; `None` when it does not exist.
    fn read(&self, name: &str, limit: usize) -> io::Result<Option<Vec<u8>>> {
        let mut f = match self.openat(name, libc::O_RDONLY, 0) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        let mut chunk = [0u8; 512];
        loop {
            match f.read(&mut chunk) {
                Ok(0) => return Ok(Some(out)),
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if out.len() > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("larger than {limit} bytes, not a file this store wrote"),
                ));
            }
        }
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        self.stat_at(name).map(|st| st.is_some())
    }

    /// lstat of a name in the store; None when there is nothing by that name.
    fn stat_at(&self, name: &str) -> io::Result<Option<libc::stat>> {
        let c = cname(name)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstatat fills `st` on success, the only case in which it is read.
        match cvt(unsafe {
            libc::fstatat(
                self.fd(),
                c.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        }) {
            Ok(_) => Ok(Some(unsafe { st.assume_init() })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn unlink(&self, name: &str) -> io::Result<()> {
        let c = cname(name)?;
        cvt(unsafe { libc::unlinkat(self.fd(), c.as_ptr(), 0) }).map(drop)
    }

    /// Removes the reservation `name` if `release_it` says so of its content, and returns
    /// that content; None when it is gone or kept.
    ///
    /// Deciding and unlinking cannot be one syscall, and the name may meanwhile have been
    /// freed by another remover and re-reserved by another attachment (two runtimes
    /// sharing a network: one's GC, the other's DEL). Every remover therefore locks the
    /// file it read (flock on that inode) and unlinks only while the name still points
    /// at it: a second remover of the same inode waits, then finds the name moved on.
    /// Creators never need the lock: linkat cannot replace a name.
    fn remove_reservation(
        &self,
        name: &str,
        release_it: impl FnOnce(&[u8]) -> bool,
    ) -> io::Result<Option<Vec<u8>>> {
        let mut f = match self.openat(name, libc::O_RDONLY, 0) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // SAFETY: flock on an fd this function owns; released when `f` is closed.
        cvt(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) })?;
        let mut content = Vec::new();
        (&mut f)
            .take(MAX_RESERVATION as u64 + 1)
            .read_to_end(&mut content)?;
        if content.len() > MAX_RESERVATION || !release_it(&content) {
            return Ok(None);
        }
        let read = f.metadata()?;
        match self.stat_at(name)? {
            Some(now) if now.st_ino == read.ino() && now.st_dev == read.dev() => {}
            _ => return Ok(None),
        }
        match self.unlink(name) {
            Ok(()) => Ok(Some(content)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Atomically replaces `name` (temp file in the same directory, then rename), so readers
    /// see the old or the new content, never a torn one.
    fn write_file(&self, name: &str, content: &[u8]) -> io::Result<()> {
        let tmp = match name.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{}", tmp_name()),
            None => tmp_name(),
        };
        let written = self
            .openat(&tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
            .and_then(|mut f| f.write_all(content));
        let renamed = written.and_then(|()| {
            let (from, to) = (cname(&tmp)?, cname(name)?);
            cvt(unsafe { libc::renameat(self.fd(), from.as_ptr(), self.fd(), to.as_ptr()) })
                .map(drop)
        });
        if renamed.is_err() {
            let _ = self.unlink(&tmp);
        }
        renamed
    }

    /// Puts an index back as it was before a failed reserve, best-effort: an index that
    /// still names a candidate is harmless, release checks the reservation's content.
    fn restore_index(&self, index: &str, original: Option<&[u8]>) {
        let _ = match original {
            Some(bytes) => self.write_file(index, bytes),
            None => self.unlink(index),
        };
    }

    /// Creates a file in `dir` that already holds `content` but has no visible name yet:
    /// O_TMPFILE where supported, else a `.tmp.*` file that GC sweeps if we die.
    fn pending(&self, dir: &str, content: &[u8]) -> io::Result<Pending<'_>> {
        if !self.no_tmpfile.load(Ordering::Relaxed) {
            match self.openat(dir, libc::O_TMPFILE | libc::O_WRONLY, 0o600) {
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
        self.pending_named(dir, content)
    }

    fn pending_named(&self, dir: &str, content: &[u8]) -> io::Result<Pending<'_>> {
        let name = if dir == "." {
            tmp_name()
        } else {
            format!("{dir}/{}", tmp_name())
        };
        let mut f = self.openat(&name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
        // From here the guard owns the name, so a failed write still unlinks it.
        let pending = Pending::Named { store: self, name };
        f.write_all(content)?;
        Ok(pending)
    }

    /// Gives `pending` the name `name`; EEXIST when someone holds it already. Exclusive
    /// because link(2)/linkat(2) never replace an existing name.
    fn link<'a>(
        &'a self,
        pending: &mut Pending<'a>,
        name: &str,
        holder: &Holder,
    ) -> io::Result<()> {
        let to = cname(name)?;
        if let Pending::Unnamed(f) = pending {
            let proc = cname(&format!("/proc/self/fd/{}", f.as_raw_fd()))?;
            let res = cvt(unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    proc.as_ptr(),
                    self.fd(),
                    to.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            });
            match res {
                Ok(_) => return Ok(()),
                // No /proc (or no magic links there): switch to a named temp for good.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.no_tmpfile.store(true, Ordering::Relaxed);
                    *pending = self.pending_named(".", holder.file_content().as_bytes())?;
                }
                Err(e) => return Err(e),
            }
        }
        let Pending::Named { name: from, .. } = pending else {
            unreachable!("an unnamed pending file either linked, failed or was replaced")
        };
        let from = cname(from)?;
        cvt(unsafe { libc::linkat(self.fd(), from.as_ptr(), self.fd(), to.as_ptr(), 0) }).map(drop)
    }

    /// Entries of `dir` (relative to the store) as (name, is regular file), for GC only.
    fn list(&self, dir: &str, report: &mut GcReport) -> Vec<(String, bool)> {
        let path = self.path(dir);
        let entries = match fs::read_dir(&path) {
            Ok(rd) => rd,
            Err(e) => {
                report.errors.push(self.io_err("list", dir, &e));
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => {
                    let Ok(name) = entry.file_name().into_string() else {
                        continue;
                    };
                    let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
                    out.push((name, is_file));
                }
                Err(e) => report.errors.push(self.io_err("list", dir, &e)),
            }
        }
        out
    }

    fn sweep_tmp(&self, name: &str, now: SystemTime, report: &mut GcReport) {
        let modified = fs::symlink_metadata(self.path(name)).and_then(|m| m.modified());
        match modified {
            Ok(t) if now.duration_since(t).unwrap_or_default() > STALE_TMP => {
                if let Err(e) = self.unlink(name) {
                    if e.kind() != io::ErrorKind::NotFound {
                        report
                            .errors
                            .push(self.io_err("remove stale temp file", name, &e));
                    }
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => report.errors.push(self.io_err("stat temp file", name, &e)),
        }
    }
}

/// STATUS for a network without an open store: an unusable store directory is code 50 like
/// any other reason the plugin cannot serve ADD; a bad network name stays code 7.
pub fn status(data_dir: &Path, network: &str, pools: &[Pool]) -> Result<()> {
    let store = Store::open(data_dir, network).map_err(|mut e| {
        if e.code == code::IO_FAILURE {
            e.code = code::NOT_AVAILABLE;
        }
        e
    })?;
    store.status(pools)
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
