//! What the MAC filter wants of `bridge academy`, as data (../engine/): the network's
//! map, two sets and rule, made with its first guarded port; and each guarded port's
//! three elements, which carry its attachment's owner comment.

use super::create::{allowed_of, drop_rule, guarded_of, map_of};
use super::names::{
    allowed_set, cut_rule_comment, guarded_set, pair_key, ports_map, rule_comment, BRIDGE_CHAIN,
};
use crate::attachment::Attachment;
use crate::cni::result::format_mac;
use crate::config::Config;
use crate::firewall::engine::{Keys, Owner, Want, Wanted};
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::nftables::attrs::ifname_bytes;
use crate::netlink::nftables::model::{
    Chain, ChainType, Change, Element, Hook, Priority, Rule, Set,
};

/// The network's rule, with the table, chain, map and sets made first if missing (the
/// rule looks the sets up); with every key asked for (a release), the map and sets as
/// objects of their own too. Nothing without macspoofchk, unless every key is asked
/// for. The map and sets are containers: a port's elements make theirs when missing
/// (`port_wants`), so a CHECK looks for no set apart.
pub fn network_wants(conf: &Config, keys: Keys) -> Vec<Want> {
    if keys == Keys::AsConfigured && !conf.mac_spoof_check {
        return Vec::new();
    }
    let network = conf.name.as_str();
    let owner = Owner::Network(network.to_string());
    let (map, guarded, allowed) = containers(network);
    let mut setup = base();
    setup.extend([&map, &guarded, &allowed].map(|s| Change::add_set(s.clone())));
    let rule = Rule {
        table: ACADEMY_BRIDGE,
        chain: BRIDGE_CHAIN.to_string(),
        handle: 0,
        comment: Some(rule_comment(network)),
        exprs: drop_rule(&guarded.name, &allowed.name),
    };
    let mut wants = vec![Want {
        wanted: Wanted::Rule {
            rule,
            known_as: vec![rule_comment(network), cut_rule_comment(network)],
            slot: None,
            setup,
        },
        owner: owner.clone(),
        what: format!("the macspoofchk rule of network {network}"),
        harm: "every guarded port accepts any source MAC".to_string(),
    }];
    if keys == Keys::All {
        for set in [map, guarded, allowed] {
            let kind = if set.data.is_some() { "map" } else { "set" };
            wants.push(Want {
                what: format!("{kind} {}", set.name),
                wanted: Wanted::Set { set, setup: base() },
                owner: owner.clone(),
                harm: "its guarded ports' source MACs are not checked".to_string(),
            });
        }
    }
    wants
}

/// The table and its chain, made if missing.
fn base() -> Vec<Change> {
    let chain = Chain {
        table: ACADEMY_BRIDGE,
        name: BRIDGE_CHAIN,
        hook: Hook::Prerouting,
        priority: Priority::BRIDGE_NAT_DST_BRIDGED,
        kind: ChainType::Filter,
    };
    vec![Change::add_table(ACADEMY_BRIDGE), Change::add_chain(chain)]
}

/// The network's map, guarded set and allowed set.
fn containers(network: &str) -> (Set, Set, Set) {
    let map = ports_map(network);
    (
        map_of(&map),
        guarded_of(&map, &guarded_set(network)),
        allowed_of(&map, &allowed_set(network)),
    )
}

/// A guarded port's elements: its host veth mapped to `mac` (unknown: any MAC, and no
/// pair to look for), in the guarded set, and paired with `mac` in the allowed set.
/// Each key names the host veth, which is the attachment's own: an element under it
/// with another MAC is a stale one of the same attachment, replaced.
pub fn port_wants(network: &str, who: &Attachment, mac: Option<[u8; 6]>) -> Vec<Want> {
    let port = who.host_name();
    let owner = Owner::Attachment(who.owners().to_vec());
    let (map, guarded, allowed) = containers(network);
    let element = |set: Set, key: Vec<u8>, data: Option<Vec<u8>>, what: String, harm: &str| {
        let mut setup = base();
        setup.push(Change::add_set(set.clone()));
        Want {
            wanted: Wanted::Element {
                table: ACADEMY_BRIDGE,
                set: set.name,
                element: Element {
                    key,
                    data,
                    comment: who.owner(),
                },
                replace: true,
                setup,
            },
            owner: owner.clone(),
            what,
            harm: harm.to_string(),
        }
    };
    let unchecked = "its source MACs are not checked";
    let mut wants = vec![
        element(
            map,
            ifname_bytes(&port),
            mac.map(|m| m.to_vec()),
            format!("host veth {port}"),
            unchecked,
        ),
        element(
            guarded,
            ifname_bytes(&port),
            None,
            format!("host veth {port}"),
            unchecked,
        ),
    ];
    if let Some(mac) = mac {
        wants.push(element(
            allowed,
            pair_key(&port, mac),
            None,
            format!("{port} . {}", format_mac(mac)),
            "every frame from it is dropped",
        ));
    }
    wants
}
