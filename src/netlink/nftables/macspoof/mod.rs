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

use netlink_packet_core::{NLM_F_CREATE, NLM_F_DUMP};

use super::attrs::{comment_of, comment_udata};
use super::batch::Batch;
use super::consts::{
    IFNAMSIZ, NFPROTO_BRIDGE, NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_IMMEDIATE_DATA,
    NFTA_IMMEDIATE_DREG, NFTA_LIST_ELEM, NFTA_LOOKUP_FLAGS, NFTA_LOOKUP_SET, NFTA_LOOKUP_SET_ID,
    NFTA_LOOKUP_SREG, NFTA_META_DREG, NFTA_META_KEY, NFTA_PAYLOAD_BASE, NFTA_PAYLOAD_DREG,
    NFTA_PAYLOAD_LEN, NFTA_PAYLOAD_OFFSET, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS, NFTA_RULE_TABLE,
    NFTA_RULE_USERDATA, NFTA_SET_DATA_LEN, NFTA_SET_DATA_TYPE, NFTA_SET_ELEM_DATA,
    NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_USERDATA, NFTA_SET_FLAGS, NFTA_SET_ID,
    NFTA_SET_KEY_LEN, NFTA_SET_KEY_TYPE, NFTA_SET_NAME, NFTA_SET_TABLE, NFTA_SET_USERDATA,
    NFTA_VERDICT_CODE, NFT_LOOKUP_F_INV, NFT_META_IIFNAME, NFT_MSG_DELSETELEM, NFT_MSG_GETRULE,
    NFT_MSG_GETSETELEM, NFT_MSG_NEWRULE, NFT_MSG_NEWSET, NFT_MSG_NEWSETELEM, NFT_PAYLOAD_LL_HEADER,
    NFT_REG_1, NFT_REG_2, NFT_REG_VERDICT, NFT_SET_MAP, NF_BR_PRE_ROUTING,
    NF_BR_PRI_NAT_DST_BRIDGED, NF_DROP, TABLE, TYPE_ETHERADDR, TYPE_IFNAME,
};
use super::rule::expr;
use super::step::Step;
use super::Nftables;

use crate::netlink::nfnetlink::{attributes, Attrs};
use crate::netlink::socket::{Await, NlResult};

mod create;

#[cfg(test)]
use create::{drop_rule, NewSet, PORTS_ID};

pub const BRIDGE_CHAIN: &str = "prerouting";

/// A MAC in a concatenation takes 8 bytes: each part is padded to 4.
const PAIR_LEN: usize = IFNAMSIZ + 8;

/// A port whose frames are checked: its host veth, the source MAC it may send, and the
/// comment naming the attachment it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedPort {
    pub port: String,
    pub mac: [u8; 6],
    pub comment: String,
}

/// The map and sets of a network's MAC filter, by name.
pub fn guard_sets(network: &str) -> [String; 3] {
    [
        ports_map(network),
        guarded_set(network),
        allowed_set(network),
    ]
}

pub fn ports_map(network: &str) -> String {
    format!("{network}-ports")
}

pub fn guarded_set(network: &str) -> String {
    format!("{network}-guarded")
}

pub fn allowed_set(network: &str) -> String {
    format!("{network}-allowed")
}

fn rule_comment(network: &str) -> String {
    format!("academy macspoofchk {network}")
}

fn ifname_key(name: &str) -> Vec<u8> {
    let mut key = name.as_bytes().to_vec();
    key.resize(IFNAMSIZ, 0);
    key
}

fn pair_key(name: &str, mac: [u8; 6]) -> Vec<u8> {
    let mut key = ifname_key(name);
    key.extend_from_slice(&mac);
    key.resize(PAIR_LEN, 0);
    key
}

impl Nftables {
    /// Guards `port`: its three elements in one batch, creating the network's table,
    /// chain, map, sets and rule first when missing. A port already guarded with another
    /// MAC is refused by the kernel (EBUSY): the caller decides whether it is stale.
    pub fn guard_port(&mut self, network: &str, port: &GuardedPort) -> NlResult<()> {
        match self.change_ports(NFT_MSG_NEWSETELEM, network, std::slice::from_ref(port)) {
            Err(e) if e.is(libc::ENOENT) => {
                self.create_guard(network)?;
                self.change_ports(NFT_MSG_NEWSETELEM, network, std::slice::from_ref(port))
            }
            other => other,
        }
    }

