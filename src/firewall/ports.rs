//! Publishing ports (capability `portMappings`): each mapping becomes one element of a
//! shared nf_tables map, (host address,) protocol, host port to container address and
//! port, named after its attachment. What academy creates in nf_tables is described in
//! netlink/nftables/portmap.rs; this module decides what goes in and who holds it.
//!
//! ADD sends the attachment's masquerade elements and its ports in one batch, so one
//! sendmsg and all or nothing: a port another attachment holds fails the batch, and the
//! ADD with it, naming the holder. Every removal (DEL, GC, reclaim, a failed ADD)
//! removes only elements whose comment names its attachment: the kernel deletes by key
//! alone, and the key may by then be another container's.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use ipnetwork::IpNetwork;
use nix::fcntl::Flock;

use super::{Diff, Live, Removing, Wired};
use crate::attachment::Attachment;
use crate::cni::{code, Error, Result};
use crate::config::{Config, PortMapping};
use crate::ipam::store::files;
use crate::netlink::{
    flush_udp_conntrack, key_text, Family, Flushed, Nftables, Object, PortElement, PortKey,
    UdpDestination,
};

const IPPROTO_UDP: u8 = 17;

/// Deletes the conntrack entries of datagrams sent to the UDP ports just published
/// before they were (to the host itself, or to a container that held the port before):
/// while their client keeps sending, its datagrams would follow the entry and never
/// reach this container (src/netlink/conntrack.rs). After the batch, so that no
/// datagram between the two makes a new stale entry.
///
/// A failure is logged and ADD goes on, as the reference portmap does: the ports are
/// published and every new flow reaches the container; failing would undo a working
/// container for the sake of the clients that were already sending, and a retried ADD
/// would most likely meet the same refusal.
pub(super) fn flush_stale_udp(ports: &[PortElement]) {
    let udp: Vec<UdpDestination> = ports
        .iter()
        .filter(|p| p.key.protocol == IPPROTO_UDP)
        .map(|p| UdpDestination {
            family: p.key.family,
            address: p.key.host_ip,
            port: p.key.host_port,
        })
        .collect();
    if udp.is_empty() {
        return;
    }
    match flush_udp_conntrack(&udp) {
        Ok(Flushed::Deleted(0) | Flushed::Unavailable) => {}
        Ok(Flushed::Deleted(n)) => {
            eprintln!("academy: deleted {n} stale conntrack entries of the published udp ports")
        }
        Err(e) => eprintln!(
            "academy: warning: stale udp conntrack entries may remain (their clients may not reach the container until they pause): {}",
            Error::from(e)
        ),
    }
}

/// Keys looked up one by one before one dump of their map is cheaper (a lookup and a
/// dump are one round trip each; a dump's cost grows with what the map holds).
const LOOKUPS_BEFORE_DUMP: usize = 16;

/// The elements under `keys` now, by key: each looked up when a map has few of them,
/// else from one dump of that map, so any number of keys costs at most four dumps.
fn held<'k>(
    nft: &mut Nftables,
    keys: impl IntoIterator<Item = &'k PortKey>,
) -> Result<HashMap<PortKey, PortElement>> {
    let mut by_map: HashMap<(Family, bool), Vec<&PortKey>> = HashMap::new();
    for key in keys {
        by_map
            .entry((key.family, key.host_ip.is_some()))
            .or_default()
            .push(key);
    }
    let mut found = HashMap::new();
    for ((family, by_host_ip), keys) in by_map {
        if keys.len() <= LOOKUPS_BEFORE_DUMP {
            for key in keys {
                if let Some(e) = nft.port_element(key)? {
                    found.insert(key.clone(), e);
                }
            }
        } else {
            let wanted: HashSet<&PortKey> = keys.into_iter().collect();
            for e in nft.port_elements_of(family, by_host_ip)? {
                if wanted.contains(&e.key) {
                    found.insert(e.key.clone(), e);
                }
            }
        }
    }
    Ok(found)
}

/// The container id a holder's comment `<network>:<container id>:<ifname>` names, when
/// it names one whole (a capped comment may have lost it: then it names none).
fn container_of(comment: &str) -> Option<&str> {
    let mut parts = comment.splitn(3, ':');
    let (_network, cid, _ifname) = (parts.next()?, parts.next()?, parts.next()?);
    Some(cid)
}

