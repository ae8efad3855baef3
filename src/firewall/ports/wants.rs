//! What the node's wired attachments want published, from their runtime records
//! (src/ipam/store/runtime.rs), and the conflicts judged against it. The maps say who
//! holds a port only while nothing flushed them: after `nft delete table inet academy`
//! a running container's ports are gone from the kernel but still its own, and an ADD
//! or a restore that judged by the maps alone would hand them to another container
//! (issue 35, finding 5).
//!
//! The maps are shared by every network, so the wants are the node's: every network
//! whose store lives in the same dataDir (`<dataDir>/<network>/`), each attachment that
//! has its host veth here. A network with another dataDir is not seen (its store is
//! not known to this ADD).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;

use ipnetwork::IpNetwork;

use super::holders::other_container;
use super::{elements_of, held, PortElement, PortKey};
use crate::attachment::{container_of, host_name, Attachment};
use crate::cni::Result;
use crate::config::{Config, Recorded};
use crate::ipam::store::files::FileLock;
use crate::ipam::store::{Runtime, StoreDir};
use crate::ipam::Holder;
use crate::netlink::{Netlink, Nftables};

/// Whether two keys answer the same packets on some address: same family, protocol and
/// host port, and the same hostIP or one of them published on every address.
pub(crate) fn overlaps(a: &PortKey, b: &PortKey) -> bool {
    a.family == b.family
        && a.protocol == b.protocol
        && a.host_port == b.host_port
        && (a.host_ip == b.host_ip || a.host_ip.is_none() || b.host_ip.is_none())
}

/// The first of `ports` another container wants, with that container's element.
pub(crate) fn wanted_by_other<'w>(
    who: &Attachment,
    ports: &[PortElement],
    wants: &'w [PortElement],
) -> Option<(PortElement, &'w PortElement)> {
    ports.iter().find_map(|port| {
        wants
            .iter()
            .find(|w| other_container(who, &w.comment) && overlaps(&port.key, &w.key))
            .map(|w| (port.clone(), w))
    })
}

/// Puts back, in one batch, the other attachments' `wants` that no map holds, as the
/// restore would, except a key two other containers' records both ask for (the restore
/// says which; this ADD's own are judged after, against what is put back). Best effort, as the masquerade's put-back of its set (masquerade/nat.rs):
/// ADD does it to help the others, and judges its own ports against `wants` anyway.
/// Under the publish lock, so no other ADD or restore publishes in between.
pub(crate) fn put_back_wants(
    nft: &mut Nftables,
    conf: &Config,
    who: &Attachment,
    wants: &[PortElement],
) {
    let others: Vec<&PortElement> = wants.iter().filter(|w| !who.owns(&w.comment)).collect();
    if others.is_empty() {
        return;
    }
    let now = match held(nft, others.iter().map(|w| &w.key)) {
        Ok(now) => now,
        Err(e) => return eprintln!("academy: cannot look for the ports a flush took: {e}"),
    };
    let lost: Vec<PortElement> = others
        .iter()
        .filter(|w| !now.contains_key(&w.key))
        .filter(|w| {
            !others.iter().any(|v| {
                container_of(&v.comment) != container_of(&w.comment) && overlaps(&v.key, &w.key)
            })
        })
        .map(|w| (*w).clone())
        .collect();
    if lost.is_empty() {
        return;
    }
    match nft.publish_ports(&lost, &conf.bridge) {
        Ok(()) => eprintln!(
            "academy: network {}: put back {} published port(s) of wired containers that a flush took",
            conf.name,
            lost.len()
        ),
        Err(e) => eprintln!(
            "academy: could not put back the published ports of wired containers that a flush took: {}",
            crate::cni::Error::from(e)
        ),
    }
}

