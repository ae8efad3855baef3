//! A network's MAC filter made, in one batch with its first guarded port's ADD: the
//! table `bridge academy`, its chain, the network's map and two sets, and its rule.

use super::names::{allowed_set, guarded_set, ports_map, rule_comment, BRIDGE_CHAIN, PAIR_LEN};
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::nftables::attrs::name_byteorder;
use crate::netlink::nftables::consts::{IFNAMSIZ, TYPE_ETHERADDR, TYPE_IFNAME};
use crate::netlink::nftables::model::{
    Chain, ChainType, Change, Expr, Hook, MetaKey, PayloadBase, Priority, Reg, Rule, Set, Verdict,
};

/// The ids that name the map and sets within their creating batch (the rule's lookups
/// refer to them so, before they exist).
const PORTS_ID: u32 = 1;
const ALLOWED_ID: u32 = 2;
const GUARDED_ID: u32 = 3;

/// Which of a network's filter objects a batch makes (the table and chain, shared by
/// every network, are always in it, made only when missing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lacking {
    pub map: bool,
    pub guarded: bool,
    pub allowed: bool,
    pub rule: bool,
}

impl Lacking {
    pub const ALL: Lacking = Lacking {
        map: true,
        guarded: true,
        allowed: true,
        rule: true,
    };

    pub fn any(&self) -> bool {
        self.map || self.guarded || self.allowed || self.rule
    }
}

/// The batch making what `lacking` names. The rule's lookups name the sets by name,
/// which the kernel tries before their ids: sets already there serve as well.
pub(super) fn guard_changes(network: &str, lacking: &Lacking) -> Vec<Change> {
    let (guarded, allowed) = (guarded_set(network), allowed_set(network));
    let chain = Chain {
        table: ACADEMY_BRIDGE,
        name: BRIDGE_CHAIN,
        hook: Hook::Prerouting,
        priority: Priority::BRIDGE_NAT_DST_BRIDGED,
        kind: ChainType::Filter,
    };
    // Keyed by interface name, the map and the guarded set say so in their userdata as
    // nft does (so `nft list` prints names, not bytes); the pair set's concatenated key
    // needs no such hint.
    let map = ports_map(network);
    let guarded_names = Set {
        id: GUARDED_ID,
        name: guarded.clone(),
        data: None,
        ..map_of(&map)
    };
    let pairs = Set {
        id: ALLOWED_ID,
        name: allowed.clone(),
        key: (TYPE_IFNAME << 6 | TYPE_ETHERADDR, PAIR_LEN as u32),
        data: None,
        userdata: None,
        ..map_of(&map)
    };
    let mut changes = vec![Change::add_table(ACADEMY_BRIDGE), Change::add_chain(chain)];
    if lacking.map {
        changes.push(Change::add_set(map_of(&map)));
    }
    if lacking.guarded {
        changes.push(Change::add_set(guarded_names));
    }
    if lacking.allowed {
        changes.push(Change::add_set(pairs));
    }
    if lacking.rule {
        let rule = Rule {
            table: ACADEMY_BRIDGE,
            chain: BRIDGE_CHAIN.to_string(),
            handle: 0,
            comment: Some(rule_comment(network)),
            exprs: drop_rule(&guarded, &allowed),
        };
        changes.push(Change::add_rule(
            rule,
            format!("add the macspoofchk rule of network {network}"),
        ));
    }
    changes
}

/// The network's map of guarded ports to their MAC (`name`: ports_map's).
pub(super) fn map_of(name: &str) -> Set {
    Set {
        table: ACADEMY_BRIDGE,
        name: name.to_string(),
        id: PORTS_ID,
        key: (TYPE_IFNAME, IFNAMSIZ as u32),
        data: Some((TYPE_ETHERADDR, 6)),
        userdata: Some(name_byteorder(true)),
        exclusive: true,
    }
}

/// The rule, as `nft --debug=netlink` shows it for
/// `iifname @GUARDED iifname . ether saddr != @ALLOWED drop`.
pub(super) fn drop_rule(guarded: &str, set: &str) -> Vec<Expr> {
    vec![
        Expr::meta(MetaKey::IifName, Reg::R1),
        // Both sets are new in this batch.
        Expr::lookup(guarded, Reg::R1, GUARDED_ID, false),
        // The name fills register 1 (16 bytes); the MAC follows it in register 2, and
        // the lookup reads both as one 24-byte key: the source address, after the
        // destination's 6 bytes.
        Expr::meta(MetaKey::IifName, Reg::R1),
        Expr::payload(PayloadBase::LinkLayer, 6, 6, Reg::R2),
        // Not in the set.
        Expr::lookup(set, Reg::R1, ALLOWED_ID, true),
        Expr::Verdict(Verdict::Drop),
    ]
}
