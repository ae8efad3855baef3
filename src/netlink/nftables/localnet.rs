//! The loopback guard: publishing an IPv4 port sets `route_localnet` on the bridge
//! (src/firewall/ports/localnet.rs), so the host routes 127.0.0.0/8 arriving on it; without a
//! guard, a container with CAP_NET_RAW could send a frame to the bridge's MAC with
//! destination 127.0.0.1 and reach a service of the host bound to 127.0.0.1 only
//! (CVE-2020-8558's class; the reference portmap has the same hole). kube-proxy closes
//! it with a drop of traffic to 127.0.0.0/8 that was not DNATed; academy does the same
//! in its own table, for the bridges it set `route_localnet` on:
//!
//! ```text
//! set _localnet { type ifname; }          # one element per bridge
//! chain input {
//!         type filter hook input priority filter; policy accept;
//!         iifname @_localnet ip daddr 127.0.0.0/8 ct status & dnat != dnat drop comment "academy localnet 127.0.0.0/8"
//!         iifname @_localnet ip6 daddr ::1 ct status & dnat != dnat drop comment "academy localnet ::1"
//! }
//! ```
//!
//! A connection the host itself made to 127.0.0.1:hostPort (DNATed to a container, its
//! source masqueraded) comes back on the bridge to 127.0.0.1 with the DNAT bit set, and
//! passes. The kernel already refuses ::1 from any interface but lo (a martian, before
//! the hooks); its rule is kept for a kernel or a sysctl that would not.

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};

use super::attrs::comment_udata;
use super::batch::Batch;
use super::consts::{
    IFNAMSIZ, IPS_DST_NAT, LOCALNET_SET, NFPROTO_INET, NFTA_BITWISE_DREG, NFTA_BITWISE_LEN,
    NFTA_BITWISE_MASK, NFTA_BITWISE_SREG, NFTA_BITWISE_XOR, NFTA_CT_DREG, NFTA_CT_KEY,
    NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_IMMEDIATE_DATA, NFTA_IMMEDIATE_DREG, NFTA_LIST_ELEM,
    NFTA_LOOKUP_SET, NFTA_LOOKUP_SET_ID, NFTA_LOOKUP_SREG, NFTA_META_DREG, NFTA_META_KEY,
    NFTA_PAYLOAD_BASE, NFTA_PAYLOAD_DREG, NFTA_PAYLOAD_LEN, NFTA_PAYLOAD_OFFSET, NFTA_RULE_CHAIN,
    NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_RULE_USERDATA,
    NFTA_SET_ELEM_KEY, NFTA_SET_ID, NFTA_SET_KEY_LEN, NFTA_SET_KEY_TYPE, NFTA_SET_NAME,
    NFTA_SET_TABLE, NFTA_SET_USERDATA, NFTA_VERDICT_CODE, NFT_CMP_EQ, NFT_CMP_NEQ, NFT_CT_STATUS,
    NFT_META_IIFNAME, NFT_META_NFPROTO, NFT_MSG_DELRULE, NFT_MSG_NEWRULE, NFT_MSG_NEWSET,
    NFT_MSG_NEWSETELEM, NFT_PAYLOAD_NETWORK_HEADER, NFT_REG_1, NFT_REG_VERDICT, NF_DROP,
    NF_INET_LOCAL_IN, NF_IP_PRI_FILTER, TABLE, TYPE_IFNAME,
};
use super::objects::{new_chain, new_table, BaseChain, Table};
use super::portmap::element_list;
use super::rule::{cmp, expr};
use super::step::Step;
use super::Nftables;
use crate::netlink::nfnetlink::{Attrs, Family};
use crate::netlink::socket::NlResult;

/// The guard's chain in `inet academy`.
pub const INPUT: &str = "input";

/// Every rule of the guard's has a comment starting so.
const RULE_PREFIX: &str = "academy localnet";

/// The set's id in the batch that creates it, for the rules' lookups.
const SET_ID: u32 = 1;

/// The guard's rules, as (family, comment).
fn wanted_rules() -> [(Family, String); 2] {
    [
        (Family::V4, format!("{RULE_PREFIX} 127.0.0.0/8")),
        (Family::V6, format!("{RULE_PREFIX} ::1")),
    ]
}

