//! `macspoofchk` in nf_tables: academy's own table of the bridge family, `bridge
//! academy` (the reference keeps its chains in `bridge nat`, which academy never
//! touches). In it:
//! - chain `prerouting`: type filter, hook prerouting, priority -300 (the reference's),
//!   so a frame is judged as it enters the bridge from a port, before it is forwarded
//!   or delivered to the host;
//! - per network, a set `<network>-guarded` (type ifname) of the guarded host veths, a
//!   set `<network>-allowed` (type ifname . ether_addr) of each one's pair with the one
//!   source MAC it may send, and a map `<network>-ports` (type ifname : ether_addr)
//!   holding the same pairs, each element commented with its attachment;
//! - per network, one rule: `iifname @<network>-guarded iifname . ether saddr !=
//!   @<network>-allowed drop`. Ports not guarded (containers without macspoofchk, the
//!   host's own) are not looked at.
//!
//! Per container that is three elements, added in one batch and removed in one batch:
//! O(1) whatever the number of containers, where the reference adds two chains and a
//! rule in the base chain per container (every frame walks that base chain). The map
//! is the record a removal reads: it knows only the port's name, and the map gives the
//! MAC that names the set's element, without a dump. The rule cannot look the port up
//! in the map itself: kernels before 6.5 (Debian 12 runs 6.1) refuse a lookup in a map
//! that does not load its value (EINVAL; "relax set/map validation checks", May 2023).

use super::names::{allowed_set, guard_sets, guarded_set, pair_key, ports_map, GuardedPort};
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::nftables::attrs::ifname_bytes;
use crate::netlink::nftables::model::{Change, Element, Op};
use crate::netlink::{Nftables, NlResult};

/// Removes the ports' elements. Elements already gone are success.
pub fn unguard_ports(nft: &mut Nftables, network: &str, ports: &[GuardedPort]) -> NlResult<()> {
    match nft.run(change_ports(network, ports)) {
        // One missing element fails the whole batch (a removal repeated, a table
        // never made): then each element alone, missing ones skipped.
        Err(e) if e.is(libc::ENOENT) => {
            for port in ports {
                for (set, key, _) in elements_of(network, port) {
                    let description = format!("remove {} from {set}", port.port);
                    let op = Op::DeleteElements {
                        table: ACADEMY_BRIDGE,
                        set,
                        keys: vec![key],
                        publish: false,
                    };
                    match nft.run(vec![Change::new(op, description)]) {
                        Err(e) if !e.is(libc::ENOENT) => return Err(e),
                        _ => {}
                    }
                }
            }
            Ok(())
        }
        other => other,
    }
}

/// The map's element for host veth `port`; None when absent.
pub fn guarded_port(
    nft: &mut Nftables,
    network: &str,
    port: &str,
) -> NlResult<Option<GuardedPort>> {
    let map = ports_map(network);
    let what = format!("look up {port} in nf_tables map {ACADEMY_BRIDGE} {map}");
    let found = nft.element_of(ACADEMY_BRIDGE, &map, &ifname_bytes(port), &what)?;
    Ok(found.as_ref().and_then(port_of))
}

/// Every guarded port of a network; none when its map does not exist.
pub fn guarded_ports(nft: &mut Nftables, network: &str) -> NlResult<Vec<GuardedPort>> {
    let found = nft.elements_of(ACADEMY_BRIDGE, &ports_map(network))?;
    Ok(found.iter().filter_map(port_of).collect())
}

/// One batch's messages removing the ports' elements: one per map or set, each with
/// the ports' keys in it (a removal names the key alone, as `nft delete element` does).
fn change_ports(network: &str, ports: &[GuardedPort]) -> Vec<Change> {
    let names: Vec<&str> = ports.iter().map(|p| p.port.as_str()).collect();
    let mut changes = Vec::new();
    for (i, set) in guard_sets(network).into_iter().enumerate() {
        let keys = ports
            .iter()
            .map(|port| elements_of(network, port).swap_remove(i).1)
            .collect();
        let op = Op::DeleteElements {
            table: ACADEMY_BRIDGE,
            set: set.clone(),
            keys,
            publish: false,
        };
        let what = format!(
            "remove {} in nf_tables {ACADEMY_BRIDGE} {set}",
            names.join(", ")
        );
        changes.push(Change::new(op, what));
    }
    changes
}

