//! iptables' FORWARD chain, as iptables-nft keeps it in nf_tables (`table ip filter`,
//! `table ip6 filter`). On a host whose FORWARD policy drops (Docker sets it), every
//! frame routed to or from a container is dropped there, whatever academy's own table
//! accepts: a packet must pass every base chain on its hook. academy then appends three
//! rules for the network's bridge, no wider than the `firewall` plugin's:
//!
//! ```text
//! -A FORWARD -o BR -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment "academy: replies to bridge BR" -j ACCEPT
//! -A FORWARD -o BR -m conntrack --ctstate DNAT -m comment --comment "academy: published ports of bridge BR" -j ACCEPT
//! -A FORWARD -i BR -m comment --comment "academy: forwarding from bridge BR" -j ACCEPT
//! ```
//!
//! encoded byte for byte as iptables-nft 1.8.9 encodes those commands (meta, cmp, xt
//! `conntrack` rev 3, xt `comment`, counter, immediate), so `iptables -S` lists them and
//! `iptables-save | iptables-restore` writes them back unchanged. Not as native `ct`
//! expressions: iptables-nft 1.8.9 cannot read those back, and calls the whole chain
//! "incompatible" (no `iptables -S`, no `iptables-save` of the table). The comment is an
//! xt match only, not user data too: iptables-nft lists a user-data comment as a comment
//! match, so both would list (and save, and restore) the comment twice.
//!
//! A rule is academy's by its comment, read in both forms (xt match, user data: older
//! academy wrote user data, and iptables-restore turns that into a match), whatever its
//! other expressions. It never makes the table or the chain: without them nothing drops.

use crate::firewall::engine::{Owner, Want, Wanted};
use crate::firewall::tables::iptables_filter;
use crate::netlink::nftables::consts::{
    XT_CONNTRACK_INFO_LEN, XT_CONNTRACK_MATCH_FLAGS_AT, XT_CONNTRACK_REV, XT_CONNTRACK_STATE,
    XT_CONNTRACK_STATE_DNAT, XT_CONNTRACK_STATE_ESTABLISHED, XT_CONNTRACK_STATE_MASK_AT,
    XT_CONNTRACK_STATE_RELATED, XT_MAX_COMMENT_LEN,
};
use crate::netlink::nftables::model::{CmpOp, Expr, MetaKey, Reg, Rule, Verdict};
use crate::netlink::Family;

const FORWARD: &str = "FORWARD";

/// One of academy's accept rules for a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// `-o BR --ctstate RELATED,ESTABLISHED`: answers to what the containers started.
    Replies,
    /// `-o BR --ctstate DNAT`: what a DNAT rule sent to a container (a published port).
    Published,
    /// `-i BR`: everything the containers send (to their bridge too, with br_netfilter).
    FromBridge,
}

pub const ACCEPTS: [Accept; 3] = [Accept::Replies, Accept::Published, Accept::FromBridge];

impl Accept {
    fn comment(self, bridge: &str) -> String {
        match self {
            Accept::Replies => format!("academy: replies to bridge {bridge}"),
            Accept::Published => format!("academy: published ports of bridge {bridge}"),
            Accept::FromBridge => format!("academy: forwarding from bridge {bridge}"),
        }
    }

    /// What a dropping FORWARD drops without it.
    fn harm(self, bridge: &str) -> String {
        match self {
            Accept::Replies => format!("replies to what {bridge}'s containers start are dropped"),
            Accept::Published => format!("connections to {bridge}'s published ports are dropped"),
            Accept::FromBridge => {
                format!("everything {bridge}'s containers send through the host is dropped")
            }
        }
    }

    /// The rule's expressions, in iptables-nft's order.
    fn exprs(self, bridge: &str) -> Vec<Expr> {
        let mut exprs = Vec::with_capacity(6);
        match self {
            Accept::Replies => {
                exprs.extend(interface(MetaKey::OifName, bridge));
                exprs.push(conntrack_state(
                    XT_CONNTRACK_STATE_RELATED | XT_CONNTRACK_STATE_ESTABLISHED,
                ));
            }
            Accept::Published => {
                exprs.extend(interface(MetaKey::OifName, bridge));
                exprs.push(conntrack_state(XT_CONNTRACK_STATE_DNAT));
            }
            Accept::FromBridge => exprs.extend(interface(MetaKey::IifName, bridge)),
        }
        exprs.push(comment_match(&self.comment(bridge)));
        // `counter; accept`, the counter zeroed as iptables-nft sends it.
        exprs.push(Expr::counter());
        exprs.push(Expr::Verdict(Verdict::Accept));
        exprs
    }
}

/// What earlier academy wrote for `-o BR` (with a user-data comment): an accept of all
/// traffic to the bridge, wider than the firewall plugin's. Deleted wherever found.
fn outdated_comment(bridge: &str) -> String {
    format!("academy: forwarding to bridge {bridge}")
}

