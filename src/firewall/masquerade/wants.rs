//! What the masquerade wants of `inet academy`, as data (../engine/): per family of the
//! network, one rule that masquerades its set's addresses, known by the set it looks up
//! (whatever ranges an older form was made for), with the set made first; and per
//! address of an attachment, its element, which carries the attachment's owner comment.

use std::net::IpAddr;

use super::nft::{set_name, tail_matches, MasqNetwork, RULE_PREFIX};
use super::rule::{masquerade_rule, set_id};
use crate::attachment::Attachment;
use crate::config::Config;
use crate::firewall::engine::{Accepts, Owner, Slot, Want, Wanted};
use crate::firewall::tables::{postrouting, ACADEMY, POSTROUTING};
use crate::netlink::nftables::attrs::address_bytes;
use crate::netlink::nftables::consts::{TYPE_IPV4_ADDR, TYPE_IPV6_ADDR};
use crate::netlink::nftables::model::{Change, Element, Rule, Set};
use crate::netlink::Family;

/// The rule of each of `networks` (one per family). With academy's own IPAM a rule is
/// current when made for the network's ranges and nonMasqueradeCIDRs exactly; a
/// delegated IPAM's subnets are only known from each ADD's addresses, which would make
/// every ADD from another subnet rewrite the rule, so there any rule of academy's for
/// the set made for the config's nonMasqueradeCIDRs is current.
pub fn rule_wants(conf: &Config, networks: &[MasqNetwork]) -> Vec<Want> {
    networks
        .iter()
        .map(|network| {
            let set = network.set_name();
            let comment = network.rule_comment();
            let rule = Rule {
                table: ACADEMY,
                chain: POSTROUTING.to_string(),
                handle: 0,
                comment: Some(comment.clone()),
                exprs: masquerade_rule(network),
            };
            let also_current = match conf.builtin() {
                Some(_) => None,
                None => Some(Accepts {
                    test: tail_matches,
                    arg: network.non_masquerade_tail(),
                }),
            };
            let slot = Slot {
                prefix: RULE_PREFIX.to_string(),
                set: set.clone(),
                also_current,
            };
            let setup = vec![
                Change::add_table(ACADEMY),
                postrouting(),
                Change::add_set(set_of(&network.network, network.family)),
            ];
            Want {
                wanted: Wanted::Rule {
                    rule,
                    known_as: vec![comment],
                    slot: Some(slot),
                    setup,
                },
                owner: Owner::Network(conf.name.clone()),
                what: format!("the masquerade rule of set {set}"),
                harm: "its containers' traffic out of the node leaves unmasqueraded".to_string(),
            }
        })
        .collect()
}

/// The elements of an attachment's addresses, each naming it (in the form written now;
/// any form academy has written is its own).
pub fn element_wants(network: &str, who: &Attachment, addresses: &[IpAddr]) -> Vec<Want> {
    let owner = Owner::Attachment(who.owners().to_vec());
    addresses
        .iter()
        .map(|address| {
            let family = Family::of(*address);
            let set = set_of(network, family);
            Want {
                wanted: Wanted::Element {
                    table: ACADEMY,
                    set: set.name.clone(),
                    element: Element {
                        key: address_bytes(*address),
                        data: None,
                        comment: who.owner(),
                    },
                    replace: false,
                    setup: vec![Change::add_table(ACADEMY), Change::add_set(set)],
                },
                owner: owner.clone(),
                what: format!("address {address}"),
                harm: "its traffic out of the node leaves unmasqueraded".to_string(),
            }
        })
        .collect()
}

/// The network's set of `family`: a plain set of the family's addresses. Made without
/// NLM_F_EXCL: an identical set is success, another set of the name refuses the batch.
pub(super) fn set_of(network: &str, family: Family) -> Set {
    let (key_type, len) = match family {
        Family::V4 => (TYPE_IPV4_ADDR, 4),
        Family::V6 => (TYPE_IPV6_ADDR, 16),
    };
    Set {
        table: ACADEMY,
        name: set_name(network, family),
        id: set_id(family),
        key: (key_type, len),
        data: None,
        userdata: None,
        exclusive: false,
    }
}
