//! GC (CNI 1.1): release everything of this network that the runtime's list of valid
//! attachments does not name: host veths, masquerade elements and reservations alike (an address freed while
//! its veth lives on, or the reverse, is the half-cleanup seed 004 warns about).
//!
//! GC trusts only that list. It never guesses liveness from other sources (a netns that
//! still exists, a recent file): Antrea freed in-use addresses by doing so. An empty list
//! is meaningful and frees everything; a missing list is refused.

use std::collections::HashSet;

use crate::addressing;
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::hostveth;
use crate::masquerade;
use crate::netlink::{Link, LinkKind, LinkRef, Netlink};
use crate::portmap;
use crate::wire;

pub fn gc(env: &Env, conf: &Config) -> Result<()> {
    let valid = conf.valid_attachments.as_ref().ok_or_else(|| {
        Error::config("GC needs cni.dev/valid-attachments in the network config").details(
            "an empty list frees everything; academy will not guess which attachments are live",
        )
    })?;
    let mut errors = Vec::new();

    match Netlink::open() {
        Ok(mut nl) => sweep_links(&mut nl, conf, valid, &mut errors),
        Err(e) => errors.push(e.into()),
    }

    // Before the addresses: an element never outlives its reservation.
    masquerade::gc(conf, valid, &mut errors);
    portmap::gc(conf, valid, &mut errors);
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

/// Deletes this network's host veths whose attachment is not valid. An error on one link
/// is recorded and the sweep goes on.
fn sweep_links(
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
    for link in links.iter().filter(|l| l.kind == LinkKind::Veth) {
        if !is_stale(link, conf, bridge, valid, &valid_names) {
            continue;
        }
        match wire::delete_if_present(nl, LinkRef::Index(link.index)) {
            Ok(_) => eprintln!(
                "academy: GC deleted host veth {} ({})",
                link.name,
                link.alias.as_deref().unwrap_or("unlabelled")
            ),
            Err(e) => errors.push(e.context(format!("GC could not delete {}", link.name))),
        }
    }
}

fn is_stale(
    link: &Link,
    conf: &Config,
    bridge: Option<u32>,
    valid: &HashSet<(String, String)>,
    valid_names: &HashSet<String>,
) -> bool {
    match link.alias.as_deref().map(hostveth::owner) {
        Some(Some((network, cid, ifname))) => {
            network == conf.name && !valid.contains(&(cid.to_string(), ifname.to_string()))
        }
        // Someone else's alias: not academy's.
        Some(None) => false,
        // No alias: an ADD was killed between creating the pair and labelling it. The
        // pair was born attached to this network's bridge under a derived name, which is
        // how it is recognised.
        None => {
            hostveth::is_derived_name(&link.name)
                && bridge.is_some()
                && link.controller == bridge
                && !valid_names.contains(&link.name)
        }
    }
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;
