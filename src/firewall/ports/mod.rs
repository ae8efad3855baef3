//! Publishing ports (capability `portMappings`): each mapping becomes one element of a
//! shared nf_tables map, (host address,) protocol, host port to container address and
//! port, named after its attachment. What academy creates in nf_tables is described in
//! nft.rs (maps, chains, rules), rules.rs (their expressions), elements.rs
//! (keys and values) and guard.rs (the loopback guard); this module decides what goes in and who holds it.
//! lost.rs finds the ports a flush took, from the runtime records ADD wrote
//! (src/ipam/store/runtime.rs), for STATUS and the restore; wants.rs reads the same
//! records node-wide when ADD finds the maps re-made, so a flush never frees a running
//! container's port for another.
//!
//! ADD sends the attachment's masquerade elements and its ports in one batch, so one
//! sendmsg and all or nothing: a port another attachment holds fails the batch, and the
//! ADD with it, naming the holder. Every removal (DEL, GC, reclaim, a failed ADD)
//! removes only elements whose comment names its attachment: the kernel deletes by key
//! alone, and the key may by then be another container's.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::engine::{self, AttachmentSet, Want};
use super::{Adding, Checking, Diff, Looking, Releasing, Removing, Repair};
use crate::attachment::{of_network, Attachment};
use crate::cni::{Error, Result};
use crate::config::{Config, PortMapping};
use crate::netlink::{flush_udp_conntrack, Family, Flushed, Nftables, Object, UdpDestination};

mod holders;
mod localnet;
mod lost;
mod wants;

use holders::*;
pub(super) use holders::{cross_conflict, holders, publish_lock};
pub(super) use localnet::allow_localhost;
use localnet::*;
use wants::{no_removals_beside, node_wants, put_back_wants, wanted_by_other};

mod elements;
mod guard;
mod nft;
mod rules;
pub mod services;

pub use elements::{key_text, PortElement, PortKey};
use elements::{port_element, PortMap};
use guard::{localnet_guard, localnet_rules};
pub use nft::{hairpin_mark, port_changes, portmap_rules};

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
            // A repair: a client's entries the kernel kept toward a gone container
            // would misdirect its flow (rare; one line).
            eprintln!("academy: deleted {n} stale conntrack entries of the published udp ports")
        }
        Err(e) => eprintln!(
            "academy: warning: stale udp conntrack entries may remain (their clients may not reach the container until they pause): {}",
            Error::from(e)
        ),
    }
}

/// ADD, for the one batch: the attachment's ports (none: nothing), after the bridge's
/// loopback guard when an IPv4 port is among them (route_localnet goes on with it), and
/// under the host's publish lock, held until the batch is in, once no port is found held
/// in the map the kernel does not compare (a hostIP mapping against the ports published
/// on every address, and the reverse: `cross_conflict`).
pub fn add(a: &mut Adding) -> Result<()> {
    let published = elements(a.conf, a.who, a.addresses)?;
    if published.is_empty() {
        return Ok(());
    }
    let nft = a.nft.get()?;
    a.batch.publish_lock = publish_lock();
    // Port mapping's maps and rules as an admin's flush may have left them and, with an
    // IPv4 port, the bridge's loopback guard, before route_localnet goes on: one look
    // (one dump of the table) and, only when something lacks, one batch.
    let routed = a.conf.routed_interface();
    let v4 = published.iter().any(|p| p.key.family == Family::V4);
    let mut objects = vec![portmap_rules()];
    if v4 {
        objects.extend([localnet_rules(&routed), localnet_guard(&routed)]);
    }
    let remade = engine::complete(nft, &objects)?
        .put_back
        .contains(&objects[0]);
    if v4 {
        allow_localhost(&routed)?;
    }
    // A flush took the maps with the other containers' ports: the maps cannot say who
    // holds what, their records can (wants.rs). Read only then, so a steady ADD reads
    // no record but its own; and what the records ask for is put back at once, so the
    // next ADD finds it in the maps (this one may not be the one that conflicts).
    let wants = match remade {
        false => Vec::new(),
        true => {
            // The removal locks come before the publish lock (the restore's order).
            a.batch.publish_lock = None;
            let _no_removals = no_removals_beside(a.conf);
            a.batch.publish_lock = publish_lock();
            let wants = node_wants(a.conf, a.nl)?;
            put_back_wants(nft, a.conf, a.who, &wants);
            wants
        }
    };
    if let Some(conflict) = cross_conflict(nft, a.who, &published)? {
        return Err(conflict);
    }
    if let Some((port, holder)) = wanted_by_other(a.who, &published, &wants) {
        return Err(taken_error(&port, holder));
    }
    a.batch.ports = published;
    Ok(())
}

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
    if mappings.is_empty() {
        // The usual ADD: no HashSet, so no seeding of its hasher (a getrandom).
        return Ok(Vec::new());
    }
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

