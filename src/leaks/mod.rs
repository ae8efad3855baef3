//! Leaks: reservations whose attachment academy no longer has wired, found by comparing
//! the store with the host's links, and freed (by an ADD that found its pool exhausted
//! or its requested address held, or by the operator through `academy list` / `academy
//! reclaim`). Freeing goes through the one removal (removal.rs).
//!
//! Every attachment academy wires has a host veth whose name is derived from (container
//! id, ifname) and whose alias names its owner, and a holder index in the store naming
//! its addresses. A reservation is *leaked* only when academy can attribute it and sees
//! that nothing of its attachment is left: academy's index names it, and neither a link
//! under the derived name nor one with its alias exists in the network's netns. Its
//! container's netns is gone (the kernel deletes a veth pair with it) or its ADD was
//! killed before the pair was made, and no DEL came. Once that has lasted longer than any
//! ADD takes, or since before the current boot, nothing will use the address again, so
//! freeing it is safe whatever the runtime does (README, "Failure model").
//!
//! What academy cannot attribute is never judged leaked: a reservation no academy index
//! names (host-local's, on a shared store), a legacy one naming no interface, and any
//! survey made from a netns that does not hold the network's bridge (it would see none
//! of the veths).

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::addressing::open_store;
use crate::attachment::{self, Caller, HostLinks};
use crate::cni::Result;
use crate::config::Config;
use crate::ipam::store::{Reservation, StoreDir};
use crate::netlink::Netlink;
use crate::netns::{Netns, OpenError};

mod heal;
mod reclaim;

pub use heal::{free_dead_holder, heal, status_despite_leaks};
pub use reclaim::{plan, reclaim, Freed, Report, Selection};

/// What academy knows of one reservation's attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its host veth exists (by derived name or by alias).
    Wired,
    /// Attributed to an academy attachment with no host veth: nothing is left but the
    /// address.
    Leaked,
    /// Not attributable to an attachment academy can see; [`Entry::why`] says why.
    Unknown,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Wired => "wired",
            State::Leaked => "leaked",
            State::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub reservation: Reservation,
    pub age: Duration,
    /// Made before the current boot: its attachment cannot have survived the reboot.
    pub before_boot: bool,
    /// The host veth's derived name (None for a legacy reservation).
    pub host_veth: Option<String>,
    pub state: State,
    /// For an unknown reservation, why academy cannot judge it.
    pub why: Option<&'static str>,
}

impl Entry {
    /// Leaked for at least `grace`, or since before the current boot.
    pub fn leaked_for(&self, grace: Duration) -> bool {
        self.state == State::Leaked && (self.age >= grace || self.before_boot)
    }
}

const WHY_LEGACY: &str =
    "a legacy reservation naming the container only: its veth cannot be derived";
const WHY_ELSEWHERE: &str = "its container's netns still has the interface with this address: the attachment lives, its host veth is in another netns";
const WHY_NETNS_UNREADABLE: &str = "its container's netns exists but could not be looked into";
const WHY_UNINDEXED: &str = "no academy holder index names it: written by another IPAM (host-local on a shared store) or by hand, so academy cannot see its attachment";

/// Every reservation of the network with its state, by address.
pub fn survey(
    conf: &Config,
    store: &StoreDir,
    nl: &mut Netlink,
    caller: Caller,
) -> Result<Vec<Entry>> {
    let links = HostLinks::read(nl, conf, caller)?;
    judge(&links, store.reservations()?, |r| store.index_of(r))
}

/// Each reservation's state against links already read; `index_of` is
/// [`StoreDir::index_of`] or a copy of its answers (the watch's scrapes keep one).
pub fn judge(
    links: &HostLinks,
    reservations: Vec<Reservation>,
    mut index_of: impl FnMut(&Reservation) -> Result<Option<Option<String>>>,
) -> Result<Vec<Entry>> {
    let now = SystemTime::now();
    let boot = boot_time();
    let mut entries = Vec::with_capacity(reservations.len());
    for r in reservations {
        let (state, why) = match &r.ifname {
            None => (State::Unknown, Some(WHY_LEGACY)),
            Some(ifname) if links.wired(&r.container_id, ifname) => (State::Wired, None),
            Some(ifname) => match index_of(&r)? {
                None => (State::Unknown, Some(WHY_UNINDEXED)),
                Some(Some(netns)) => match alive_in(&netns, ifname, r.address) {
                    Alive::No => (State::Leaked, None),
                    Alive::Yes => (State::Unknown, Some(WHY_ELSEWHERE)),
                    Alive::CannotTell => (State::Unknown, Some(WHY_NETNS_UNREADABLE)),
                },
                Some(None) => (State::Leaked, None),
            },
        };
        entries.push(Entry {
            age: r.age(now),
            before_boot: boot.is_some_and(|b| r.made < b),
            host_veth: r
                .ifname
                .as_ref()
                .map(|i| attachment::host_name(&r.container_id, i)),
            state,
            why,
            reservation: r,
        });
    }
    Ok(entries)
}

enum Alive {
    Yes,
    No,
    CannotTell,
}

/// Whether the attachment's interface still holds `address` in the netns ADD recorded.
/// Only ever spares a reservation: a netns that is gone (or never was) says nothing
/// either way, and GC never asks (it trusts the runtime's list alone).
fn alive_in(netns: &str, ifname: &str, address: IpAddr) -> Alive {
    let ns = match Netns::open(netns) {
        Ok(ns) => ns,
        // Gone, or no longer a netns (an unmounted leftover file, a reused /proc/PID
        // that is now a host process): the container that had it is gone too.
        Err(OpenError::Missing | OpenError::Unusable(_)) => return Alive::No,
    };
    let look = ns.run(|| {
        let mut nl = Netlink::open()?;
        let Some(link) = nl.link(ifname)? else {
            return Ok(false);
        };
        Ok(nl.addresses(link.index)?.iter().any(|a| a.ip() == address))
    });
    match look {
        Ok(true) => Alive::Yes,
        Ok(false) => Alive::No,
        Err(_) => Alive::CannotTell,
    }
}

/// When the running kernel booted (`btime` of /proc/stat); None if unreadable, which
/// only means nothing counts as made before the boot.
fn boot_time() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// "3d4h", "2h13m", "5m7s", "42s": the two largest units, for people.
pub fn format_age(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, mins, secs) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    match () {
        _ if days > 0 => format!("{days}d{hours}h"),
        _ if hours > 0 => format!("{hours}h{mins}m"),
        _ if mins > 0 => format!("{mins}m{secs}s"),
        _ => format!("{secs}s"),
    }
}

/// Parses "90", "90s", "15m", "2h", "7d" (a whole number with an optional unit).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let factor = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return None,
    };
    n.checked_mul(factor).map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ages() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7d"), Some(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        for bad in ["", "h", "-5m", "1.5h", "5 m", "5y", "99999999999999999999d"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        assert_eq!(format_age(Duration::from_secs(42)), "42s");
        assert_eq!(format_age(Duration::from_secs(307)), "5m7s");
        assert_eq!(format_age(Duration::from_secs(7980)), "2h13m");
        assert_eq!(format_age(Duration::from_secs(273_600)), "3d4h");
    }
}
