//! iptables' rules as iptables-nft keeps them in nf_tables (tables `ip nat`, `ip
//! filter` and their ip6 twins): read back with their expressions decoded as far as
//! telling rules apart needs, and rules and chains deleted. Which rules are whose is the
//! callers' (src/firewall/); this file only reads and deletes what it is told.
//!
//! iptables-nft 1.8.9 (Debian 12) keeps `-m comment` as an xt `match` expression whose
//! info is `struct xt_comment_info { char comment[256]; }`, not as rule user data (nft
//! lists such rules without their comment); both forms are read, for newer iptables.

use super::attrs::comment_of;
use super::batch::Change;
use super::consts::{
    NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE, NFTA_CMP_DATA, NFTA_CMP_OP, NFTA_DATA_VALUE,
    NFTA_DATA_VERDICT, NFTA_EXPR_DATA, NFTA_EXPR_NAME, NFTA_IMMEDIATE_DATA, NFTA_LIST_ELEM,
    NFTA_MATCH_INFO, NFTA_MATCH_NAME, NFTA_PAYLOAD_BASE, NFTA_PAYLOAD_LEN, NFTA_PAYLOAD_OFFSET,
    NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_RULE_USERDATA,
    NFTA_TARGET_NAME, NFTA_VERDICT_CHAIN, NFTA_VERDICT_CODE, NFT_CMP_EQ, NFT_GOTO, NFT_JUMP,
    NFT_MSG_DELCHAIN, NFT_MSG_DELRULE, NFT_MSG_GETRULE, NFT_PAYLOAD_NETWORK_HEADER, NFT_RETURN,
    NF_ACCEPT, NF_DROP,
};
use super::step::Step;
use super::Nftables;
use crate::netlink::nfnetlink::{attributes, Attrs, Family};
use crate::netlink::socket::NlResult;

/// The verdict codes as the kernel stores them, signed beside NFT_JUMP and the others.
const ACCEPT: i32 = NF_ACCEPT as i32;
const DROP: i32 = NF_DROP as i32;

/// One expression of an iptables-nft rule, as far as telling the reference's rules apart
/// needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `payload load LEN @ network header + OFFSET`.
    NetworkPayload {
        offset: u32,
        len: u32,
    },
    /// `cmp eq` against these bytes.
    CmpEq(Vec<u8>),
    /// An xt match (`comment`, `conntrack`, `multiport`, ...).
    Match(String),
    /// An xt target (`MASQUERADE`, `DNAT`, ...).
    Target(String),
    Verdict(Verdict),
    /// Any other expression, by name (`counter`, `meta`, `bitwise`, ...).
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Jump(String),
    Goto(String),
    Other(i32),
}

/// A rule of an iptables-nft table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IptablesRule {
    pub chain: String,
    pub handle: u64,
    /// Its `-m comment` texts (and a user-data comment, if any).
    pub comments: Vec<String>,
    pub exprs: Vec<Expr>,
}

impl IptablesRule {
    /// The chain it jumps or goes to.
    pub fn target_chain(&self) -> Option<&str> {
        self.exprs.iter().find_map(|e| match e {
            Expr::Verdict(Verdict::Jump(c) | Verdict::Goto(c)) => Some(c.as_str()),
            _ => None,
        })
    }

    /// Its expressions without counters: iptables-nft puts one in every rule.
    pub fn shape(&self) -> Vec<&Expr> {
        self.exprs
            .iter()
            .filter(|e| !matches!(e, Expr::Other(n) if n == "counter"))
            .collect()
    }
}

/// What to delete from one iptables-nft table.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IptablesRemoval {
    /// Rules by (chain, handle).
    pub rules: Vec<(String, u64)>,
    /// Chains emptied and deleted (after the rules above, so nothing jumps to them).
    pub chains: Vec<String>,
}

impl IptablesRemoval {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.chains.is_empty()
    }
}

fn nfproto(family: Family) -> u8 {
    family.layout().0
}