    /// Removes the ports' elements. Elements already gone are success.
    pub fn unguard_ports(&mut self, network: &str, ports: &[GuardedPort]) -> NlResult<()> {
        match self.change_ports(NFT_MSG_DELSETELEM, network, ports) {
            // One missing element fails the whole batch (a removal repeated, a table
            // never made): then each element alone, missing ones skipped.
            Err(e) if e.is(libc::ENOENT) => {
                for port in ports {
                    for (set, key, _) in elements_of(network, port) {
                        let mut batch = Batch::in_family(&mut self.socket, NFPROTO_BRIDGE);
                        let what = format!("remove {} from {set}", port.port);
                        batch.add(
                            Step::RemoveElement,
                            NFT_MSG_DELSETELEM,
                            0,
                            element_list(&set, &key),
                            what,
                        );
                        match batch.commit() {
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
    pub fn guarded_port(&mut self, network: &str, port: &str) -> NlResult<Option<GuardedPort>> {
        let map = ports_map(network);
        let attrs = element_list(&map, &ifname_key(port));
        let what = format!("look up {port} in nf_tables map bridge {TABLE} {map}");
        let mut found = None;
        match self.request_in(
            NFPROTO_BRIDGE,
            NFT_MSG_GETSETELEM,
            0,
            attrs,
            Await::One,
            &what,
            |p| {
                found = decode_ports(p).into_iter().next();
            },
        ) {
            Ok(()) => Ok(found),
            Err(e) if e.is(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every guarded port of a network; none when its map does not exist.
    pub fn guarded_ports(&mut self, network: &str) -> NlResult<Vec<GuardedPort>> {
        let map = ports_map(network);
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        attrs.str(NFTA_SET_ELEM_LIST_SET, &map);
        let what = format!("list the elements of nf_tables map bridge {TABLE} {map}");
        self.dump_in(
            NFPROTO_BRIDGE,
            NFT_MSG_GETSETELEM,
            attrs,
            &what,
            |p, found| found.extend(decode_ports(p)),
        )
    }

    /// Whether the guarded set holds `port`.
    pub fn port_guarded(&mut self, network: &str, port: &str) -> NlResult<bool> {
        self.bridge_has_element(&guarded_set(network), &ifname_key(port), port)
    }

    /// Whether the allowed set holds `port` with `mac`.
    pub fn port_allows(&mut self, network: &str, port: &str, mac: [u8; 6]) -> NlResult<bool> {
        self.bridge_has_element(&allowed_set(network), &pair_key(port, mac), port)
    }

    fn bridge_has_element(&mut self, set: &str, key: &[u8], port: &str) -> NlResult<bool> {
        let what = format!("look up {port} in nf_tables set bridge {TABLE} {set}");
        self.has_element(NFPROTO_BRIDGE, set, key, &what)
    }

    /// Whether chain prerouting holds the network's drop rule.
    /// The network's MAC filter rule, if it is there.
    pub fn guard_rule(&mut self, network: &str) -> NlResult<Option<super::TableRule>> {
        let wanted = rule_comment(network);
        Ok(self
            .rules_of(super::Table::AcademyBridge, Some(BRIDGE_CHAIN))?
            .into_iter()
            .find(|r| r.comment == wanted))
    }

    pub fn has_guard_rule(&mut self, network: &str) -> NlResult<bool> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_RULE_TABLE, TABLE);
        attrs.str(NFTA_RULE_CHAIN, BRIDGE_CHAIN);
        let wanted = rule_comment(network);
        let what = format!("list the rules of nf_tables chain bridge {TABLE} {BRIDGE_CHAIN}");
        let mut found = false;
        let result = self.request_in(
            NFPROTO_BRIDGE,
            NFT_MSG_GETRULE,
            NLM_F_DUMP,
            attrs,
            Await::Dump,
            &what,
            |p| {
                let comment = attributes(p)
                    .find(|(kind, _)| *kind == NFTA_RULE_USERDATA)
                    .and_then(|(_, data)| comment_of(data));
                found |= comment.as_deref() == Some(wanted.as_str());
            },
        );
        match result {
            Err(e) if e.is(libc::ENOENT) => Ok(false),
            other => other.map(|()| found),
        }
    }

    /// One batch: one message per map or set, each with the ports' elements in it.
    fn change_ports(&mut self, kind: u8, network: &str, ports: &[GuardedPort]) -> NlResult<()> {
        let (verb, step) = if kind == NFT_MSG_NEWSETELEM {
            ("add", Step::AddElement)
        } else {
            ("remove", Step::RemoveElement)
        };
        let names: Vec<&str> = ports.iter().map(|p| p.port.as_str()).collect();
        let mut batch = Batch::in_family(&mut self.socket, NFPROTO_BRIDGE);
        let sets = [
            ports_map(network),
            guarded_set(network),
            allowed_set(network),
        ];
        for (i, set) in sets.iter().enumerate() {
            let mut attrs = Attrs::default();
            attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
            attrs.str(NFTA_SET_ELEM_LIST_SET, set);
            attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
                for port in ports {
                    let (_, key, data) = elements_of(network, port).swap_remove(i);
                    // A removal names the key alone, as `nft delete element` does.
                    match kind {
                        NFT_MSG_NEWSETELEM => element(list, &key, data.as_deref(), &port.comment),
                        _ => element(list, &key, None, ""),
                    }
                }
            });
            let what = format!(
                "{verb} {} in nf_tables bridge {TABLE} {set}",
                names.join(", ")
            );
            // An element that exists already, same data (an ADD repeated), is fine.
            batch.add(step, kind, NLM_F_CREATE, attrs, what);
        }
        batch.commit()
    }
}

/// A port's three elements, in the order of change_ports: (set, key, map data).
fn elements_of(network: &str, port: &GuardedPort) -> Vec<(String, Vec<u8>, Option<Vec<u8>>)> {
    vec![
        (
            ports_map(network),
            ifname_key(&port.port),
            Some(port.mac.to_vec()),
        ),
        (guarded_set(network), ifname_key(&port.port), None),
        (allowed_set(network), pair_key(&port.port, port.mac), None),
    ]
}

/// A one-element list of `set`, by key: for a lookup, or a removal of one element.
fn element_list(set: &str, key: &[u8]) -> Attrs {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
    attrs.str(NFTA_SET_ELEM_LIST_SET, set);
    attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
        element(list, key, None, "")
    });
    attrs
}

fn element(list: &mut Attrs, key: &[u8], data: Option<&[u8]>, comment: &str) {
    list.nested(NFTA_LIST_ELEM, |elem| {
        elem.nested(NFTA_SET_ELEM_KEY, |k| k.put(NFTA_DATA_VALUE, key));
        if let Some(data) = data {
            elem.nested(NFTA_SET_ELEM_DATA, |d| d.put(NFTA_DATA_VALUE, data));
        }
        if !comment.is_empty() {
            elem.put(NFTA_SET_ELEM_USERDATA, &comment_udata(comment));
        }
    });
}

/// The map elements of one GETSETELEM reply (attributes after the nfgenmsg).
fn decode_ports(payload: &[u8]) -> Vec<GuardedPort> {
    let mut found = Vec::new();
    let lists = attributes(payload).filter(|(k, _)| *k == NFTA_SET_ELEM_LIST_ELEMENTS);
    for (_, list) in lists {
        for (_, element) in attributes(list).filter(|(k, _)| *k == NFTA_LIST_ELEM) {
            let (mut port, mut mac, mut comment) = (None, None, String::new());
            let value = |nested: &[u8]| {
                attributes(nested)
                    .find(|(k, _)| *k == NFTA_DATA_VALUE)
                    .map(|(_, v)| v.to_vec())
            };
            for (kind, nested) in attributes(element) {
                match kind {
                    NFTA_SET_ELEM_KEY => {
                        port = value(nested).map(|v| {
                            let name = v.split(|b| *b == 0).next().unwrap_or(&[]);
                            String::from_utf8_lossy(name).into_owned()
                        })
                    }
                    NFTA_SET_ELEM_DATA => mac = value(nested).and_then(|v| v.try_into().ok()),
                    NFTA_SET_ELEM_USERDATA => comment = comment_of(nested).unwrap_or_default(),
                    _ => {}
                }
            }
            if let (Some(port), Some(mac)) = (port, mac) {
                found.push(GuardedPort { port, mac, comment });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};

    /// The rule's and sets' bytes, pinned as their digest: a refactor of the encoding that
    /// changes one byte on the wire fails here.
    #[test]
    fn the_guard_encodes_as_before() {
        let mut list = Attrs::default();
        drop_rule(&mut list, "n-guarded", "n-allowed");
        assert_eq!(
            hex(&sha256(&list.0)),
            "eb4617dd366842f6d14afa4744516320cafec8019c087cfcea599eaf5eda84a3"
        );
        let map = NewSet {
            id: PORTS_ID,
            name: "n-ports",
            key: (TYPE_IFNAME, IFNAMSIZ),
            data: Some((TYPE_ETHERADDR, 6)),
            names_in_userdata: true,
        };
        assert_eq!(
            hex(&sha256(&map.attrs().0)),
            "4a9c1e9230ad7c16b81beb0ba9d9c181127a9c0852c050f4772d8f0488fbb6ef"
        );
        let port = GuardedPort {
            port: "veth1".into(),
            mac: [2, 0, 0, 0, 0, 9],
            comment: "n:c:eth0".into(),
        };
        let mut list = Attrs::default();
        for (_, key, data) in elements_of("n", &port) {
            element(&mut list, &key, data.as_deref(), &port.comment);
        }
        assert_eq!(
            hex(&sha256(&list.0)),
            "7d0bd1d2e2c2f05e046bb6041ef0998cae51b2e9f0bda6080c559f8da383c67e"
        );
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
        let mut reply = Attrs::default();
        reply.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        reply.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
            element(
                list,
                &ifname_key("vethab"),
                Some(&[2, 1, 2, 3, 4, 5]),
                "c:eth0",
            );
            // An element without data is not a port (never in the map): skipped.
            element(list, &ifname_key("x"), None, "");
        });
        assert_eq!(
            decode_ports(&reply.0),
            vec![GuardedPort {
                port: "vethab".into(),
                mac: [2, 1, 2, 3, 4, 5],
                comment: "c:eth0".into()
            }]
        );
    }
}
