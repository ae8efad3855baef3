//! The one encoder: a typed change (model.rs) as the message nf_tables takes, its
//! expressions attribute for attribute as nft (or iptables-nft) sends them.

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL};

use super::attrs::{comment_udata, COMMENT_MAX};
use super::consts::*;
use super::model::{
    CmpOp, CtKey, Element, Expr, FibResult, Hook, MetaKey, NatType, Op, PayloadBase, Reg, Rule,
    Set, Verdict,
};
use crate::netlink::nfnetlink::Attrs;

/// One change as it goes on the wire: message type (NFT_MSG_*), flags, attributes.
pub struct Encoded {
    pub kind: u8,
    pub flags: u16,
    pub attrs: Attrs,
}

pub fn op(op: &Op) -> Encoded {
    let mut attrs = Attrs::default();
    let (kind, flags) = match op {
        Op::AddTable(table) => {
            attrs.str(NFTA_TABLE_NAME, table.name);
            (NFT_MSG_NEWTABLE, NLM_F_CREATE)
        }
        Op::AddChain(chain) => {
            attrs.str(NFTA_CHAIN_TABLE, chain.table.name);
            attrs.str(NFTA_CHAIN_NAME, chain.name);
            attrs.nested(NFTA_CHAIN_HOOK, |hook| {
                hook.be32(NFTA_HOOK_HOOKNUM, hook_number(chain.hook));
                hook.be32(NFTA_HOOK_PRIORITY, chain.priority.0 as u32);
            });
            attrs.str(NFTA_CHAIN_TYPE, chain.kind.name());
            (NFT_MSG_NEWCHAIN, NLM_F_CREATE)
        }
        Op::AddSet(set) => {
            encode_set(&mut attrs, set);
            let exclusive = if set.exclusive { NLM_F_EXCL } else { 0 };
            (NFT_MSG_NEWSET, NLM_F_CREATE | exclusive)
        }
        Op::DeleteSet { table, name } => {
            attrs.str(NFTA_SET_TABLE, table.name);
            attrs.str(NFTA_SET_NAME, name);
            (NFT_MSG_DELSET, 0)
        }
        Op::AddRule(rule) => {
            encode_rule(&mut attrs, rule);
            (NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND)
        }
        Op::DeleteRule {
            table,
            chain,
            handle,
        } => {
            attrs.str(NFTA_RULE_TABLE, table.name);
            attrs.str(NFTA_RULE_CHAIN, chain);
            // Without a handle, DELRULE deletes every rule of the chain.
            if let Some(handle) = handle {
                attrs.be64(NFTA_RULE_HANDLE, *handle);
            }
            (NFT_MSG_DELRULE, 0)
        }
        Op::DeleteChain { table, chain } => {
            attrs.str(NFTA_CHAIN_TABLE, table.name);
            attrs.str(NFTA_CHAIN_NAME, chain);
            (NFT_MSG_DELCHAIN, 0)
        }
        Op::AddElements {
            table,
            set,
            elements,
            exclusive,
            ..
        } => {
            element_list(&mut attrs, table.name, set, |list| {
                for e in elements {
                    element(list, e);
                }
            });
            let exclusive = if *exclusive { NLM_F_EXCL } else { 0 };
            (NFT_MSG_NEWSETELEM, NLM_F_CREATE | exclusive)
        }
        Op::DeleteElements {
            table, set, keys, ..
        } => {
            // A removal names the key alone, as `nft delete element` does.
            element_list(&mut attrs, table.name, set, |list| {
                for key in keys {
                    element_key(list, key);
                }
            });
            (NFT_MSG_DELSETELEM, 0)
        }
    };
    Encoded { kind, flags, attrs }
}

