//! The expressions rules are made of, each as `nft --debug=netlink` shows it: one
//! function per expression, so a rule reads as the list `nft` would print.

use super::consts::{
    NFTA_BITWISE_DREG, NFTA_BITWISE_LEN, NFTA_BITWISE_MASK, NFTA_BITWISE_SREG, NFTA_BITWISE_XOR,
    NFTA_CMP_DATA, NFTA_CMP_OP, NFTA_CMP_SREG, NFTA_COUNTER_BYTES, NFTA_COUNTER_PACKETS,
    NFTA_CT_DREG, NFTA_CT_KEY, NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_EXPR_DATA, NFTA_EXPR_NAME,
    NFTA_IMMEDIATE_DATA, NFTA_IMMEDIATE_DREG, NFTA_LIST_ELEM, NFTA_LOOKUP_FLAGS, NFTA_LOOKUP_SET,
    NFTA_LOOKUP_SET_ID, NFTA_LOOKUP_SREG, NFTA_MATCH_INFO, NFTA_MATCH_NAME, NFTA_MATCH_REV,
    NFTA_META_DREG, NFTA_META_KEY, NFTA_PAYLOAD_BASE, NFTA_PAYLOAD_DREG, NFTA_PAYLOAD_LEN,
    NFTA_PAYLOAD_OFFSET, NFTA_VERDICT_CODE, NFT_LOOKUP_F_INV, NFT_REG_VERDICT,
};
use crate::netlink::nfnetlink::Attrs;

/// One expression of a rule's list: its name and its data.
pub fn expr(list: &mut Attrs, name: &str, data: impl FnOnce(&mut Attrs)) {
    list.nested(NFTA_LIST_ELEM, |e| {
        e.str(NFTA_EXPR_NAME, name);
        e.nested(NFTA_EXPR_DATA, data);
    });
}

/// `cmp`: the register against `value` (NFT_CMP_EQ, NFT_CMP_NEQ, ...).
pub fn cmp(list: &mut Attrs, register: u32, op: u32, value: &[u8]) {
    expr(list, "cmp", |e| {
        e.be32(NFTA_CMP_SREG, register);
        e.be32(NFTA_CMP_OP, op);
        e.nested(NFTA_CMP_DATA, |d| d.put(NFTA_DATA_VALUE, value));
    });
}

/// `meta KEY` into `register`.
pub fn meta(list: &mut Attrs, register: u32, key: u32) {
    expr(list, "meta", |e| {
        e.be32(NFTA_META_DREG, register);
        e.be32(NFTA_META_KEY, key);
    });
}

/// `payload`: `len` bytes at `offset` of header `base` into `register`.
pub fn payload(list: &mut Attrs, base: u32, offset: u32, len: u32, register: u32) {
    expr(list, "payload", |e| {
        e.be32(NFTA_PAYLOAD_DREG, register);
        e.be32(NFTA_PAYLOAD_BASE, base);
        e.be32(NFTA_PAYLOAD_OFFSET, offset);
        e.be32(NFTA_PAYLOAD_LEN, len);
    });
}

/// `ct KEY` into `register`.
pub fn ct(list: &mut Attrs, register: u32, key: u32) {
    expr(list, "ct", |e| {
        e.be32(NFTA_CT_DREG, register);
        e.be32(NFTA_CT_KEY, key);
    });
}

/// `bitwise`: `dreg = (sreg & mask) ^ xor`, on `mask.len()` bytes.
pub fn bitwise(list: &mut Attrs, sreg: u32, dreg: u32, mask: &[u8], xor: &[u8]) {
    expr(list, "bitwise", |e| {
        e.be32(NFTA_BITWISE_SREG, sreg);
        e.be32(NFTA_BITWISE_DREG, dreg);
        e.be32(NFTA_BITWISE_LEN, mask.len() as u32);
        e.nested(NFTA_BITWISE_MASK, |m| m.put(NFTA_DATA_VALUE, mask));
        e.nested(NFTA_BITWISE_XOR, |x| x.put(NFTA_DATA_VALUE, xor));
    });
}

/// `lookup`: the key in `register` looked up in `set`; `set_id` names a set new in the
/// same batch (0: it exists); `inverted` matches what is not in the set.
pub fn lookup(list: &mut Attrs, set: &str, register: u32, set_id: u32, inverted: bool) {
    expr(list, "lookup", |e| {
        e.str(NFTA_LOOKUP_SET, set);
        e.be32(NFTA_LOOKUP_SREG, register);
        if set_id != 0 {
            e.be32(NFTA_LOOKUP_SET_ID, set_id);
        }
        if inverted {
            e.be32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
        }
    });
}

/// `immediate`: the verdict (NF_ACCEPT, NF_DROP, ...).
pub fn verdict(list: &mut Attrs, code: u32) {
    expr(list, "immediate", |e| {
        e.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        e.nested(NFTA_IMMEDIATE_DATA, |data| {
            data.nested(NFTA_DATA_VERDICT, |v| v.be32(NFTA_VERDICT_CODE, code))
        });
    });
}

/// `counter`, zeroed.
pub fn counter(list: &mut Attrs) {
    expr(list, "counter", |e| {
        e.be64(NFTA_COUNTER_BYTES, 0);
        e.be64(NFTA_COUNTER_PACKETS, 0);
    });
}

/// An xt match inside the rule (nft_compat), as iptables-nft writes `-m NAME`.
pub fn xt_match(list: &mut Attrs, name: &str, revision: u32, info: &[u8]) {
    expr(list, "match", |e| {
        e.str(NFTA_MATCH_NAME, name);
        e.be32(NFTA_MATCH_REV, revision);
        e.put(NFTA_MATCH_INFO, info);
    });
}
