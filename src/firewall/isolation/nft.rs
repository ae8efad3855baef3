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
//! element, made with its first attachment and deleted with its last (objects.rs). The
//! rule names no network; like the chains and port mapping's rules it stays, and with
//! the set empty it drops nothing.
//!
//! The forward hook sees routed traffic, and with br_netfilter's bridge-nf-call-iptables
//! also the frames a bridge switches between its own ports, with the bridge as both
//! interfaces: the third lookup passes those, as the reference's `! -o <bridge>` does.
//! Both families (the table is inet); the reference writes its rules in the families of
//! the network's addresses, which are the only ones its bridge routes.

use crate::firewall::ports::hairpin_key;
use crate::firewall::tables::{bridge_pairs, forward, ACADEMY, FORWARD};
use crate::netlink::nftables::model::{Change, Element, Expr, MetaKey, Reg, Rule, Verdict};
use crate::netlink::{Nftables, NlResult, Object};

/// The set of isolated bridges (`ingressPolicy` same-bridge), as `bridge . bridge`.
pub const ISOLATED_SET: &str = "_isolated";

/// The isolation rule's comment, by which it is found.
pub const ISOLATION_RULE: &str = "academy isolation";

/// The set's id in the batch that creates it, for the rule's lookups.
const SET_ID: u32 = 1;

/// Makes sure of the rule and puts `bridge . bridge` in `_isolated`: one small dump of
/// chain `forward`, then one batch. When the rule is there once, the batch only adds
/// the element (already there is success). Otherwise `lock` is taken (the host's
/// repair lock, so that concurrent first ADDs leave one rule), the chain looked at
/// again, and the batch also creates table, set and chain if missing (an identical
/// one is success) and replaces whatever copies of the rule are left. True when it
/// wrote the rule.
pub fn ensure_isolation<G>(
    nft: &mut Nftables,
    bridge: &str,
    lock: impl FnOnce() -> G,
) -> NlResult<bool> {
    let mut present = isolation_rules(nft)?;
    let _held = match present.len() {
        1 => None,
        _ => {
            let held = lock();
            present = isolation_rules(nft)?;
            Some(held)
        }
    };
    let repair = present.len() != 1;
    let mut changes = match repair {
        true => isolation_objects(&present),
        false => Vec::new(),
    };
    changes.push(Change::add_element(
        ACADEMY,
        ISOLATED_SET,
        Element::key(hairpin_key(bridge)),
        format!("add {bridge} . {bridge} to nf_tables set {ACADEMY} {ISOLATED_SET}"),
    ));
    nft.run(changes).map(|()| repair)
}

/// Whether chain `forward` lacks the isolation rule.
pub fn isolation_rule_missing(nft: &mut Nftables) -> NlResult<bool> {
    Ok(isolation_rules(nft)?.is_empty())
}

/// Whether `_isolated` holds `bridge . bridge`.
pub fn is_isolated(nft: &mut Nftables, bridge: &str) -> NlResult<bool> {
    let what = format!("look up {bridge} . {bridge} in nf_tables set {ACADEMY} {ISOLATED_SET}");
    nft.has_element(ACADEMY, ISOLATED_SET, &hairpin_key(bridge), &what)
}

/// The handles of the isolation rule's copies in chain `forward`; none when it is gone.
fn isolation_rules(nft: &mut Nftables) -> NlResult<Vec<u64>> {
    Ok(nft
        .rules_of(ACADEMY, Some(FORWARD))?
        .into_iter()
        .filter(|r| r.comment == ISOLATION_RULE)
        .map(|r| r.handle)
        .collect())
}

/// The bridge's element of `_isolated`, to delete with its network.
pub fn isolated_object(bridge: &str) -> Object {
    Object::Element {
        table: ACADEMY,
        set: ISOLATED_SET.to_string(),
        key: hairpin_key(bridge),
        shown: format!("{bridge} . {bridge}"),
    }
}

/// Table, set and chain (created if missing), the copies of the rule deleted, and the
/// rule added at the chain's end.
fn isolation_objects(present: &[u64]) -> Vec<Change> {
    // Port mapping's chain, with its hook and priority: whichever comes first makes it.
    let mut changes = vec![
        Change::add_table(ACADEMY),
        bridge_pairs(ISOLATED_SET, SET_ID),
        forward(),
    ];
    for handle in present {
        let what =
            format!("delete the rule {ISOLATION_RULE:?} (handle {handle}) from chain {FORWARD}");
        changes.push(Change::delete_rule(ACADEMY, FORWARD, *handle, what));
    }
    let rule = Rule {
        table: ACADEMY,
        chain: FORWARD.to_string(),
        handle: 0,
        comment: Some(ISOLATION_RULE.to_string()),
        exprs: isolation_rule(SET_ID),
    };
    changes.push(Change::add_rule(
        rule,
        format!("add the rule {ISOLATION_RULE:?} to chain {FORWARD}"),
    ));
    changes
}

/// `iifname . iifname @_isolated oifname . oifname @_isolated iifname . oifname !=
/// @_isolated drop`, expression for expression as `nft --debug=netlink` shows nft 1.0.6
/// writing it: each pair of names loaded into registers 1 and 2 (16 bytes each, so the
/// 32-byte key spans both) and looked up, the last lookup inverted.
fn isolation_rule(set_id: u32) -> Vec<Expr> {
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
        let list = expression_bytes(&isolation_rule(SET_ID));
        assert_eq!(
            hex(&sha256(&list)),
            "dfff54ba3509fe13a34ec3540ad330f6c83062dd52b7538bc220f73266fc38cf"
        );
        let key = hairpin_key("br0");
        assert_eq!(key.len(), 2 * IFNAMSIZ);
        assert_eq!(&key[..3], b"br0");
        assert_eq!(&key[IFNAMSIZ..IFNAMSIZ + 3], b"br0");
    }
}
