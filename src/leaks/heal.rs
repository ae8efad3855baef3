//! Healing, decided by ADD: when its pool is exhausted, or the address it was asked for
//! is held by a provably dead attachment, ADD frees such leaks (through reclaim and the
//! one removal) and tries once more. STATUS's view of a pool that healing would serve.

use std::net::IpAddr;
use std::time::Duration;

use super::{open_store, plan, reclaim, Caller, Freed, Report, Selection};
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::netlink::Netlink;

/// ADD's remedy for an exhausted pool: frees this network's reservations that have had
/// no host veth for longer than `reclaimLeakedAfter` (or since before the current boot),
/// saying so on stderr. Returns how many addresses it freed; any problem is logged and
/// leaves ADD's own error standing.
pub fn heal(conf: &Config) -> usize {
    let grace = Duration::from_secs(conf.reclaim_leaked_after);
    free(conf, &Selection::LeakedFor(grace), "no free address")
}

/// ADD's remedy for a requested address (runtimeConfig.ips, IP=) held by another
/// attachment: freed if that attachment is provably dead by the same rule as healing.
/// True when the address was freed.
pub fn free_dead_holder(conf: &Config, address: IpAddr) -> bool {
    let grace = Duration::from_secs(conf.reclaim_leaked_after);
    let why = format!("requested address {address} is held");
    free(conf, &Selection::LeakedAddress(address, grace), &why) > 0
}

fn free(conf: &Config, sel: &Selection, why: &str) -> usize {
    if conf.reclaim_leaked_after == 0 || conf.builtin().is_none() {
        return 0;
    }
    let attempt = || -> Result<Report> {
        let Some(store) = open_store(conf)? else {
            return Ok(Report::default());
        };
        let mut nl = Netlink::open()?;
        reclaim(conf, &store, &mut nl, sel, Caller::Add)
    };
    match attempt() {
        Ok(report) => {
            for f in &report.freed {
                eprintln!(
                    "academy: network {}: {why}, so {} {f}: no host veth for longer than reclaimLeakedAfter ({}s) or since before this boot",
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
    if conf.reclaim_leaked_after == 0 || err.code != code::ADDRESS_EXHAUSTED {
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
        Ok(plan(conf, &store, &mut nl, &grace, Caller::Add)?
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
    for pool in b.pools() {
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