/// A port's three elements, in the order of guard_sets: (set, key, map data).
pub(super) fn elements_of(
    network: &str,
    port: &GuardedPort,
) -> Vec<(String, Vec<u8>, Option<Vec<u8>>)> {
    vec![
        (
            ports_map(network),
            ifname_bytes(&port.port),
            Some(port.mac.to_vec()),
        ),
        (guarded_set(network), ifname_bytes(&port.port), None),
        (allowed_set(network), pair_key(&port.port, port.mac), None),
    ]
}

/// A map element as a guarded port: an interface name key and a MAC value.
pub(super) fn port_of(raw: &Element) -> Option<GuardedPort> {
    let name = raw.key.split(|b| *b == 0).next().unwrap_or(&[]);
    Some(GuardedPort {
        port: String::from_utf8_lossy(name).into_owned(),
        mac: raw.data.as_deref()?.try_into().ok()?,
        comment: raw.comment.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::create::{drop_rule, map_of};
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::dump::decode_elements;
    use crate::netlink::nftables::encode::{self, element_bytes, element_reply, expression_bytes};

    /// The rule's and sets' bytes, pinned as their digest: a refactor of the encoding that
    /// changes one byte on the wire fails here.
    #[test]
    fn the_guard_encodes_as_before() {
        let list = expression_bytes(&drop_rule("n-guarded", "n-allowed"));
        assert_eq!(
            hex(&sha256(&list)),
            "eb4617dd366842f6d14afa4744516320cafec8019c087cfcea599eaf5eda84a3"
        );
        assert_eq!(
            hex(&sha256(&encode::op(&Op::AddSet(map_of("n-ports"))).attrs.0)),
            "4a9c1e9230ad7c16b81beb0ba9d9c181127a9c0852c050f4772d8f0488fbb6ef"
        );
        let port = GuardedPort {
            port: "veth1".into(),
            mac: [2, 0, 0, 0, 0, 9],
            comment: "n:c:eth0".into(),
        };
        let mut list = Vec::new();
        for (_, key, data) in elements_of("n", &port) {
            let comment = port.comment.clone();
            list.extend(element_bytes(&Element { key, data, comment }));
        }
        assert_eq!(
            hex(&sha256(&list)),
            "7d0bd1d2e2c2f05e046bb6041ef0998cae51b2e9f0bda6080c559f8da383c67e"
        );
    }

    /// ADD's elements (wants.rs) are those a removal deletes, byte for byte: the
    /// pinned digest above holds for what ADD sends.
    #[test]
    fn a_port_s_wanted_elements_are_the_ones_a_removal_deletes() {
        use crate::attachment::Attachment;
        use crate::firewall::engine::Wanted;
        let who = Attachment::new("n", "c", "eth0");
        let mac = [2, 0, 0, 0, 0, 9];
        let port = GuardedPort {
            port: who.host_name(),
            mac,
            comment: who.owner(),
        };
        let wanted: Vec<(String, Vec<u8>, Option<Vec<u8>>)> =
            super::super::wants::port_wants("n", &who, Some(mac))
                .into_iter()
                .map(|w| match w.wanted {
                    Wanted::Element { set, element, .. } => {
                        assert_eq!(element.comment, port.comment);
                        (set, element.key, element.data)
                    }
                    other => panic!("{other:?}"),
                })
                .collect();
        assert_eq!(wanted, elements_of("n", &port));
    }

    #[test]
    fn a_pair_key_is_the_padded_name_then_the_padded_mac() {
        let key = pair_key("veth1", [2, 0, 0, 0, 0, 9]);
        assert_eq!(key.len(), 24);
        assert_eq!(&key[..5], b"veth1");
        assert!(key[5..16].iter().all(|b| *b == 0));
        assert_eq!(&key[16..22], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&key[22..], &[0, 0]);
    }

    #[test]
    fn ports_decode_from_a_map_element_reply() {
        let port = Element {
            key: ifname_bytes("vethab"),
            data: Some(vec![2, 1, 2, 3, 4, 5]),
            comment: "c:eth0".into(),
        };
        // An element without data is not a port (never in the map): skipped.
        let reply = element_reply("n-ports", &[port, Element::key(ifname_bytes("x"))]);
        let ports: Vec<GuardedPort> = decode_elements(&reply).iter().filter_map(port_of).collect();
        assert_eq!(
            ports,
            vec![GuardedPort {
                port: "vethab".into(),
                mac: [2, 1, 2, 3, 4, 5],
                comment: "c:eth0".into()
            }]
        );
    }
}
