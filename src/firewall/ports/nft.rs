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

use super::elements::{
    describe, key_text, port_element, PortElement, PortKey, PortMap, HAIRPIN_SET,
};
use super::rules::{dnat_rule, hairpin_rule, localhost_rule, masquerade_marked};
use crate::firewall::engine::{Owner, Want, Wanted};
use crate::firewall::tables::{
    bridge_pair, bridge_pair_key, bridge_pairs, forward, postrouting, ACADEMY, FORWARD, OUTPUT,
    POSTROUTING, PREROUTING,
};
use crate::netlink::nftables::batch::named;
use crate::netlink::nftables::model::{
    Chain, ChainType, Change, Element, Expr, Hook, Op, Priority, Rule,
};
use crate::netlink::{Family, Nftables, NlResult};

/// Keys per batch of a removal: a key is at most 36 bytes encoded (a v6 host address,
/// protocol and port), so a batch stays below BATCH_BYTES.
const DELETE_KEYS_PER_BATCH: usize = 2048;

impl Nftables {
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
        let found = self.elements_of(ACADEMY, &map.name())?;
        Ok(found
            .iter()
            .filter_map(|raw| port_element(raw, map))
            .collect())
    }

    /// Removes the elements under `keys`. Nothing to remove is success. The caller
    /// chooses the keys by their holder: the kernel deletes by key alone. Any number of
    /// keys: DELETE_KEYS_PER_BATCH per batch, each applied all or nothing (a GC of
    /// 10,000 stale ports is a few batches).
    pub fn delete_port_elements(&mut self, keys: &[PortKey]) -> NlResult<()> {
        for part in keys.chunks(DELETE_KEYS_PER_BATCH) {
            match self.run(unpublish(part)) {
                // All or nothing: one key gone already keeps the others. Rare (a DEL
                // repeated, a GC racing), so one at a time.
                Err(e) if e.is(libc::ENOENT) => {
                    for key in part {
                        match self.run(unpublish(std::slice::from_ref(key))) {
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

    /// Publishes `ports` and marks `bridge` for hairpin in one batch, as ADD's batch
    /// does (the restore of ports a flush took; the maps must exist: `portmap_rules`).
    pub fn publish_ports(&mut self, ports: &[PortElement], bridge: &str) -> NlResult<()> {
        self.run(port_changes(ports, bridge, true))
    }
}

/// The messages removing `keys` from their maps.
fn unpublish(keys: &[PortKey]) -> Vec<Change> {
    let mut changes = Vec::new();
    for map in PortMap::ALL {
        let mine: Vec<&PortKey> = keys.iter().filter(|k| k.map() == map).collect();
        changes.extend(Change::elements(
            &mine,
            |key| Element::key(key.bytes()),
            |elements| Op::DeleteElements {
                table: ACADEMY,
                set: map.name(),
                keys: elements.into_iter().map(|e| e.key).collect(),
                publish: true,
            },
            |part| {
                format!(
                    "unpublish {} from nf_tables map {ACADEMY} {}",
                    named(part.iter().map(|k| key_text(k))),
                    map.name()
                )
            },
        ));
    }
    changes
}

/// Port mapping's rules, every publishing network's (the host's, never released):
/// made whole, in their order, with the table, chains, maps and hairpin set they need,
/// whenever one is missing or another of their prefix is there (an admin's `nft flush
/// table` or `flush chain` keeps the maps and their elements, and loses only these).
pub fn portmap_rules() -> Want {
    let mut setup = vec![Change::add_table(ACADEMY)];
    for (name, hook) in [(PREROUTING, Hook::Prerouting), (OUTPUT, Hook::Output)] {
        setup.push(Change::add_chain(Chain {
            table: ACADEMY,
            name,
            hook,
            priority: Priority::NAT_DST,
            kind: ChainType::Nat,
        }));
    }
    setup.push(forward());
    setup.push(postrouting());
    for (id, map) in (1..).zip(PortMap::ALL) {
        setup.push(Change::add_set(map.set(id)));
    }
    let hairpin_id = PortMap::ALL.len() as u32 + 1;
    setup.push(bridge_pairs(HAIRPIN_SET, hairpin_id));
    let mut rules = Vec::new();
    for chain in [PREROUTING, OUTPUT] {
        for (id, map) in (1..).zip(PortMap::ALL) {
            let comment = format!("{RULE_PREFIX} {}", map.name());
            rules.push(rule(chain, comment, dnat_rule(map, id)));
        }
    }
    let hairpin_rule_comment = format!("{RULE_PREFIX} hairpin");
    rules.push(rule(
        FORWARD,
        hairpin_rule_comment,
        hairpin_rule(hairpin_id),
    ));
    let marked = format!("{RULE_PREFIX} masquerade marked");
    rules.push(rule(POSTROUTING, marked, masquerade_marked()));
    let localhost = format!("{RULE_PREFIX} localhost");
    rules.push(rule(POSTROUTING, localhost, localhost_rule()));
    Want {
        wanted: Wanted::group(RULE_PREFIX, rules, setup),
        owner: Owner::Host,
        what: "port mapping".to_string(),
        harm: "published ports are not forwarded to their containers".to_string(),
    }
}

/// The bridge's element of `_hairpin` (its containers reaching each other's published
/// ports, or Services, through the host).
pub fn hairpin_mark(bridge: &str) -> Want {
    let what = format!("the hairpin mark of bridge {bridge} ({bridge} . {bridge})");
    let harm = "its containers cannot reach each other's published ports".to_string();
    bridge_pair(
        HAIRPIN_SET,
        PortMap::ALL.len() as u32 + 1,
        bridge,
        what,
        harm,
    )
}

/// Every port mapping rule's comment starts so.
const RULE_PREFIX: &str = "academy portmap";

fn rule(chain: &str, comment: String, exprs: Vec<Expr>) -> Rule {
    Rule {
        table: ACADEMY,
        chain: chain.to_string(),
        handle: 0,
        comment: Some(comment),
        exprs,
    }
}

/// The changes of ADD's batch that publish `ports` and mark `bridge` for hairpin (they
/// go in the batch with the masquerade's). A key another attachment holds with other
/// data makes the kernel refuse the batch (EEXIST, "publish ...").
pub fn port_changes(ports: &[PortElement], bridge: &str, hairpin: bool) -> Vec<Change> {
    let mut changes = Vec::new();
    for map in PortMap::ALL {
        let mine: Vec<&PortElement> = ports.iter().filter(|p| p.key.map() == map).collect();
        // Not exclusive: the same element again (an ADD repeated) is fine; the same key
        // with other data (another container's port) is EEXIST all the same.
        changes.extend(Change::elements(
            &mine,
            |p| Element {
                key: p.key.bytes(),
                data: Some(p.data()),
                comment: p.comment.clone(),
            },
            |elements| Op::AddElements {
                table: ACADEMY,
                set: map.name(),
                elements,
                exclusive: false,
                publish: true,
            },
            |part| {
                format!(
                    "publish {} in nf_tables map {ACADEMY} {}",
                    named(part.iter().map(|p| describe(p))),
                    map.name()
                )
            },
        ));
    }
    if hairpin || !ports.is_empty() {
        changes.push(Change::add_element(
            ACADEMY,
            HAIRPIN_SET,
            Element::key(bridge_pair_key(bridge)),
            format!("add {bridge} . {bridge} to nf_tables set {ACADEMY} {HAIRPIN_SET}"),
        ));
    }
    changes
}
