//! A network's MAC filter made, in one batch with its first guarded port's ADD: the
//! table `bridge academy`, its chain, the network's map and two sets, and its rule.

use super::names::{allowed_set, guarded_set, ports_map, rule_comment, BRIDGE_CHAIN, PAIR_LEN};
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::nftables::attrs::name_byteorder;
use crate::netlink::nftables::consts::{IFNAMSIZ, TYPE_ETHERADDR, TYPE_IFNAME};
use crate::netlink::nftables::model::{
    Chain, ChainType, Change, Expr, Hook, MetaKey, PayloadBase, Priority, Reg, Rule, Set, Verdict,
};
use crate::netlink::{Nftables, NlResult};

/// The ids that name the map and sets within their creating batch (the rule's lookups
/// refer to them so, before they exist).
const PORTS_ID: u32 = 1;
const ALLOWED_ID: u32 = 2;
const GUARDED_ID: u32 = 3;

/// The table, chain, map, sets and rule of one network, in one batch. The map is
/// created exclusively and the rule with it: if the map exists, so does the rule, and
/// the kernel refuses the whole batch, which is success here.
pub(super) fn create_guard(nft: &mut Nftables, network: &str) -> NlResult<()> {
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
    let rule = Rule {
        table: ACADEMY_BRIDGE,
        chain: BRIDGE_CHAIN.to_string(),
        handle: 0,
        comment: Some(rule_comment(network)),
        exprs: drop_rule(&guarded, &allowed),
    };
    let changes = vec![
        Change::add_table(ACADEMY_BRIDGE),
        Change::add_chain(chain),
        Change::add_set(map_of(&map)),
        Change::add_set(guarded_names),
        Change::add_set(pairs),
        Change::add_rule(
            rule,
            format!("add the macspoofchk rule of network {network}"),
        ),
    ];
    match nft.run(changes) {
        Err(e) if e.is(libc::EEXIST) => Ok(()),
        other => other,
    }
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
