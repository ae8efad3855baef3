//! Everything academy makes for one attachment, removed in one place: DEL, and the undo
//! of a failed ADD, both come here, so a new kind of state is added to one list.
//!
//! The order keeps two invariants: an address is not freed while a veth that used it
//! lives (another container could get it while the old pair still answers for it), and
//! a masquerade element never outlives its reservation (a reused address would carry
//! the old holder's element, which a later GC would remove from under the new one).
//! So: masquerade and published ports, then host veth, then the reservations. The masquerade goes before the
//! veth rather than after because its socket's close waits out an RCU grace period that
//! the veth deletion (itself slow) then overlaps: DEL with ipMasq took 23.4 ms against
//! 35.2 ms the other way round (medians of 40 interleaved runs). The price is that a
//! container being torn down sends its last packets, if any, unmasqueraded. A step that
//! fails stops the later ones; a repeated teardown (a DEL retried) finishes the job.

use std::net::IpAddr;

use crate::addressing::{self, Assigned};
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::result::CniResult;
use crate::cni::Result;
use crate::config::{Config, Ipam};
use crate::ipam::Store;
use crate::masquerade;
use crate::netlink::Netlink;
use crate::portmap;
use crate::wire::{self, PairRemoval};

/// Who is removing the attachment, which says how its addresses are known.
pub enum Removing<'a> {
    /// DEL looks them up: academy's store, a prevResult, or (last resort) the sets.
    Del,
    /// A failed ADD knows exactly what it was given, and the store it reserved in (which
    /// frees what it linked even if a racing GC took its holder index).
    FailedAdd(&'a Assigned),
}

pub fn attachment(env: &Env, conf: &Config, removing: Removing) -> Result<()> {
    let who = Attachment::of(env, conf);
    // Kept open until the end: see masquerade::Removal.
    let mut masquerade_socket = None;
    if conf.ip_masq {
        let addresses = match &removing {
            Removing::FailedAdd(assigned) => assigned.addresses(),
            Removing::Del => held(&who, conf)?,
        };
        let removal = masquerade_socket.insert(masquerade::Removal::open()?);
        removal.remove(conf, &addresses)?;
    }
    // Published ports go with the masquerade, before the address they point to is freed;
    // kept open like it.
    let mut portmap_socket = None;
    if conf.publishes_ports {
        let removal = portmap_socket.insert(portmap::Removal::open()?);
        removal.remove(conf, &who)?;
    }
    let mut nl = Netlink::open()?;
    // A foreign link under academy's derived name is not ours to delete, and must not
    // wedge the container in a DEL that can never succeed.
    if let PairRemoval::NotOurs(why) = wire::remove_pair(&mut nl, &who)? {
        eprintln!("academy: {why}");
    }
    match removing {
        Removing::FailedAdd(assigned) => addressing::undo(env, conf, assigned),
        Removing::Del => addressing::release(env, conf),
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
