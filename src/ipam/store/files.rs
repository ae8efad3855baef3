//! The store's file plumbing: one directory, opened once, every name resolved inside it.
//!
//! A store is only as safe as its name resolution, so everything here holds to three
//! rules (issue 14): names are single components resolved relative to a directory fd
//! opened with O_NOFOLLOW|O_DIRECTORY, so a swapped path or a symlinked subdirectory
//! can never redirect a read, a write or an unlink outside the store; no symlink inside
//! the store is followed; and only regular files are read or written, opened
//! non-blocking so a FIFO or a device in their place cannot hang academy. What is not a
//! regular file is reported as [`NotRegular`] and treated by the store as not academy's.
//!
//! Only nix's safe wrappers are used, but for one flock(2) call ([`FileLock`]'s, on the
//! descriptor it owns).

use std::fs::File;
use std::io::{self, Read, Write};
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::dir::{Dir as DirStream, Type};
use nix::errno::Errno;
use nix::fcntl::{self, AtFlags, OFlag};
use nix::sys::stat::{self, FileStat, Mode, SFlag};
use nix::unistd::{self, UnlinkatFlags};

/// Why a name in the store is not something academy reads or writes: it exists, but is
/// not a regular file (a FIFO, a directory, a symlink, a socket, a device).
#[derive(Debug)]
pub struct NotRegular(pub &'static str);

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "it is {}, not a regular file", self.0)
    }
}

impl std::error::Error for NotRegular {}

/// Whether `e` says the name holds something other than a regular file.
pub fn is_not_regular(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NotRegular>())
}

fn not_regular(kind: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, NotRegular(kind))
}

fn kind_of(mode: libc::mode_t) -> &'static str {
    match SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        _ => "of an unknown type",
    }
}

fn is_regular(mode: libc::mode_t) -> bool {
    mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits()
}

fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// The flags every open here carries: never follow a final symlink, never block on a
/// FIFO's missing peer, never become a controlling terminal, never leak into a child.
fn guarded(flags: OFlag) -> OFlag {
    flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC
}

/// Maps the errors an open with O_NOFOLLOW|O_NONBLOCK gives for non-files to [`NotRegular`].
fn open_error(e: Errno) -> io::Error {
    match e {
        // O_NOFOLLOW on a symlink.
        Errno::ELOOP => not_regular("a symlink"),
        // A socket, or a FIFO opened for writing with no reader.
        Errno::ENXIO => not_regular("a socket or a FIFO"),
        Errno::EISDIR => not_regular("a directory"),
        other => errno(other),
    }
}

/// The file a name holds and its identity, so a remover can check the name still points
/// at the inode it read (see `Store::remove_reservation`).
pub struct Opened {
    pub file: File,
    pub stat: FileStat,
}

/// One directory of the store (the network folder, or holders/ inside it).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirStamp {
    dev: u64,
    ino: u64,
    pub changed: SystemTime,
}