/// The removal locks of the networks stored beside `conf`'s, each held whole (in name
/// order, so two such holders never wait on each other), for a put-back from its look
/// at the records to its batch: no removal of theirs is then in flight (network::removal).
pub(crate) fn no_removals_beside(conf: &Config) -> Vec<Option<FileLock>> {
    let Some(b) = conf.builtin() else {
        return Vec::new();
    };
    let mut networks = networks_beside(conf, &b.data_dir);
    networks.sort();
    networks
        .iter()
        .map(|n| crate::firewall::network::no_removal_in_flight(n))
        .collect()
}

/// The networks whose stores are in `data_dir`, `conf`'s first.
fn networks_beside(conf: &Config, data_dir: &Path) -> Vec<String> {
    let mut networks = vec![conf.name.clone()];
    if let Ok(entries) = std::fs::read_dir(data_dir) {
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && !name.starts_with('.') && name != conf.name {
                networks.push(name);
            }
        }
    }
    networks
}

/// Every element the wired attachments of the networks stored beside `conf`'s want.
/// Best effort for the stores of other networks (one that cannot be read is said on
/// stderr and passed over); the network's own store must read.
pub(crate) fn node_wants(conf: &Config, nl: &mut Netlink) -> Result<Vec<PortElement>> {
    let Some(b) = conf.builtin() else {
        return Ok(Vec::new()); // a delegated IPAM keeps no records
    };
    let links: HashSet<String> = nl.links()?.into_iter().map(|l| l.name).collect();
    let networks = networks_beside(conf, &b.data_dir);
    let mut wants = Vec::new();
    for network in &networks {
        match wants_of(&b.data_dir, network, &links) {
            Ok(found) => wants.extend(found),
            Err(e) if *network == conf.name => return Err(e),
            Err(e) => eprintln!(
                "academy: cannot read the published ports recorded for network {network}: {e}"
            ),
        }
    }
    Ok(wants)
}

/// One network's wants: its reservations whose host veth is here, by holder, and the
/// elements of each one's recorded mappings.
fn wants_of(data_dir: &Path, network: &str, links: &HashSet<String>) -> Result<Vec<PortElement>> {
    let Some(store) = StoreDir::open(&data_dir.join(network))? else {
        return Ok(Vec::new());
    };
    let mut addresses: HashMap<Holder, Vec<IpAddr>> = HashMap::new();
    for r in store.reservations()? {
        let Some(holder) = r.holder() else { continue };
        if links.contains(&host_name(&holder.container_id, &holder.ifname)) {
            addresses.entry(holder).or_default().push(r.address);
        }
    }
    let mut wants = Vec::new();
    for (holder, ips) in addresses {
        let Ok(Runtime::Record(bytes)) = store.runtime_of(&holder) else {
            continue; // nothing recorded, or unknown: the restore says so
        };
        let Ok(recorded) = Recorded::parse(&bytes) else {
            continue;
        };
        let nets: Vec<IpNetwork> = ips.into_iter().map(IpNetwork::from).collect();
        let who = Attachment::new(network, &holder.container_id, &holder.ifname);
        if let Ok(elements) = elements_of(&recorded.port_mappings, &who, &nets) {
            wants.extend(elements);
        }
    }
    Ok(wants)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::Family;

    fn key(host_ip: Option<&str>, port: u16) -> PortKey {
        PortKey {
            family: Family::V4,
            protocol: 6,
            host_ip: host_ip.map(|h| h.parse().unwrap()),
            host_port: port,
        }
    }

    #[test]
    fn a_wildcard_overlaps_every_address_of_its_port() {
        let (any, one, two) = (
            key(None, 8080),
            key(Some("10.0.0.1"), 8080),
            key(Some("10.0.0.2"), 8080),
        );
        assert!(overlaps(&any, &one) && overlaps(&one, &any) && overlaps(&any, &any));
        assert!(overlaps(&one, &one));
        assert!(!overlaps(&one, &two));
        assert!(!overlaps(&any, &key(None, 8081)));
        let udp = PortKey {
            protocol: 17,
            ..any.clone()
        };
        assert!(!overlaps(&any, &udp));
        let v6 = PortKey {
            family: Family::V6,
            ..any.clone()
        };
        assert!(!overlaps(&any, &v6));
    }
}
