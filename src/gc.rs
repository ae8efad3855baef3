//! GC (CNI 1.1): release everything of this network that the runtime's list of valid
//! attachments does not name (an address freed while its veth lives on, or the reverse,
//! is the half-cleanup seed 004 warns about).
//!
//! Two parts. Every attachment academy finds a trace of (a host veth whose alias names
//! it, a holder index in the store) and the list does not name is removed whole, by the
//! one removal (removal.rs). Then what names no whole attachment is swept by kind:
//!
//! - a veth with academy's derived name but no alias (an ADD killed between creating
//!   the pair and labelling it), on this network's bridge;
//! - masquerade elements, published ports and the MAC filter elements of macspoofchk,
//!   whose comment is no valid attachment's, on one socket and in one shape (`sweep`);
//!   comments are capped by the kernel, so they are compared, never parsed back into an
//!   attachment;
//! - reservations no index names (host-local's on a shared store, legacy id-only files,
//!   an ADD killed before its index was written) and abandoned temp files;
//! - for a delegated IPAM, that plugin's own GC.
//!
//! GC trusts only the list. It never guesses liveness from other sources (a netns that
//! still exists, a recent file): Antrea freed in-use addresses by doing so. An empty list
//! is meaningful and frees everything; a missing list is refused.

use std::collections::{BTreeSet, HashSet};

use crate::addressing;
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::hostveth;
use crate::ipam::Store;
use crate::macspoof;
use crate::masquerade;
use crate::netlink::{stored_comment, Link, LinkKind, Netlink, Nftables, NlError};
use crate::portmap;
use crate::removal::{self, Reservations, Target};
use crate::wire;

pub fn gc(env: &Env, conf: &Config) -> Result<()> {
    let valid = conf.valid_attachments.as_ref().ok_or_else(|| {
        Error::config("GC needs cni.dev/valid-attachments in the network config").details(
            "an empty list frees everything; academy will not guess which attachments are live",
        )
    })?;
    let mut errors = Vec::new();

    let stale = stale_attachments(conf, valid, &mut errors);
    let targets = stale
        .iter()
        .map(|(cid, ifname)| Target {
            who: Attachment::new(&conf.name, cid, ifname),
            reservations: Reservations::Indexed,
        })
        .collect();
    let report = removal::attachments(conf, targets);
    for veth in &report.veths {
        eprintln!("academy: GC deleted host veth {veth}");
    }
    for (address, holder) in &report.freed {
        eprintln!("academy: GC released {address} (held by {holder})");
    }
    errors.extend(report.errors);

    match Netlink::open() {
        Ok(mut nl) => sweep_unlabelled(&mut nl, conf, valid, &mut errors),
        Err(e) => errors.push(e.into()),
    }
    sweep_nftables(conf, valid, &mut errors);
    addressing::gc(env, conf, &mut errors);

    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        n => {
            let code = errors[0].code;
            let all: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(Error::new(
                code,
                format!("GC finished with {n} errors: {}", all.join("; ")),
            ))
        }
    }
}

/// The attachments of this network that academy has a trace of and the list does not
/// name: host veths by alias, holder indexes in academy's store.
fn stale_attachments(
    conf: &Config,
    valid: &HashSet<(String, String)>,
    errors: &mut Vec<Error>,
) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    match Netlink::open().and_then(|mut nl| nl.links()) {
        Ok(links) => {
            for link in &links {
                if let Stale::Attachment(cid, ifname) =
                    stale(link, conf, None, valid, &HashSet::new())
                {
                    found.insert((cid, ifname));
                }
            }
        }
        Err(e) => errors.push(e.into()),
    }
    if let Some(b) = conf.builtin() {
        match Store::open(&b.data_dir, &conf.name).and_then(|s| s.indexed_holders()) {
            Ok(holders) => found.extend(holders.into_iter().map(|h| (h.container_id, h.ifname))),
            Err(e) => errors.push(e),
        }
    }
    found.retain(|a| !valid.contains(a));
    found
}