impl Dir {
    /// Opens the directory at `path`, refusing a symlink in its last component.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = fcntl::open(path, dir_flags(), Mode::empty()).map_err(dir_open_error)?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens the subdirectory `name`, itself not a symlink.
    pub fn subdir(&self, name: &str) -> io::Result<Dir> {
        let fd =
            fcntl::openat(&self.fd, name, dir_flags(), Mode::empty()).map_err(dir_open_error)?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
        })
    }

    /// Creates the subdirectory `name`; AlreadyExists when there is one (or anything else
    /// by that name).
    pub fn mkdir(&self, name: &str, mode: u32) -> io::Result<()> {
        stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)).map_err(errno)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's identity and last change (its mtime moves with every name made,
    /// renamed or removed in it).
    pub fn stamp(&self) -> io::Result<DirStamp> {
        let st = stat::fstat(&self.fd).map_err(errno)?;
        Ok(DirStamp {
            dev: st.st_dev,
            ino: st.st_ino,
            changed: UNIX_EPOCH + Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32),
        })
    }

    /// The path of `name` inside this directory, for messages.
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Refuses a directory anyone but the running user could change: owned by another
    /// user, or writable by group or others. Returns what is wrong and how to fix it.
    pub fn check_private(&self) -> Result<(), (String, String)> {
        let st =
            stat::fstat(&self.fd).map_err(|e| (format!("cannot stat it: {e}"), String::new()))?;
        let me = effective_uid();
        let path = self.path.display();
        if st.st_uid != me {
            return Err((
                format!("is owned by uid {}, not by the running user (uid {me})", st.st_uid),
                format!("another user could forge or delete reservations; run chown {me} {path}, or use a dataDir of academy's own"),
            ));
        }
        if st.st_mode & 0o022 != 0 {
            return Err((
                format!("is writable by group or others (mode {:o})", st.st_mode & 0o7777),
                format!("anyone who can write there could forge or delete reservations; run chmod 0700 {path}"),
            ));
        }
        Ok(())
    }

    /// Opens the regular file `name` for reading; None when nothing has that name.
    pub fn open_read(&self, name: &str) -> io::Result<Option<Opened>> {
        match self.open_regular(name, OFlag::O_RDONLY, 0) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            other => other.map(Some),
        }
    }

    /// Reads the regular file `name`, at most `limit` bytes; None when it does not exist.
    pub fn read(&self, name: &str, limit: usize) -> io::Result<Option<Vec<u8>>> {
        let Some(mut opened) = self.open_read(name)? else {
            return Ok(None);
        };
        read_capped(&mut opened.file, limit).map(Some)
    }

    /// Overwrites (or creates) the regular file `name`. Something else by that name is
    /// left alone and reported as [`NotRegular`].
    ///
    /// Written in place, then cut to length, never opened with O_TRUNC: ext4 flushes a
    /// file truncated to zero and rewritten when it is closed (auto_da_alloc), which cost
    /// about 0.9 ms of every ADD's hint write here, against 0.1 ms this way.
    pub fn overwrite(&self, name: &str, content: &[u8]) -> io::Result<()> {
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT;
        let mut opened = self.open_regular(name, flags, 0o600)?;
        overwrite_file(&mut opened.file, content)
    }

    /// Opens the regular file `name` for reading and then writing over it
    /// ([`overwrite_file`]); None when nothing has that name.
    pub fn open_rw(&self, name: &str) -> io::Result<Option<Opened>> {
        match self.open_regular(name, OFlag::O_RDWR, 0) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            other => other.map(Some),
        }
    }

    /// Creates `name`, which must not exist (O_EXCL never follows a symlink either).
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        let flags = guarded(OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL);
        let fd =
            fcntl::openat(&self.fd, name, flags, Mode::from_bits_truncate(0o600)).map_err(errno)?;
        Ok(File::from(fd))
    }

    /// An unnamed regular file in this directory (O_TMPFILE), to be named with
    /// [`Dir::link_unnamed`].
    pub fn create_unnamed(&self) -> io::Result<File> {
        let flags = OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC;
        let fd =
            fcntl::openat(&self.fd, ".", flags, Mode::from_bits_truncate(0o600)).map_err(errno)?;
        Ok(File::from(fd))
    }

    /// Gives an O_TMPFILE file the name `name`; EEXIST if taken (linkat never replaces).
    /// Linking through /proc/self/fd needs no privilege (AT_EMPTY_PATH would).
    pub fn link_unnamed(&self, file: &File, name: &str) -> io::Result<()> {
        let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
        unistd::linkat(
            fcntl::AT_FDCWD,
            proc.as_str(),
            &self.fd,
            name,
            AtFlags::AT_SYMLINK_FOLLOW,
        )
        .map_err(errno)
    }

    /// Links `from` to `to`, both in this directory; EEXIST if `to` is taken.
    pub fn link(&self, from: &str, to: &str) -> io::Result<()> {
        unistd::linkat(&self.fd, from, &self.fd, to, AtFlags::empty()).map_err(errno)
    }

    /// Renames `from` over `to`, both in this directory.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fcntl::renameat(&self.fd, from, &self.fd, to).map_err(errno)
    }

    /// Removes the name `name` (a symlink itself, never its target).
    pub fn unlink(&self, name: &str) -> io::Result<()> {
        unistd::unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir).map_err(errno)
    }

    /// lstat of `name`; None when nothing has that name.
    pub fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
        match stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(errno(e)),
        }
    }

    /// The entries of this directory as (name, is a regular file); names that are not
    /// UTF-8 are skipped (academy never writes one). Read through its own fd, never by path.
    pub fn list(&self) -> io::Result<Vec<(String, bool)>> {
        let mut stream =
            DirStream::openat(&self.fd, ".", dir_flags(), Mode::empty()).map_err(errno)?;
        let mut out = Vec::new();
        for entry in stream.iter() {
            let entry = entry.map_err(errno)?;
            let Ok(name) = std::str::from_utf8(entry.file_name().to_bytes()) else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let regular = match entry.file_type() {
                Some(t) => t == Type::File,
                // Some file systems do not fill d_type: ask.
                None => self.stat(name)?.is_some_and(|st| is_regular(st.st_mode)),
            };
            out.push((name.to_string(), regular));
        }
        Ok(out)
    }

    fn open_regular(&self, name: &str, flags: OFlag, mode: u32) -> io::Result<Opened> {
        let fd = fcntl::openat(
            &self.fd,
            name,
            guarded(flags),
            Mode::from_bits_truncate(mode),
        )
        .map_err(open_error)?;
        let stat = stat::fstat(&fd).map_err(errno)?;
        if !is_regular(stat.st_mode) {
            return Err(not_regular(kind_of(stat.st_mode)));
        }
        let file = File::from(fd);
        // Regular files never block; reads and writes behave as without O_NONBLOCK.
        Ok(Opened { file, stat })
    }
}

