//! Port mapping in academy's table (`inet academy`): DNAT of published host ports to
//! containers, encoded by hand like the masquerade.
//!
//! Shared by every network (a host port is the host's, whatever network asks for it):
//! - maps `_ports-v4` / `_ports-v6`: `inet_proto . inet_service : address . inet_service`,
//!   (protocol, host port) to the container's address and port;
//! - maps `_ports-hostip-v4` / `_ports-hostip-v6`: the same keyed by the host address
//!   too, for mappings with a hostIP;
//! - chains `prerouting` (traffic from elsewhere) and `output` (the host's own, to its
//!   addresses and 127.0.0.1), type nat at priority dstnat, each with one DNAT rule per
//!   map (the hostIP maps first: the more specific mapping wins on its address), every
//!   rule matching only `fib daddr type local`: a map lookup, so the same cost for one
//!   published port or ten thousand;
//! - set `_hairpin` of `bridge . bridge` names, looked up by a rule of chain `forward`
//!   (type filter, accepting everything) that marks DNATed traffic leaving by the
//!   bridge it came from; in `postrouting`, rules masquerading marked traffic and
//!   DNATed traffic from 127.0.0.0/8.
//!
//! Each map element's comment names its holder `<network>:<container id>:<ifname>`
//! (the maps are shared, so the network is part of the name), which is how DEL, GC and
//! reclaim remove only their own. The names start with '_', which no network name can
//! (config.rs), so they never meet a network's masquerade sets.
//!
//! A host port is held once: adding a key the map has with other data is refused by the
//! kernel (EEXIST) and, the batch being atomic, nothing of the ADD is applied.

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};

use super::attrs::comment_udata;
use super::batch::{element_groups, named, Batch, Change};
use super::consts::{
    CHAIN, HAIRPIN_SET, IFNAMSIZ, NFPROTO_INET, NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFTA_RULE_CHAIN,
    NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_RULE_USERDATA,
    NFTA_SET_DATA_LEN, NFTA_SET_DATA_TYPE, NFTA_SET_ELEM_DATA, NFTA_SET_ELEM_KEY,
    NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE,
    NFTA_SET_ELEM_USERDATA, NFTA_SET_FLAGS, NFTA_SET_ID, NFTA_SET_KEY_LEN, NFTA_SET_KEY_TYPE,
    NFTA_SET_NAME, NFTA_SET_TABLE, NFT_MSG_DELRULE, NFT_MSG_DELSETELEM, NFT_MSG_GETSETELEM,
    NFT_MSG_NEWRULE, NFT_MSG_NEWSET, NFT_MSG_NEWSETELEM, NFT_SET_MAP, NF_INET_FORWARD,
    NF_INET_LOCAL_OUT, NF_INET_POST_ROUTING, NF_INET_PRE_ROUTING, NF_IP_PRI_FILTER,
    NF_IP_PRI_NAT_DST, NF_IP_PRI_NAT_SRC, TABLE, TYPE_BITS, TYPE_IFNAME,
};
use super::objects::{new_chain, new_table, BaseChain, Table};
use super::port_elements::{decode_ports, describe, key_text, PortElement, PortKey, PortMap};
use super::portmap_rules::{dnat_rule, hairpin_rule, localhost_rule, masquerade_marked};
use super::step::Step;
use super::Nftables;

use crate::netlink::nfnetlink::{Attrs, Family};
use crate::netlink::socket::{Await, NlResult};

pub const PREROUTING: &str = "prerouting";
pub const OUTPUT: &str = "output";
pub const FORWARD: &str = "forward";

/// Keys per batch of a removal: a key is at most 36 bytes encoded (a v6 host address,
/// protocol and port), so a batch stays below BATCH_BYTES.
const DELETE_KEYS_PER_BATCH: usize = 2048;