/// Whether `comment` names another attachment of the same container (podman passes the
/// same portMappings to every network of a container: its other networks' elements are
/// its own, not a conflict).
fn same_container(who: &Attachment, comment: &str) -> bool {
    comment != who.owner() && container_of(comment) == Some(who.container_id)
}

/// Who holds the keys ADD's batch was refused for (EEXIST on publishing), in one look:
/// the first other container holding one (an error naming it), the keys the same
/// container holds on another network (left to it: see `resolve_published` in nat.rs),
/// and this attachment's own stale elements pointing elsewhere (to be removed).
pub(super) struct Holders {
    pub conflict: Option<Error>,
    pub shared: Vec<PortElement>,
    pub stale: Vec<PortKey>,
}

pub(super) fn holders(
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
        if held.comment == port.comment {
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
pub(super) fn cross_conflict(
    nft: &mut Nftables,
    who: &Attachment,
    ports: &[PortElement],
) -> Result<Option<Error>> {
    let wildcard_of = |k: &PortKey| PortKey {
        host_ip: None,
        ..k.clone()
    };
    let specific: Vec<&PortElement> = ports.iter().filter(|p| p.key.host_ip.is_some()).collect();
    let wildcards: Vec<PortKey> = specific.iter().map(|p| wildcard_of(&p.key)).collect();
    let now = held(nft, &wildcards)?;
    for (port, wildcard) in specific.iter().zip(&wildcards) {
        if let Some(holder) = now.get(wildcard) {
            if other_container(who, &holder.comment) {
                return Ok(Some(taken_error(port, holder)));
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
                return Ok(Some(taken_error(port, holder)));
            }
        }
    }
    Ok(None)
}

/// Whether `comment` names another container than `who`'s.
fn other_container(who: &Attachment, comment: &str) -> bool {
    comment != who.owner() && container_of(comment) != Some(who.container_id)
}

/// The host's lock on publishing: `cross_conflict`'s look and ADD's batch are one step
/// for every other publishing ADD (the kernel's EEXIST covers one map, not two). Held
/// for the batch only, by ADDs that publish; best effort like the repair lock: without
/// /run, or after 5 s, ADD goes on unlocked.
pub(super) fn publish_lock() -> Option<Flock<File>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(PUBLISH_LOCK)
        .ok()?;
    files::lock_exclusive(file, Duration::from_secs(5)).ok()
}

const PUBLISH_LOCK: &str = "/run/academy-ports.lock";

/// The elements ADD publishes for the runtime's mappings. A hostIP of a family the
/// container has no address of could never be published: refused (code 7), never
/// silently left out.
pub(super) fn elements(
    conf: &Config,
    who: &Attachment,
    addresses: &[IpNetwork],
) -> Result<Vec<PortElement>> {
    elements_of(mappings(conf), who, addresses)
}

/// The elements of `mappings` for the container's addresses: a mapping without hostIP
/// answers in every family the container has, one with a hostIP in that one's family.
fn elements_of(
    mappings: &[PortMapping],
    who: &Attachment,
    addresses: &[IpNetwork],
) -> Result<Vec<PortElement>> {
    let comment = who.owner();
    let mut found = Vec::new();
    let mut keys = HashSet::new();
    for (i, m) in mappings.iter().enumerate() {
        if let Some(h) = m.host_ip {
            if !addresses
                .iter()
                .any(|a| Family::of(a.ip()) == Family::of(h))
            {
                return Err(unpublishable(i, h, who, addresses));
            }
        }
        for address in addresses.iter().map(IpNetwork::ip) {
            let family = Family::of(address);
            if m.host_ip.is_some_and(|h| Family::of(h) != family) {
                continue;
            }
            let key = key(m, family);
            if !keys.insert(key.clone()) {
                continue; // a second address of the family: the first one takes the port
            }
            found.push(PortElement {
                key,
                address,
                port: m.container_port,
                comment: comment.clone(),
            });
        }
    }
    Ok(found)
}

/// A mapping whose hostIP is of a family the container has no address of.
fn unpublishable(i: usize, host_ip: IpAddr, who: &Attachment, addresses: &[IpNetwork]) -> Error {
    let (family, other) = match host_ip {
        IpAddr::V4(_) => ("IPv4", "IPv6"),
        IpAddr::V6(_) => ("IPv6", "IPv4"),
    };
    let has: Vec<String> = addresses.iter().map(|a| a.ip().to_string()).collect();
    let has = match has.is_empty() {
        true => "no address".to_string(),
        false => has.join(", "),
    };
    let what = match host_ip.is_unspecified() {
        true => format!("hostIP {host_ip} asks for {family} only"),
        false => format!("hostIP {host_ip} is an {family} address"),
    };
    Error::config(format!(
        "runtimeConfig.portMappings[{i}]: {what}, and the container has no {family} address on network {} ({has}): academy cannot publish it",
        who.network
    ))
    .details(format!(
        "give a hostIP of the network's family ({other}), leave hostIP out to publish on every host address, or give the network an {family} range"
    ))
}

/// The runtime's mappings, none when it sent none.
fn mappings(conf: &Config) -> &[PortMapping] {
    conf.port_mappings.as_deref().unwrap_or_default()
}

fn key(m: &PortMapping, family: Family) -> PortKey {
    PortKey {
        family,
        protocol: m.protocol,
        host_ip: m.host_ip.filter(|h| !h.is_unspecified()),
        host_port: m.host_port,
    }
}

/// Traffic to 127.0.0.1:hostPort is sent on to the container with its source kept; the
/// kernel drops a packet from 127.0.0.0/8 leaving by an interface without
/// route_localnet (the reference portmap sets it on the same interface). The bridge's
/// loopback guard comes first: with route_localnet, a container's frame to 127.0.0.1
/// would otherwise reach the host's services bound there (netlink/nftables/localnet.rs).
pub(super) fn allow_localhost(nft: &mut Nftables, bridge: &str) -> Result<()> {
    let lock = super::network::repair_lock;
    // A release deleting the table between the look and the batch: look again.
    match nft.ensure_localnet(bridge, lock) {
        Err(e) if e.is(libc::ENOENT) => nft.ensure_localnet(bridge, lock).map(drop)?,
        other => other.map(drop)?,
    }
    let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
    if std::fs::read(&path).is_ok_and(|v| v.starts_with(b"1")) {
        return Ok(());
    }
    std::fs::write(&path, "1").map_err(|e| Error::io(format!("cannot write 1 to {path}"), &e))
}

/// Whether `bridge` routes 127.0.0.0/8 (route_localnet), and so needs its loopback guard.
fn localnet_on(bridge: &str) -> bool {
    let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
    std::fs::read(path).is_ok_and(|v| v.starts_with(b"1"))
}

/// What of `bridge`'s loopback guard nf_tables lacks, in words (CHECK, STATUS).
fn localnet_missing(nft: &mut Nftables, bridge: &str) -> Result<Vec<String>> {
    let open = "its containers can reach the host's services bound to 127.0.0.1";
    let rule = |r: String| {
        format!("the loopback guard's rule {r:?} is missing from nf_tables table inet academy: bridge {bridge} routes 127.0.0.0/8, and {open}")
    };
    let mut missing: Vec<String> = nft
        .missing_localnet_rules()?
        .into_iter()
        .map(rule)
        .collect();
    if !nft.has_localnet(bridge)? {
        missing.push(format!(
            "bridge {bridge} is missing from nf_tables set inet academy _localnet: {open}"
        ));
    }
    Ok(missing)
}

/// The error of a port another container holds: 105, naming the holder.
fn taken_error(port: &PortElement, held: &PortElement) -> Error {
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
fn describe_holder(comment: &str) -> String {
    let mut parts = comment.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(network), Some(cid), Some(ifname)) => {
            format!("container {cid} (interface {ifname}, network {network})")
        }
        _ => format!("{comment:?}"),
    }
}

