//! iptables' FORWARD chain, as iptables-nft keeps it in nf_tables (`table ip filter`,
//! `table ip6 filter`). On a host whose FORWARD policy drops (Docker sets it), every
//! frame routed to or from a container is dropped there, whatever academy's own table
//! accepts: a packet must pass every base chain on its hook. academy then appends two
//! rules for the network's bridge, in the form iptables-nft writes itself (`-i BRIDGE
//! -j ACCEPT`, `-o BRIDGE -j ACCEPT`: meta, cmp, counter, immediate), so `iptables -S`
//! lists them, with a comment naming academy. It never makes the table or the chain:
//! without them nothing drops.

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};

use super::attrs::comment_udata;
use super::batch::Batch;
use super::consts::{
    NFTA_CHAIN_NAME, NFTA_CHAIN_POLICY, NFTA_CHAIN_TABLE, NFTA_DATA_VERDICT, NFTA_IMMEDIATE_DATA,
    NFTA_IMMEDIATE_DREG, NFTA_META_DREG, NFTA_META_KEY, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS,
    NFTA_RULE_TABLE, NFTA_RULE_USERDATA, NFTA_VERDICT_CODE, NFT_CMP_EQ, NFT_META_IIFNAME,
    NFT_META_OIFNAME, NFT_MSG_GETCHAIN, NFT_MSG_NEWRULE, NFT_REG_1, NFT_REG_VERDICT, NF_ACCEPT,
    NF_DROP,
};
use super::rule::{cmp, expr};
use super::step::Step;
use super::{Family, Nftables, Table, TableRule};
use crate::netlink::nfnetlink::{attributes, Attrs};
use crate::netlink::socket::{Await, NlResult};

const FILTER: &str = "filter";
const FORWARD: &str = "FORWARD";

/// The comment of academy's rule for `bridge` in one direction.
fn comment(bridge: &str, direction: &str) -> String {
    format!("academy: forwarding {direction} bridge {bridge}")
}

impl Nftables {
    /// Whether iptables' FORWARD chain of `family` exists and drops by policy.
    pub fn forward_drops(&mut self, family: Family) -> NlResult<bool> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_CHAIN_TABLE, FILTER);
        attrs.str(NFTA_CHAIN_NAME, FORWARD);
        let (nfproto, _, _, _) = family.layout();
        let what = format!("look up chain {FORWARD} of iptables' table {FILTER}");
        let mut policy = None;
        let result = self.request_in(
            nfproto,
            NFT_MSG_GETCHAIN,
            0,
            attrs,
            Await::One,
            &what,
            |p| {
                policy = attributes(p)
                    .find(|(kind, _)| *kind == NFTA_CHAIN_POLICY)
                    .and_then(|(_, v)| <[u8; 4]>::try_from(v).ok())
                    .map(u32::from_be_bytes);
            },
        );
        match result {
            Err(e) if e.is(libc::ENOENT) => Ok(false),
            other => other.map(|()| policy == Some(NF_DROP)),
        }
    }

    /// Appends the accept rules of `bridge` to iptables' FORWARD chain of `family` unless
    /// they are there (one dump of the chain). True when it wrote.
    pub fn accept_forwarding(&mut self, family: Family, bridge: &str) -> NlResult<bool> {
        let (nfproto, _, _, _) = family.layout();
        let present = self.forward_comments(nfproto)?;
        let missing: Vec<(&str, u32)> = [("from", NFT_META_IIFNAME), ("to", NFT_META_OIFNAME)]
            .into_iter()
            .filter(|(direction, _)| !present.contains(&comment(bridge, direction)))
            .collect();
        if missing.is_empty() {
            return Ok(false);
        }
        let mut batch = Batch::in_family(&mut self.socket, nfproto);
        for (direction, key) in missing {
            let text = comment(bridge, direction);
            let mut rule = Attrs::default();
            rule.str(NFTA_RULE_TABLE, FILTER);
            rule.str(NFTA_RULE_CHAIN, FORWARD);
            rule.nested(NFTA_RULE_EXPRESSIONS, |list| {
                accept_interface(list, key, bridge)
            });
            rule.put(NFTA_RULE_USERDATA, &comment_udata(&text));
            batch.add(
                Step::AddRule,
                NFT_MSG_NEWRULE,
                NLM_F_CREATE | NLM_F_APPEND,
                rule,
                format!("append {text:?} to iptables' chain {FILTER} {FORWARD}"),
            );
        }
        batch.commit().map(|()| true)
    }

    /// academy's accept rules of `bridge` in iptables' FORWARD chain of `family`.
    pub fn forward_rules(&mut self, family: Family, bridge: &str) -> NlResult<Vec<TableRule>> {
        let ours = [comment(bridge, "from"), comment(bridge, "to")];
        Ok(self
            .rules_of(Table::IptablesFilter(family), Some(FORWARD))?
            .into_iter()
            .filter(|r| ours.contains(&r.comment))
            .collect())
    }

    fn forward_comments(&mut self, nfproto: u8) -> NlResult<Vec<String>> {
        let rules = self.commented_rules(nfproto, FILTER, Some(FORWARD))?;
        Ok(rules.into_iter().map(|r| r.comment).collect())
    }
}

/// `meta iifname|oifname == NAME; counter; accept`, as iptables-nft encodes `-i`/`-o`
/// (the name compared with its NUL, so no prefix of it matches).
fn accept_interface(list: &mut Attrs, key: u32, name: &str) {
    expr(list, "meta", |e| {
        e.be32(NFTA_META_DREG, NFT_REG_1);
        e.be32(NFTA_META_KEY, key);
    });
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &bytes);
    expr(list, "counter", |_| {});
    expr(list, "immediate", |e| {
        e.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        e.nested(NFTA_IMMEDIATE_DATA, |data| {
            data.nested(NFTA_DATA_VERDICT, |verdict| {
                verdict.be32(NFTA_VERDICT_CODE, NF_ACCEPT)
            })
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};

    /// The rule's bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here.
    #[test]
    fn the_accept_rules_encode_as_before() {
        let digest = |key| {
            let mut list = Attrs::default();
            accept_interface(&mut list, key, "br0");
            hex(&sha256(&list.0))
        };
        assert_eq!(
            digest(NFT_META_IIFNAME),
            "af2827e212f02fffdf82d76f29d716cb8fb7ab3a1f97d3466e6e8364aa658099"
        );
        assert_eq!(
            digest(NFT_META_OIFNAME),
            "a7212e5e0db9b92283a2ed2fb468a6ff0c9e351dee3413b69e5911908cdd1832"
        );
    }
}
