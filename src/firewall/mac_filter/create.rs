//! The shapes of a network's MAC filter objects in `bridge academy`: its map, two sets
//! and rule (wants.rs says when they are wanted).

use super::names::PAIR_LEN;
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::nftables::attrs::name_byteorder;
use crate::netlink::nftables::consts::{IFNAMSIZ, TYPE_ETHERADDR, TYPE_IFNAME};
use crate::netlink::nftables::model::{Expr, MetaKey, PayloadBase, Reg, Set, Verdict};

/// The ids that name the map and sets within their creating batch (the rule's lookups
/// refer to them so, before they exist).
const PORTS_ID: u32 = 1;
const ALLOWED_ID: u32 = 2;
const GUARDED_ID: u32 = 3;

/// The network's set of guarded ports (`map`: its map's name, whose shape it shares):
/// keyed by interface name, it says so in its userdata as nft does (so `nft list`
/// prints names, not bytes).
pub(super) fn guarded_of(map: &str, guarded: &str) -> Set {
    Set {
        id: GUARDED_ID,
        name: guarded.to_string(),
        data: None,
        ..map_of(map)
    }
}

/// The network's set of (port, MAC) pairs; its concatenated key needs no userdata.
pub(super) fn allowed_of(map: &str, allowed: &str) -> Set {
    Set {
        id: ALLOWED_ID,
        name: allowed.to_string(),
        key: (TYPE_IFNAME << 6 | TYPE_ETHERADDR, PAIR_LEN as u32),
        data: None,
        userdata: None,
        ..map_of(map)
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
        // An identical set made by a concurrent completion is success.
        exclusive: false,
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
