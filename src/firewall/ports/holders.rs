//! Who holds a host port: the lookups and dumps that find an element's holder, the
//! conflicts between a hostIP mapping and a wildcard one, and the words that name a
//! holder in an error.

use std::collections::HashMap;
use std::time::Duration;

use super::elements::{port_element, PortMap};
use super::{key_text, PortElement, PortKey};
use crate::attachment::{container_of, Attachment};
use crate::cni::{code, Error, Result};
use crate::firewall::engine;
use crate::firewall::tables::ACADEMY;
use crate::ipam::store::files::{self, FileLock};
use crate::netlink::{Family, Nftables};

/// The elements under `keys` now, by key: the engine's element look of each map (a
/// lookup per key, or one dump of a map past a few), so any number of keys costs at
/// most four dumps.
pub(crate) fn held<'k>(
    nft: &mut Nftables,
    keys: impl IntoIterator<Item = &'k PortKey>,
) -> Result<HashMap<PortKey, PortElement>> {
    let mut by_map: Vec<(PortMap, Vec<Vec<u8>>)> = Vec::new();
    for key in keys {
        let map = key.map();
        match by_map.iter_mut().find(|(m, _)| *m == map) {
            Some((_, of_map)) => of_map.push(key.bytes()),
            None => by_map.push((map, vec![key.bytes()])),
        }
    }
    let mut found = HashMap::new();
    for (map, keys) in by_map {
        for raw in engine::elements_under(nft, ACADEMY, &map.name(), &keys)? {
            if let Some(e) = port_element(&raw, map) {
                found.insert(e.key.clone(), e);
            }
        }
    }
    Ok(found)
}

/// Whether `comment` names another attachment of the same container (podman passes the
/// same portMappings to every network of a container: its other networks' elements are
/// its own, not a conflict).
pub(crate) fn same_container(who: &Attachment, comment: &str) -> bool {
    !who.owns(comment) && container_of(comment) == Some(who.container_id)
}

/// Who holds the keys ADD's batch was refused for (EEXIST on publishing), in one look:
/// the first other container holding one (an error naming it), the keys the same
/// container holds on another network (left to it: see `resolve_published` in nat.rs),
/// and this attachment's own stale elements pointing elsewhere (to be removed).
pub(crate) struct Holders {
    pub conflict: Option<Error>,
    pub shared: Vec<PortElement>,
    pub stale: Vec<PortKey>,
}

pub(crate) fn holders(
    nft: &mut Nftables,
    who: &Attachment,
    ports: &[PortElement],
) -> Result<Holders> {
    let now = held(nft, ports.iter().map(|p| &p.key))?;
    let mut found = Holders {
        conflict: None,
        shared: Vec::new(),
        stale: Vec::new(),
    };
    for port in ports {
        let Some(held) = now.get(&port.key) else {
            continue;
        };
        let elsewhere = (held.address, held.port) != (port.address, port.port);
        if who.owns(&held.comment) {
            if elsewhere {
                found.stale.push(port.key.clone());
            }
        } else if same_container(who, &held.comment) {
            found.shared.push(held.clone());
        } else if elsewhere && found.conflict.is_none() {
            found.conflict = Some(taken_error(port, held));
        }
    }
    Ok(found)
}

/// The one check the kernel cannot make: a mapping with hostIP and one without, of the
/// same protocol and port, live in different maps, and the hostIP map wins on its
/// address. Held by different containers they are a conflict, whichever came first:
/// the second ADD fails with code 105 naming the holder. A hostIP key is looked up in
/// the map of every address (its one wildcard key); a wildcard key needs the hostIP map
/// of its family dumped (any address may hold it; that map holds only hostIP mappings,
/// usually few). Called under `publish_lock`, so no other ADD publishes in between.
pub(crate) fn cross_conflict(
    nft: &mut Nftables,
    who: &Attachment,
    ports: &[PortElement],
) -> Result<Option<Error>> {
    Ok(cross_held(nft, who, ports)?
        .first()
        .map(|(port, holder)| taken_error(port, holder)))
}

/// Each of `ports` another container holds in the other map than its own (see
/// `cross_conflict`), with the holder's element: ADD refuses the first, the restore
/// leaves each out and says so.
pub(crate) fn cross_held(
    nft: &mut Nftables,
    who: &Attachment,
    ports: &[PortElement],
) -> Result<Vec<(PortElement, PortElement)>> {
    let wildcard_of = |k: &PortKey| PortKey {
        host_ip: None,
        ..k.clone()
    };
    let mut found = Vec::new();
    let specific: Vec<&PortElement> = ports.iter().filter(|p| p.key.host_ip.is_some()).collect();
    let wildcards: Vec<PortKey> = specific.iter().map(|p| wildcard_of(&p.key)).collect();
    let now = held(nft, &wildcards)?;
    for (port, wildcard) in specific.iter().zip(&wildcards) {
        if let Some(holder) = now.get(wildcard) {
            if other_container(who, &holder.comment) {
                found.push(((*port).clone(), holder.clone()));
            }
        }
    }
    for family in [Family::V4, Family::V6] {
        let mine: Vec<&PortElement> = ports
            .iter()
            .filter(|p| p.key.host_ip.is_none() && p.key.family == family)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut by_port: HashMap<(u8, u16), PortElement> = HashMap::new();
        for e in nft.port_elements_of(family, true)? {
            if other_container(who, &e.comment) {
                by_port
                    .entry((e.key.protocol, e.key.host_port))
                    .or_insert(e);
            }
        }
        for port in mine {
            if let Some(holder) = by_port.get(&(port.key.protocol, port.key.host_port)) {
                found.push((port.clone(), holder.clone()));
            }
        }
    }
    Ok(found)
}

/// Whether `comment` names another container than `who`'s.
pub(crate) fn other_container(who: &Attachment, comment: &str) -> bool {
    !who.owns(comment) && container_of(comment) != Some(who.container_id)
}

/// The host's lock on publishing: `cross_conflict`'s look and ADD's batch are one step
/// for every other publishing ADD (the kernel's EEXIST covers one map, not two). Held
/// for the batch only, by ADDs that publish; best effort like the repair lock: without
/// /run, or after 5 s, ADD goes on unlocked.
pub(crate) fn publish_lock() -> Option<FileLock> {
    files::host_lock(PUBLISH_LOCK, Duration::from_secs(5))
}

const PUBLISH_LOCK: &str = "/run/academy-ports.lock";

/// The error of a port another container holds: 105, naming the holder.
pub(crate) fn taken_error(port: &PortElement, held: &PortElement) -> Error {
    let mut msg = format!(
        "host port {} is already published by {}",
        key_text(&port.key),
        describe_holder(&held.comment)
    );
    if held.key != port.key {
        msg.push_str(&format!(" as {}", key_text(&held.key)));
    }
    Error::new(code::PORT_TAKEN, msg).details(format!(
        "it goes to {} port {}; remove that container or publish another host port",
        held.address, held.port
    ))
}

/// "container C (interface I, network N)" from a comment, or the comment as it is.
pub(crate) fn describe_holder(comment: &str) -> String {
    let mut parts = comment.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(network), Some(cid), Some(ifname)) => {
            // The network's key: its name's first bytes, then '#' and a digest.
            let network = network.split('#').next().unwrap_or(network);
            format!("container {cid} (interface {ifname}, network {network})")
        }
        _ => format!("{comment:?}"),
    }
}