/// One of `bridge`'s accepts in iptables' FORWARD chain of `family`, known by its
/// comment. It never makes the table or the chain: without them nothing drops.
pub fn accept(family: Family, bridge: &str, accept: Accept) -> Want {
    let comment = accept.comment(bridge);
    let rule = Rule {
        table: iptables_filter(family),
        chain: FORWARD.to_string(),
        handle: 0,
        comment: None,
        exprs: accept.exprs(bridge),
    };
    Want {
        wanted: Wanted::rule(rule, &comment, Vec::new()),
        owner: Owner::Bridge(bridge.to_string()),
        what: format!("{comment:?}"),
        harm: format!(
            "iptables' {} FORWARD policy drops, and {}",
            iptables_filter(family),
            accept.harm(bridge)
        ),
    }
}

/// The accept an older academy wrote for `bridge`, to go wherever it is.
pub fn outdated(family: Family, bridge: &str) -> Want {
    let comment = outdated_comment(bridge);
    Want {
        wanted: Wanted::OutdatedRule {
            table: iptables_filter(family),
            chain: FORWARD.to_string(),
            comment: comment.clone(),
        },
        owner: Owner::Bridge(bridge.to_string()),
        what: format!("{comment:?}"),
        harm: "it accepts more than the firewall plugin would".to_string(),
    }
}

/// `meta iifname|oifname == NAME`, as iptables-nft encodes `-i`/`-o` (its attribute
/// order; the name compared with its NUL, so no prefix of it matches).
fn interface(key: MetaKey, name: &str) -> [Expr; 2] {
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    [
        Expr::IptablesMeta { key, dreg: Reg::R1 },
        Expr::cmp(Reg::R1, CmpOp::Eq, bytes),
    ]
}

/// `-m conntrack --ctstate STATES`: struct xt_conntrack_mtinfo3 with only the state
/// test set.
fn conntrack_state(states: u16) -> Expr {
    let mut info = vec![0u8; XT_CONNTRACK_INFO_LEN];
    let flags = XT_CONNTRACK_MATCH_FLAGS_AT;
    info[flags..flags + 2].copy_from_slice(&XT_CONNTRACK_STATE.to_ne_bytes());
    let mask = XT_CONNTRACK_STATE_MASK_AT;
    info[mask..mask + 2].copy_from_slice(&states.to_ne_bytes());
    Expr::Match {
        name: "conntrack".into(),
        rev: XT_CONNTRACK_REV,
        info,
    }
}

/// `-m comment --comment TEXT`: struct xt_comment_info, the text NUL-padded.
fn comment_match(text: &str) -> Expr {
    let mut info = vec![0u8; XT_MAX_COMMENT_LEN];
    let bytes = text.as_bytes();
    let len = bytes.len().min(XT_MAX_COMMENT_LEN - 1);
    info[..len].copy_from_slice(&bytes[..len]);
    Expr::Match {
        name: "comment".into(),
        rev: 0,
        info,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::encode::expression_bytes;

    /// The expressions are those iptables-nft 1.8.9 sends for the same command, byte for
    /// byte: the digests are of the rule's expression list payloads `strace -xx` showed
    /// for `iptables-nft -A FORWARD -o br0 -m conntrack --ctstate RELATED,ESTABLISHED -m
    /// comment --comment "academy: replies to bridge br0" -j ACCEPT`, the same with
    /// `--ctstate DNAT` and "academy: published ports of bridge br0", and `-i br0 -m
    /// comment --comment "academy: forwarding from bridge br0" -j ACCEPT`.
    #[test]
    fn the_accepts_encode_as_iptables_nft_encodes_them() {
        let digest = |accept: Accept| {
            let list = expression_bytes(&accept.exprs("br0"));
            (list.len(), hex(&sha256(&list)))
        };
        assert_eq!(
            digest(Accept::Replies),
            (
                688,
                "77717f64dc5ea815e871391972f4dc5f9b6c7eba6bfbd3e3278b3c572ab0bedf".into()
            )
        );
        assert_eq!(
            digest(Accept::Published),
            (
                688,
                "41df31c49b443b812a0d00b91df830361e1c0cdb6adfe4714081e02daf598cb1".into()
            )
        );
        assert_eq!(
            digest(Accept::FromBridge),
            (
                472,
                "738a3219b4a739e951d1a690438f6e3745fa6715009858137a26a3fcbb642182".into()
            )
        );
    }

    #[test]
    fn the_comments_are_distinct_and_fit_iptables_comment_match() {
        let bridge = "b".repeat(15);
        let mut all: Vec<String> = ACCEPTS.iter().map(|a| a.comment(&bridge)).collect();
        all.push(outdated_comment(&bridge));
        for c in &all {
            assert!(c.len() < XT_MAX_COMMENT_LEN, "{c}");
        }
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4);
    }
}
