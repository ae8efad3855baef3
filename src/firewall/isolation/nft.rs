//! Network isolation (`"ingressPolicy": "same-bridge"`, the reference firewall plugin's
//! meaning): what is forwarded from one isolated network's bridge to another isolated
//! network's bridge is dropped, either way. The node, the outside, a network's own bridge
//! and the networks without the key are left alone. In academy's table:
//!
//! ```text
//! set _isolated { type ifname . ifname; }     # one element "<bridge>" . "<bridge>" per isolated network
//! chain forward {                             # port mapping's chain (src/firewall/ports/nft.rs), shared
//!         type filter hook forward priority filter; policy accept;
//!         iifname . iifname @_isolated oifname . oifname @_isolated iifname . oifname != @_isolated drop comment "academy isolation"
//! }
//! ```
//!
//! One rule for every isolated network, its three lookups in one hash set: a forwarded
//! packet costs the same one lookup (for most, the first misses and ends the rule)
//! whether the node has one isolated network or a thousand, where one rule per network
//! (`iifname "<bridge>" oifname @set oifname != "<bridge>" drop`, the reference's
//! per-bridge iptables rules) would be walked rule by rule by every forwarded packet. The
//! element `b . b` says both "b is isolated" (the first two lookups, which load the same
//! name twice) and "in and out are one bridge" (the third, inverted): a network is one
//! element, made with its first attachment and deleted with its last (network/). The
//! rule names no network; like the chains and port mapping's rules it stays, and with
//! the set empty it drops nothing.
//!
//! The forward hook sees routed traffic, and with br_netfilter's bridge-nf-call-iptables
//! also the frames a bridge switches between its own ports, with the bridge as both
//! interfaces: the third lookup passes those, as the reference's `! -o <bridge>` does.
//! Both families (the table is inet); the reference writes its rules in the families of
//! the network's addresses, which are the only ones its bridge routes.

use crate::firewall::engine::{Owner, Want, Wanted};
use crate::firewall::tables::{bridge_pair, bridge_pairs, forward, ACADEMY, FORWARD};
use crate::netlink::nftables::model::{Change, Expr, MetaKey, Reg, Rule, Verdict};

/// The set of isolated bridges (`ingressPolicy` same-bridge), as `bridge . bridge`.
pub const ISOLATED_SET: &str = "_isolated";

/// The isolation rule's comment, by which it is found.
pub const ISOLATION_RULE: &str = "academy isolation";

/// The set's id in the batch that creates it, for the rule's lookups.
const SET_ID: u32 = 1;

/// The rule, every isolated network's: with its table, set and chain made if missing
/// (port mapping's chain, with its hook and priority: whichever comes first makes it).
pub fn isolation_rule(harm: &str) -> Want {
    let rule = Rule {
        table: ACADEMY,
        chain: FORWARD.to_string(),
        handle: 0,
        comment: Some(ISOLATION_RULE.to_string()),
        exprs: isolation_exprs(SET_ID),
    };
    let setup = vec![
        Change::add_table(ACADEMY),
        bridge_pairs(ISOLATED_SET, SET_ID),
        forward(),
    ];
    Want {
        wanted: Wanted::rule(rule, ISOLATION_RULE, setup),
        owner: Owner::Host,
        what: "the isolation rule".to_string(),
        harm: harm.to_string(),
    }
}

/// `bridge . bridge` in `_isolated`: the bridge's, going with the last network on it.
pub fn isolated_bridge(bridge: &str, harm: &str) -> Want {
    let what = format!("{bridge} . {bridge}");
    bridge_pair(ISOLATED_SET, SET_ID, bridge, what, harm.to_string())
}

/// `iifname . iifname @_isolated oifname . oifname @_isolated iifname . oifname !=
/// @_isolated drop`, expression for expression as `nft --debug=netlink` shows nft 1.0.6
/// writing it: each pair of names loaded into registers 1 and 2 (16 bytes each, so the
/// 32-byte key spans both) and looked up, the last lookup inverted.
fn isolation_exprs(set_id: u32) -> Vec<Expr> {
    let pairs = [
        (MetaKey::IifName, MetaKey::IifName, false),
        (MetaKey::OifName, MetaKey::OifName, false),
        (MetaKey::IifName, MetaKey::OifName, true),
    ];
    let mut exprs = Vec::with_capacity(10);
    for (first, second, inverted) in pairs {
        exprs.push(Expr::meta(first, Reg::R1));
        exprs.push(Expr::meta(second, Reg::R2));
        // The set may be new in this batch.
        exprs.push(Expr::lookup(ISOLATED_SET, Reg::R1, set_id, inverted));
    }
    exprs.push(Expr::Verdict(Verdict::Drop));
    exprs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::consts::IFNAMSIZ;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::encode::expression_bytes;

    /// The rule's bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here. (That they are nft's own expressions is held to
    /// the kernel by tests/it/isolation.rs, which reads the rule back with `nft`.)
    #[test]
    fn the_isolation_rule_encodes_as_before() {
        let list = expression_bytes(&isolation_exprs(SET_ID));
        assert_eq!(
            hex(&sha256(&list)),
            "dfff54ba3509fe13a34ec3540ad330f6c83062dd52b7538bc220f73266fc38cf"
        );
        let key = crate::firewall::tables::bridge_pair_key("br0");
        assert_eq!(key.len(), 2 * IFNAMSIZ);
        assert_eq!(&key[..3], b"br0");
        assert_eq!(&key[IFNAMSIZ..IFNAMSIZ + 3], b"br0");
    }
}