/// Deletes the unlabelled veths of this network (derived name, no alias, on its bridge)
/// whose attachment is not valid. An error on one link is recorded and the sweep goes on.
fn sweep_unlabelled(
    nl: &mut Netlink,
    conf: &Config,
    valid: &HashSet<(String, String)>,
    errors: &mut Vec<Error>,
) {
    let links = match nl.links() {
        Ok(l) => l,
        Err(e) => return errors.push(e.into()),
    };
    let bridge = links
        .iter()
        .find(|l| l.name == conf.bridge && l.kind == LinkKind::Bridge)
        .map(|l| l.index);
    let valid_names: HashSet<String> = valid
        .iter()
        .map(|(cid, ifname)| Attachment::new(&conf.name, cid, ifname).host_name())
        .collect();
    for link in &links {
        if stale(link, conf, bridge, valid, &valid_names) != Stale::Unlabelled {
            continue;
        }
        match wire::delete_if_present(nl, link.index) {
            Ok(_) => eprintln!("academy: GC deleted host veth {} (unlabelled)", link.name),
            Err(e) => errors.push(e.context(format!("GC could not delete {}", link.name))),
        }
    }
}

/// The by-kind sweeps of nf_tables, on one socket: masquerade elements, MAC filters and
/// published ports whose comment names no valid attachment.
fn sweep_nftables(conf: &Config, valid: &HashSet<(String, String)>, errors: &mut Vec<Error>) {
    let mut nft = match Nftables::open() {
        Ok(nft) => nft,
        Err(e) => return errors.push(e.into()),
    };
    let live = Live::of(conf, valid);
    masquerade::gc(&mut nft, conf, &live, errors);
    macspoof::gc(&mut nft, conf, &live.holders, errors);
    portmap::gc(&mut nft, conf, &live.ports, errors);
}

/// The comments the valid attachments' elements carry, as the kernel stores them (capped,
/// so compared whole and never parsed back into an attachment).
pub struct Live {
    /// `<container id>:<ifname>`: masquerade and MAC filter elements, in per-network sets.
    pub holders: HashSet<String>,
    /// `<network>:<container id>:<ifname>`: published ports, in maps every network shares.
    pub ports: HashSet<String>,
}

impl Live {
    fn of(conf: &Config, valid: &HashSet<(String, String)>) -> Live {
        let who = || {
            valid
                .iter()
                .map(|(cid, ifname)| Attachment::new(&conf.name, cid, ifname))
        };
        Live {
            holders: who().map(|w| stored_comment(&w.holder().key())).collect(),
            ports: who()
                .map(|w| stored_comment(&portmap::holder(&w)))
                .collect(),
        }
    }
}

/// One by-kind sweep: of the `found` elements, those whose comment is not `live` are
/// handed to `remove` in one call, then each is logged as `removed` words it. Errors are
/// collected; GC goes on.
pub fn sweep<E>(
    found: std::result::Result<Vec<E>, NlError>,
    live: &HashSet<String>,
    comment: impl Fn(&E) -> &str,
    remove: impl FnOnce(&[E]) -> std::result::Result<(), NlError>,
    removed: impl Fn(&E) -> String,
    errors: &mut Vec<Error>,
) {
    let stale: Vec<E> = match found {
        Ok(found) => found
            .into_iter()
            .filter(|e| !live.contains(comment(e)))
            .collect(),
        Err(e) => return errors.push(e.into()),
    };
    if stale.is_empty() {
        return;
    }
    match remove(&stale) {
        Ok(()) => stale
            .iter()
            .for_each(|e| eprintln!("academy: GC {}", removed(e))),
        Err(e) => errors.push(e.into()),
    }
}

/// What GC makes of a host link.
#[derive(Debug, PartialEq, Eq)]
enum Stale {
    Keep,
    /// A veth whose alias names an attachment of this network the list does not name.
    Attachment(String, String),
    /// A veth with no alias: an ADD was killed between creating the pair and labelling
    /// it. The pair was born attached to this network's bridge under a derived name,
    /// which is how it is recognised.
    Unlabelled,
}

fn stale(
    link: &Link,
    conf: &Config,
    bridge: Option<u32>,
    valid: &HashSet<(String, String)>,
    valid_names: &HashSet<String>,
) -> Stale {
    if link.kind != LinkKind::Veth {
        return Stale::Keep;
    }
    match link.alias.as_deref().map(hostveth::owner) {
        Some(Some((network, cid, ifname))) => {
            let key = (cid.to_string(), ifname.to_string());
            if network == conf.name && !valid.contains(&key) {
                Stale::Attachment(key.0, key.1)
            } else {
                Stale::Keep
            }
        }
        // Someone else's alias: not academy's.
        Some(None) => Stale::Keep,
        None if hostveth::is_derived_name(&link.name)
            && bridge.is_some()
            && link.controller == bridge
            && !valid_names.contains(&link.name) =>
        {
            Stale::Unlabelled
        }
        None => Stale::Keep,
    }
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
