//! Leaks: reservations whose attachment academy no longer has wired, found by comparing
//! the store with the host's links, and freed (by an ADD that found its pool exhausted,
//! or by the operator through `academy list` / `academy reclaim`).
//!
//! Every attachment academy wires has a host veth whose name is derived from (container
//! id, ifname) and whose alias names its owner. A reservation whose attachment has
//! neither is *leaked*: its container's netns is gone (the kernel deletes a veth pair
//! with it) or its ADD was killed before the pair was made, and no DEL came. Once that
//! has lasted longer than any ADD takes, nothing will use the address again, so freeing
//! it is safe whatever the runtime does (README, "Failure model").

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use crate::attachment::Attachment;
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::hostveth;
use crate::ipam::leaks::{Reservation, StoreDir};
use crate::ipam::Holder;
use crate::masquerade;
use crate::netlink::{LinkKind, Netlink};
use crate::portmap;
use crate::wire::{self, PairRemoval};

/// What academy knows of one reservation's attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its host veth exists (by derived name or by alias).
    Wired,
    /// No host veth: nothing of the attachment is left but the address.
    Leaked,
    /// A legacy reservation naming the container only: its veth cannot be derived.
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
    /// The host veth's derived name (None for a legacy reservation).
    pub host_veth: Option<String>,
    pub state: State,
}

/// The host's links as far as this network is concerned.
struct HostLinks {
    names: HashSet<String>,
    /// (container id, ifname) of every link whose alias names this network.
    owners: HashSet<(String, String)>,
    /// Those links with their names, for the veths that have no reservation.
    owned: Vec<(String, String, String)>,
}

impl HostLinks {
    fn read(nl: &mut Netlink, network: &str) -> Result<HostLinks> {
        let links = nl.links()?;
        let mut owners = HashSet::new();
        let mut owned = Vec::new();
        for link in &links {
            let owner = link.alias.as_deref().and_then(hostveth::owner);
            if let Some((net, cid, ifname)) = owner {
                if net == network && link.kind == LinkKind::Veth {
                    owners.insert((cid.to_string(), ifname.to_string()));
                    owned.push((link.name.clone(), cid.to_string(), ifname.to_string()));
                }
            }
        }
        Ok(HostLinks {
            names: links.into_iter().map(|l| l.name).collect(),
            owners,
            owned,
        })
    }

    fn state_of(&self, r: &Reservation) -> State {
        let Some(ifname) = &r.ifname else {
            return State::Unknown;
        };
        // Any link under the derived name counts: an unlabelled pair is an ADD that was
        // killed while wiring, and a foreign link there is not academy's to judge.
        let by_name = self
            .names
            .contains(&hostveth::name(&r.container_id, ifname));
        if by_name
            || self
                .owners
                .contains(&(r.container_id.clone(), ifname.clone()))
        {
            State::Wired
        } else {
            State::Leaked
        }
    }
}

/// The network's store, if anything was ever reserved in it (built-in IPAM only).
pub fn open_store(conf: &Config) -> Result<Option<StoreDir>> {
    let Some(b) = conf.builtin() else {
        return Err(Error::config(format!(
            "network {} delegates its addresses to another IPAM plugin; academy keeps no reservations for it",
            conf.name
        ))
        .details("leaks of a delegated IPAM are that plugin's to find"));
    };
    StoreDir::open(&b.data_dir.join(&conf.name))
}

/// Every reservation of the network with its state, by address.
pub fn survey(conf: &Config, store: &StoreDir, nl: &mut Netlink) -> Result<Vec<Entry>> {
    let now = SystemTime::now();
    let reservations = store.reservations()?;
    let links = HostLinks::read(nl, &conf.name)?;
    Ok(reservations
        .into_iter()
        .map(|r| Entry {
            age: r.age(now),
            host_veth: r
                .ifname
                .as_ref()
                .map(|i| hostveth::name(&r.container_id, i)),
            state: links.state_of(&r),
            reservation: r,
        })
        .collect())
}

/// Which attachments to free.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Leaked and at least this old.
    LeakedFor(Duration),
    /// Every attachment whose container id is not listed (what is still running), wired
    /// or not, when at least `min_age` old.
    NotKept {
        keep: HashSet<String>,
        min_age: Duration,
    },
}

impl Selection {
    fn picks(&self, e: &Entry) -> bool {
        match self {
            Selection::LeakedFor(age) => e.state == State::Leaked && e.age >= *age,
            Selection::NotKept { keep, min_age } => {
                !keep.contains(&e.reservation.container_id) && e.age >= *min_age
            }
        }
    }
}

/// One thing reclaiming did (or, in a dry run, would do).
#[derive(Debug, Clone)]
pub enum Freed {
    Address(Entry),
    HostVeth {
        name: String,
        container_id: String,
        ifname: String,
    },
}

impl Freed {
    /// "free"/"freed" for an address, "delete"/"deleted" for a link.
    pub fn verb(&self, done: bool) -> &'static str {
        match (self, done) {
            (Freed::Address(_), false) => "free",
            (Freed::Address(_), true) => "freed",
            (Freed::HostVeth { .. }, false) => "delete",
            (Freed::HostVeth { .. }, true) => "deleted",
        }
    }
}

