//! The one removal of an attachment: everything academy made for one (network, container
//! id, ifname), taken away in one order defined here. DEL, the undo of a failed ADD, leak
//! healing, `academy reclaim` and GC's per-attachment part all come here, so a new kind
//! of per-attachment state (a port mapping, a MAC filter) is added to this one list.
//!
//! The order keeps two invariants: an address is not freed while a veth that used it
//! lives (another container could get it while the old pair still answers for it), and
//! nf_tables state naming an attachment never outlives its reservation (a reused address
//! would carry the old holder's element, which a later GC would remove from under the
//! new one). So:
//!
//! 1. per-attachment nf_tables state (masquerade elements, published ports, the MAC
//!    filter of macspoofchk), removed by identity;
//! 2. the veth pair, through its host end;
//! 3. the reservations.
//!
//! The nf_tables step goes before the veth rather than after because closing its socket
//! waits out an RCU grace period that the veth deletion (itself slow) then overlaps: DEL
//! with ipMasq took 23.4 ms against 35.2 ms the other way round (medians of 40
//! interleaved runs). The price is that a container being torn down sends its last
//! packets, if any, unmasqueraded.
//!
//! A failing step does not stop the others, except that the reservations are kept when
//! step 1 or 2 failed (the invariants above); every failure is reported, and a repeated
//! removal (a DEL retried) finishes the job.
//!
//! What GC must still sweep by kind, because it names no whole attachment, is listed in
//! gc.rs. Elsewhere nothing is removed but: the allocator's undo of a reservation it made
//! before it returns a refusal (addressing.rs: no attachment had it yet), ADD replacing
//! its own attachment's stale port element when the kernel refuses its batch
//! (portmap.rs), and reclaim's sweep of a legacy reservation that names no interface
//! (leaks/reclaim.rs).

use std::net::IpAddr;

use crate::addressing::{self, Assigned};
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::result::CniResult;
use crate::cni::{Error, Result};
use crate::config::{Config, Ipam};
use crate::firewall::macspoof;
use crate::firewall::masquerade;
use crate::firewall::ports;
use crate::ipam::store::Locked;
use crate::ipam::Store;
use crate::netlink::{Netlink, NftablesOnDemand};
use crate::wire::{self, PairRemoval};

/// How an attachment's reservations are known, which is also how they are freed.
pub enum Reservations<'a> {
    /// DEL: whatever the attachment holds in its IPAM, academy's store or a delegated
    /// plugin (run with DEL).
    Held(&'a Env),
    /// A failed ADD: exactly what it was given, through the store it reserved with (which
    /// frees what it linked even if a racing GC took its holder index).
    Assigned(&'a Env, &'a Assigned),
    /// An attachment found by its traces (a host veth's alias, a holder index): what its
    /// holder index names in academy's store. Nothing for a delegated IPAM, whose own GC
    /// is run by the GC verb.
    Indexed,
    /// Reservations a reclaimer decided on and holds locked, so that no ADD can confirm
    /// them meanwhile; unlinked while still locked.
    Locked(Vec<Locked<'a>>),
    /// None: an ADD replacing its attachment's stale pair keeps what it reserved.
    Kept,
}

/// One attachment to remove.
pub struct Target<'a> {
    pub who: Attachment<'a>,
    pub reservations: Reservations<'a>,
}

/// What a removal of several attachments did.
#[derive(Debug, Default)]
pub struct Report {
    /// The addresses whose reservations were freed, with their holder's key.
    pub freed: Vec<(IpAddr, String)>,
    /// Host veths deleted.
    pub veths: Vec<String>,
    pub errors: Vec<Error>,
}

/// Removes one attachment (DEL, a failed ADD). Every step is tried; the first error is
/// returned with the others in its details.
pub fn attachment(conf: &Config, target: Target) -> Result<()> {
    let mut report = attachments(conf, vec![target]);
    match report.errors.len() {
        0 => Ok(()),
        1 => Err(report.errors.remove(0)),
        _ => {
            let first = report.errors.remove(0);
            let rest: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
            Err(first.details(format!("also: {}", rest.join("; "))))
        }
    }
}

