//! The nf_tables state academy keeps, as one table of kinds.
//!
//! Each kind is state academy adds for its attachments and their networks: masquerade
//! elements (ipMasq), published ports (portMappings), the MAC filter (macspoofchk), the
//! bridge's FORWARD accepts, the network's isolation (ingressPolicy same-bridge), and the
//! bandwidth capability's traffic shaping (tc, not nf_tables, but per-attachment state all
//! the same: its operations ignore the nf_tables socket and open an rtnetlink one). Each
//! answers the same operations, one `match` each, so
//! a new kind is one variant here plus its module, and the compiler names every
//! operation it must answer:
//!
//! - `remove`: one attachment's state, by its owner comment (the one removal);
//! - `check`: what CHECK compares with what ADD reported;
//! - `sweep`: GC's removal of elements no valid attachment owns;
//! - `missing` / `restore`: what an admin's flush or a reload took that academy can see,
//!   and putting it back (STATUS, `academy restore`);
//! - `release`: the network's own objects (its rules, sets, maps, FORWARD accepts),
//!   deleted by network.rs once the network has no attachment left.
//!
//! The one removal, GC, CHECK, STATUS and the restore command loop over `KINDS` and name
//! no kind. ADD names its steps (verbs/add.rs), since their order matters there.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::attachment::Attachment;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::netlink::{Nftables, Object};

pub mod bandwidth;
pub mod forward;
pub mod isolation;
pub mod mac_filter;
pub mod masquerade;
pub mod network;
pub mod ports;
pub mod reference;
pub mod services;
pub mod tables;
mod wired;

pub use wired::Wired;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Masquerade,
    Ports,
    MacFilter,
    Forward,
    Bandwidth,
    Isolation,
}

/// Every kind, in the order the walks visit them.
pub const KINDS: [Kind; 6] = [
    Kind::Masquerade,
    Kind::Ports,
    Kind::MacFilter,
    Kind::Forward,
    Kind::Bandwidth,
    Kind::Isolation,
];

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Masquerade => "outbound NAT",
            Kind::Ports => "published ports",
            Kind::MacFilter => "MAC filter",
            Kind::Forward => "FORWARD accepts",
            Kind::Bandwidth => "bandwidth shaping",
            Kind::Isolation => "network isolation",
        })
    }
}

/// One attachment as the one removal knows it.
pub struct Removing<'a> {
    pub who: Attachment<'a>,
    /// Where its masquerade elements may be (empty when unknown).
    pub addresses: &'a [IpAddr],
    /// Found by its traces (GC, reclaim, healing): the config at hand may not be the one
    /// it was added with, so every kind looks by owner whatever the config says.
    pub traced: bool,
}

/// A difference CHECK found, and whether the restore command repairs it (state an
/// admin's flush took, rebuilt from the store and the links) or only DEL and ADD do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub text: String,
    pub restorable: bool,
}

/// The owner comments of GC's valid attachments, in both forms academy has written.
pub struct Live {
    owners: HashSet<String>,
}

impl Live {
    pub fn of(conf: &Config, valid: &HashSet<(String, String)>) -> Live {
        let mut owners = HashSet::new();
        for (cid, ifname) in valid {
            let who = Attachment::new(&conf.name, cid, ifname);
            owners.insert(who.owner());
            owners.insert(who.legacy_owner());
        }
        Live { owners }
    }

    pub fn owns(&self, comment: &str) -> bool {
        self.owners.contains(comment)
    }
}

impl Kind {
    /// Whether the network may hold state of this kind for an attachment.
    pub fn on(self, conf: &Config, traced: bool) -> bool {
        match self {
            // Its elements name addresses: without ipMasq none were ever added.
            Kind::Masquerade => conf.ip_masq,
            Kind::Ports => conf.publishes_ports || traced,
            // The entry's key, not a container's: the config at hand says it.
            Kind::MacFilter => conf.mac_spoof_check,
            // `shapes` is the entry's (its keys or its capability), whatever rates each
            // container's runtimeConfig asked for.
            Kind::Bandwidth => conf.shapes,
            Kind::Forward | Kind::Isolation => false, // nothing per attachment
        }
    }

    /// The one removal's first step for one attachment: its elements of this kind, only
    /// those whose comment names it.
    pub fn remove(self, nft: &mut Nftables, conf: &Config, r: &Removing) -> Result<()> {
        match self {
            Kind::Masquerade => masquerade::remove(nft, conf, r),
            Kind::Ports => ports::remove(nft, conf, r),
            Kind::MacFilter => mac_filter::remove(nft, conf, r),
            Kind::Bandwidth => bandwidth::remove(nft, conf, r),
            Kind::Forward | Kind::Isolation => Ok(()),
        }
    }

    /// CHECK: the differences between the kernel and what ADD reported.
    pub fn check(
        self,
        nft: &mut Nftables,
        conf: &Config,
        who: &Attachment,
        addresses: &[IpNetwork],
        mac: &str,
    ) -> Result<Vec<Diff>> {
        match self {
            Kind::Masquerade if conf.ip_masq => masquerade::check(nft, conf, who, addresses),
            Kind::Ports => ports::check(nft, conf, who, addresses),
            Kind::MacFilter if conf.mac_spoof_check => mac_filter::check(nft, conf, who, mac),
            Kind::Forward => forward::check(nft, conf),
            Kind::Bandwidth => bandwidth::check(nft, conf, who),
            Kind::Isolation => isolation::check(nft, conf),
            Kind::Masquerade | Kind::MacFilter => Ok(Vec::new()),
        }
    }