impl std::fmt::Display for Freed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Freed::Address(e) => {
                let r = &e.reservation;
                write!(
                    f,
                    "address {} (container {}, interface {}, {}, reserved {} ago)",
                    r.address,
                    r.container_id,
                    r.ifname.as_deref().unwrap_or("?"),
                    e.state.name(),
                    format_age(e.age)
                )
            }
            Freed::HostVeth {
                name,
                container_id,
                ifname,
            } => write!(
                f,
                "host veth {name} (container {container_id}, interface {ifname})"
            ),
        }
    }
}

/// What a reclaim did: what it freed and what it could not (the sweep never stops at an
/// error).
#[derive(Debug, Default)]
pub struct Report {
    pub freed: Vec<Freed>,
    pub errors: Vec<Error>,
}

/// What `reclaim` would free, without changing anything.
pub fn plan(
    conf: &Config,
    store: &StoreDir,
    nl: &mut Netlink,
    sel: &Selection,
) -> Result<Vec<Freed>> {
    let entries = survey(conf, store, nl)?;
    let (picked, kept): (Vec<Entry>, Vec<Entry>) = entries.into_iter().partition(|e| sel.picks(e));
    let mut out = Vec::new();
    if let Selection::NotKept { keep, .. } = sel {
        // An unlisted attachment spared by --older-than keeps its veth too.
        let spared: HashSet<(String, String)> = kept
            .iter()
            .filter_map(|e| {
                let r = &e.reservation;
                Some((r.container_id.clone(), r.ifname.clone()?))
            })
            .collect();
        out.extend(unkept_veths(nl, conf, keep, &spared, &picked)?);
    }
    out.extend(picked.into_iter().map(Freed::Address));
    Ok(out)
}

/// The host veths of the attachments a keep-list frees: every veth of this network whose
/// container is not kept, unless its reservation is `spared` (a veth with no reservation
/// at all is an orphan and goes), and the derived-name link of each picked wired
/// attachment (an unlabelled pair has no alias to be found by).
fn unkept_veths(
    nl: &mut Netlink,
    conf: &Config,
    keep: &HashSet<String>,
    spared: &HashSet<(String, String)>,
    picked: &[Entry],
) -> Result<Vec<Freed>> {
    let links = HostLinks::read(nl, &conf.name)?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let aliased = links.owned.into_iter().filter(|(_, cid, ifname)| {
        !keep.contains(cid) && !spared.contains(&(cid.clone(), ifname.clone()))
    });
    let derived = picked
        .iter()
        .filter(|e| e.state == State::Wired)
        .filter_map(|e| {
            let r = &e.reservation;
            let ifname = r.ifname.clone()?;
            Some((
                hostveth::name(&r.container_id, &ifname),
                r.container_id.clone(),
                ifname,
            ))
        });
    for (name, container_id, ifname) in aliased.chain(derived) {
        if seen.insert((container_id.clone(), ifname.clone())) {
            out.push(Freed::HostVeth {
                name,
                container_id,
                ifname,
            });
        }
    }
    Ok(out)
}

/// Frees what `sel` picks. Each address is re-decided with its file locked, just before
/// it goes: a leaked one only while it still has no host veth and is still old enough.
pub fn reclaim(
    conf: &Config,
    store: &StoreDir,
    nl: &mut Netlink,
    sel: &Selection,
) -> Result<Report> {
    let planned = plan(conf, store, nl, sel)?;
    let mut report = Report::default();
    // Veths first: an address must not be handed out while the old pair still exists.
    for item in &planned {
        if let Freed::HostVeth {
            container_id,
            ifname,
            ..
        } = item
        {
            let who = Attachment::new(&conf.name, container_id, ifname);
            match wire::remove_pair(nl, &who) {
                Ok(PairRemoval::Deleted) => report.freed.push(item.clone()),
                Ok(PairRemoval::Absent) => {}
                Ok(PairRemoval::NotOurs(why)) => eprintln!("academy: {why}"),
                Err(e) => report.errors.push(e),
            }
        }
    }
    let mut holders = Vec::new();
    for item in planned {
        let Freed::Address(entry) = &item else {
            continue;
        };
        match free_address(conf, store, nl, sel, entry) {
            Ok(true) => {
                if let Some(h) = entry.reservation.holder() {
                    holders.push(h);
                }
                report.freed.push(item);
            }
            Ok(false) => {}
            Err(e) => report.errors.push(e),
        }
    }
    for holder in holders {
        if let Err(e) = store.drop_index_if_unused(&holder) {
            report.errors.push(e);
        }
    }
    Ok(report)
}

