//! One change of academy's NAT state, sent as one batch (split only past BATCH_BYTES):
//! the table, chain and sets made sure of, outdated rules replaced, elements added or
//! taken over. Everything is idempotent but the elements added exclusively, so the same
//! change can be sent again after a concurrent one.

use std::net::IpAddr;

use super::nft::{set_name, MasqElement, MasqNetwork};
use super::rule::masquerade_rule;
use crate::firewall::ports::port_changes;
use crate::firewall::ports::PortElement;
use crate::firewall::tables::{postrouting, ACADEMY, POSTROUTING};
use crate::netlink::nftables::attrs::address_bytes;
use crate::netlink::nftables::batch::named;
use crate::netlink::nftables::consts::{TYPE_IPV4_ADDR, TYPE_IPV6_ADDR};
use crate::netlink::nftables::model::{Change, Element, Op, Rule, Set};
use crate::netlink::{Family, Nftables, NlResult};

/// An element of a set, by set name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetElement {
    pub set: String,
    pub element: MasqElement,
}

#[derive(Debug, Default, Clone)]
pub struct NatChange {
    /// Networks whose table, chain and set are made sure of (created if missing, left as
    /// they are if academy's; a foreign chain or set of the name refuses the batch).
    pub ensure: Vec<MasqNetwork>,
    /// academy's rules to delete (by handle), replaced in the same batch by `rules`.
    pub drop_rules: Vec<u64>,
    pub rules: Vec<MasqNetwork>,
    /// Elements to take away before `exclusive` adds them back with their owner's comment.
    pub retake: Vec<SetElement>,
    /// Added with NLM_F_EXCL: the batch fails with EEXIST if one is already there.
    pub exclusive: Vec<SetElement>,
    /// Added if missing, left alone if present (whatever their comment).
    pub if_missing: Vec<SetElement>,
    /// Published ports (portMappings), with the bridge their hairpin is marked on
    /// (none: empty) when the attachment publishes, even when its ports are all held
    /// by the same container on another network: in the same batch as the
    /// masquerade's elements (src/firewall/ports/nft.rs).
    pub ports: Vec<PortElement>,
    pub hairpin_bridge: String,
    /// The chain is known to be there (it holds academy's rules): not sent again. A
    /// NEWCHAIN of an existing base chain is an update, which the kernel frees only
    /// after an RCU grace period, and the socket's close waits that out (the kernel's
    /// NETLINK_URELEASE handler flushes the pending frees): 8-12 ms on a network's
    /// first ADD.
    pub chain_present: bool,
}

impl NatChange {
    pub fn is_empty(&self) -> bool {
        self.ensure.is_empty()
            && self.drop_rules.is_empty()
            && self.rules.is_empty()
            && self.retake.is_empty()
            && self.exclusive.is_empty()
            && self.if_missing.is_empty()
            && self.ports.is_empty()
    }
}

pub fn apply(nft: &mut Nftables, change: &NatChange) -> NlResult<()> {
    let mut changes = Vec::new();
    if !change.ensure.is_empty() || !change.rules.is_empty() {
        changes.push(Change::add_table(ACADEMY));
        // Re-sending an existing base chain is an update, whose old copy the kernel
        // frees after an RCU grace period that the socket's close then waits out.
        if !change.chain_present {
            changes.push(postrouting());
        }
    }
    for (id, network) in change.ensure.iter().enumerate() {
        changes.push(set(network, id as u32 + 1));
    }
    for handle in &change.drop_rules {
        changes.push(Change::delete_rule(
            ACADEMY,
            POSTROUTING,
            *handle,
            format!("delete academy's outdated rule (handle {handle}) from chain {POSTROUTING}"),
        ));
    }
    for network in &change.rules {
        let id = change
            .ensure
            .iter()
            .position(|n| n.set_name() == network.set_name())
            .map_or(0, |i| i as u32 + 1);
        changes.push(rule(network, id));
    }
    element_changes(&mut changes, Elements::Remove, &change.retake);
    element_changes(&mut changes, Elements::AddExclusive, &change.exclusive);
    element_changes(&mut changes, Elements::AddIfMissing, &change.if_missing);
    let hairpin = !change.hairpin_bridge.is_empty();
    changes.extend(port_changes(&change.ports, &change.hairpin_bridge, hairpin));
    nft.run(changes)
}

/// Removes the addresses from the network's sets. Nothing to remove is success.
pub fn delete_elements(nft: &mut Nftables, network: &str, addresses: &[IpAddr]) -> NlResult<()> {
    match change_elements(nft, network, addresses) {
        // One batch is all or nothing: one missing element (or set, or table) keeps
        // the others. Rare (a DEL repeated, a crash undone), so one at a time.
        Err(e) if e.is(libc::ENOENT) => {
            for address in addresses {
                match change_elements(nft, network, std::slice::from_ref(address)) {
                    Err(e) if !e.is(libc::ENOENT) => return Err(e),
                    _ => {}
                }
            }
            Ok(())
        }
        other => other,
    }
}

/// One batch removing `addresses` from the network's sets (all or nothing).
fn change_elements(nft: &mut Nftables, network: &str, addresses: &[IpAddr]) -> NlResult<()> {
    let change = NatChange {
        retake: addresses
            .iter()
            .map(|a| SetElement {
                set: set_name(network, Family::of(*a)),
                element: MasqElement {
                    address: *a,
                    comment: String::new(),
                },
            })
            .collect(),
        ..NatChange::default()
    };
    apply(nft, &change)
}