fn encode_set(attrs: &mut Attrs, set: &Set) {
    attrs.str(NFTA_SET_TABLE, set.table.name);
    attrs.str(NFTA_SET_NAME, &set.name);
    if set.data.is_some() {
        attrs.be32(NFTA_SET_FLAGS, NFT_SET_MAP);
    }
    attrs.be32(NFTA_SET_KEY_TYPE, set.key.0);
    attrs.be32(NFTA_SET_KEY_LEN, set.key.1);
    if let Some((data_type, data_len)) = set.data {
        attrs.be32(NFTA_SET_DATA_TYPE, data_type);
        attrs.be32(NFTA_SET_DATA_LEN, data_len);
    }
    if set.id != 0 {
        attrs.be32(NFTA_SET_ID, set.id);
    }
    if let Some(userdata) = &set.userdata {
        attrs.put(NFTA_SET_USERDATA, userdata);
    }
}

fn encode_rule(attrs: &mut Attrs, rule: &Rule) {
    attrs.str(NFTA_RULE_TABLE, rule.table.name);
    attrs.str(NFTA_RULE_CHAIN, &rule.chain);
    attrs.nested(NFTA_RULE_EXPRESSIONS, |list| expressions(list, &rule.exprs));
    if let Some(comment) = &rule.comment {
        attrs.put(NFTA_RULE_USERDATA, &comment_udata(comment));
    }
}

/// A set's element list message: table, set, and the elements `elements` writes.
pub fn element_list(attrs: &mut Attrs, table: &str, set: &str, elements: impl FnOnce(&mut Attrs)) {
    attrs.str(NFTA_SET_ELEM_LIST_TABLE, table);
    attrs.str(NFTA_SET_ELEM_LIST_SET, set);
    attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, elements);
}

/// One element of a list: its key, a map's value, and its comment when it has one.
pub fn element(list: &mut Attrs, element: &Element) {
    list.nested(NFTA_LIST_ELEM, |elem| {
        elem.nested(NFTA_SET_ELEM_KEY, |k| k.put(NFTA_DATA_VALUE, &element.key));
        if let Some(data) = &element.data {
            elem.nested(NFTA_SET_ELEM_DATA, |d| d.put(NFTA_DATA_VALUE, data));
        }
        if !element.comment.is_empty() {
            elem.put(NFTA_SET_ELEM_USERDATA, &comment_udata(&element.comment));
        }
    });
}

fn element_key(list: &mut Attrs, key: &[u8]) {
    list.nested(NFTA_LIST_ELEM, |elem| {
        elem.nested(NFTA_SET_ELEM_KEY, |k| k.put(NFTA_DATA_VALUE, key));
    });
}

/// The bytes `element` writes, counted without writing them (batches are split by it).
pub fn element_len(element: &Element) -> usize {
    let attr = |payload: usize| 4 + ((payload + 3) & !3);
    let mut inner = attr(attr(element.key.len()));
    if let Some(data) = &element.data {
        inner += attr(attr(data.len()));
    }
    if !element.comment.is_empty() {
        inner += attr(2 + element.comment.len().min(COMMENT_MAX) + 1);
    }
    attr(inner)
}

/// A rule's expressions, each one NFTA_LIST_ELEM of name and data.
pub fn expressions(list: &mut Attrs, exprs: &[Expr]) {
    for e in exprs {
        list.nested(NFTA_LIST_ELEM, |item| {
            item.str(NFTA_EXPR_NAME, e.name());
            match e {
                Expr::Other { data, .. } => item.put(NFTA_EXPR_DATA, data),
                _ => item.nested(NFTA_EXPR_DATA, |d| expression(d, e)),
            }
        });
    }
}

