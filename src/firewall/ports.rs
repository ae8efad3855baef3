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

use std::collections::HashSet;

use ipnetwork::IpNetwork;

use crate::attachment::Attachment;
use crate::cni::{code, Error, Result};
use crate::config::{Config, PortMapping};
use crate::firewall::masquerade;
use crate::netlink::{
    flush_udp_conntrack, key_text, stored_comment, Family, Flushed, Nftables, NlError, PortElement,
    PortKey, UdpDestination,
};

const IPPROTO_UDP: u8 = 17;

/// The holder named in a map element's comment. The maps are shared by every network,
/// so unlike the masquerade's per-network sets the network is part of it.
pub fn holder(who: &Attachment) -> String {
    format!("{}:{}:{}", who.network, who.container_id, who.ifname)
}

/// ADD: the attachment's masquerade elements (ipMasq) and published ports, in one batch
/// (masquerade::add sends it, with the NAT's repair when one is needed).
pub fn add(
    nft: &mut Nftables,
    conf: &Config,
    who: &Attachment,
    addresses: &[IpNetwork],
) -> Result<()> {
    let ports = elements(mappings(conf), who, addresses);
    if !conf.ip_masq && ports.is_empty() {
        return Ok(());
    }
    if ports.iter().any(|p| p.key.family == Family::V4) {
        allow_localhost(&conf.bridge)?;
    }
    // The attachment's own element from an earlier life (an ADD whose DEL never came,
    // its address since changed) is replaced; another's is a conflict.
    let resolve = |nft: &mut Nftables, refused: NlError| -> Result<()> {
        if let Some(conflict) = taken(nft, &ports)? {
            return Err(conflict);
        }
        let stale = own_stale(nft, &ports)?;
        if stale.is_empty() {
            return Err(refused.into());
        }
        Ok(nft.delete_port_elements(&stale)?)
    };
    let publish = masquerade::Publish {
        ports: &ports,
        bridge: &conf.bridge,
        resolve: &resolve,
    };
    masquerade::add(nft, conf, &who.holder(), addresses, &publish)?;
    flush_stale_udp(&ports);
    Ok(())
}

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
fn flush_stale_udp(ports: &[PortElement]) {
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

/// The keys of `ports` whose element names this holder but points elsewhere.
fn own_stale(nft: &mut Nftables, ports: &[PortElement]) -> Result<Vec<PortKey>> {
    let mut stale = Vec::new();
    for port in ports {
        if let Some(held) = nft.port_element(&port.key)? {
            let elsewhere = (held.address, held.port) != (port.address, port.port);
            if elsewhere && held.comment == stored_comment(&port.comment) {
                stale.push(port.key.clone());
            }
        }
    }
    Ok(stale)
}

/// The elements of `mappings` for the container's addresses: a mapping without hostIP
/// answers in every family the container has, one with a hostIP in that one's family.
pub fn elements(
    mappings: &[PortMapping],
    who: &Attachment,
    addresses: &[IpNetwork],
) -> Vec<PortElement> {
    let comment = holder(who);
    let mut found = Vec::new();
    for m in mappings {
        for address in addresses.iter().map(IpNetwork::ip) {
            let family = Family::of(address);
            if m.host_ip.is_some_and(|h| Family::of(h) != family) {
                continue;
            }
            let key = key(m, family);
            if found.iter().any(|e: &PortElement| e.key == key) {
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
    found
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
/// route_localnet (the reference portmap sets it on the same interface).
fn allow_localhost(bridge: &str) -> Result<()> {
    let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
    if std::fs::read(&path).is_ok_and(|v| v.starts_with(b"1")) {
        return Ok(());
    }
    std::fs::write(&path, "1").map_err(|e| Error::io(format!("cannot write 1 to {path}"), &e))
}

/// Why the batch was refused: the first requested key another attachment holds.
fn taken(nft: &mut Nftables, ports: &[PortElement]) -> Result<Option<Error>> {
    for port in ports {
        let Some(held) = nft.port_element(&port.key)? else {
            continue;
        };
        let elsewhere = (held.address, held.port) != (port.address, port.port);
        if !elsewhere || held.comment == stored_comment(&port.comment) {
            continue;
        }
        return Ok(Some(
            Error::new(
                code::PORT_TAKEN,
                format!(
                    "host port {} is already published by {}",
                    key_text(&port.key),
                    describe_holder(&held.comment)
                ),
            )
            .details(format!(
                "it goes to {} port {}; remove that container or publish another host port",
                held.address, held.port
            )),
        ));
    }
    Ok(None)
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

/// Removes the attachment's published ports. With the runtime's mappings at hand, each
/// key is looked up (both families: the addresses may be gone) and removed only if the
/// attachment holds it; without them, the maps are searched for its name (a runtime that
/// sent an empty list is believed: GC sweeps what it forgot).
pub fn remove(nft: &mut Nftables, conf: &Config, who: &Attachment) -> Result<()> {
    let mine = holder(who);
    let mine = stored_comment(&mine);
    let mut keys = Vec::new();
    match &conf.port_mappings {
        // The runtime says there were none (containerd sends an empty list for a
        // pod without hostPort): nothing to look for.
        Some(known) if known.is_empty() => return Ok(()),
        None => {
            let all = nft.port_elements()?;
            keys.extend(all.into_iter().filter(|e| e.comment == mine).map(|e| e.key));
        }
        Some(known) => {
            for m in known {
                for family in [Family::V4, Family::V6] {
                    if m.host_ip.is_some_and(|h| Family::of(h) != family) {
                        continue;
                    }
                    let key = key(m, family);
                    if let Some(held) = nft.port_element(&key)? {
                        if held.comment == mine && !keys.contains(&key) {
                            keys.push(key);
                        }
                    }
                }
            }
        }
    }
    if keys.is_empty() {
        return Ok(());
    }
    Ok(nft.delete_port_elements(&keys)?)
}

/// GC: removes the network's published ports whose comment is no valid attachment's.
/// The maps are shared by every network: only elements naming this one are looked at.
pub fn gc(nft: &mut Nftables, conf: &Config, live: &HashSet<String>, errors: &mut Vec<Error>) {
    let prefix = format!("{}:", conf.name);
    let found = nft.port_elements().map(|all| {
        all.into_iter()
            .filter(|e| e.comment.starts_with(&prefix))
            .collect()
    });
    crate::verbs::gc::sweep(
        found,
        live,
        |e: &PortElement| &e.comment,
        |stale| {
            let keys: Vec<PortKey> = stale.iter().map(|e| e.key.clone()).collect();
            nft.delete_port_elements(&keys)
        },
        |e| {
            format!(
                "unpublished host port {} (held by {})",
                key_text(&e.key),
                e.comment
            )
        },
        errors,
    );
}

/// CHECK: each mapping is in its map, held by this attachment, going to its address.
pub fn check(
    conf: &Config,
    who: &Attachment,
    addresses: &[IpNetwork],
    diffs: &mut Vec<String>,
) -> Result<()> {
    let wanted = elements(mappings(conf), who, addresses);
    if wanted.is_empty() {
        return Ok(());
    }
    let mut nft = Nftables::open()?;
    for want in wanted {
        let text = key_text(&want.key);
        match nft.port_element(&want.key)? {
            None => diffs.push(format!("host port {text} is not published")),
            Some(held) if held.comment != stored_comment(&want.comment) => diffs.push(format!(
                "host port {text} is published by {}",
                describe_holder(&held.comment)
            )),
            Some(held) if (held.address, held.port) != (want.address, want.port) => {
                diffs.push(format!(
                    "host port {text} goes to {} port {} instead of {} port {}",
                    held.address, held.port, want.address, want.port
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
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
        let got = elements(
            &[
                mapping(8080, None),
                mapping(8081, Some("10.0.0.1")),
                mapping(8082, Some("::")),
            ],
            &who,
            &addresses,
        );
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
