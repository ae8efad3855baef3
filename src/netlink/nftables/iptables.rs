//! iptables' rules as iptables-nft keeps them in nf_tables (tables `ip nat`, `ip
//! filter` and their ip6 twins): read back with their expressions decoded as far as
//! telling rules apart needs, and rules and chains deleted. Which rules are whose is the
//! callers' (src/firewall/); this file only reads and deletes what it is told.
//!
//! iptables-nft 1.8.9 (Debian 12) keeps `-m comment` as an xt `match` expression whose
//! info is `struct xt_comment_info { char comment[256]; }`, not as rule user data (nft
//! lists such rules without their comment); both forms are read, for newer iptables.

use super::model::{Change, Expr, Op, Table, Verdict};
use super::Nftables;
use crate::netlink::nfnetlink::Family;
use crate::netlink::socket::NlResult;

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
    /// The rule read back (decode.rs), its comments gathered from both forms.
    fn of(rule: super::model::Rule) -> IptablesRule {
        IptablesRule {
            comments: rule.comments(),
            chain: rule.chain,
            handle: rule.handle,
            exprs: rule.exprs,
        }
    }

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
            .filter(|e| e.name() != "counter")
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

impl Nftables {
    /// Every rule of iptables' `table` in `family` (of one chain when given), in one dump;
    /// none when the table or chain does not exist.
    pub fn iptables_rules(
        &mut self,
        family: Family,
        table: &'static str,
        chain: Option<&str>,
    ) -> NlResult<Vec<IptablesRule>> {
        let rules = self.rules(Table::ip(family, table), chain)?;
        Ok(rules.into_iter().map(IptablesRule::of).collect())
    }

    /// One batch: the rules, then each chain emptied and deleted. All or nothing; EBUSY
    /// when a chain is still jumped to by a rule not in the batch.
    pub fn remove_iptables(
        &mut self,
        family: Family,
        table: &'static str,
        removal: &IptablesRemoval,
    ) -> NlResult<()> {
        if removal.is_empty() {
            return Ok(());
        }
        let ip = Table::ip(family, table);
        let mut changes = Vec::new();
        for (chain, handle) in &removal.rules {
            let what = format!("delete rule {handle} of iptables' chain {table} {chain}");
            changes.push(Change::delete_rule(ip, chain, *handle, what));
        }
        for chain in &removal.chains {
            // A DELRULE naming a chain and no handle deletes every rule of the chain.
            let flush = Op::DeleteRule {
                table: ip,
                chain: chain.clone(),
                handle: None,
            };
            let what = format!("empty iptables' chain {table} {chain}");
            changes.push(Change::new(flush, what));
            let delete = Op::DeleteChain {
                table: ip,
                chain: chain.clone(),
            };
            let what = format!("delete iptables' chain {table} {chain}");
            changes.push(Change::new(delete, what));
        }
        self.run(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nfnetlink::Attrs;
    use crate::netlink::nftables::attrs::comment_udata;
    use crate::netlink::nftables::consts::*;
    use crate::netlink::nftables::model::{CmpOp, PayloadBase, Reg};

    fn decode_rule(payload: &[u8]) -> Option<IptablesRule> {
        super::super::decode::rule(payload, Table::ip(Family::V4, "nat")).map(IptablesRule::of)
    }

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
                &Expr::payload(PayloadBase::Network, 12, 4, Reg::R1),
                &Expr::cmp(Reg::R1, CmpOp::Eq, vec![10, 199, 7, 2])
            ]
        );
        assert_eq!(rule.exprs.len(), 5);
        assert_eq!(rule.shape().len(), 4);
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