impl Nftables {
    /// Makes sure of the guard and puts `bridge` in `_localnet`: one small dump of the
    /// chain's rules, then one batch. When both rules are there, the batch only adds the
    /// element (already there is success). Otherwise `lock` is taken (the host's repair
    /// lock, so concurrent first ADDs leave one rule each), the chain looked at again,
    /// and the batch also creates table, set and chain if missing (an identical one is
    /// success) and replaces whatever is left of the rules. True when it wrote rules.
    pub fn ensure_localnet<G>(&mut self, bridge: &str, lock: impl FnOnce() -> G) -> NlResult<bool> {
        let mut present = self.localnet_rules()?;
        let _held = match complete(&present) {
            true => None,
            false => {
                let held = lock();
                present = self.localnet_rules()?;
                Some(held)
            }
        };
        let repair = !complete(&present);
        // The usual publishing ADD finds the guard whole and its bridge in the set: a
        // lookup instead of a commit (a transaction, which costs the kernel far more).
        if !repair && self.has_localnet(bridge)? {
            return Ok(false);
        }
        let mut batch = Batch::new(&mut self.socket);
        if repair {
            add_objects(&mut batch, &present);
        }
        let attrs = element_list(LOCALNET_SET, |list| {
            list.nested(NFTA_LIST_ELEM, |elem| {
                elem.nested(NFTA_SET_ELEM_KEY, |k| {
                    k.put(NFTA_DATA_VALUE, &localnet_key(bridge))
                });
            });
        });
        batch.add(
            Step::AddElement,
            NFT_MSG_NEWSETELEM,
            NLM_F_CREATE,
            attrs,
            format!("add {bridge} to nf_tables set inet {TABLE} {LOCALNET_SET}"),
        );
        batch.commit().map(|()| repair)
    }

    /// The comments of the guard's rules that are not in chain `input`.
    pub fn missing_localnet_rules(&mut self) -> NlResult<Vec<String>> {
        let present = self.localnet_rules()?;
        Ok(wanted_rules()
            .into_iter()
            .map(|(_, comment)| comment)
            .filter(|comment| !present.iter().any(|(c, _)| c == comment))
            .collect())
    }

    /// Whether `_localnet` holds `bridge`.
    pub fn has_localnet(&mut self, bridge: &str) -> NlResult<bool> {
        let what = format!("look up {bridge} in nf_tables set inet {TABLE} {LOCALNET_SET}");
        self.has_element(NFPROTO_INET, LOCALNET_SET, &localnet_key(bridge), &what)
    }

    /// The guard's rules in chain `input`, as (comment, handle); none when it is gone.
    fn localnet_rules(&mut self) -> NlResult<Vec<(String, u64)>> {
        Ok(self
            .commented_rules(NFPROTO_INET, TABLE, Some(INPUT))?
            .into_iter()
            .filter(|r| r.comment.starts_with(RULE_PREFIX))
            .map(|r| (r.comment, r.handle))
            .collect())
    }
}

/// Each wanted rule once, and nothing else of the guard's.
fn complete(present: &[(String, u64)]) -> bool {
    let wanted = wanted_rules();
    present.len() == wanted.len()
        && wanted
            .iter()
            .all(|(_, comment)| present.iter().any(|(c, _)| c == comment))
}

/// Table, set and chain (created if missing), what is left of the rules deleted, and
/// both rules added, in their order.
fn add_objects(batch: &mut Batch, present: &[(String, u64)]) {
    batch.push(new_table(Table::Academy));
    let mut set = Attrs::default();
    set.str(NFTA_SET_TABLE, TABLE);
    set.str(NFTA_SET_NAME, LOCALNET_SET);
    set.be32(NFTA_SET_KEY_TYPE, TYPE_IFNAME);
    set.be32(NFTA_SET_KEY_LEN, IFNAMSIZ as u32);
    set.be32(NFTA_SET_ID, SET_ID);
    set.put(NFTA_SET_USERDATA, &name_byteorder());
    batch.add(
        Step::CreateSet,
        NFT_MSG_NEWSET,
        NLM_F_CREATE,
        set,
        format!("create set {LOCALNET_SET}"),
    );
    batch.push(new_chain(
        Table::Academy,
        BaseChain {
            name: INPUT,
            hook: NF_INET_LOCAL_IN,
            priority: NF_IP_PRI_FILTER,
            kind: "filter",
        },
    ));
    for (comment, handle) in present {
        let mut rule = Attrs::default();
        rule.str(NFTA_RULE_TABLE, TABLE);
        rule.str(NFTA_RULE_CHAIN, INPUT);
        rule.be64(NFTA_RULE_HANDLE, *handle);
        batch.add(
            Step::DeleteRule,
            NFT_MSG_DELRULE,
            0,
            rule,
            format!("delete the rule {comment:?} (handle {handle}) from chain {INPUT}"),
        );
    }
    for (family, comment) in wanted_rules() {
        let mut rule = Attrs::default();
        rule.str(NFTA_RULE_TABLE, TABLE);
        rule.str(NFTA_RULE_CHAIN, INPUT);
        rule.nested(NFTA_RULE_EXPRESSIONS, |list| {
            localnet_rule(list, family, SET_ID)
        });
        rule.put(NFTA_RULE_USERDATA, &comment_udata(&comment));
        batch.add(
            Step::AddRule,
            NFT_MSG_NEWRULE,
            NLM_F_CREATE | NLM_F_APPEND,
            rule,
            format!("add the rule {comment:?} to chain {INPUT}"),
        );
    }
}