fn expression(e: &mut Attrs, expr: &Expr) {
    match expr {
        Expr::Meta { key, dreg } => {
            e.be32(NFTA_META_DREG, dreg.0);
            e.be32(NFTA_META_KEY, meta_key(*key));
        }
        Expr::IptablesMeta { key, dreg } => {
            e.be32(NFTA_META_KEY, meta_key(*key));
            e.be32(NFTA_META_DREG, dreg.0);
        }
        Expr::MetaSet { key, sreg } => {
            e.be32(NFTA_META_KEY, meta_key(*key));
            e.be32(NFTA_META_SREG, sreg.0);
        }
        Expr::Cmp { sreg, op, data } => {
            e.be32(NFTA_CMP_SREG, sreg.0);
            e.be32(NFTA_CMP_OP, cmp_op(*op));
            e.nested(NFTA_CMP_DATA, |d| d.put(NFTA_DATA_VALUE, data));
        }
        Expr::Payload {
            base,
            offset,
            len,
            dreg,
        } => {
            e.be32(NFTA_PAYLOAD_DREG, dreg.0);
            e.be32(NFTA_PAYLOAD_BASE, payload_base(*base));
            e.be32(NFTA_PAYLOAD_OFFSET, *offset);
            e.be32(NFTA_PAYLOAD_LEN, *len);
        }
        Expr::Ct { key, dreg } => {
            e.be32(NFTA_CT_DREG, dreg.0);
            e.be32(NFTA_CT_KEY, ct_key(*key));
        }
        Expr::Bitwise {
            sreg,
            dreg,
            mask,
            xor,
        } => {
            e.be32(NFTA_BITWISE_SREG, sreg.0);
            e.be32(NFTA_BITWISE_DREG, dreg.0);
            e.be32(NFTA_BITWISE_LEN, mask.len() as u32);
            e.nested(NFTA_BITWISE_MASK, |m| m.put(NFTA_DATA_VALUE, mask));
            e.nested(NFTA_BITWISE_XOR, |x| x.put(NFTA_DATA_VALUE, xor));
        }
        Expr::Lookup {
            set,
            sreg,
            dreg,
            set_id,
            inverted,
        } => {
            e.str(NFTA_LOOKUP_SET, set);
            e.be32(NFTA_LOOKUP_SREG, sreg.0);
            if let Some(dreg) = dreg {
                e.be32(NFTA_LOOKUP_DREG, dreg.0);
            }
            if *set_id != 0 {
                e.be32(NFTA_LOOKUP_SET_ID, *set_id);
            }
            if *inverted {
                e.be32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
            }
        }
        Expr::Fib {
            dreg,
            result,
            flags,
        } => {
            e.be32(NFTA_FIB_DREG, dreg.0);
            e.be32(NFTA_FIB_RESULT, fib_result(*result));
            e.be32(NFTA_FIB_FLAGS, flags.0);
        }
        Expr::Nat {
            kind,
            family,
            addr,
            proto,
        } => {
            let kind = match kind {
                NatType::Snat => NFT_NAT_SNAT,
                NatType::Dnat => NFT_NAT_DNAT,
            };
            e.be32(NFTA_NAT_TYPE, kind);
            e.be32(NFTA_NAT_FAMILY, u32::from(family.layout().0));
            e.be32(NFTA_NAT_REG_ADDR_MIN, addr.0);
            if let Some(proto) = proto {
                e.be32(NFTA_NAT_REG_PROTO_MIN, proto.0);
            }
        }
        Expr::Masq => {}
        Expr::Counter { bytes, packets } => {
            e.be64(NFTA_COUNTER_BYTES, *bytes);
            e.be64(NFTA_COUNTER_PACKETS, *packets);
        }
        Expr::Verdict(verdict) => {
            e.be32(NFTA_IMMEDIATE_DREG, Reg::VERDICT.0);
            e.nested(NFTA_IMMEDIATE_DATA, |data| {
                data.nested(NFTA_DATA_VERDICT, |v| {
                    v.be32(NFTA_VERDICT_CODE, verdict_code(verdict) as u32);
                    if let Verdict::Jump(chain) | Verdict::Goto(chain) = verdict {
                        v.str(NFTA_VERDICT_CHAIN, chain);
                    }
                })
            });
        }
        Expr::Immediate { dreg, data } => {
            e.be32(NFTA_IMMEDIATE_DREG, dreg.0);
            e.nested(NFTA_IMMEDIATE_DATA, |d| d.put(NFTA_DATA_VALUE, data));
        }
        Expr::Match { name, rev, info } => {
            e.str(NFTA_MATCH_NAME, name);
            e.be32(NFTA_MATCH_REV, *rev);
            e.put(NFTA_MATCH_INFO, info);
        }
        Expr::Target { name, rev, info } => {
            e.str(NFTA_TARGET_NAME, name);
            e.be32(NFTA_TARGET_REV, *rev);
            e.put(NFTA_TARGET_INFO, info);
        }
        Expr::Other { .. } => unreachable!("written raw by expressions()"),
    }
}

