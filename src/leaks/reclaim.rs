//! `academy reclaim` and healing: which reservations to free (a [`Selection`]), and
//! freeing them through the one removal, each decided again under its lock just before.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use super::{format_age, survey, Caller, Entry, HostLinks, State};
use crate::attachment;
use crate::attachment::Attachment;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::firewall::masquerade;
use crate::ipam::store::{Locked, StoreDir};
use crate::ipam::Holder;
use crate::netlink::Netlink;
use crate::removal::{self, Reservations, Target};

/// Which attachments to free.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Leaked for at least this long, or since before the current boot.
    LeakedFor(Duration),
    /// One leaked address, as LeakedFor (a requested address a dead holder keeps).
    LeakedAddress(IpAddr, Duration),
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
            Selection::LeakedFor(grace) => e.leaked_for(*grace),
            Selection::LeakedAddress(address, grace) => {
                e.reservation.address == *address && e.leaked_for(*grace)
            }
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
    caller: Caller,
) -> Result<Vec<Freed>> {
    let entries = survey(conf, store, nl, caller)?;
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
        out.extend(unkept_veths(nl, conf, keep, &spared, &picked, caller)?);
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
    caller: Caller,
) -> Result<Vec<Freed>> {
    let links = HostLinks::read(nl, conf, caller)?;
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
                attachment::host_name(&r.container_id, &ifname),
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

/// Frees what `sel` picks, through the one removal. Each address is re-decided with its
/// file locked, and stays locked until it is unlinked: a leaked one only while it still
/// has no host veth and is still old enough.
pub fn reclaim(
    conf: &Config,
    store: &StoreDir,
    nl: &mut Netlink,
    sel: &Selection,
    caller: Caller,
) -> Result<Report> {
    let planned = plan(conf, store, nl, sel, caller)?;
    let mut report = Report::default();
    // Per attachment: its picked reservations, locked, and whether a veth is planned.
    let mut attachments: BTreeMap<(String, String), Vec<Locked>> = BTreeMap::new();
    for item in &planned {
        match item {
            Freed::HostVeth {
                container_id,
                ifname,
                ..
            } => {
                attachments
                    .entry((container_id.clone(), ifname.clone()))
                    .or_default();
            }
            Freed::Address(entry) => match lock(store, nl, sel, entry) {
                Ok(Some(locked)) => match &entry.reservation.ifname {
                    Some(ifname) => attachments
                        .entry((entry.reservation.container_id.clone(), ifname.clone()))
                        .or_default()
                        .push(locked),
                    // A legacy reservation names no attachment: swept alone, by kind, its
                    // masquerade element (named by its container) first.
                    None => match sweep_legacy(conf, &entry.reservation.container_id, locked) {
                        Ok(true) => report.freed.push(item.clone()),
                        Ok(false) => {}
                        Err(e) => report.errors.push(e),
                    },
                },
                Ok(None) => {}
                Err(e) => report.errors.push(e),
            },
        }
    }
    let (keys, locks): (Vec<_>, Vec<_>) = attachments.into_iter().unzip();
    let targets: Vec<Target> = keys
        .iter()
        .zip(locks)
        .map(|((cid, ifname), locked)| Target {
            who: Attachment::new(&conf.name, cid, ifname),
            reservations: Reservations::Locked(locked),
        })
        .collect();
    let removed = removal::attachments(conf, targets);
    let freed: HashSet<IpAddr> = removed.freed.iter().map(|(a, _)| *a).collect();
    let veths: HashSet<&String> = removed.veths.iter().collect();
    for item in planned {
        let done = match &item {
            Freed::Address(e) => {
                e.reservation.ifname.is_some() && freed.contains(&e.reservation.address)
            }
            Freed::HostVeth { name, .. } => veths.contains(name),
        };
        if done {
            report.freed.push(item);
        }
    }
    report.errors.extend(removed.errors);
    Ok(report)
}

/// A legacy reservation (no interface in it): the masquerade elements its container's
/// attachments left at its address, then the file, still locked. Looked up whether or
/// not ipMasq is still set (it may have been taken out since ADD): one lookup.
fn sweep_legacy(conf: &Config, container_id: &str, locked: Locked) -> Result<bool> {
    masquerade::remove_of_container(conf, container_id, &[locked.address()])?;
    locked.remove()
}

/// Locks the entry's reservation if `sel` still picks it: same holder, old enough and,
/// for a leak, still without a host veth (looked at under the lock, so an ADD wiring
/// this attachment right now cannot confirm its address between this look and the
/// unlink).
fn lock<'s>(
    store: &'s StoreDir,
    nl: &mut Netlink,
    sel: &Selection,
    entry: &Entry,
) -> Result<Option<Locked<'s>>> {
    let r = &entry.reservation;
    let holder = r
        .holder()
        // A legacy file: matched on the container id alone, as DEL does.
        .unwrap_or_else(|| Holder::new(r.container_id.clone(), "-"));
    let mut failure = None;
    let locked = store.lock_if(r.address, |content, made| {
        let age = SystemTime::now().duration_since(made).unwrap_or_default();
        if !holder.matches(content) {
            return false;
        }
        match sel {
            Selection::LeakedFor(grace) | Selection::LeakedAddress(_, grace) => {
                if age < *grace && !entry.before_boot {
                    return false;
                }
                match still_unwired(nl, entry) {
                    Ok(unwired) => unwired,
                    Err(e) => {
                        failure = Some(e);
                        false
                    }
                }
            }
            Selection::NotKept { min_age, .. } => age >= *min_age,
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(locked),
    }
}

/// No link exists under the attachment's derived name (academy names every host veth
/// so; an alias without that name would be a link renamed by hand, and the survey already
/// counted it as wired).
fn still_unwired(nl: &mut Netlink, e: &Entry) -> Result<bool> {
    let Some(ifname) = &e.reservation.ifname else {
        return Ok(false);
    };
    let name = attachment::host_name(&e.reservation.container_id, ifname);
    Ok(nl.link(&name)?.is_none())
}
