//! Network isolation (`"ingressPolicy": "same-bridge"`, the reference firewall plugin's
//! meaning): what is forwarded from one isolated network's bridge to another isolated
//! network's bridge is dropped, either way. The node, the outside, a network's own bridge
//! and the networks without the key are left alone. In academy's table:
//!
//! ```text
//! set _isolated { type ifname . ifname; }     # one element "<bridge>" . "<bridge>" per isolated network
//! chain forward {                             # port mapping's chain (portmap.rs), shared
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

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};

use super::attrs::comment_udata;
use super::batch::Batch;
use super::consts::{
    IFNAMSIZ, ISOLATED_SET, NFPROTO_INET, NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_IMMEDIATE_DATA,
    NFTA_IMMEDIATE_DREG, NFTA_LIST_ELEM, NFTA_LOOKUP_FLAGS, NFTA_LOOKUP_SET, NFTA_LOOKUP_SET_ID,
    NFTA_LOOKUP_SREG, NFTA_META_DREG, NFTA_META_KEY, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS,
    NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_RULE_USERDATA, NFTA_SET_ELEM_KEY, NFTA_SET_ID,
    NFTA_SET_KEY_LEN, NFTA_SET_KEY_TYPE, NFTA_SET_NAME, NFTA_SET_TABLE, NFTA_VERDICT_CODE,
    NFT_LOOKUP_F_INV, NFT_META_IIFNAME, NFT_META_OIFNAME, NFT_MSG_DELRULE, NFT_MSG_NEWRULE,
    NFT_MSG_NEWSET, NFT_MSG_NEWSETELEM, NFT_REG_1, NFT_REG_2, NFT_REG_VERDICT, NF_DROP,
    NF_INET_FORWARD, NF_IP_PRI_FILTER, TABLE, TYPE_BITS, TYPE_IFNAME,
};
use super::objects::{new_chain, new_table, BaseChain, Table};
use super::portmap::{element_list, hairpin_key, FORWARD};
use super::rule::expr;
use super::step::Step;
use super::Nftables;
use crate::netlink::nfnetlink::Attrs;
use crate::netlink::socket::NlResult;

/// The isolation rule's comment, by which it is found.
pub const ISOLATION_RULE: &str = "academy isolation";

/// The set's id in the batch that creates it, for the rule's lookups.
const SET_ID: u32 = 1;

impl Nftables {
    /// Makes sure of the rule and puts `bridge . bridge` in `_isolated`: one small dump of
    /// chain `forward`, then one batch. When the rule is there once, the batch only adds
    /// the element (already there is success). Otherwise `lock` is taken (the host's
    /// repair lock, so that concurrent first ADDs leave one rule), the chain looked at
    /// again, and the batch also creates table, set and chain if missing (an identical
    /// one is success) and replaces whatever copies of the rule are left. True when it
    /// wrote the rule.
    pub fn ensure_isolation<G>(
        &mut self,
        bridge: &str,
        lock: impl FnOnce() -> G,
    ) -> NlResult<bool> {
        let mut present = self.isolation_rules()?;
        let _held = match present.len() {
            1 => None,
            _ => {
                let held = lock();
                present = self.isolation_rules()?;
                Some(held)
            }
        };
        let repair = present.len() != 1;
        let mut batch = Batch::new(&mut self.socket);
        if repair {
            add_objects(&mut batch, &present);
        }
        batch.add(
            Step::AddElement,
            NFT_MSG_NEWSETELEM,
            NLM_F_CREATE,
            element(bridge),
            format!("add {bridge} . {bridge} to nf_tables set inet {TABLE} {ISOLATED_SET}"),
        );
        batch.commit().map(|()| repair)
    }

    /// Whether chain `forward` lacks the isolation rule.
    pub fn isolation_rule_missing(&mut self) -> NlResult<bool> {
        Ok(self.isolation_rules()?.is_empty())
    }

    /// Whether `_isolated` holds `bridge . bridge`.
    pub fn is_isolated(&mut self, bridge: &str) -> NlResult<bool> {
        let what =
            format!("look up {bridge} . {bridge} in nf_tables set inet {TABLE} {ISOLATED_SET}");
        self.has_element(NFPROTO_INET, ISOLATED_SET, &hairpin_key(bridge), &what)
    }

    /// The handles of the isolation rule's copies in chain `forward`; none when it is gone.
    fn isolation_rules(&mut self) -> NlResult<Vec<u64>> {
        Ok(self
            .commented_rules(NFPROTO_INET, TABLE, Some(FORWARD))?
            .into_iter()
            .filter(|r| r.comment == ISOLATION_RULE)
            .map(|r| r.handle)
            .collect())
    }
}

/// `bridge . bridge` as the one element of an element list of `_isolated`.
pub(super) fn element(bridge: &str) -> Attrs {
    element_list(ISOLATED_SET, |list| {
        list.nested(NFTA_LIST_ELEM, |elem| {
            elem.nested(NFTA_SET_ELEM_KEY, |k| {
                k.put(NFTA_DATA_VALUE, &hairpin_key(bridge))
            });
        });
    })
}

