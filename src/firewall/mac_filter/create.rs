//! A network's MAC filter made, in one batch with its first guarded port's ADD: the
//! table `bridge academy`, its chain, the network's map and two sets, and its rule.

use super::names::{allowed_set, guarded_set, ports_map, rule_comment, BRIDGE_CHAIN, PAIR_LEN};
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::nftables::attrs::name_byteorder;
use crate::netlink::nftables::consts::{
    IFNAMSIZ, NFPROTO_BRIDGE, NFT_META_IIFNAME, NFT_PAYLOAD_LL_HEADER, NFT_REG_1, NFT_REG_2,
    NF_BR_PRE_ROUTING, NF_BR_PRI_NAT_DST_BRIDGED, NF_DROP, TYPE_ETHERADDR, TYPE_IFNAME,
};
use crate::netlink::nftables::expr::{lookup, meta, payload, verdict};
use crate::netlink::nftables::objects::{new_chain, new_rule, new_table, BaseChain, NewSet};
use crate::netlink::{Attrs, Nftables, NlResult};

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
    let chain = BaseChain {
        name: BRIDGE_CHAIN,
        hook: NF_BR_PRE_ROUTING,
        priority: NF_BR_PRI_NAT_DST_BRIDGED,
        kind: "filter",
    };
    // Keyed by interface name, the map and the guarded set say so in their userdata as
    // nft does (so `nft list` prints names, not bytes); the pair set's concatenated key
    // needs no such hint.
    let map = ports_map(network);
    let guarded_names = NewSet {
        id: GUARDED_ID,
        name: &guarded,
        data: None,
        ..map_of(&map)
    };
    let pairs = NewSet {
        id: ALLOWED_ID,
        name: &allowed,
        key: (TYPE_IFNAME << 6 | TYPE_ETHERADDR, PAIR_LEN as u32),
        data: None,
        userdata: None,
        ..map_of(&map)
    };
    let changes = vec![
        new_table(ACADEMY_BRIDGE),
        new_chain(ACADEMY_BRIDGE, chain),
        map_of(&map).change(),
        guarded_names.change(),
        pairs.change(),
        new_rule(
            ACADEMY_BRIDGE,
            BRIDGE_CHAIN,
            Some(&rule_comment(network)),
            |list| drop_rule(list, &guarded, &allowed),
            format!("add the macspoofchk rule of network {network}"),
        ),
    ];
    match nft.commit(NFPROTO_BRIDGE, changes) {
        Err(e) if e.is(libc::EEXIST) => Ok(()),
        other => other,
    }
}

/// The network's map of guarded ports to their MAC (`name`: ports_map's).
pub(super) fn map_of(name: &str) -> NewSet<'_> {
    NewSet {
        table: ACADEMY_BRIDGE,
        name,
        id: PORTS_ID,
        key: (TYPE_IFNAME, IFNAMSIZ as u32),
        data: Some((TYPE_ETHERADDR, 6)),
        userdata: Some(name_byteorder(true)),
        exclusive: true,
    }
}

/// The rule, as `nft --debug=netlink` shows it for
/// `iifname @GUARDED iifname . ether saddr != @ALLOWED drop`.
pub(super) fn drop_rule(list: &mut Attrs, guarded: &str, set: &str) {
    meta(list, NFT_REG_1, NFT_META_IIFNAME);
    // Both sets are new in this batch.
    lookup(list, guarded, NFT_REG_1, GUARDED_ID, false);
    // The name fills register 1 (16 bytes); the MAC follows it in register 2, and the
    // lookup reads both as one 24-byte key: the source address, after the
    // destination's 6 bytes.
    meta(list, NFT_REG_1, NFT_META_IIFNAME);
    payload(list, NFT_PAYLOAD_LL_HEADER, 6, 6, NFT_REG_2);
    // Not in the set.
    lookup(list, set, NFT_REG_1, ALLOWED_ID, true);
    verdict(list, NF_DROP);
}