/// Writes `content` over `file` from its start, wherever a read left it, then cuts it to
/// length (see [`Dir::overwrite`] for why not O_TRUNC).
pub fn overwrite_file(file: &mut File, content: &[u8]) -> io::Result<()> {
    write_from_start(file, content)?;
    file.set_len(content.len() as u64)
}

/// Writes `content` over `file` from its start, leaving whatever lies past its end.
pub fn write_from_start(file: &File, content: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(content, 0)
}

/// A file under flock(2), unlocked when the guard drops.
///
/// A flock belongs to the open file description and the kernel releases it when the
/// description's last descriptor closes, so the guard only closes: nix's `Flock` calls
/// flock(LOCK_UN) first, a syscall more per lock (3 an ADD, 2 a DEL). The guard's
/// descriptor is the last: every file academy opens is O_CLOEXEC and none is dup'ed, so
/// a delegate IPAM plugin's child holds a copy only until its exec, which
/// `Command::spawn` returns after.
#[derive(Debug)]
pub struct FileLock(File);

/// How [`FileLock::take`] locks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Share {
    Shared,
    Exclusive,
}

impl FileLock {
    /// Locks `file` without waiting; the file back with the errno when it cannot
    /// (EWOULDBLOCK: someone else holds it).
    pub fn take(file: File, share: Share) -> Result<FileLock, (File, Errno)> {
        let op = match share {
            Share::Shared => libc::LOCK_SH,
            Share::Exclusive => libc::LOCK_EX,
        } | libc::LOCK_NB;
        // SAFETY: flock(2) on a descriptor `file` owns and keeps open across the call.
        match Errno::result(unsafe { libc::flock(file.as_raw_fd(), op) }) {
            Ok(_) => Ok(FileLock(file)),
            Err(e) => Err((file, e)),
        }
    }
}

impl Deref for FileLock {
    type Target = File;
    fn deref(&self) -> &File {
        &self.0
    }
}

impl DerefMut for FileLock {
    fn deref_mut(&mut self) -> &mut File {
        &mut self.0
    }
}

/// Takes an exclusive flock on `file`, released when the returned guard is dropped.
/// Another academy remover holds it for microseconds; whoever holds it longer than
/// `wait` is not academy, and waiting on it would hang DEL or GC: EWOULDBLOCK then.
pub fn lock_exclusive(file: File, wait: Duration) -> io::Result<FileLock> {
    lock_exclusive_in_place(&file, wait)?;
    Ok(FileLock(file))
}

/// As [`lock_exclusive`], on a file the caller keeps: the lock goes with the file's last
/// close (or an explicit unlock), not with a guard.
pub fn lock_exclusive_in_place(file: &File, wait: Duration) -> io::Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        // SAFETY: flock(2) on a descriptor `file` owns and keeps open across the call.
        match Errno::result(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) })
        {
            Ok(_) => return Ok(()),
            Err(Errno::EWOULDBLOCK) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(errno(e)),
        }
    }
}