/// The hook's number (enum nf_inet_hooks; the bridge's nf_br_hooks number alike).
const _: () = assert!(NF_BR_PRE_ROUTING == NF_INET_PRE_ROUTING);
fn hook_number(hook: Hook) -> u32 {
    match hook {
        Hook::Prerouting => NF_INET_PRE_ROUTING,
        Hook::Input => NF_INET_LOCAL_IN,
        Hook::Forward => NF_INET_FORWARD,
        Hook::Output => NF_INET_LOCAL_OUT,
        Hook::Postrouting => NF_INET_POST_ROUTING,
    }
}

pub(super) fn meta_key(key: MetaKey) -> u32 {
    match key {
        MetaKey::Mark => NFT_META_MARK,
        MetaKey::IifName => NFT_META_IIFNAME,
        MetaKey::OifName => NFT_META_OIFNAME,
        MetaKey::NfProto => NFT_META_NFPROTO,
        MetaKey::L4Proto => NFT_META_L4PROTO,
        MetaKey::Other(key) => key,
    }
}

pub(super) fn cmp_op(op: CmpOp) -> u32 {
    match op {
        CmpOp::Eq => NFT_CMP_EQ,
        CmpOp::Neq => NFT_CMP_NEQ,
        CmpOp::Lt => NFT_CMP_LT,
        CmpOp::Lte => NFT_CMP_LTE,
        CmpOp::Gt => NFT_CMP_GT,
        CmpOp::Gte => NFT_CMP_GTE,
    }
}

pub(super) fn payload_base(base: PayloadBase) -> u32 {
    match base {
        PayloadBase::LinkLayer => NFT_PAYLOAD_LL_HEADER,
        PayloadBase::Network => NFT_PAYLOAD_NETWORK_HEADER,
        PayloadBase::Transport => NFT_PAYLOAD_TRANSPORT_HEADER,
    }
}

pub(super) fn ct_key(key: CtKey) -> u32 {
    match key {
        CtKey::Status => NFT_CT_STATUS,
        CtKey::Other(key) => key,
    }
}

pub(super) fn fib_result(result: FibResult) -> u32 {
    match result {
        FibResult::AddrType => NFT_FIB_RESULT_ADDRTYPE,
        FibResult::Other(result) => result,
    }
}

pub(super) fn verdict_code(verdict: &Verdict) -> i32 {
    match verdict {
        Verdict::Accept => NF_ACCEPT as i32,
        Verdict::Drop => NF_DROP as i32,
        Verdict::Return => NFT_RETURN,
        Verdict::Jump(_) => NFT_JUMP,
        Verdict::Goto(_) => NFT_GOTO,
        Verdict::Other(code) => *code,
    }
}

/// A rule's expression list as bytes (what the NFTA_RULE_EXPRESSIONS attribute holds):
/// what the pinned digests are taken of.
#[cfg(test)]
pub fn expression_bytes(exprs: &[Expr]) -> Vec<u8> {
    let mut list = Attrs::default();
    expressions(&mut list, exprs);
    list.0
}

/// A set element list as a GETSETELEM reply carries it (table "academy"), for the
/// readers' tests.
#[cfg(test)]
pub fn element_reply(set: &str, elements: &[Element]) -> Vec<u8> {
    let mut attrs = Attrs::default();
    element_list(&mut attrs, "academy", set, |list| {
        for e in elements {
            element(list, e);
        }
    });
    attrs.0
}

/// One element as its list carries it (one NFTA_LIST_ELEM): what a pinned digest is of.
#[cfg(test)]
pub fn element_bytes(e: &Element) -> Vec<u8> {
    let mut list = Attrs::default();
    element(&mut list, e);
    list.0
}