/// `iifname @_localnet ip daddr 127.0.0.0/8 ct status & dnat != dnat drop` (IPv6:
/// `ip6 daddr ::1`), expression for expression as `nft --debug=netlink` shows nft 1.0.6
/// writing it: the name looked up, the family, the destination (one byte for the /8,
/// all sixteen for ::1), then the conntrack status without its DNAT bit.
pub(super) fn localnet_rule(list: &mut Attrs, family: Family, set_id: u32) {
    let (nfproto, _, _, daddr) = family.layout();
    meta(list, NFT_META_IIFNAME);
    expr(list, "lookup", |e| {
        e.str(NFTA_LOOKUP_SET, LOCALNET_SET);
        e.be32(NFTA_LOOKUP_SREG, NFT_REG_1);
        // The set may be new in this batch.
        e.be32(NFTA_LOOKUP_SET_ID, set_id);
    });
    meta(list, NFT_META_NFPROTO);
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &[nfproto]);
    let loopback: Vec<u8> = match family {
        Family::V4 => vec![127],
        Family::V6 => std::net::Ipv6Addr::LOCALHOST.octets().to_vec(),
    };
    expr(list, "payload", |e| {
        e.be32(NFTA_PAYLOAD_DREG, NFT_REG_1);
        e.be32(NFTA_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
        e.be32(NFTA_PAYLOAD_OFFSET, daddr);
        e.be32(NFTA_PAYLOAD_LEN, loopback.len() as u32);
    });
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &loopback);
    expr(list, "ct", |e| {
        e.be32(NFTA_CT_DREG, NFT_REG_1);
        e.be32(NFTA_CT_KEY, NFT_CT_STATUS);
    });
    expr(list, "bitwise", |e| {
        e.be32(NFTA_BITWISE_SREG, NFT_REG_1);
        e.be32(NFTA_BITWISE_DREG, NFT_REG_1);
        e.be32(NFTA_BITWISE_LEN, 4);
        e.nested(NFTA_BITWISE_MASK, |m| {
            m.put(NFTA_DATA_VALUE, &IPS_DST_NAT.to_ne_bytes())
        });
        e.nested(NFTA_BITWISE_XOR, |x| x.put(NFTA_DATA_VALUE, &[0; 4]));
    });
    cmp(list, NFT_REG_1, NFT_CMP_NEQ, &IPS_DST_NAT.to_ne_bytes());
    expr(list, "immediate", |e| {
        e.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        e.nested(NFTA_IMMEDIATE_DATA, |data| {
            data.nested(NFTA_DATA_VERDICT, |verdict| {
                verdict.be32(NFTA_VERDICT_CODE, NF_DROP)
            })
        });
    });
}

fn meta(list: &mut Attrs, key: u32) {
    expr(list, "meta", |e| {
        e.be32(NFTA_META_DREG, NFT_REG_1);
        e.be32(NFTA_META_KEY, key);
    });
}

/// libnftnl's set user data telling nft that the key, a name, is in host byte order
/// (NFTNL_UDATA_SET_KEYBYTEORDER), as nft writes it for `type ifname`: without it, nft
/// reads a name as a big-endian number and lists every bridge as "". The kernel ignores it.
fn name_byteorder() -> Vec<u8> {
    const KEY_BYTEORDER: u8 = 0;
    const HOST_ENDIAN: u32 = 1;
    let mut udata = vec![KEY_BYTEORDER, 4];
    udata.extend_from_slice(&HOST_ENDIAN.to_ne_bytes());
    udata
}

/// The bridge's name NUL-padded to IFNAMSIZ, as the kernel loads `iifname`.
pub(super) fn localnet_key(bridge: &str) -> Vec<u8> {
    let mut name = bridge.as_bytes().to_vec();
    name.resize(IFNAMSIZ, 0);
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};

    /// The rules' bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here. (That they are nft's own expressions is held to
    /// the kernel by tests/it/portmap/localnet.rs, against `nft --debug=netlink`.)
    #[test]
    fn the_loopback_guard_rules_encode_as_before() {
        let digest = |family| {
            let mut list = Attrs::default();
            localnet_rule(&mut list, family, SET_ID);
            hex(&sha256(&list.0))
        };
        assert_eq!(
            digest(Family::V4),
            "9842ebc2de05611492452ac98a6b8764f39b91b7d39ddda24deb0a9fad44f76b"
        );
        assert_eq!(
            digest(Family::V6),
            "32240fb1a46be542aa202982249a037dc00dc4eb977c67ea7f55f9da6a7223ba"
        );
        assert_eq!(localnet_key("br0"), b"br0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    }
}
