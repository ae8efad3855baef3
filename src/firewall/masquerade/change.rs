//! One change of academy's NAT state, sent as one batch (split only past BATCH_BYTES):
//! the network's rules as the engine completes them, elements added or taken over,
//! published ports. Everything is idempotent but the elements added exclusively, so the
//! same change can be sent again after a concurrent one.

use super::nft::MasqElement;
use crate::firewall::ports::port_changes;
use crate::firewall::ports::PortElement;
use crate::firewall::tables::ACADEMY;
use crate::netlink::nftables::attrs::address_bytes;
use crate::netlink::nftables::batch::named;
use crate::netlink::nftables::model::{Change, Element, Op};
use crate::netlink::{Nftables, NlResult};

/// An element of a set, by set name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetElement {
    pub set: String,
    pub element: MasqElement,
}

#[derive(Debug, Default, Clone)]
pub struct NatChange {
    /// What the engine's look found the network's rules lack (engine::batch): what they
    /// need made first, outdated forms deleted, the rules added. First in the batch.
    pub repair: Vec<Change>,
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
}

pub fn apply(nft: &mut Nftables, change: &NatChange) -> NlResult<()> {
    let mut changes = change.repair.clone();
    element_changes(&mut changes, Elements::Remove, &change.retake);
    element_changes(&mut changes, Elements::AddExclusive, &change.exclusive);
    element_changes(&mut changes, Elements::AddIfMissing, &change.if_missing);
    let hairpin = !change.hairpin_bridge.is_empty();
    changes.extend(port_changes(&change.ports, &change.hairpin_bridge, hairpin));
    nft.run(changes)
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
    use super::super::nft::MasqNetwork;
    use super::super::rule::masquerade_rule;
    use super::super::wants::set_of;
    use super::*;
    use crate::firewall::tables::{postrouting, POSTROUTING};
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::encode;
    use crate::netlink::nftables::model::Rule;
    use crate::netlink::Family;
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
            Change::add_set(set_of(&network.network, network.family)),
        ];
        let rule = Rule {
            table: ACADEMY,
            chain: POSTROUTING.to_string(),
            handle: 0,
            comment: Some(network.rule_comment()),
            exprs: masquerade_rule(&network),
        };
        changes.push(Change::add_rule(
            rule,
            "add the masquerade rule of set n-v4",
        ));
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