/// The one removal's step for published ports: only elements whose comment names the
/// attachment. With the runtime's mappings at hand (DEL, a failed ADD), each key is
/// looked up (both families: the addresses may be gone); an attachment found by its
/// traces (GC, reclaim, healing) or a DEL without mappings is searched for by its owner
/// in every map, whatever mappings the caller's config carries (a healer's are its own).
/// A runtime that sent an empty list is believed: GC sweeps what it forgot.
pub fn remove(nft: &mut Nftables, conf: &Config, r: &Removing) -> Result<()> {
    let mine = r.who.owner();
    let keys: Vec<PortKey> = match &conf.port_mappings {
        // The runtime says there were none (containerd sends an empty list for a
        // pod without hostPort): nothing to look for.
        Some(known) if known.is_empty() && !r.traced => return Ok(()),
        Some(known) if !r.traced => {
            let mut candidates = Vec::new();
            let mut seen = HashSet::new();
            for m in known {
                for family in [Family::V4, Family::V6] {
                    if m.host_ip.is_some_and(|h| Family::of(h) != family) {
                        continue;
                    }
                    let key = key(m, family);
                    if seen.insert(key.clone()) {
                        candidates.push(key);
                    }
                }
            }
            let now = held(nft, &candidates)?;
            candidates
                .into_iter()
                .filter(|k| now.get(k).is_some_and(|e| e.comment == mine))
                .collect()
        }
        _ => nft
            .port_elements()?
            .into_iter()
            .filter(|e| e.comment == mine)
            .map(|e| e.key)
            .collect(),
    };
    if keys.is_empty() {
        return Ok(());
    }
    Ok(nft.delete_port_elements(&keys)?)
}

