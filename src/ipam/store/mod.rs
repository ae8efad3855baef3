//! The file system side of the IPAM: reservation files, holder indexes, the hint, GC.
//!
//! Every name is resolved by `files::Dir`, relative to the network folder or holders/
//! opened once (O_NOFOLLOW|O_DIRECTORY) for the Store's lifetime: a rename or symlink swap
//! of a path cannot redirect a write, and anything in the store that is not a regular
//! file is never read, written or removed as if it were academy's.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use self::files::{is_not_regular, Dir};
use super::{Holder, Pool};
use crate::cni::{code, Error, Result};

const HOLDERS: &str = "holders";
const TMP_PREFIX: &str = ".tmp.";
/// An interrupted write's temp file is only swept once surely abandoned.
const STALE_TMP: Duration = Duration::from_secs(60);
/// Upper bounds on what we read, so a garbage file cannot make us allocate without limit.
const MAX_RESERVATION: usize = 4096;
const MAX_INDEX: usize = 64 * 1024;
/// Removers hold a reservation's lock for microseconds; a holder this long is not academy.
const LOCK_WAIT: Duration = Duration::from_secs(5);

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// One network's allocation state, `<dataDir>/<network>/`.
#[derive(Debug)]
pub struct Store {
    network: String,
    dir: Dir,
    holders: Dir,
    /// Set once O_TMPFILE (or linking it via /proc) is found unusable, to stop retrying it.
    no_tmpfile: AtomicBool,
    /// The reservations this Store linked, by holder key, address and inode: an undo
    /// frees them even if the holder index that names them was removed meanwhile (a
    /// racing GC or DEL), and ADD's last check locks them without opening their names.
    linked: Mutex<Vec<Linked>>,
    /// How long a remover waits for another's lock on a reservation (see remove_reservation).
    lock_wait: Duration,
    /// The container's netns, recorded in the holder index ADD writes: a survey that finds
    /// no host veth can still see the attachment alive there (its host veth moved away).
    netns: Option<String>,
    /// ADD's runtime record (runtime.rs), None when it has nothing to record.
    record: Option<Vec<u8>>,
    /// Files written and done with (the hint, an index's temp file), closed with the
    /// Store rather than one by one: a successful ADD hands its Store to the exit
    /// (verbs::LeftOpen), where the kernel closes them all. A few at most (KEPT_AT_MOST):
    /// a long walk of the store (GC) closes the rest as it goes.
    done_with: Mutex<Vec<File>>,
}

/// Files a Store keeps until it is dropped (`done_with`).
const KEPT_AT_MOST: usize = 4;

impl Store {
    /// Keeps a file written and done with until the Store goes (`done_with`).
    fn done_with(&self, file: File) {
        let mut kept = self.done_with.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < KEPT_AT_MOST {
            kept.push(file);
        }
    }
}

fn is_errno(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

fn not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

/// A temp name no other writer uses (the STATUS probes).
fn unique_tmp_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // pid + time alone can collide between threads of one process.
    let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{TMP_PREFIX}{}.{nanos}.{seq}", std::process::id())
}

