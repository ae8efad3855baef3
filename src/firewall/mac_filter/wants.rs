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
use crate::netlink::nftables::model::{Chain, ChainType, Change, Element, Hook, Priority, Rule};

/// The network's map and sets, then its rule (which looks the sets up, so they come
/// first in a batch), with the table and chain made if missing; nothing without
/// macspoofchk, unless every key is asked for.
pub fn network_wants(conf: &Config, keys: Keys) -> Vec<Want> {
    if keys == Keys::AsConfigured && !conf.mac_spoof_check {
        return Vec::new();
    }
    let network = conf.name.as_str();
    let chain = Chain {
        table: ACADEMY_BRIDGE,
        name: BRIDGE_CHAIN,
        hook: Hook::Prerouting,
        priority: Priority::BRIDGE_NAT_DST_BRIDGED,
        kind: ChainType::Filter,
    };
    let setup = vec![Change::add_table(ACADEMY_BRIDGE), Change::add_chain(chain)];
    let owner = Owner::Network(network.to_string());
    let unchecked = "its guarded ports' source MACs are not checked".to_string();
    let set = |set, what: String| Want {
        wanted: Wanted::Set {
            set,
            setup: setup.clone(),
        },
        owner: owner.clone(),
        what,
        harm: unchecked.clone(),
    };
    let (map, guarded, allowed) = (
        ports_map(network),
        guarded_set(network),
        allowed_set(network),
    );
    let rule = Rule {
        table: ACADEMY_BRIDGE,
        chain: BRIDGE_CHAIN.to_string(),
        handle: 0,
        comment: Some(rule_comment(network)),
        exprs: drop_rule(&guarded, &allowed),
    };
    vec![
        set(map_of(&map), format!("map {map}")),
        set(guarded_of(&map, &guarded), format!("set {guarded}")),
        set(allowed_of(&map, &allowed), format!("set {allowed}")),
        Want {
            wanted: Wanted::Rule {
                rule,
                known_as: vec![rule_comment(network), cut_rule_comment(network)],
                setup: setup.clone(),
            },
            owner: owner.clone(),
            what: format!("the macspoofchk rule of network {network}"),
            harm: "every guarded port accepts any source MAC".to_string(),
        },
    ]
}

/// A guarded port's elements: its host veth mapped to `mac` (unknown: any MAC, and no
/// pair to look for), in the guarded set, and paired with `mac` in the allowed set.
/// Each key names the host veth, which is the attachment's own: an element under it
/// with another MAC is a stale one of the same attachment, replaced.
pub fn port_wants(network: &str, who: &Attachment, mac: Option<[u8; 6]>) -> Vec<Want> {
    let port = who.host_name();
    let owner = Owner::Attachment(who.owners().to_vec());
    let element =
        |set: String, key: Vec<u8>, data: Option<Vec<u8>>, what: String, harm: &str| Want {
            wanted: Wanted::Element {
                table: ACADEMY_BRIDGE,
                set,
                element: Element {
                    key,
                    data,
                    comment: who.owner(),
                },
                replace: true,
                setup: Vec::new(),
            },
            owner: owner.clone(),
            what,
            harm: harm.to_string(),
        };
    let unchecked = "its source MACs are not checked";
    let mut wants = vec![
        element(
            ports_map(network),
            ifname_bytes(&port),
            mac.map(|m| m.to_vec()),
            format!("host veth {port}"),
            unchecked,
        ),
        element(
            guarded_set(network),
            ifname_bytes(&port),
            None,
            format!("host veth {port}"),
            unchecked,
        ),
    ];
    if let Some(mac) = mac {
        wants.push(element(
            allowed_set(network),
            pair_key(&port, mac),
            None,
            format!("{port} . {}", format_mac(mac)),
            "every frame from it is dropped",
        ));
    }
    wants
}