/// GC: removes the network's published ports whose owner is not live. The maps are
/// shared by every network: only elements naming this one are looked at.
pub fn sweep(nft: &mut Nftables, conf: &Config, live: &Live, errors: &mut Vec<Error>) {
    let prefix = format!("{}:", conf.name);
    let stale: Vec<PortElement> = match nft.port_elements() {
        Ok(all) => all
            .into_iter()
            .filter(|e| e.comment.starts_with(&prefix) && !live.owns(&e.comment))
            .collect(),
        Err(e) => return errors.push(e.into()),
    };
    if stale.is_empty() {
        return;
    }
    let keys: Vec<PortKey> = stale.iter().map(|e| e.key.clone()).collect();
    match nft.delete_port_elements(&keys) {
        Ok(()) => {
            for e in stale.iter().take(LOGGED) {
                eprintln!(
                    "academy: GC unpublished host port {} (held by {})",
                    key_text(&e.key),
                    e.comment
                );
            }
            if stale.len() > LOGGED {
                eprintln!(
                    "academy: GC unpublished {} more host ports of network {}",
                    stale.len() - LOGGED,
                    conf.name
                );
            }
        }
        Err(e) => errors.push(e.into()),
    }
}

/// Lines a verb writes about single ports before it counts the rest.
pub(super) const LOGGED: usize = 8;

/// CHECK: each mapping is in its map, held by this attachment, going to its address,
/// and port mapping's rules are all there (an admin's flush of the chains keeps the
/// maps, and the restore command puts the rules back).
pub fn check(
    nft: &mut Nftables,
    conf: &Config,
    who: &Attachment,
    addresses: &[IpNetwork],
) -> Result<Vec<Diff>> {
    let wanted = elements(conf, who, addresses)?;
    let mut diffs = Vec::new();
    if wanted.is_empty() {
        return Ok(diffs);
    }
    let mut diff = |text: String| {
        diffs.push(Diff {
            text,
            restorable: false,
        })
    };
    let now = held(nft, wanted.iter().map(|w| &w.key))?;
    for want in &wanted {
        let text = key_text(&want.key);
        match now.get(&want.key) {
            None => diff(format!("host port {text} is not published")),
            // The same container's on another of its networks: that one serves it.
            Some(held) if same_container(who, &held.comment) => {}
            Some(held) if held.comment != want.comment => diff(format!(
                "host port {text} is published by {}",
                describe_holder(&held.comment)
            )),
            Some(held) if (held.address, held.port) != (want.address, want.port) => diff(format!(
                "host port {text} goes to {} port {} instead of {} port {}",
                held.address, held.port, want.address, want.port
            )),
            Some(_) => {}
        }
    }
    for rule in nft.missing_portmap_rules()? {
        diffs.push(Diff {
            text: format!(
                "port mapping's rule {rule:?} is missing from nf_tables table inet academy"
            ),
            restorable: true,
        });
    }
    if !nft.has_hairpin(&conf.bridge)? {
        diffs.push(Diff {
            text: format!(
                "bridge {} is missing from nf_tables set inet academy _hairpin: its containers cannot reach each other's published ports",
                conf.bridge
            ),
            restorable: true,
        });
    }
    if localnet_on(&conf.bridge) {
        let texts = localnet_missing(nft, &conf.bridge)?;
        diffs.extend(texts.into_iter().map(|text| Diff {
            text,
            restorable: true,
        }));
    }
    Ok(diffs)
}