/// The temp name of a holder's writes. One per holder, and the runtime never runs two
/// operations for one attachment at once, so a leftover by this name is a killed run's:
/// the next write for the holder replaces it and the holder's release removes it, even
/// where GC never runs.
fn holder_tmp_name(holder: &Holder) -> String {
    format!("{TMP_PREFIX}{}", holder.key())
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
    /// Opens (creating on demand) `<data_dir>/<network>/` and its holders/. Both are
    /// created 0700 and refused if they are symlinks, not owned by the running user, or
    /// writable by group or others: anyone who can write there can steal or free addresses.
    pub fn open(data_dir: &Path, network: &str) -> Result<Store> {
        validate_network(network)?;
        let path = data_dir.join(network);
        // The store exists on every ADD but the network's first: open it first, and only
        // create what is missing (a mkdir that fails with EEXIST still costs a syscall).
        let dir = match Dir::open(&path) {
            Err(e) if not_found(&e) => {
                Self::create(data_dir, &path)?;
                Dir::open(&path)
            }
            other => other,
        }
        .map_err(|e| {
            Error::io(format!("cannot open IPAM store {}", path.display()), &e)
                .details("it must be a real directory, not a symlink")
        })?;
        dir.check_private()
            .map_err(|(problem, details)| refuse_dir(&path, problem, &details))?;
        let holders_path = dir.path_of(HOLDERS);
        // As the store: opened first, made only when missing (once per network, where a
        // mkdir on every open cost each ADD and DEL a failed syscall).
        let holders = match dir.subdir(HOLDERS) {
            Err(e) if not_found(&e) => {
                if let Err(e) = dir.mkdir(HOLDERS, 0o700) {
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(Error::io(
                            format!(
                                "network {network}: cannot create {}",
                                holders_path.display()
                            ),
                            &e,
                        ));
                    }
                }
                dir.subdir(HOLDERS)
            }
            other => other,
        }
        .map_err(|e| {
            refuse_dir(
                &holders_path,
                format_args!("cannot be opened: {e}"),
                "remove it; academy recreates holders/ as a private directory",
            )
        })?;
        holders
            .check_private()
            .map_err(|(problem, details)| refuse_dir(&holders_path, problem, &details))?;
        Ok(Store {
            network: network.to_string(),
            dir,
            holders,
            no_tmpfile: AtomicBool::new(false),
            linked: Mutex::new(Vec::new()),
            lock_wait: LOCK_WAIT,
            netns: None,
            record: None,
            done_with: Mutex::new(Vec::new()),
        })
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

    /// Records `netns` in the holder indexes this Store writes (ADD's).
    pub fn in_netns(mut self, netns: &str) -> Store {
        self.netns = Some(netns.to_string());
        self
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// ADD's last check: each address is still reserved for `holder`, looked at under the
    /// lock removers take (src/ipam/store/survey.rs). The first address that is not.
    ///
    /// A reservation this Store linked from an O_TMPFILE is locked on the file it kept
    /// open, and is held while that file has a link (its one name is the address, and
    /// its content, written before the link, is never rewritten): a flock and an fstat,
    /// where opening the name again took an open, an fstat, a read, a stat of the name
    /// and a close. The lock stays with that file until the Store drops it (at an
    /// undo's release, which drops it before removing anything, or when the Store
    /// closes); any other address is checked by its name as before.
    pub fn confirm_held(&self, holder: &Holder, addresses: &[IpAddr]) -> Result<Option<IpAddr>> {
        let key = holder.key();
        let linked = self.linked.lock().unwrap_or_else(|p| p.into_inner());
        for &address in addresses {
            let kept = linked.iter().rev().find_map(|l| match &l.inode {
                Inode::Open(file) if l.key == key && l.addr == address => Some(file),
                _ => None,
            });
            let name = address.to_string();
            let held = match kept {
                Some(file) => survey::confirm_linked(file),
                None => survey::confirm_one(&self.dir, &name, holder),
            }
            .map_err(|e| survey::reservation_err(&self.dir, "read reservation", &name, &e))?;
            if !held {
                return Ok(Some(address));
            }
        }
        Ok(None)
    }

    /// Reserves a free address of `pool` for `holder`, round-robin after the last one
    /// handed out. If the holder already holds an address of this pool (an ADD retried
    /// after a kill), that address is returned instead of a second one.
    #[cfg(test)]
    pub fn reserve(&self, holder: &Holder, pool: &Pool) -> Result<IpAddr> {
        self.reserve_free(holder, pool)?
    }

    /// As `reserve`, with a full pool told apart from a failure: `Ok(Err(e))`, `e` being
    /// the code-110 error that says how full it is, so that a caller can try another
    /// pool, or free leaks and try again, without comparing codes.
    pub fn reserve_free(
        &self,
        holder: &Holder,
        pool: &Pool,
    ) -> Result<std::result::Result<IpAddr, Error>> {
        holder.validate()?;
        let original = self.read_index(holder)?;
        let mut kept = Vec::new();
        for addr in parse_index(original.as_deref().unwrap_or_default()) {
            if !pool.contains(addr) {
                kept.push(addr);
            } else if self.holds(holder, addr)? {
                self.keep_marked(holder, original.as_deref())?;
                return Ok(Ok(addr));
            }
            // Otherwise a candidate lost to someone else (or never linked): dropped below.
        }

        let (hint, mut hint_file) = self.open_hint(pool);
        let mut index_touched = false;
        let outcome = self.reserve_from(holder, pool, hint, &kept, &mut index_touched);
        if !matches!(outcome, Ok(Ok(_))) && index_touched {
            self.restore_index(holder, original.as_deref());
        }
        match outcome {
            Ok(Ok(addr)) => {
                self.write_hint(pool, addr, hint_file.as_mut());
                if let Some(hint) = hint_file {
                    self.done_with(hint.into_file());
                }
                Ok(Ok(addr))
            }
            Ok(Err(held)) => Ok(Err(self.exhausted(pool, held))),
            Err(e) => Err(e),
        }
    }

    /// The candidate loop of `reserve`: `Ok(Err(held))` means every candidate was taken.
    fn reserve_from(
        &self,
        holder: &Holder,
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
                .dir
                .stat(&name)
                .map_err(|e| self.io_err("check reservation", &name, &e))?
                .is_some()
            {
                held += 1;
                continue;
            }
            // The index must name the candidate before the reservation can exist, so that
            // a kill between the two leaves something DEL can find.
            lines.truncate(kept.len());
            lines.push(cand);
            self.write_index(holder, &lines)?;
            *index_touched = true;
            let p = match &mut pending {
                Some(p) => p,
                None => pending.insert(
                    self.pending(
                        &self.dir,
                        holder.file_content().as_bytes(),
                        &holder_tmp_name(holder),
                    )
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
        let original = self.read_index(holder)?;
        let mut lines = parse_index(original.as_deref().unwrap_or_default());
        let listed = lines.contains(&addr);

        if let Some(content) = self.read_reservation(&name)? {
            if !holder.matches(&content) {
                return Err(self.taken(addr, &content));
            }
            if !listed {
                // Held by us but unknown to the index (written by an older version or by
                // host-local): record it so DEL finds it.
                lines.push(addr);
                self.write_index(holder, &lines)?;
            } else {
                self.keep_marked(holder, original.as_deref())?;
            }
            return Ok(addr);
        }

        if !listed {
            lines.push(addr);
            self.write_index(holder, &lines)?;
        }
        let linked = self
            .pending(
                &self.dir,
                holder.file_content().as_bytes(),
                &holder_tmp_name(holder),
            )
            .and_then(|mut p| self.link(&mut p, &name, holder));
        match linked {
            Ok(()) => Ok(addr),
            Err(e) if is_errno(&e, libc::EEXIST) => {
                let content = self.read_reservation(&name).ok().flatten();
                match content {
                    Some(c) if holder.matches(&c) => Ok(addr),
                    other => {
                        if !listed {
                            self.restore_index(holder, original.as_deref());
                        }
                        Err(self.taken(addr, other.as_deref().unwrap_or_default()))
                    }
                }
            }
            Err(e) => {
                if !listed {
                    self.restore_index(holder, original.as_deref());
                }
                Err(self.io_err("create reservation", &name, &e))
            }
        }
    }

    /// The addresses `holder` actually holds (listed in its index and held on disk).
    pub fn held_by(&self, holder: &Holder) -> Result<Vec<IpAddr>> {
        holder.validate()?;
        let listed = parse_index(self.read_index(holder)?.as_deref().unwrap_or_default());
        let mut held = Vec::new();
        for addr in listed {
            if self.holds(holder, addr)? {
                held.push(addr);
            }
        }
        Ok(held)
    }

    /// A reservation's content; None when there is none. Something that is not a regular
    /// file by that name is code 111 (see `occupied`).
    fn read_reservation(&self, name: &str) -> Result<Option<Vec<u8>>> {
        match self.dir.read(name, MAX_RESERVATION) {
            Ok(c) => Ok(c),
            Err(e) if is_not_regular(&e) => {
                Err(self.occupied(name.parse().expect("reservation names are addresses"), &e))
            }
            Err(e) => Err(self.io_err("read reservation", name, &e)),
        }
    }

    /// The addresses whose reservation names `holder`, by reading every reservation.
    fn reserved_by_content(&self, holder: &Holder) -> Result<Vec<IpAddr>> {
        let names = self.dir.list().map_err(|e| self.io_err("list", ".", &e))?;
        let mut found = Vec::new();
        for (name, regular) in names {
            let Ok(addr) = name.parse::<IpAddr>() else {
                continue;
            };
            if regular && self.holds(holder, addr)? {
                found.push(addr);
            }
        }
        Ok(found)
    }

    /// Whether a regular file reserves `addr` (for anyone): ADD tells an address held by
    /// another attachment, which a dead holder may be freed from, from one refused for
    /// what it is.
    pub fn is_reserved(&self, addr: IpAddr) -> Result<bool> {
        let name = addr.to_string();
        match self.dir.stat(&name) {
            Ok(Some(st)) => Ok(st.st_mode & libc::S_IFMT == libc::S_IFREG),
            Ok(None) => Ok(false),
            Err(e) => Err(self.io_err("look up reservation", &name, &e)),
        }
    }

    /// Whether `addr` is reserved by `holder`. Anything but a regular file is not ours.
    fn holds(&self, holder: &Holder, addr: IpAddr) -> Result<bool> {
        let name = addr.to_string();
        match self.dir.read(&name, MAX_RESERVATION) {
            Ok(content) => Ok(content.is_some_and(|c| holder.matches(&c))),
            Err(e) if is_not_regular(&e) => Ok(false),
            Err(e) => Err(self.io_err("read reservation", &name, &e)),
        }
    }
}

mod errors;
pub(crate) mod files;
mod hint;
mod index;
mod pending;
mod release;
mod runtime;
mod survey;
mod sweep;
use errors::refuse_dir;
use index::parse_index;
pub(crate) use index::recorded_netns;
use pending::{Inode, Linked, Pending};
pub use runtime::Runtime;
pub use survey::{Locked, Reservation, StoreDir, StoreStamp};
pub use sweep::status;

#[cfg(test)]
mod tests;