/// A host-wide lock file (created 0600, never through a symlink) locked exclusively within
/// `wait`: None when it cannot be opened (no /run) or stays held, and the caller goes on
/// unlocked (these locks are best effort: they keep concurrent repairs from doubling a
/// rule, not anything from being correct).
pub fn host_lock(path: &str, wait: Duration) -> Option<FileLock> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    lock_exclusive(file, wait).ok()
}

/// Replaces the host-wide record `path` (academy's, under /run) with `bytes` through a
/// temp file beside it (`.<name>.<pid>.tmp`, created 0600, never through a symlink)
/// and a rename, so a reader sees the old file or the new one, never a part. Its
/// folder is made (0700) only when the temp file's open says it is missing: once per
/// boot, not a mkdir per write.
pub fn replace_host_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
    };
    let written = open_making_dir(dir, open)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// `open()` of a file in academy's folder `dir` under /run, the folder made (0700, with
/// its parents) only when the open says it is missing, and the open tried again: a
/// folder of /run is made once per boot, so the usual path is one open, not a mkdir
/// and a stat each time.
pub fn open_making_dir<T>(
    dir: impl AsRef<Path>,
    open: impl Fn() -> io::Result<T>,
) -> io::Result<T> {
    use std::os::unix::fs::DirBuilderExt;
    match open() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            open()
        }
        other => other,
    }
}

/// Reads a small host file whole (a /proc/sys value, one of academy's records under
/// /run): open, one read, close, where std::fs::read adds a statx and a read returning 0.
pub fn read_host_file(path: impl AsRef<Path>, limit: usize) -> io::Result<Vec<u8>> {
    read_capped(&mut File::open(path)?, limit)
}

/// Reads all of `file`, failing when it holds more than `limit` bytes: a garbage file
/// must not make academy allocate without bound.
///
/// A read that fills less than it asked for is the end: these are regular files, which
/// a read fills up to their end, and the store's files are complete before they get
/// their names. So a small file costs one read, not read_to_end's two (the second only
/// to see 0), on every reservation, holder index and hint an ADD reads.
pub fn read_capped(file: &mut File, limit: usize) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; FIRST_READ.min(limit + 1)];
    let mut len = 0;
    loop {
        let n = match file.read(&mut out[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        len += n;
        if n == 0 || len < out.len() || len > limit {
            break;
        }
        out.resize((out.len() * 2).min(limit + 1), 0);
    }
    out.truncate(len);
    if out.len() > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes, not a file this store wrote"),
        ));
    }
    Ok(out)
}

/// academy's effective uid, asked once: every ADD checks two directories against it.
/// The kernel puts it in the auxiliary vector at exec (AT_EUID), where glibc reads it
/// without a syscall; academy never changes it, so that is the current one. geteuid(2)
/// when the vector has none.
fn effective_uid() -> libc::uid_t {
    static UID: std::sync::OnceLock<libc::uid_t> = std::sync::OnceLock::new();
    *UID.get_or_init(|| {
        // SAFETY: getauxval only reads the auxiliary vector; 0 with ENOENT when absent.
        let at_exec = unsafe {
            *libc::__errno_location() = 0;
            let euid = libc::getauxval(libc::AT_EUID);
            (*libc::__errno_location() == 0).then_some(euid)
        };
        match at_exec.and_then(|euid| libc::uid_t::try_from(euid).ok()) {
            Some(euid) => euid,
            None => unistd::geteuid().as_raw(),
        }
    })
}

/// The first read's size: every file the store writes is smaller.
const FIRST_READ: usize = 512;

/// Whether two stats are of the same inode.
pub fn same_inode(a: &FileStat, b: &FileStat) -> bool {
    a.st_ino == b.st_ino && a.st_dev == b.st_dev
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn dir_open_error(e: Errno) -> io::Error {
    match e {
        Errno::ELOOP | Errno::ENOTDIR => io::Error::new(
            io::ErrorKind::InvalidData,
            "it is a symlink or not a directory, and academy follows no symlink in its store",
        ),
        other => errno(other),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_effective_uid_at_exec_is_the_current_one() {
        assert_eq!(super::effective_uid(), nix::unistd::geteuid().as_raw());
    }
}
