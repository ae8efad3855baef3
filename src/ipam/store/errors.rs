//! How the store's failures read: the code, what happened, the path, and what to do.
//! A child of store.rs.

use std::io;
use std::net::IpAddr;
use std::path::Path;

use super::files::{is_not_regular, Dir};
use super::{is_errno, Store};
use crate::cni::{code, Error};
use crate::ipam::{shown, FileHolder, Pool};

/// A store directory that is not a directory, or not private to the running user.
pub(super) fn refuse_dir(path: &Path, problem: impl std::fmt::Display, details: &str) -> Error {
    Error::new(
        code::IO_FAILURE,
        format!("IPAM store {} {problem}", path.display()),
    )
    .details(details)
}

impl Store {
    pub(super) fn exhausted(&self, pool: &Pool, held: u128) -> Error {
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

    /// A requested address someone else holds. The file's content is shown escaped and
    /// cut short: it may be anything, and it goes into the runtime's logs.
    pub(super) fn taken(&self, addr: IpAddr, content: &[u8]) -> Error {
        let who = match FileHolder::parse(content) {
            FileHolder::Full { id, ifname } => {
                format!("container {} (interface {})", shown(&id), shown(&ifname))
            }
            FileHolder::Legacy(id) => format!("container {}", shown(&id)),
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

    /// A requested address whose name in the store is taken by something that is not a
    /// reservation (a FIFO, a directory, a symlink): not academy's, so never removed.
    pub(super) fn occupied(&self, addr: IpAddr, e: &io::Error) -> Error {
        Error::new(
            code::ADDRESS_UNAVAILABLE,
            format!(
                "network {}: requested address {addr} cannot be reserved: {} {e}",
                self.network,
                self.dir.path_of(&addr.to_string()).display()
            ),
        )
        .details("academy did not make it and leaves it alone; remove it if nothing uses it, or request another address")
    }

    pub(super) fn io_err(&self, what: &str, name: &str, e: &io::Error) -> Error {
        self.io_err_in(&self.dir, what, name, e)
    }

    pub(super) fn io_err_in(&self, dir: &Dir, what: &str, name: &str, e: &io::Error) -> Error {
        let path = if name == "." {
            dir.path().to_path_buf()
        } else {
            dir.path_of(name)
        };
        let err = Error::io(
            format!("network {}: cannot {what} {}", self.network, path.display()),
            e,
        );
        if is_not_regular(e) {
            err.details("academy did not write it; remove it if nothing else uses it")
        } else if is_errno(e, libc::EWOULDBLOCK) {
            // Someone other than academy holds the reservation's lock: retrying may work.
            let mut err = err.details(format!(
                "another process has held its lock for over {} s; nothing was removed, retry",
                self.lock_wait.as_secs()
            ));
            err.code = code::TRY_AGAIN_LATER;
            err
        } else {
            err
        }
    }
}