/// Removes each target in the one order, sharing the sockets among them (GC and reclaim
/// may remove thousands). Never stops at an error.
pub fn attachments(conf: &Config, targets: Vec<Target>) -> Report {
    let mut report = Report::default();
    let mut failed = vec![false; targets.len()];

    // 1. nf_tables, on one socket kept open until the end (see masquerade::remove_owned:
    // closing it waits out the removal's RCU grace period, which the veth step overlaps).
    let mut nft = NftablesOnDemand::default();
    for (t, failed) in targets.iter().zip(failed.iter_mut()) {
        *failed = !remove_nftables(&mut nft, conf, t, &mut report.errors);
    }

    // 2. The veth pairs.
    match Netlink::open() {
        Ok(mut nl) => {
            for (t, failed) in targets.iter().zip(failed.iter_mut()) {
                match wire::remove_pair(&mut nl, &t.who) {
                    Ok(PairRemoval::Deleted) => report.veths.push(t.who.host_name()),
                    Ok(PairRemoval::Absent) => {}
                    // A foreign link under academy's derived name is not ours to delete,
                    // and must not wedge the container in a DEL that can never succeed.
                    Ok(PairRemoval::NotOurs(why)) => eprintln!("academy: {why}"),
                    Err(e) => {
                        report.errors.push(e);
                        *failed = true;
                    }
                }
            }
        }
        Err(e) => {
            report.errors.push(e.into());
            failed.iter_mut().for_each(|f| *f = true);
        }
    }

    // 3. The reservations, of the attachments whose other state is gone.
    for (t, failed) in targets.into_iter().zip(failed) {
        let key = t.who.holder().key();
        if failed && matches!(t.reservations, Reservations::Kept) {
            continue;
        }
        if failed {
            report.errors.push(Error::new(
                crate::cni::code::IO_FAILURE,
                format!(
                    "the addresses of {} on network {} are kept until the steps above succeed",
                    t.who.holder(),
                    conf.name
                ),
            ).details("an address is never freed while its veth or nf_tables state may still use it; retry the removal (DEL, GC or academy reclaim)"));
            continue;
        }
        match release(conf, t) {
            Ok(freed) => report
                .freed
                .extend(freed.into_iter().map(|a| (a, key.clone()))),
            Err(e) => report.errors.push(e),
        }
    }
    drop(nft);
    report
}

/// Step 1 for one attachment: its masquerade elements, published ports and MAC filter,
/// each tried even when another failed. False when one failed.
fn remove_nftables(
    nft: &mut NftablesOnDemand,
    conf: &Config,
    t: &Target,
    errors: &mut Vec<Error>,
) -> bool {
    let before = errors.len();
    if conf.ip_masq {
        let removed = addresses(conf, t)
            .and_then(|addrs| masquerade::remove_owned(nft.get()?, conf, &t.who.holder(), &addrs));
        errors.extend(removed.err());
    }
    // DEL and a failed ADD look for published ports when the network publishes them;
    // GC, reclaim and healing always do (the capability may have been on when they were
    // published, and the config they read has no mappings: the maps are searched by
    // holder).
    let found_by_traces = matches!(
        t.reservations,
        Reservations::Indexed | Reservations::Locked(_)
    );
    if conf.publishes_ports || found_by_traces {
        let removed = nft
            .get()
            .map_err(Error::from)
            .and_then(|n| ports::remove(n, conf, &t.who));
        errors.extend(removed.err());
    }
    if conf.mac_spoof_check {
        let removed = nft
            .get()
            .map_err(Error::from)
            .and_then(|n| macspoof::remove_owned(n, conf, &t.who));
        errors.extend(removed.err());
    }
    // A container the reference chain made before `academy convert`.
    if let Reservations::Held(env) = &t.reservations {
        let removed = nft.get().map_err(Error::from).and_then(|n| {
            crate::firewall::reference::remove_leftovers(n, conf, &t.who, &env.netns)
        });
        errors.extend(removed.err());
    }
    errors.len() == before
}

/// The attachment's addresses, for the nf_tables step (which removes only elements that
/// name the attachment, so an address is a place to look, never a licence to delete).
fn addresses(conf: &Config, t: &Target) -> Result<Vec<IpAddr>> {
    match &t.reservations {
        Reservations::Assigned(_, assigned) => Ok(assigned.addresses()),
        Reservations::Locked(locked) => Ok(locked.iter().map(|l| l.address()).collect()),
        Reservations::Held(_) | Reservations::Indexed | Reservations::Kept => held(&t.who, conf),
    }
}

/// The attachment's addresses as DEL can learn them, cheapest source first.
fn held(who: &Attachment, conf: &Config) -> Result<Vec<IpAddr>> {
    let holder = who.holder();
    if let Ipam::Builtin(b) = &conf.ipam {
        return Store::open(&b.data_dir, &conf.name)?.held_by(&holder);
    }
    if let Some(prev) = &conf.prev_result {
        if let Ok(result) = CniResult::from_json(prev) {
            return Ok(result.ips.iter().map(|ip| ip.address.ip()).collect());
        }
    }
    masquerade::owned_by(conf, &holder)
}

fn release(conf: &Config, t: Target) -> Result<Vec<IpAddr>> {
    match t.reservations {
        Reservations::Held(env) => addressing::release(env, conf),
        Reservations::Assigned(env, assigned) => addressing::undo(env, conf, assigned),
        Reservations::Indexed => match conf.builtin() {
            Some(b) => Store::open(&b.data_dir, &conf.name)?.release(&t.who.holder()),
            None => Ok(Vec::new()),
        },
        Reservations::Kept => Ok(Vec::new()),
        Reservations::Locked(locked) => {
            let store = locked.first().map(|l| l.store());
            let mut freed = Vec::new();
            let mut first_err = None;
            for lock in locked {
                let address = lock.address();
                match lock.remove() {
                    Ok(true) => freed.push(address),
                    Ok(false) => {}
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
            if let (None, Some(store)) = (&first_err, store) {
                // Its index goes once it names nothing held, so a DEL finds nothing.
                store.drop_index_if_unused(&t.who.holder())?;
            }
            first_err.map_or(Ok(freed), Err)
        }
    }
}