fn free_address(
    conf: &Config,
    store: &StoreDir,
    nl: &mut Netlink,
    sel: &Selection,
    entry: &Entry,
) -> Result<bool> {
    let r = &entry.reservation;
    let mut failure = None;
    let removed = store.remove_if(r.address, |content, made| {
        let same_holder = match &r.holder() {
            Some(h) => h.matches(content),
            // A legacy file: matched on the container id alone, as DEL does.
            None => Holder::new(r.container_id.clone(), "-").matches(content),
        };
        let age = SystemTime::now().duration_since(made).unwrap_or_default();
        let free = match sel {
            Selection::LeakedFor(min) => {
                if !same_holder || age < *min {
                    return false;
                }
                // Under the lock, so an ADD wiring this attachment right now cannot
                // confirm its address between this look and the unlink.
                match still_unwired(nl, r) {
                    Ok(unwired) => unwired,
                    Err(e) => {
                        failure = Some(e);
                        false
                    }
                }
            }
            Selection::NotKept { min_age, .. } => same_holder && age >= *min_age,
        };
        // The masquerade element goes before the reservation: it never outlives it.
        if free && conf.ip_masq {
            if let Err(e) = masquerade::remove(conf, &[r.address]) {
                failure = Some(e);
                return false;
            }
        }
        // So do its published ports, which point at the address (any network may hold
        // them: reclaim looks whatever the capability says now).
        if let (true, Some(ifname)) = (free, &r.ifname) {
            if let Err(e) = portmap::remove_holder(conf, &r.container_id, ifname) {
                failure = Some(e);
                return false;
            }
        }
        free
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

/// No link exists under the attachment's derived name (academy names every host veth
/// so; an alias without that name would be a link renamed by hand, and the survey already
/// counted it as wired).
fn still_unwired(nl: &mut Netlink, r: &Reservation) -> Result<bool> {
    let Some(ifname) = &r.ifname else {
        return Ok(false);
    };
    let name = hostveth::name(&r.container_id, ifname);
    Ok(nl.link(&name)?.is_none())
}

/// ADD's remedy for an exhausted pool: frees this network's reservations that have had
/// no host veth for longer than `reclaimLeakedAfter`, saying so on stderr. Returns how
/// many addresses it freed; any problem is logged and leaves ADD's own error standing.
pub fn heal(conf: &Config) -> usize {
    if conf.reclaim_leaked_after == 0 || conf.builtin().is_none() {
        return 0;
    }
    let grace = Duration::from_secs(conf.reclaim_leaked_after);
    let attempt = || -> Result<Report> {
        let Some(store) = open_store(conf)? else {
            return Ok(Report::default());
        };
        let mut nl = Netlink::open()?;
        reclaim(conf, &store, &mut nl, &Selection::LeakedFor(grace))
    };
    match attempt() {
        Ok(report) => {
            for f in &report.freed {
                eprintln!(
                    "academy: network {}: no free address, so {} {f}: no host veth and older than reclaimLeakedAfter ({}s)",
                    conf.name,
                    f.verb(true),
                    conf.reclaim_leaked_after
                );
            }
            for e in &report.errors {
                eprintln!(
                    "academy: network {}: while reclaiming leaked addresses: {e}",
                    conf.name
                );
            }
            report
                .freed
                .iter()
                .filter(|f| matches!(f, Freed::Address(_)))
                .count()
        }
        Err(e) => {
            eprintln!(
                "academy: network {}: cannot look for leaked addresses: {e}",
                conf.name
            );
            0
        }
    }
}

/// STATUS's second look at a full pool: an ADD would free the leaks older than
/// `reclaimLeakedAfter` and succeed, so a pool that holds one can still serve ADD (a
/// runtime that believed STATUS would otherwise stop sending the ADDs that heal it).
/// Returns `err` unchanged unless every exhausted pool has such a leak.
pub fn status_despite_leaks(conf: &Config, err: Error) -> Result<()> {
    let Some(b) = conf.builtin() else {
        return Err(err);
    };
    if conf.reclaim_leaked_after == 0 || err.code != code::NOT_AVAILABLE {
        return Err(err);
    }
    // Writability first: a store that cannot be written cannot be healed either.
    crate::ipam::status(&b.data_dir, &conf.name, &[])?;
    let grace = Selection::LeakedFor(Duration::from_secs(conf.reclaim_leaked_after));
    let reclaimable = || -> Result<Vec<IpAddr>> {
        let Some(store) = open_store(conf)? else {
            return Ok(Vec::new());
        };
        let mut nl = Netlink::open()?;
        Ok(plan(conf, &store, &mut nl, &grace)?
            .into_iter()
            .filter_map(|f| match f {
                Freed::Address(e) => Some(e.reservation.address),
                Freed::HostVeth { .. } => None,
            })
            .collect())
    };
    let Ok(reclaimable) = reclaimable() else {
        return Err(err);
    };
    for pool in b.range_sets.iter().flatten() {
        let full = crate::ipam::status(&b.data_dir, &conf.name, std::slice::from_ref(pool));
        if let Err(full) = full {
            if !reclaimable.iter().any(|a| pool.contains(*a)) {
                return Err(full);
            }
        }
    }
    eprintln!(
        "academy: network {}: no free address, but {} leaked for longer than reclaimLeakedAfter ({}s) will be reclaimed by the next ADD",
        conf.name,
        reclaimable.len(),
        conf.reclaim_leaked_after
    );
    Ok(())
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