/// STATUS: port mapping's rules, when this network publishes ports that are still in
/// the maps (after a deletion of the table the maps are gone too, and each container's
/// ports come back with its next ADD: academy keeps no other record of them).
pub fn missing(nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    if wired.attachments.is_empty() {
        return Ok(missing);
    }
    if published_here(nft, conf)? || super::services::need_hairpin(conf) {
        let rules = nft.missing_portmap_rules()?;
        if !rules.is_empty() {
            missing.push(format!("port mapping's rules ({} of them)", rules.len()));
        }
        if !nft.has_hairpin(&conf.bridge)? {
            missing.push(format!("the hairpin mark of bridge {}", conf.bridge));
        }
    }
    // The bridge routes 127.0.0.0/8 as long as route_localnet is on, ports or not (after
    // a deletion of the table, its ports are gone and the bridge is still open).
    if localnet_on(&conf.bridge) {
        missing.extend(localnet_missing(nft, &conf.bridge)?);
    }
    Ok(missing)
}

/// Whether the maps hold a port of this network.
fn published_here(nft: &mut Nftables, conf: &Config) -> Result<bool> {
    let prefix = format!("{}:", conf.name);
    Ok(nft
        .port_elements()?
        .iter()
        .any(|e| e.comment.starts_with(&prefix)))
}

/// Puts port mapping's rules back (and the bridge's hairpin mark and loopback guard)
/// when `missing` names them.
pub fn restore(nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Vec<String>> {
    let missing = missing(nft, conf, wired)?;
    if missing.is_empty() {
        return Ok(missing);
    }
    let _lock = super::network::repair_lock();
    if published_here(nft, conf)? || super::services::need_hairpin(conf) {
        nft.ensure_portmap()?;
        nft.mark_hairpin(&conf.bridge)?;
    }
    if localnet_on(&conf.bridge) {
        nft.ensure_localnet(&conf.bridge, || ())?; // the repair lock is held
    }
    Ok(missing)
}

/// The network's own objects in the shared sets, its bridge's hairpin mark and loopback
/// guard, once none of its ports is published. The bridge then has no port, and gives
/// up route_localnet with its guard: a container attached later without a published
/// port (so without the guard) must not find 127.0.0.0/8 routed.
pub fn objects(nft: &mut Nftables, conf: &Config) -> Result<Option<Vec<Object>>> {
    if !conf.publishes_ports && !conf.is_gateway {
        return Ok(Some(Vec::new()));
    }
    if published_here(nft, conf)? {
        return Ok(None);
    }
    let mut objects = Vec::new();
    // Set for published ports, or for Services (services.rs).
    if nft.has_hairpin(&conf.bridge)? {
        objects.push(Object::Hairpin(conf.bridge.clone()));
    }
    if conf.publishes_ports && localhost_off(&conf.bridge) {
        objects.push(Object::Localnet(conf.bridge.clone()));
    }
    Ok(Some(objects))
}

/// route_localnet back to 0 on `bridge`; whether it is off (or the bridge gone). A
/// failure is said on stderr, and the guard stays.
fn localhost_off(bridge: &str) -> bool {
    if !localnet_on(bridge) {
        return true;
    }
    let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
    match std::fs::write(&path, "0") {
        Ok(()) => true,
        Err(e) => {
            eprintln!("academy: warning: cannot write 0 to {path}, so bridge {bridge} keeps its loopback guard: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn mapping(host_port: u16, host_ip: Option<&str>) -> PortMapping {
        PortMapping {
            host_port,
            container_port: 80,
            protocol: 6,
            host_ip: host_ip.map(|h| h.parse::<IpAddr>().unwrap()),
        }
    }

    #[test]
    fn each_mapping_answers_in_the_families_it_may() {
        let who = Attachment::new("net", "c1", "eth0");
        let addresses: Vec<IpNetwork> = vec![
            "10.1.0.5/24".parse().unwrap(),
            "fd00::5/64".parse().unwrap(),
        ];
        let got = elements_of(
            &[
                mapping(8080, None),
                mapping(8081, Some("10.0.0.1")),
                mapping(8082, Some("::")),
            ],
            &who,
            &addresses,
        )
        .unwrap();
        let summary: Vec<String> = got
            .iter()
            .map(|e| format!("{} {} {}", key_text(&e.key), e.address, e.comment))
            .collect();
        assert_eq!(
            summary,
            [
                "tcp/8080 (v4) 10.1.0.5 net:c1:eth0",
                "tcp/8080 (v6) fd00::5 net:c1:eth0",
                "tcp/10.0.0.1:8081 10.1.0.5 net:c1:eth0",
                "tcp/8082 (v6) fd00::5 net:c1:eth0",
            ]
        );
        assert_eq!(
            describe_holder("net:c1:eth0"),
            "container c1 (interface eth0, network net)"
        );
    }
}