impl Nftables {
    /// Every rule of iptables' `table` in `family` (of one chain when given), in one dump;
    /// none when the table or chain does not exist.
    pub fn iptables_rules(
        &mut self,
        family: Family,
        table: &str,
        chain: Option<&str>,
    ) -> NlResult<Vec<IptablesRule>> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_RULE_TABLE, table);
        if let Some(chain) = chain {
            attrs.str(NFTA_RULE_CHAIN, chain);
        }
        let what = format!("list the rules of iptables' table {table} ({family:?})");
        self.dump(
            nfproto(family),
            NFT_MSG_GETRULE,
            attrs,
            &what,
            |p, found| found.extend(decode_rule(p)),
        )
    }

    /// One batch: the rules, then each chain emptied and deleted. All or nothing; EBUSY
    /// when a chain is still jumped to by a rule not in the batch.
    pub fn remove_iptables(
        &mut self,
        family: Family,
        table: &str,
        removal: &IptablesRemoval,
    ) -> NlResult<()> {
        if removal.is_empty() {
            return Ok(());
        }
        let mut changes = Vec::new();
        let change = |step, kind, attrs, description| Change {
            step,
            kind,
            flags: 0,
            attrs,
            description,
        };
        for (chain, handle) in &removal.rules {
            let mut rule = Attrs::default();
            rule.str(NFTA_RULE_TABLE, table);
            rule.str(NFTA_RULE_CHAIN, chain);
            rule.be64(NFTA_RULE_HANDLE, *handle);
            let what = format!("delete rule {handle} of iptables' chain {table} {chain}");
            changes.push(change(Step::DeleteRule, NFT_MSG_DELRULE, rule, what));
        }
        for chain in &removal.chains {
            // A DELRULE naming a chain and no handle deletes every rule of the chain.
            let mut flush = Attrs::default();
            flush.str(NFTA_RULE_TABLE, table);
            flush.str(NFTA_RULE_CHAIN, chain);
            let what = format!("empty iptables' chain {table} {chain}");
            changes.push(change(Step::DeleteRule, NFT_MSG_DELRULE, flush, what));
            let mut del = Attrs::default();
            del.str(NFTA_CHAIN_TABLE, table);
            del.str(NFTA_CHAIN_NAME, chain);
            let what = format!("delete iptables' chain {table} {chain}");
            changes.push(change(Step::DeleteChain, NFT_MSG_DELCHAIN, del, what));
        }
        self.commit(nfproto(family), changes)
    }
}