/// Without NLM_F_EXCL: an identical set is success, any other set of the name EEXIST.
fn set(network: &MasqNetwork, id: u32) -> Change {
    let (_, len, _, _) = network.family.layout();
    let key_type = match network.family {
        Family::V4 => TYPE_IPV4_ADDR,
        Family::V6 => TYPE_IPV6_ADDR,
    };
    Change::add_set(Set {
        table: ACADEMY,
        name: network.set_name(),
        id,
        key: (key_type, len),
        data: None,
        userdata: None,
        exclusive: false,
    })
}

fn rule(network: &MasqNetwork, set_id: u32) -> Change {
    let rule = Rule {
        table: ACADEMY,
        chain: POSTROUTING.to_string(),
        handle: 0,
        comment: Some(network.rule_comment()),
        exprs: masquerade_rule(network, set_id),
    };
    Change::add_rule(
        rule,
        format!("add the masquerade rule of set {}", network.set_name()),
    )
}

/// What is done with a list of elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elements {
    Remove,
    /// Added, and the batch refused (EEXIST) if one is already there.
    AddExclusive,
    /// Added if missing, left alone if present.
    AddIfMissing,
}

/// One message per set and ELEMENT_LIST_BYTES of elements.
fn element_changes(out: &mut Vec<Change>, what: Elements, elements: &[SetElement]) {
    let verb = match what {
        Elements::Remove => "remove",
        Elements::AddExclusive | Elements::AddIfMissing => "add",
    };
    let mut sets: Vec<&str> = elements.iter().map(|e| e.set.as_str()).collect();
    sets.sort_unstable();
    sets.dedup();
    for set in sets {
        let mine: Vec<&MasqElement> = elements
            .iter()
            .filter(|e| e.set == set)
            .map(|e| &e.element)
            .collect();
        out.extend(Change::elements(
            &mine,
            |e| Element {
                key: address_bytes(e.address),
                data: None,
                comment: match what {
                    Elements::Remove => String::new(),
                    Elements::AddExclusive | Elements::AddIfMissing => e.comment.clone(),
                },
            },
            |elements| match what {
                Elements::Remove => Op::DeleteElements {
                    table: ACADEMY,
                    set: set.to_string(),
                    keys: elements.into_iter().map(|e| e.key).collect(),
                    publish: false,
                },
                Elements::AddExclusive | Elements::AddIfMissing => Op::AddElements {
                    table: ACADEMY,
                    set: set.to_string(),
                    elements,
                    exclusive: what == Elements::AddExclusive,
                    publish: false,
                },
            },
            |part| {
                let addresses = named(part.iter().map(|e| e.address.to_string()));
                format!("{verb} {addresses} in nf_tables set {ACADEMY} {set}")
            },
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::encode;
    use crate::netlink::Step;

    /// The messages' bytes, pinned as their digest (kind, flags, attributes): a refactor
    /// of the encoding that changes one byte on the wire fails here.
    #[test]
    fn the_masquerade_changes_encode_as_before() {
        let network = MasqNetwork {
            network: "n".into(),
            family: Family::V4,
            subnets: vec!["10.1.0.0/16".parse().unwrap()],
            non_masquerade: Vec::new(),
        };
        let element = SetElement {
            set: network.set_name(),
            element: MasqElement {
                address: "10.1.0.2".parse().unwrap(),
                comment: "n:c:eth0".into(),
            },
        };
        let mut changes = vec![
            Change::add_table(ACADEMY),
            postrouting(),
            set(&network, 1),
            rule(&network, 1),
        ];
        element_changes(
            &mut changes,
            Elements::AddIfMissing,
            std::slice::from_ref(&element),
        );
        element_changes(&mut changes, Elements::Remove, &[element]);
        let port = PortElement {
            key: crate::firewall::ports::PortKey {
                family: Family::V6,
                protocol: 6,
                host_ip: Some("fd00::1".parse().unwrap()),
                host_port: 8080,
            },
            address: "fd00::9".parse().unwrap(),
            port: 80,
            comment: "n:c:eth0".into(),
        };
        changes.extend(port_changes(&[port], "br0", false));
        let digests: Vec<String> = changes
            .iter()
            .map(|c| {
                let wire = encode::op(&c.op);
                let mut bytes = vec![wire.kind];
                bytes.extend_from_slice(&wire.flags.to_ne_bytes());
                bytes.extend_from_slice(&wire.attrs.0);
                bytes.extend_from_slice(c.description.as_bytes());
                hex(&sha256(&bytes))
            })
            .collect();
        let steps: Vec<Step> = changes.iter().map(|c| c.op.step()).collect();
        assert_eq!(
            steps,
            [
                Step::CreateTable,
                Step::CreateChain,
                Step::CreateSet,
                Step::AddRule,
                Step::AddElement,
                Step::RemoveElement,
                Step::Publish,
                Step::AddElement,
            ]
        );
        assert_eq!(
            digests,
            [
                "dd0665e26f615c86d88da05207196f7a3f3983e98b041e688ff0aee3155678df",
                "a49fa3932e6d5b8c9047b5304a1e97db11273cc3f23b3be07b1edcf73a9d6f53",
                "bda6dd144172d2d113abb3c1314683ec4d144b767109d2300ca7a8a7cb9b4555",
                "622ca5562d2b5d8fb8404933f143f755542ede6f085b065d52aa7eab39b092a2",
                "b1a9621fa326e8cd4908ec39c3ef39a803abd2990344addb665667ff2ac5e9b3",
                "64c144aef263dbc956e36b7f212f40ae1fd8959d336c0ab373d7925ed5f47f7c",
                "49526609427a9eb5f90434b272d9ed5759e861b3c2962a5b773cf0b5d4ec7397",
                "e6d8154efb44dc02a158d7a6e45f7df1158737592099d36e32d559627cfa93fd"
            ]
        );
    }
}