/// Table, set and chain (created if missing), the copies of the rule deleted, and the
/// rule added at the chain's end.
fn add_objects(batch: &mut Batch, present: &[u64]) {
    batch.push(new_table(Table::Academy));
    let mut set = Attrs::default();
    set.str(NFTA_SET_TABLE, TABLE);
    set.str(NFTA_SET_NAME, ISOLATED_SET);
    set.be32(NFTA_SET_KEY_TYPE, (TYPE_IFNAME << TYPE_BITS) | TYPE_IFNAME);
    set.be32(NFTA_SET_KEY_LEN, 2 * IFNAMSIZ as u32);
    set.be32(NFTA_SET_ID, SET_ID);
    batch.add(
        Step::CreateSet,
        NFT_MSG_NEWSET,
        NLM_F_CREATE,
        set,
        format!("create set {ISOLATED_SET}"),
    );
    // Port mapping's chain, with its hook and priority: whichever comes first makes it.
    batch.push(new_chain(
        Table::Academy,
        BaseChain {
            name: FORWARD,
            hook: NF_INET_FORWARD,
            priority: NF_IP_PRI_FILTER,
            kind: "filter",
        },
    ));
    for handle in present {
        let mut rule = Attrs::default();
        rule.str(NFTA_RULE_TABLE, TABLE);
        rule.str(NFTA_RULE_CHAIN, FORWARD);
        rule.be64(NFTA_RULE_HANDLE, *handle);
        batch.add(
            Step::DeleteRule,
            NFT_MSG_DELRULE,
            0,
            rule,
            format!("delete the rule {ISOLATION_RULE:?} (handle {handle}) from chain {FORWARD}"),
        );
    }
    let mut rule = Attrs::default();
    rule.str(NFTA_RULE_TABLE, TABLE);
    rule.str(NFTA_RULE_CHAIN, FORWARD);
    rule.nested(NFTA_RULE_EXPRESSIONS, |list| isolation_rule(list, SET_ID));
    rule.put(NFTA_RULE_USERDATA, &comment_udata(ISOLATION_RULE));
    batch.add(
        Step::AddRule,
        NFT_MSG_NEWRULE,
        NLM_F_CREATE | NLM_F_APPEND,
        rule,
        format!("add the rule {ISOLATION_RULE:?} to chain {FORWARD}"),
    );
}

/// `iifname . iifname @_isolated oifname . oifname @_isolated iifname . oifname !=
/// @_isolated drop`, expression for expression as `nft --debug=netlink` shows nft 1.0.6
/// writing it: each pair of names loaded into registers 1 and 2 (16 bytes each, so the
/// 32-byte key spans both) and looked up, the last lookup inverted.
pub(super) fn isolation_rule(list: &mut Attrs, set_id: u32) {
    let pairs = [
        (NFT_META_IIFNAME, NFT_META_IIFNAME, false),
        (NFT_META_OIFNAME, NFT_META_OIFNAME, false),
        (NFT_META_IIFNAME, NFT_META_OIFNAME, true),
    ];
    for (first, second, inverted) in pairs {
        meta(list, NFT_REG_1, first);
        meta(list, NFT_REG_2, second);
        expr(list, "lookup", |e| {
            e.str(NFTA_LOOKUP_SET, ISOLATED_SET);
            e.be32(NFTA_LOOKUP_SREG, NFT_REG_1);
            // The set may be new in this batch.
            e.be32(NFTA_LOOKUP_SET_ID, set_id);
            if inverted {
                e.be32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
            }
        });
    }
    expr(list, "immediate", |e| {
        e.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        e.nested(NFTA_IMMEDIATE_DATA, |data| {
            data.nested(NFTA_DATA_VERDICT, |verdict| {
                verdict.be32(NFTA_VERDICT_CODE, NF_DROP)
            })
        });
    });
}

fn meta(list: &mut Attrs, register: u32, key: u32) {
    expr(list, "meta", |e| {
        e.be32(NFTA_META_DREG, register);
        e.be32(NFTA_META_KEY, key);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};

    /// The rule's bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here. (That they are nft's own expressions is held to
    /// the kernel by tests/it/isolation.rs, which reads the rule back with `nft`.)
    #[test]
    fn the_isolation_rule_encodes_as_before() {
        let mut list = Attrs::default();
        isolation_rule(&mut list, SET_ID);
        assert_eq!(
            hex(&sha256(&list.0)),
            "dfff54ba3509fe13a34ec3540ad330f6c83062dd52b7538bc220f73266fc38cf"
        );
        let key = hairpin_key("br0");
        assert_eq!(key.len(), 2 * IFNAMSIZ);
        assert_eq!(&key[..3], b"br0");
        assert_eq!(&key[IFNAMSIZ..IFNAMSIZ + 3], b"br0");
    }
}