fn text(bytes: &[u8]) -> String {
    let bytes = bytes.split(|b| *b == 0).next().unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

fn be32(bytes: &[u8]) -> Option<u32> {
    bytes.try_into().ok().map(u32::from_be_bytes)
}

fn find(bytes: &[u8], kind: u16) -> Option<&[u8]> {
    attributes(bytes).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

fn decode_rule(payload: &[u8]) -> Option<IptablesRule> {
    let (mut chain, mut handle) = (None, None);
    let mut comments = Vec::new();
    let mut exprs = Vec::new();
    for (kind, value) in attributes(payload) {
        match kind {
            NFTA_RULE_CHAIN => chain = Some(text(value)),
            NFTA_RULE_HANDLE => handle = value.try_into().ok().map(u64::from_be_bytes),
            NFTA_RULE_USERDATA => comments.extend(comment_of(value)),
            NFTA_RULE_EXPRESSIONS => {
                for (_, e) in attributes(value).filter(|(k, _)| *k == NFTA_LIST_ELEM) {
                    let expr = decode_expr(e);
                    if let Some(Expr::Match(name)) = &expr {
                        if name == "comment" {
                            let data = find(e, NFTA_EXPR_DATA).unwrap_or_default();
                            comments.extend(find(data, NFTA_MATCH_INFO).map(text));
                        }
                    }
                    exprs.extend(expr);
                }
            }
            _ => {}
        }
    }
    Some(IptablesRule {
        chain: chain?,
        handle: handle?,
        comments,
        exprs,
    })
}

fn decode_expr(e: &[u8]) -> Option<Expr> {
    let name = text(find(e, NFTA_EXPR_NAME)?);
    let data = find(e, NFTA_EXPR_DATA).unwrap_or_default();
    let expr = match name.as_str() {
        "match" => Expr::Match(find(data, NFTA_MATCH_NAME).map(text).unwrap_or_default()),
        "target" => Expr::Target(find(data, NFTA_TARGET_NAME).map(text).unwrap_or_default()),
        "payload"
            if find(data, NFTA_PAYLOAD_BASE).and_then(be32) == Some(NFT_PAYLOAD_NETWORK_HEADER) =>
        {
            match (
                find(data, NFTA_PAYLOAD_OFFSET).and_then(be32),
                find(data, NFTA_PAYLOAD_LEN).and_then(be32),
            ) {
                (Some(offset), Some(len)) => Expr::NetworkPayload { offset, len },
                _ => Expr::Other(name),
            }
        }
        "cmp" if find(data, NFTA_CMP_OP).and_then(be32) == Some(NFT_CMP_EQ) => {
            match find(data, NFTA_CMP_DATA).and_then(|d| find(d, NFTA_DATA_VALUE)) {
                Some(value) => Expr::CmpEq(value.to_vec()),
                None => Expr::Other(name),
            }
        }
        "immediate" => {
            match find(data, NFTA_IMMEDIATE_DATA).and_then(|d| find(d, NFTA_DATA_VERDICT)) {
                Some(v) => Expr::Verdict(verdict(v)),
                None => Expr::Other(name),
            }
        }
        _ => Expr::Other(name),
    };
    Some(expr)
}

fn verdict(v: &[u8]) -> Verdict {
    let code = find(v, NFTA_VERDICT_CODE).and_then(be32).map(|c| c as i32);
    let chain = find(v, NFTA_VERDICT_CHAIN).map(text).unwrap_or_default();
    match code {
        Some(ACCEPT) => Verdict::Accept,
        Some(DROP) => Verdict::Drop,
        Some(NFT_RETURN) => Verdict::Return,
        Some(NFT_JUMP) => Verdict::Jump(chain),
        Some(NFT_GOTO) => Verdict::Goto(chain),
        Some(other) => Verdict::Other(other),
        None => Verdict::Other(i32::MIN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::attrs::comment_udata;
    use crate::netlink::nftables::consts::{
        NFTA_CMP_SREG, NFTA_IMMEDIATE_DREG, NFTA_MATCH_REV, NFTA_PAYLOAD_DREG, NFT_REG_1,
        NFT_REG_VERDICT,
    };

    fn expr(list: &mut Attrs, name: &str, data: impl FnOnce(&mut Attrs)) {
        list.nested(NFTA_LIST_ELEM, |e| {
            e.str(NFTA_EXPR_NAME, name);
            e.nested(NFTA_EXPR_DATA, data);
        });
    }

    /// The POSTROUTING rule the reference bridge's ipMasq leaves, as iptables-nft 1.8.9
    /// writes it (`nft --debug=netlink` of a real run): saddr, comment match, counter,
    /// jump.
    fn masq_jump(comment: &str) -> Vec<u8> {
        let mut a = Attrs::default();
        a.str(NFTA_RULE_TABLE, "nat");
        a.str(NFTA_RULE_CHAIN, "POSTROUTING");
        a.be64(NFTA_RULE_HANDLE, 5);
        a.nested(NFTA_RULE_EXPRESSIONS, |l| {
            expr(l, "payload", |d| {
                d.be32(NFTA_PAYLOAD_DREG, NFT_REG_1);
                d.be32(NFTA_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
                d.be32(NFTA_PAYLOAD_OFFSET, 12);
                d.be32(NFTA_PAYLOAD_LEN, 4);
            });
            expr(l, "cmp", |d| {
                d.be32(NFTA_CMP_SREG, NFT_REG_1);
                d.be32(NFTA_CMP_OP, NFT_CMP_EQ);
                d.nested(NFTA_CMP_DATA, |v| v.put(NFTA_DATA_VALUE, &[10, 199, 7, 2]));
            });
            expr(l, "match", |d| {
                d.str(NFTA_MATCH_NAME, "comment");
                d.be32(NFTA_MATCH_REV, 0);
                let mut info = comment.as_bytes().to_vec();
                info.resize(256, 0);
                d.put(NFTA_MATCH_INFO, &info);
            });
            expr(l, "counter", |_| {});
            expr(l, "immediate", |d| {
                d.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
                d.nested(NFTA_IMMEDIATE_DATA, |data| {
                    data.nested(NFTA_DATA_VERDICT, |v| {
                        v.be32(NFTA_VERDICT_CODE, NFT_JUMP as u32);
                        v.str(NFTA_VERDICT_CHAIN, "CNI-f932e8dd6bf382c1e3921eeb");
                    })
                });
            });
        });
        a.0
    }

    #[test]
    fn a_reference_jump_reads_with_its_xt_comment_and_target() {
        let comment = r#"name: "expnet" id: "cnitool-767de159e706b79ef4ea""#;
        let rule = decode_rule(&masq_jump(comment)).unwrap();
        assert_eq!(rule.chain, "POSTROUTING");
        assert_eq!(rule.handle, 5);
        assert_eq!(rule.comments, [comment]);
        assert_eq!(rule.target_chain(), Some("CNI-f932e8dd6bf382c1e3921eeb"));
        assert_eq!(
            rule.shape()[..2],
            [
                &Expr::NetworkPayload { offset: 12, len: 4 },
                &Expr::CmpEq(vec![10, 199, 7, 2])
            ]
        );
        assert!(!rule.shape().contains(&&Expr::Other("counter".into())));
    }

    #[test]
    fn a_user_data_comment_is_read_too() {
        let mut a = Attrs::default();
        a.str(NFTA_RULE_CHAIN, "CNI-HOSTPORT-DNAT");
        a.be64(NFTA_RULE_HANDLE, 9);
        a.put(
            NFTA_RULE_USERDATA,
            &comment_udata("dnat name: \"n\" id: \"c\""),
        );
        let rule = decode_rule(&a.0).unwrap();
        assert_eq!(rule.comments, ["dnat name: \"n\" id: \"c\""]);
        assert_eq!(rule.target_chain(), None);
    }
}
