//! A DEL's removal of a port whose map element is gone while its set elements stay (the
//! map deleted alone, then made again by an ADD's completion before any restore put the
//! port back in it): the map is the record a removal reads, so without this the sets
//! would keep the port's elements for ever (GC reads the map too). Looked for only
//! when the map has no element for the port, on a network with macspoofchk.

use super::names::{allowed_set, guarded_set, GuardedPort, PAIR_LEN};
use super::nft::unguard_ports;
use crate::attachment::Attachment;
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::nftables::attrs::ifname_bytes;
use crate::netlink::{Nftables, NlResult};

/// Removes the attachment's elements from the two sets when the guarded set names it:
/// the pairs of its port in the allowed set (one dump of it, only then) that name it
/// too.
pub(super) fn remove_unmapped(nft: &mut Nftables, network: &str, who: &Attachment) -> NlResult<()> {
    let (port, guarded) = (who.host_name(), guarded_set(network));
    let key = ifname_bytes(&port);
    let what = format!("look up {port} in nf_tables set {ACADEMY_BRIDGE} {guarded}");
    match nft.element_of(ACADEMY_BRIDGE, &guarded, &key, &what)? {
        Some(element) if who.owns(&element.comment) => {}
        Some(_) | None => return Ok(()),
    }
    let mut ports: Vec<GuardedPort> = nft
        .elements_of(ACADEMY_BRIDGE, &allowed_set(network))?
        .into_iter()
        .filter(|e| e.key.len() == PAIR_LEN && e.key.starts_with(&key) && who.owns(&e.comment))
        .filter_map(|e| {
            Some(GuardedPort {
                port: port.clone(),
                mac: e.key[key.len()..key.len() + 6].try_into().ok()?,
                comment: e.comment,
            })
        })
        .collect();
    if ports.is_empty() {
        // The guarded element alone: a MAC no pair names, whose pair removal finds
        // nothing (skipped).
        ports.push(GuardedPort {
            port: port.clone(),
            mac: [0; 6],
            comment: who.owner(),
        });
    }
    eprintln!(
        "academy: the MAC filter of {port} on network {network} was missing from its map; its set elements removed"
    );
    unguard_ports(nft, network, &ports)
}
