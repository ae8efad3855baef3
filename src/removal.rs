//! The one removal of an attachment: everything academy made for one (network, container
//! id, ifname), taken away in one order defined here. DEL, the undo of a failed ADD, leak
//! healing, `academy reclaim` and GC's per-attachment part all come here; its nf_tables
//! step walks the table of kinds (firewall/mod.rs), so a new kind is removed here
//! without this file naming it.
//!
//! The order keeps two invariants: an address is not freed while a veth that used it
//! lives (another container could get it while the old pair still answers for it), and
//! nf_tables state naming an attachment never outlives its reservation (a reused address
//! would carry the old holder's element, which a later GC would remove from under the
//! new one). So:
//!
//! 1. per-attachment state (every kind of firewall::KINDS), removed by owner whatever
//!    the config at hand enables;
//! 2. the veth pair, through its host end;
//! 3. the reservations;
//! 4. for DEL, GC and reclaim, the network's own nf_tables objects once it has no
//!    attachment left (`network_if_unused`).
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
//! (firewall/ports/), and reclaim's sweep of a legacy reservation that names no interface
//! (leaks/reclaim.rs).

use std::net::IpAddr;

use crate::addressing::{self, Assigned};
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::result::CniResult;
use crate::cni::{Error, Result};
use crate::config::{Config, Ipam};
use crate::firewall::{self, network, Removing, KINDS};
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
    crate::firewall::first_of(attachments(conf, vec![target]).errors)
}

/// Removes each target in the one order, sharing the sockets among them (GC and reclaim
/// may remove thousands). Never stops at an error.
pub fn attachments(conf: &Config, targets: Vec<Target>) -> Report {
    let mut report = Report::default();
    let mut failed = vec![false; targets.len()];
    // Until the reservations are freed: a put-back (a restore, an ADD after a flush) waits
    // for it, and then sees these gone (firewall::network::removal).
    let _removal = network::removal(conf);

    // 1. nf_tables, on one socket kept open until the end (see firewall::masquerade::remove:
    // closing it waits out the removal's RCU grace period, which the veth step overlaps),
    // and the ifbs, on the rtnetlink socket the veth step then uses.
    let mut nft = NftablesOnDemand::default();
    let mut nl = Netlink::open();
    for (t, failed) in targets.iter().zip(failed.iter_mut()) {
        let removed = remove_kinds(&mut nft, nl.as_mut().ok(), conf, t, &mut report.errors);
        *failed = !removed;
    }

    // The debug build's test hook: a removal held between its nf_tables step and its
    // veths, still holding the network's removal lock (tests/it/restore_removal.rs).
    crate::firewall::hold_for_test("ACADEMY_TEST_HOLD_REMOVAL");

    // 2. The veth pairs.
    match nl {
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

    // Tests only: a removal held with its veths gone and its reservations still held
    // (tests/it/failure/races.rs: an ADD meeting a GC there must fail).
    crate::firewall::hold_for_test("ACADEMY_TEST_HOLD_FREEING");

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

/// Step 4, for DEL, GC, reclaim and a failed ADD's undo: the network's own nf_tables
/// objects once it has no attachment left (firewall/network/). Healing and an ADD's
/// replacement of its own stale pair leave them: the ADD itself is an attachment.
pub fn network_if_unused(conf: &Config) -> Result<()> {
    // A lifecycle event, not news: nothing on stderr (quiet success).
    for what in network::release_if_unused(conf)? {
        crate::log::debug(format_args!(
            "network {} has no attachment left: deleted {what}",
            conf.name
        ));
    }
    Ok(())
}

/// Step 1 for one attachment: every kind's state it may have, each tried even when
/// another failed, whatever the config at hand enables (a key taken out since ADD must
/// not leave its state behind: each kind's look is one lookup when nothing is there).
/// False when one failed.
fn remove_kinds(
    nft: &mut NftablesOnDemand,
    nl: Option<&mut Netlink>,
    conf: &Config,
    t: &Target,
    errors: &mut Vec<Error>,
) -> bool {
    let before = errors.len();
    // GC, reclaim and healing found the attachment by its traces: the runtime arguments
    // they carry (portMappings) are not the attachment's, so the ports look by owner.
    let traced = matches!(
        t.reservations,
        Reservations::Indexed | Reservations::Locked(_)
    );
    // A container (DEL only) the reference chain made before `academy convert`.
    if let Reservations::Held(env) = &t.reservations {
        let removed = nft.get().map_err(Error::from).and_then(|n| {
            crate::firewall::reference::remove_leftovers(n, conf, &t.who, &env.netns)
        });
        errors.extend(removed.err());
    }
    // The store is read for the attachment's addresses only if a kind keeps state by
    // address for the network.
    let (address_state, addresses) =
        match firewall::keyed_on_addresses(nft, conf).and_then(|any| match any {
            true => addresses(conf, t).map(|a| (true, a)),
            false => Ok((false, Vec::new())),
        }) {
            Ok(found) => found,
            Err(e) => {
                errors.push(e);
                return false;
            }
        };
    let mut removing = Removing {
        conf,
        nft,
        nl,
        who: t.who,
        addresses: &addresses,
        address_state,
        traced,
    };
    for kind in KINDS {
        errors.extend(kind.remove(&mut removing).err());
    }
    errors.len() == before
}

/// The attachment's addresses, for the nf_tables step (which removes only elements that
/// name the attachment, so an address is a place to look, never a licence to delete).
/// Empty when unknown: the masquerade then looks for its owner in the sets.
fn addresses(conf: &Config, t: &Target) -> Result<Vec<IpAddr>> {
    match &t.reservations {
        Reservations::Assigned(_, assigned) => Ok(assigned.addresses()),
        Reservations::Locked(locked) => Ok(locked.iter().map(|l| l.address()).collect()),
        Reservations::Held(_) | Reservations::Indexed | Reservations::Kept => held(&t.who, conf),
    }
}

/// The attachment's addresses as DEL can learn them, cheapest source first.
fn held(who: &Attachment, conf: &Config) -> Result<Vec<IpAddr>> {
    if let Ipam::Builtin(b) = &conf.ipam {
        return Store::open(&b.data_dir, &conf.name)?.held_by(&who.holder());
    }
    if let Some(prev) = &conf.prev_result {
        if let Ok(result) = CniResult::from_json(prev) {
            return Ok(result.ips.iter().map(|ip| ip.address.ip()).collect());
        }
    }
    Ok(Vec::new())
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