/// The one removal's step for published ports: only elements whose comment names the
/// attachment. With the runtime's mappings at hand (DEL, a failed ADD), each key is
/// looked up (both families: the addresses may be gone); an attachment found by its
/// traces (GC, reclaim, healing) or a DEL without mappings is searched for by its owner
/// in every map, whatever mappings the caller's config carries (a healer's are its own).
/// A runtime that sent an empty list is believed: GC sweeps what it forgot.
pub fn remove(r: &mut Removing) -> Result<()> {
    let conf = r.conf;
    let maps = attachment_sets(conf);
    let maps = match &conf.port_mappings {
        // The runtime says there were none (containerd sends an empty list for a
        // pod without hostPort): nothing to look for.
        Some(known) if known.is_empty() && !r.traced => return Ok(()),
        Some(known) if !r.traced => {
            let mut keys: Vec<PortKey> = Vec::new();
            for m in known {
                for family in [Family::V4, Family::V6] {
                    if m.host_ip.is_some_and(|h| Family::of(h) != family) {
                        continue;
                    }
                    let key = key(m, family);
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
            let keyed = PortMap::ALL.into_iter().zip(maps).filter_map(|(map, set)| {
                let of_map: Vec<Vec<u8>> = keys
                    .iter()
                    .filter(|k| k.map() == map)
                    .map(PortKey::bytes)
                    .collect();
                (!of_map.is_empty()).then(|| set.only(of_map))
            });
            keyed.collect()
        }
        _ => maps,
    };
    // Its ports were always written with a network: the legacy form is not theirs.
    let mine = [r.who.owner(), r.who.named_owner()];
    let taken = engine::take(r.nft.get()?, &maps, |c| mine.iter().any(|m| m == c));
    // Another's element under its key is the usual case of a DEL after an ADD refused
    // for that very port: left without a word.
    super::said(conf, taken, false).map(drop)
}

/// Where GC finds the network's published ports: the four maps every network shares,
/// each element the network's when its comment names the network.
pub fn attachment_sets(conf: &Config) -> Vec<AttachmentSet> {
    PortMap::ALL
        .into_iter()
        .map(|map| {
            let network = conf.name.clone();
            AttachmentSet::new(map.set(0), move |e| {
                let port = port_element(e, map)?;
                of_network(&network, &port.comment)
                    .then(|| format!("published port {}", key_text(&port.key)))
            })
            .published()
        })
        .collect()
}

/// Lines a verb writes about single ports before it counts the rest.
pub(super) const LOGGED: usize = 8;

/// CHECK: each mapping is in its map, held by this attachment, going to its address,
/// and port mapping's rules are all there (an admin's flush of the chains keeps the
/// maps, and the restore command puts the rules back).
pub fn check(c: &mut Checking) -> Result<Vec<Diff>> {
    let (conf, who, addresses) = (c.conf, c.who, c.addresses);
    let nft = c.nft.get()?;
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
            Some(held) if !who.owns(&held.comment) => diff(format!(
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
    let mut wants = vec![portmap_rules(), hairpin_mark(&conf.bridge)];
    let routed = conf.routed_interface();
    if localnet_on(&routed) {
        wants.extend([localnet_rules(&routed), localnet_guard(&routed)]);
    }
    diffs.extend(engine::missing(nft, &wants)?.into_iter().map(|text| Diff {
        text,
        restorable: true,
    }));
    Ok(diffs)
}

/// STATUS: the ports the wired attachments' records ask for and the maps lack (after a
/// flush or a deletion of the table, which take the maps with their elements), and port
/// mapping's rules and the bridge's hairpin mark when the network publishes ports.
pub fn missing(l: &mut Looking) -> Result<Vec<String>> {
    let (conf, wired) = (l.conf, l.wired);
    if wired.attachments.is_empty() {
        return Ok(Vec::new());
    }
    let nft = l.nft.get()?;
    let lost = lost::lost(nft, conf, wired)?;
    let mut missing = lost.words(false);
    missing.extend(missing_objects(nft, conf, !lost.ports.is_empty())?);
    Ok(missing)
}

/// Port mapping's rules, the hairpin mark and the loopback guard the network wants:
/// the first two where it publishes (a port the records ask for, `lost`; one in the
/// maps) or needs the mark for Services, the guard wherever its bridge routes
/// 127.0.0.0/8, ports or not (after a deletion of the table its ports are gone and the
/// bridge is still open).
fn object_wants(nft: &mut Nftables, conf: &Config, lost: bool) -> Result<Vec<Want>> {
    let mut wants = Vec::new();
    if lost || published_here(nft, conf)? || services::need_hairpin(conf) {
        wants.extend([portmap_rules(), hairpin_mark(&conf.bridge)]);
    }
    let routed = conf.routed_interface();
    if localnet_on(&routed) {
        wants.extend([localnet_rules(&routed), localnet_guard(&routed)]);
    }
    Ok(wants)
}

/// What of `object_wants` nf_tables lacks, in words.
fn missing_objects(nft: &mut Nftables, conf: &Config, lost: bool) -> Result<Vec<String>> {
    let wants = object_wants(nft, conf, lost)?;
    Ok(engine::missing(nft, &wants)?)
}

/// Whether the maps hold a port of this network.
fn published_here(nft: &mut Nftables, conf: &Config) -> Result<bool> {
    Ok(nft
        .port_elements()?
        .iter()
        .any(|e| of_network(&conf.name, &e.comment)))
}

/// Puts back the ports the records ask for and the maps lack, port mapping's rules, the
/// bridge's hairpin mark and loopback guard, under the repair lock; says which ports it
/// could not put back, and why.
pub fn restore(l: &mut Looking) -> Result<Repair> {
    let (conf, wired) = (l.conf, l.wired);
    if wired.attachments.is_empty() {
        return Ok(Repair::default());
    }
    let nft = l.nft.get()?;
    let mut lost = lost::lost(nft, conf, wired)?;
    let mut missing = missing_objects(nft, conf, !lost.ports.is_empty())?;
    if !missing.is_empty() || !lost.ports.is_empty() {
        // Looked at again under the locks: an ADD's repair may have come first. Only then
        // taken, so a watch that finds everything in place never waits on an ADD; in
        // ADD's order (the publish lock, then the repair lock), so neither waits out
        // the other's timeout.
        let _publish = publish_lock();
        let _lock = super::network::repair_lock();
        lost = lost::lost(nft, conf, wired)?;
        missing = missing_objects(nft, conf, !lost.ports.is_empty())?;
        return put_back(nft, conf, wired, lost, missing);
    }
    Ok(Repair {
        not_put_back: lost.not,
        unrecorded: lost.unrecorded,
        put_back: Vec::new(),
    })
}

/// The restore's repair, under the publish and repair locks: what `lost` and `missing`
/// name.
fn put_back(
    nft: &mut Nftables,
    conf: &Config,
    wired: &super::Wired,
    mut lost: lost::Lost,
    missing: Vec<String>,
) -> Result<Repair> {
    let mut repair = Repair {
        not_put_back: std::mem::take(&mut lost.not),
        unrecorded: std::mem::take(&mut lost.unrecorded),
        put_back: Vec::new(),
    };
    if missing.is_empty() && lost.ports.is_empty() {
        return Ok(repair);
    }
    // Before the ports answer, as in ADD: the guard too (route_localnet is a sysctl,
    // which no flush turns off: on wherever an IPv4 port was ever published). The
    // repair lock is held.
    let wants = object_wants(nft, conf, !lost.ports.is_empty())?;
    let completed = engine::complete_held(nft, &wants)?;
    let ports = lost.elements();
    repair.put_back = completed.words("published ports");
    if !ports.is_empty() {
        match nft.publish_ports(&ports, &conf.bridge) {
            // An ADD took one of the keys since the look: looked at again, once.
            Err(e) if e.is(libc::EEXIST) => {
                let mut again = lost::lost(nft, conf, wired)?;
                repair.not_put_back = std::mem::take(&mut again.not);
                lost = again;
                nft.publish_ports(&lost.elements(), &conf.bridge)?;
            }
            other => other?,
        }
        flush_stale_udp(&lost.elements());
        let mut words = lost.words(true);
        words.append(&mut repair.put_back);
        repair.put_back = words;
    }
    Ok(repair)
}

/// The network's own objects in the shared sets, its bridge's hairpin mark and loopback
/// guard, once none of its ports is published. The bridge then has no port, and gives
/// up route_localnet with its guard: a container attached later without a published
/// port (so without the guard) must not find 127.0.0.0/8 routed.
///
/// Looked for whether or not the capability or isGateway is still set (either may have
/// been taken out since ADD).
pub fn objects(r: &mut Releasing) -> Result<Option<Vec<Object>>> {
    let conf = r.conf;
    let nft = r.nft.get()?;
    if published_here(nft, conf)? {
        return Ok(None);
    }
    // Set for published ports, or for Services (services.rs).
    let mut objects = engine::present(nft, &[hairpin_mark(&conf.bridge)])?;
    let routed = conf.routed_interface();
    let guard = engine::present(nft, &[localnet_guard(&routed)])?;
    let guarded = conf.publishes_ports || !guard.is_empty();
    if guarded && localhost_off(&routed) {
        objects.extend(guard);
    }
    Ok(Some(objects))
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
        let owner = who.owner();
        assert_eq!(
            summary,
            [
                format!("tcp/8080 (v4) 10.1.0.5 {owner}"),
                format!("tcp/8080 (v6) fd00::5 {owner}"),
                format!("tcp/10.0.0.1:8081 10.1.0.5 {owner}"),
                format!("tcp/8082 (v6) fd00::5 {owner}"),
            ]
        );
        // The network's key and the name written before it read the same.
        for holder in [owner.as_str(), "net:c1:eth0"] {
            assert_eq!(
                describe_holder(holder),
                "container c1 (interface eth0, network net)"
            );
        }
    }
}
