//! Network namespaces: open one by path, and run work inside it on a scoped thread.
//!
//! setns(2) changes only the calling thread, so a short-lived thread enters the netns,
//! does its work and ends; the main thread never changes namespace and nothing has to
//! be switched back (an early return cannot strand the process in the container).

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use nix::sched::{setns, CloneFlags};

use crate::cni::{code, Error, Result};

/// The node: this process's network namespace (the main thread never leaves it), by
/// inode, as academy's records under /run name it (one stat per process).
pub fn node() -> Option<u64> {
    own().map(|(_, ino)| ino)
}

/// The node's netns as (device, inode): asked once, for the records' names and for
/// `Netns::open`'s refusal of the node itself (one stat an ADD, not two).
fn own() -> Option<(u64, u64)> {
    static OWN: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| {
        std::fs::metadata("/proc/self/ns/net")
            .ok()
            .map(|m| (m.dev(), m.ino()))
    })
}

/// statfs f_type of nsfs, where every /proc/<pid>/ns/* and bind-mounted netns lives.
const NSFS_MAGIC: i64 = 0x6e73_6673;
/// ioctl(2) on an nsfs file: which kind of namespace it is (linux/nsfs.h, _IO(0xb7, 0x3)).
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// The netns thread's stack. Its work is a few netlink requests whose buffers are on the
/// heap; std's default (2 MiB, or RUST_MIN_STACK from the environment) is mapped and
/// then released untouched, and debug builds and a panic's message need less than this.
const THREAD_STACK: usize = 256 * 1024;

/// An open network namespace other than academy's own.
pub struct Netns {
    file: File,
    path: String,
}

/// Why a netns path could not be used.
pub enum OpenError {
    /// Nothing at that path (a DEL after the runtime removed the netns).
    Missing,
    Unusable(Error),
}

impl Netns {
    pub fn open(path: &str) -> std::result::Result<Netns, OpenError> {
        let unusable = |msg: String| OpenError::Unusable(Error::new(code::NETNS_UNUSABLE, msg));
        // Non-blocking: a FIFO at CNI_NETNS must be refused below, not waited on forever
        // for a writer (the nsfs check then rejects it, and anything else not a netns).
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path);
        let file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OpenError::Missing),
            Err(e) => return Err(unusable(format!("cannot open CNI_NETNS {path}: {e}"))),
        };
        let st = file
            .metadata()
            .map_err(|e| unusable(format!("cannot stat CNI_NETNS {path}: {e}")))?;
        // nsfs is one superblock, so every namespace file has the device of the node's
        // own, stat'ed once per process anyway: that tells nsfs without an fstatfs (a
        // syscall an ADD). Without the node's (no /proc), the file system's magic.
        let on_nsfs = match own() {
            Some((dev, _)) => st.dev() == dev,
            None => {
                nix::sys::statfs::fstatfs(&file)
                    .map_err(|e| unusable(format!("cannot stat CNI_NETNS {path}: {e}")))?
                    .filesystem_type()
                    .0 as i64
                    == NSFS_MAGIC
            }
        };
        if !on_nsfs {
            return Err(unusable(format!(
                "CNI_NETNS {path} is not a network namespace (expected a path like /var/run/netns/NAME or /proc/PID/ns/net)"
            )));
        }
        // Every /proc/PID/ns/* file lives on nsfs; only a network one will do.
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd.
        let kind = unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE) };
        if kind >= 0 && kind != libc::CLONE_NEWNET {
            return Err(unusable(format!(
                "CNI_NETNS {path} is a namespace, but not a network namespace"
            )));
        }
        // The node's own netns (the main thread's, which never leaves it).
        if let Some(ours) = own() {
            if ours == (st.dev(), st.ino()) {
                return Err(unusable(format!(
                    "CNI_NETNS {path} is the host's own network namespace; academy wires containers, not the host"
                )));
            }
        }
        Ok(Netns {
            file,
            path: path.to_string(),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Runs `work` on a new thread that has entered this netns. The thread ends with the
    /// work, so the namespace is never held past it.
    pub fn run<T, F>(&self, work: F) -> Result<T>
    where
        T: Send,
        F: FnOnce() -> Result<T> + Send,
    {
        std::thread::scope(|scope| {
            let spawned = std::thread::Builder::new()
                .stack_size(THREAD_STACK)
                .spawn_scoped(scope, || {
                    setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| {
                        Error::new(
                            code::NETNS_UNUSABLE,
                            format!("cannot enter network namespace {}: {e}", self.path),
                        )
                    })?;
                    work()
                });
            let thread = spawned.map_err(|e| {
                // Out of memory or of threads: the node's, for now.
                Error::new(
                    code::TRY_AGAIN_LATER,
                    format!(
                        "cannot start a thread to enter network namespace {}: {e}",
                        self.path
                    ),
                )
                .details("the node is short of memory or threads; try again")
            })?;
            thread.join().unwrap_or_else(|_| {
                Err(Error::new(
                    code::NETNS_UNUSABLE,
                    format!("work inside network namespace {} panicked", self.path),
                ))
            })
        })
    }
}
