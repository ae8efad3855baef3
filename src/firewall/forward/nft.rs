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

use crate::firewall::tables::iptables_filter;
use crate::netlink::nftables::consts::{
    XT_CONNTRACK_INFO_LEN, XT_CONNTRACK_MATCH_FLAGS_AT, XT_CONNTRACK_REV, XT_CONNTRACK_STATE,
    XT_CONNTRACK_STATE_DNAT, XT_CONNTRACK_STATE_ESTABLISHED, XT_CONNTRACK_STATE_MASK_AT,
    XT_CONNTRACK_STATE_RELATED, XT_MAX_COMMENT_LEN,
};
use crate::netlink::nftables::model::{Change, CmpOp, Expr, MetaKey, Reg, Rule, Verdict};
use crate::netlink::{Family, Nftables, NlResult, TableRule};

const FILTER: &str = "filter";
const FORWARD: &str = "FORWARD";

/// One of academy's accept rules for a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accept {
    /// `-o BR --ctstate RELATED,ESTABLISHED`: answers to what the containers started.
    Replies,
    /// `-o BR --ctstate DNAT`: what a DNAT rule sent to a container (a published port).
    Published,
    /// `-i BR`: everything the containers send (to their bridge too, with br_netfilter).
    FromBridge,
}

const ACCEPTS: [Accept; 3] = [Accept::Replies, Accept::Published, Accept::FromBridge];

impl Accept {
    fn comment(self, bridge: &str) -> String {
        match self {
            Accept::Replies => format!("academy: replies to bridge {bridge}"),
            Accept::Published => format!("academy: published ports of bridge {bridge}"),
            Accept::FromBridge => format!("academy: forwarding from bridge {bridge}"),
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

/// What the chain holds of academy's for one bridge.
struct Found {
    missing: Vec<Accept>,
    /// Outdated accepts, and second copies of a current one.
    surplus: Vec<TableRule>,
    /// Every rule of academy's for the bridge, surplus included.
    ours: Vec<TableRule>,
}

/// Whether iptables' FORWARD chain of `family` exists and drops by policy.
pub fn forward_drops(nft: &mut Nftables, family: Family) -> NlResult<bool> {
    let what = format!("look up chain {FORWARD} of iptables' table {FILTER}");
    let chain = nft.chain_info(iptables_filter(family), FORWARD, &what)?;
    Ok(chain.is_some_and(|c| c.policy == Some(Verdict::Drop)))
}

/// The comments of academy's accepts for `bridge` that iptables' FORWARD chain of
/// `family` lacks (one dump of the chain).
pub fn forward_missing(nft: &mut Nftables, family: Family, bridge: &str) -> NlResult<Vec<String>> {
    let found = forward_found(nft, family, bridge)?;
    Ok(found.missing.iter().map(|a| a.comment(bridge)).collect())
}

/// Whether the chain differs from academy's three accepts for `bridge`, once each.
pub fn forward_incomplete(nft: &mut Nftables, family: Family, bridge: &str) -> NlResult<bool> {
    let found = forward_found(nft, family, bridge)?;
    Ok(!found.missing.is_empty() || !found.surplus.is_empty())
}

/// Makes iptables' FORWARD chain of `family` hold academy's accepts for `bridge` once
/// each: one dump, then (only when something differs) one batch appending what is
/// missing and deleting outdated accepts and second copies. Returns what it changed,
/// in words (nothing when the chain was complete).
pub fn accept_forwarding(
    nft: &mut Nftables,
    family: Family,
    bridge: &str,
) -> NlResult<Vec<String>> {
    let found = forward_found(nft, family, bridge)?;
    if found.missing.is_empty() && found.surplus.is_empty() {
        return Ok(Vec::new());
    }
    let (table, mut changed, mut changes) = (iptables_filter(family), Vec::new(), Vec::new());
    for accept in &found.missing {
        let text = accept.comment(bridge);
        let rule = Rule {
            table,
            chain: FORWARD.to_string(),
            handle: 0,
            comment: None,
            exprs: accept.exprs(bridge),
        };
        let what = format!("append {text:?} to iptables' chain {FILTER} {FORWARD}");
        changes.push(Change::add_rule(rule, what));
        changed.push(format!("appended {text:?}"));
    }
    for rule in &found.surplus {
        let what = format!(
            "delete {:?} (handle {}) from iptables' chain {FILTER} {FORWARD}",
            rule.comment, rule.handle
        );
        changes.push(Change::delete_rule(table, FORWARD, rule.handle, what));
        changed.push(format!(
            "deleted {:?} (handle {})",
            rule.comment, rule.handle
        ));
    }
    nft.run(changes).map(|()| changed)
}

/// academy's rules for `bridge` in iptables' FORWARD chain of `family`, outdated
/// ones and second copies included.
pub fn forward_rules(nft: &mut Nftables, family: Family, bridge: &str) -> NlResult<Vec<TableRule>> {
    Ok(forward_found(nft, family, bridge)?.ours)
}

fn forward_found(nft: &mut Nftables, family: Family, bridge: &str) -> NlResult<Found> {
    let outdated = outdated_comment(bridge);
    let current: Vec<(Accept, String)> = ACCEPTS.map(|a| (a, a.comment(bridge))).into();
    let mut found = Found {
        missing: Vec::new(),
        surplus: Vec::new(),
        ours: Vec::new(),
    };
    let mut seen = Vec::new();
    for rule in nft.iptables_rules(family, FILTER, Some(FORWARD))? {
        let ours = rule.comments.iter().find_map(|c| {
            if *c == outdated {
                return Some((None, c));
            }
            current
                .iter()
                .find(|(_, t)| t == c)
                .map(|(a, _)| (Some(*a), c))
        });
        let Some((accept, comment)) = ours else {
            continue;
        };
        let table_rule = TableRule {
            table: iptables_filter(family),
            chain: rule.chain.clone(),
            handle: rule.handle,
            comment: comment.clone(),
        };
        match accept {
            Some(accept) if !seen.contains(&accept) => seen.push(accept),
            _ => found.surplus.push(table_rule.clone()),
        }
        found.ours.push(table_rule);
    }
    found.missing = ACCEPTS.into_iter().filter(|a| !seen.contains(a)).collect();
    Ok(found)
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