impl Nftables {
    /// The element under `key`, if any.
    pub fn port_element(&mut self, key: &PortKey) -> NlResult<Option<PortElement>> {
        let map = key.map();
        let attrs = element_list(&map.name(), |list| {
            list.nested(NFTA_LIST_ELEM, |elem| {
                elem.nested(NFTA_SET_ELEM_KEY, |k| k.put(NFTA_DATA_VALUE, &key.bytes()));
            });
        });
        let what = format!(
            "look up {} in nf_tables map inet {TABLE} {}",
            key_text(key),
            map.name()
        );
        let mut found = Vec::new();
        match self.request(NFT_MSG_GETSETELEM, 0, attrs, Await::One, &what, |p| {
            found.extend(decode_ports(p, map));
        }) {
            Ok(()) => Ok(found.into_iter().next()),
            Err(e) if e.is(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every element of the four maps (none when they do not exist).
    pub fn port_elements(&mut self) -> NlResult<Vec<PortElement>> {
        let mut found = Vec::new();
        for map in PortMap::ALL {
            found.extend(self.port_map_elements(map)?);
        }
        Ok(found)
    }

    /// Every element of the map of (`family`, keyed by host address or not).
    pub fn port_elements_of(
        &mut self,
        family: Family,
        by_host_ip: bool,
    ) -> NlResult<Vec<PortElement>> {
        self.port_map_elements(PortMap { family, by_host_ip })
    }

    fn port_map_elements(&mut self, map: PortMap) -> NlResult<Vec<PortElement>> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        attrs.str(NFTA_SET_ELEM_LIST_SET, &map.name());
        let what = format!(
            "list the elements of nf_tables map inet {TABLE} {}",
            map.name()
        );
        self.dump_in(
            NFPROTO_INET,
            NFT_MSG_GETSETELEM,
            attrs,
            &what,
            |p, found| found.extend(decode_ports(p, map)),
        )
    }

    /// Removes the elements under `keys`. Nothing to remove is success. The caller
    /// chooses the keys by their holder: the kernel deletes by key alone. Any number of
    /// keys: DELETE_KEYS_PER_BATCH per batch, each applied all or nothing (a GC of
    /// 10,000 stale ports is a few batches).
    pub fn delete_port_elements(&mut self, keys: &[PortKey]) -> NlResult<()> {
        for part in keys.chunks(DELETE_KEYS_PER_BATCH) {
            match self.delete_ports_batch(part) {
                // All or nothing: one key gone already keeps the others. Rare (a DEL
                // repeated, a GC racing), so one at a time.
                Err(e) if e.is(libc::ENOENT) => {
                    for key in part {
                        match self.delete_ports_batch(std::slice::from_ref(key)) {
                            Err(e) if !e.is(libc::ENOENT) => return Err(e),
                            _ => {}
                        }
                    }
                }
                other => other?,
            }
        }
        Ok(())
    }

    fn delete_ports_batch(&mut self, keys: &[PortKey]) -> NlResult<()> {
        let mut batch = Batch::new(&mut self.socket);
        for map in PortMap::ALL {
            let mine: Vec<&PortKey> = keys.iter().filter(|k| k.map() == map).collect();
            let groups = element_groups(&mine, |list, key| {
                list.nested(NFTA_LIST_ELEM, |elem| {
                    elem.nested(NFTA_SET_ELEM_KEY, |k| k.put(NFTA_DATA_VALUE, &key.bytes()));
                });
            });
            for (encoded, range) in groups {
                let attrs = element_list(&map.name(), |list| list.0.extend_from_slice(&encoded));
                batch.add(
                    Step::Unpublish,
                    NFT_MSG_DELSETELEM,
                    0,
                    attrs,
                    format!(
                        "unpublish {} from nf_tables map inet {TABLE} {}",
                        named(mine[range].iter().map(|k| key_text(k))),
                        map.name()
                    ),
                );
            }
        }
        batch.commit()
    }

    /// Table, chains, maps, set and rules of port mapping, made sure of in one batch:
    /// nothing is sent when every rule is there (one small dump of the table's rules);
    /// otherwise the objects are created if missing (an identical one is success) and
    /// academy's port mapping rules replaced, so an admin's `nft flush table` or `flush
    /// chain` (which keep the maps and their elements) is repaired. True when it wrote.
    pub fn ensure_portmap(&mut self) -> NlResult<bool> {
        self.ensure_portmap_rules().map(|wrote| wrote.is_some())
    }

    /// The comments of port mapping's rules that are not in the table (none missing
    /// when the table holds no port mapping at all: nothing was ever published).
    pub fn missing_portmap_rules(&mut self) -> NlResult<Vec<String>> {
        let present: Vec<(String, String)> = self
            .commented_rules(super::NFPROTO_INET, TABLE, None)?
            .into_iter()
            .filter(|r| r.comment.starts_with(RULE_PREFIX))
            .map(|r| (r.chain, r.comment))
            .collect();
        Ok(wanted_rules()
            .into_iter()
            .filter(|(chain, comment)| !present.iter().any(|p| p.0 == *chain && p.1 == *comment))
            .map(|(_, comment)| comment)
            .collect())
    }

    /// Marks `bridge`'s hairpin traffic (its element in `_hairpin`), as ADD's batch does.
    pub fn mark_hairpin(&mut self, bridge: &str) -> NlResult<()> {
        super::batch::commit_all(&mut self.socket, port_changes(&[], bridge, true))
    }

    fn ensure_portmap_rules(&mut self) -> NlResult<Option<()>> {
        let present: Vec<(String, String, u64)> = self
            .commented_rules(super::NFPROTO_INET, TABLE, None)?
            .into_iter()
            .filter(|r| r.comment.starts_with(RULE_PREFIX))
            .map(|r| (r.chain, r.comment, r.handle))
            .collect();
        let wanted = wanted_rules();
        let complete = present.len() == wanted.len()
            && wanted
                .iter()
                .all(|(chain, comment)| present.iter().any(|p| p.0 == *chain && p.1 == *comment));
        if complete {
            return Ok(None);
        }
        let mut batch = Batch::new(&mut self.socket);
        batch.push(new_table(Table::Academy));
        let chains = [
            (PREROUTING, NF_INET_PRE_ROUTING, NF_IP_PRI_NAT_DST, "nat"),
            (OUTPUT, NF_INET_LOCAL_OUT, NF_IP_PRI_NAT_DST, "nat"),
            (FORWARD, NF_INET_FORWARD, NF_IP_PRI_FILTER, "filter"),
            (CHAIN, NF_INET_POST_ROUTING, NF_IP_PRI_NAT_SRC, "nat"),
        ];
        for (name, hook, priority, kind) in chains {
            let chain = BaseChain {
                name,
                hook,
                priority,
                kind,
            };
            batch.push(new_chain(Table::Academy, chain));
        }
        for (id, map) in (1..).zip(PortMap::ALL) {
            let (key_type, key_len) = map.key();
            let (data_type, data_len) = map.data();
            let mut set = Attrs::default();
            set.str(NFTA_SET_TABLE, TABLE);
            set.str(NFTA_SET_NAME, &map.name());
            set.be32(NFTA_SET_FLAGS, NFT_SET_MAP);
            set.be32(NFTA_SET_KEY_TYPE, key_type);
            set.be32(NFTA_SET_KEY_LEN, key_len);
            set.be32(NFTA_SET_DATA_TYPE, data_type);
            set.be32(NFTA_SET_DATA_LEN, data_len);
            set.be32(NFTA_SET_ID, id);
            batch.add(
                Step::CreateSet,
                NFT_MSG_NEWSET,
                NLM_F_CREATE,
                set,
                format!("create map {}", map.name()),
            );
        }
        let hairpin_id = PortMap::ALL.len() as u32 + 1;
        let mut set = Attrs::default();
        set.str(NFTA_SET_TABLE, TABLE);
        set.str(NFTA_SET_NAME, HAIRPIN_SET);
        set.be32(NFTA_SET_KEY_TYPE, (TYPE_IFNAME << TYPE_BITS) | TYPE_IFNAME);
        set.be32(NFTA_SET_KEY_LEN, 2 * IFNAMSIZ as u32);
        set.be32(NFTA_SET_ID, hairpin_id);
        batch.add(
            Step::CreateSet,
            NFT_MSG_NEWSET,
            NLM_F_CREATE,
            set,
            format!("create set {HAIRPIN_SET}"),
        );
        // What is left of the rules goes: they are added back whole, in their order.
        for (chain, comment, handle) in &present {
            let mut rule = Attrs::default();
            rule.str(NFTA_RULE_TABLE, TABLE);
            rule.str(NFTA_RULE_CHAIN, chain);
            rule.be64(NFTA_RULE_HANDLE, *handle);
            batch.add(
                Step::DeleteRule,
                NFT_MSG_DELRULE,
                0,
                rule,
                format!("delete the rule {comment:?} (handle {handle}) from chain {chain}"),
            );
        }
        for chain in [PREROUTING, OUTPUT] {
            for (id, map) in (1..).zip(PortMap::ALL) {
                let comment = format!("{RULE_PREFIX} {}", map.name());
                add_rule(&mut batch, chain, &comment, |list| dnat_rule(list, map, id));
            }
        }
        add_rule(
            &mut batch,
            FORWARD,
            &format!("{RULE_PREFIX} hairpin"),
            |list| hairpin_rule(list, hairpin_id),
        );
        add_rule(
            &mut batch,
            CHAIN,
            &format!("{RULE_PREFIX} masquerade marked"),
            masquerade_marked,
        );
        add_rule(
            &mut batch,
            CHAIN,
            &format!("{RULE_PREFIX} localhost"),
            localhost_rule,
        );
        batch.commit().map(Some)
    }
}

/// Every rule of port mapping's, as (chain, comment).
fn wanted_rules() -> Vec<(&'static str, String)> {
    let mut wanted = Vec::new();
    for chain in [PREROUTING, OUTPUT] {
        for map in PortMap::ALL {
            wanted.push((chain, format!("{RULE_PREFIX} {}", map.name())));
        }
    }
    wanted.push((FORWARD, format!("{RULE_PREFIX} hairpin")));
    wanted.push((CHAIN, format!("{RULE_PREFIX} masquerade marked")));
    wanted.push((CHAIN, format!("{RULE_PREFIX} localhost")));
    wanted
}

/// Every port mapping rule's comment starts so.
const RULE_PREFIX: &str = "academy portmap";

fn add_rule(batch: &mut Batch, chain: &str, comment: &str, expressions: impl FnOnce(&mut Attrs)) {
    let mut rule = Attrs::default();
    rule.str(NFTA_RULE_TABLE, TABLE);
    rule.str(NFTA_RULE_CHAIN, chain);
    rule.nested(NFTA_RULE_EXPRESSIONS, expressions);
    rule.put(NFTA_RULE_USERDATA, &comment_udata(comment));
    batch.add(
        Step::AddRule,
        NFT_MSG_NEWRULE,
        NLM_F_CREATE | NLM_F_APPEND,
        rule,
        format!("add the rule {comment:?} to chain {chain}"),
    );
}

/// The changes of ADD's batch that publish `ports` and mark `bridge` for hairpin (see
/// change.rs: they go in the batch with the masquerade's). A key another attachment holds
/// with other data makes the kernel refuse the batch (EEXIST, "publish ...").
pub(super) fn port_changes(ports: &[PortElement], bridge: &str, hairpin: bool) -> Vec<Change> {
    let mut changes = Vec::new();
    for map in PortMap::ALL {
        let mine: Vec<&PortElement> = ports.iter().filter(|p| p.key.map() == map).collect();
        let groups = element_groups(&mine, |list, p| {
            list.nested(NFTA_LIST_ELEM, |elem| {
                elem.nested(NFTA_SET_ELEM_KEY, |k| {
                    k.put(NFTA_DATA_VALUE, &p.key.bytes())
                });
                elem.nested(NFTA_SET_ELEM_DATA, |d| d.put(NFTA_DATA_VALUE, &p.data()));
                elem.put(NFTA_SET_ELEM_USERDATA, &comment_udata(&p.comment));
            });
        });
        for (encoded, range) in groups {
            let attrs = element_list(&map.name(), |list| list.0.extend_from_slice(&encoded));
            // No EXCL: the same element again (an ADD repeated) is fine; the same key
            // with other data (another container's port) is EEXIST all the same.
            changes.push(Change {
                step: Step::Publish,
                kind: NFT_MSG_NEWSETELEM,
                flags: NLM_F_CREATE,
                attrs,
                description: format!(
                    "publish {} in nf_tables map inet {TABLE} {}",
                    named(mine[range].iter().map(|p| describe(p))),
                    map.name()
                ),
            });
        }
    }
    if hairpin || !ports.is_empty() {
        let attrs = element_list(HAIRPIN_SET, |list| {
            list.nested(NFTA_LIST_ELEM, |elem| {
                elem.nested(NFTA_SET_ELEM_KEY, |k| {
                    k.put(NFTA_DATA_VALUE, &hairpin_key(bridge))
                });
            });
        });
        changes.push(Change {
            step: Step::AddElement,
            kind: NFT_MSG_NEWSETELEM,
            flags: NLM_F_CREATE,
            attrs,
            description: format!(
                "add {bridge} . {bridge} to nf_tables set inet {TABLE} {HAIRPIN_SET}"
            ),
        });
    }
    changes
}

pub(super) fn element_list(set: &str, elements: impl FnOnce(&mut Attrs)) -> Attrs {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
    attrs.str(NFTA_SET_ELEM_LIST_SET, set);
    attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, elements);
    attrs
}

/// `bridge . bridge`, each name NUL-padded to IFNAMSIZ as the kernel loads it.
pub(super) fn hairpin_key(bridge: &str) -> Vec<u8> {
    let mut name = bridge.as_bytes().to_vec();
    name.resize(IFNAMSIZ, 0);
    [name.clone(), name].concat()
}