    /// GC: removes this network's elements of the kind that no valid attachment owns.
    /// Errors are collected; GC goes on.
    pub fn sweep(self, nft: &mut Nftables, conf: &Config, live: &Live, errors: &mut Vec<Error>) {
        match self {
            Kind::Masquerade => masquerade::sweep(nft, conf, live, errors),
            Kind::Ports => ports::sweep(nft, conf, live, errors),
            Kind::MacFilter => mac_filter::sweep(nft, conf, live, errors),
            Kind::Bandwidth => bandwidth::sweep(nft, conf, live, errors),
            Kind::Forward | Kind::Isolation => {}
        }
    }

    /// What of this kind the network should have and the kernel lacks (STATUS), in words.
    pub fn missing(self, nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Vec<String>> {
        match self {
            Kind::Masquerade => masquerade::nat::plan(nft, conf, wired).map(|r| r.missing),
            Kind::Ports => ports::missing(nft, conf, wired),
            Kind::MacFilter => mac_filter::missing(nft, conf, wired),
            Kind::Forward => forward::missing(nft, conf, wired),
            Kind::Bandwidth => bandwidth::missing(nft, conf, wired),
            Kind::Isolation => isolation::missing(nft, conf, wired),
        }
    }

    /// Puts back what `missing` names; returns it.
    pub fn restore(self, nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Vec<String>> {
        match self {
            Kind::Masquerade => masquerade::nat::restore(nft, conf, wired),
            Kind::Ports => ports::restore(nft, conf, wired),
            Kind::MacFilter => mac_filter::restore(nft, conf, wired),
            Kind::Forward => forward::restore(nft, conf, wired),
            Kind::Bandwidth => bandwidth::restore(nft, conf, wired),
            Kind::Isolation => isolation::restore(nft, conf, wired),
        }
    }

    /// The network's own objects of this kind, to delete with its last attachment; None
    /// while elements of the kind remain (another's, never a removal's to take: GC
    /// sweeps them first if their owner is gone).
    pub fn release(self, nft: &mut Nftables, conf: &Config) -> Result<Option<Vec<Object>>> {
        match self {
            Kind::Masquerade => masquerade::objects(nft, conf),
            Kind::Ports => ports::objects(nft, conf),
            Kind::MacFilter => mac_filter::objects(nft, conf),
            Kind::Forward => forward::objects(nft, conf).map(Some),
            Kind::Bandwidth => bandwidth::objects(nft, conf),
            Kind::Isolation => isolation::objects(nft, conf).map(Some),
        }
    }
}

/// STATUS and the restore command's look: what each kind finds missing of the network's
/// state, only the kinds that miss something.
pub fn missing(conf: &Config) -> Result<Vec<(Kind, Vec<String>)>> {
    let wired = Wired::read(conf)?;
    let mut nft = Nftables::open()?;
    let mut found = Vec::new();
    for kind in KINDS {
        let missing = kind.missing(&mut nft, conf, &wired)?;
        if !missing.is_empty() {
            found.push((kind, missing));
        }
    }
    Ok(found)
}

/// The restore command for one network: every kind puts back what it misses. Each kind
/// is tried even when another failed.
pub fn restore(conf: &Config) -> Result<Vec<(Kind, Vec<String>)>> {
    let wired = Wired::read(conf)?;
    let mut nft = Nftables::open()?;
    let mut restored = Vec::new();
    let mut errors = Vec::new();
    for kind in KINDS {
        match kind.restore(&mut nft, conf, &wired) {
            Ok(what) if what.is_empty() => {}
            Ok(what) => restored.push((kind, what)),
            Err(e) => errors.push(e),
        }
    }
    first_of(errors)?;
    Ok(restored)
}

/// The remedy CHECK and STATUS name for what a flush or a reload took.
pub const RESTORE_HINT: &str = "run `academy restore` (or `academy restore --conf-dir DIR`) to rebuild it from the store and the host's links; the next ADD on the network also repairs its rules";

/// The first error of a walk over the kinds, with the others in its details.
pub fn first_of(mut errors: Vec<Error>) -> Result<()> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => {
            let first = errors.remove(0);
            let rest: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(first.details(format!("also: {}", rest.join("; "))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind appears once in KINDS and every walk reaches it: the matches above
    /// have no default arm, so a new variant that is not answered does not compile, and
    /// this test fails when it is left out of the list the walks visit.
    #[test]
    fn every_kind_is_walked_once() {
        for kind in [
            Kind::Masquerade,
            Kind::Ports,
            Kind::MacFilter,
            Kind::Forward,
            Kind::Bandwidth,
            Kind::Isolation,
        ] {
            // The exhaustive match: a new variant must be added here too, which leads
            // to the list.
            match kind {
                Kind::Masquerade
                | Kind::Ports
                | Kind::MacFilter
                | Kind::Forward
                | Kind::Bandwidth
                | Kind::Isolation => {}
            }
            assert_eq!(KINDS.iter().filter(|k| **k == kind).count(), 1, "{kind}");
        }
    }
}
