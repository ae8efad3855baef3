//! The one decoder: the kernel's replies (after the nfgenmsg) as the typed model. An
//! expression academy does not know, or knows in another form, reads as `Expr::Other`
//! with its bytes, so reading never fails on someone else's rule.

use super::attrs::comment_of;
use super::consts::*;
use super::model::{
    ChainInfo, CmpOp, CtKey, Element, Expr, FibFlags, FibResult, MetaKey, NatType, PayloadBase,
    Reg, Rule, SetInfo, Table, Verdict,
};
use crate::netlink::attributes::attributes;
use crate::netlink::nfnetlink::Family;

fn text(bytes: &[u8]) -> String {
    let bytes = bytes.split(|b| *b == 0).next().unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

fn be32(bytes: &[u8]) -> Option<u32> {
    bytes.try_into().ok().map(u32::from_be_bytes)
}

fn be64(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_be_bytes)
}

fn find(bytes: &[u8], kind: u16) -> Option<&[u8]> {
    attributes(bytes).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

fn find32(bytes: &[u8], kind: u16) -> Option<u32> {
    find(bytes, kind).and_then(be32)
}

/// The value of a nested NFTA_DATA_VALUE.
fn value(bytes: &[u8], kind: u16) -> Option<Vec<u8>> {
    find(bytes, kind)
        .and_then(|d| find(d, NFTA_DATA_VALUE))
        .map(<[u8]>::to_vec)
}

/// A rule of a NEWRULE reply (a dump of `table`); None without a chain or a handle.
pub fn rule(payload: &[u8], table: Table) -> Option<Rule> {
    let (mut chain, mut handle, mut comment) = (None, None, None);
    let mut exprs = Vec::new();
    for (kind, value) in attributes(payload) {
        match kind {
            NFTA_RULE_CHAIN => chain = Some(text(value)),
            NFTA_RULE_HANDLE => handle = be64(value),
            NFTA_RULE_USERDATA => comment = comment_of(value),
            NFTA_RULE_EXPRESSIONS => {
                let items = attributes(value).filter(|(k, _)| *k == NFTA_LIST_ELEM);
                exprs.extend(items.filter_map(|(_, e)| expression(e)));
            }
            _ => {}
        }
    }
    Some(Rule {
        table,
        chain: chain?,
        handle: handle?,
        comment,
        exprs,
    })
}

/// One NFTA_LIST_ELEM of a rule's expressions.
pub fn expression(item: &[u8]) -> Option<Expr> {
    let name = text(find(item, NFTA_EXPR_NAME)?);
    let data = find(item, NFTA_EXPR_DATA).unwrap_or_default();
    Some(known(&name, data).unwrap_or_else(|| Expr::Other {
        name,
        data: data.to_vec(),
    }))
}

/// The expression, when it is one of the model's in a form the model writes.
fn known(name: &str, data: &[u8]) -> Option<Expr> {
    let reg = |kind| find32(data, kind).map(Reg);
    let kinds: Vec<u16> = attributes(data).map(|(k, _)| k).collect();
    let expr = match name {
        "meta" => {
            let key = meta_key(find32(data, NFTA_META_KEY)?);
            match kinds.as_slice() {
                [NFTA_META_DREG, NFTA_META_KEY] => Expr::Meta {
                    key,
                    dreg: reg(NFTA_META_DREG)?,
                },
                [NFTA_META_KEY, NFTA_META_DREG] => Expr::IptablesMeta {
                    key,
                    dreg: reg(NFTA_META_DREG)?,
                },
                [NFTA_META_KEY, NFTA_META_SREG] => Expr::MetaSet {
                    key,
                    sreg: reg(NFTA_META_SREG)?,
                },
                _ => return None,
            }
        }
        "cmp" => Expr::Cmp {
            sreg: reg(NFTA_CMP_SREG)?,
            op: cmp_op(find32(data, NFTA_CMP_OP)?)?,
            data: value(data, NFTA_CMP_DATA)?,
        },
        "payload" => Expr::Payload {
            base: payload_base(find32(data, NFTA_PAYLOAD_BASE)?)?,
            offset: find32(data, NFTA_PAYLOAD_OFFSET)?,
            len: find32(data, NFTA_PAYLOAD_LEN)?,
            dreg: reg(NFTA_PAYLOAD_DREG)?,
        },
        "ct" => Expr::Ct {
            key: ct_key(find32(data, NFTA_CT_KEY)?),
            dreg: reg(NFTA_CT_DREG)?,
        },
        "bitwise" => Expr::Bitwise {
            sreg: reg(NFTA_BITWISE_SREG)?,
            dreg: reg(NFTA_BITWISE_DREG)?,
            mask: value(data, NFTA_BITWISE_MASK)?,
            xor: value(data, NFTA_BITWISE_XOR)?,
        },
        "lookup" => Expr::Lookup {
            set: text(find(data, NFTA_LOOKUP_SET)?),
            sreg: reg(NFTA_LOOKUP_SREG)?,
            dreg: reg(NFTA_LOOKUP_DREG),
            set_id: find32(data, NFTA_LOOKUP_SET_ID).unwrap_or(0),
            inverted: find32(data, NFTA_LOOKUP_FLAGS).unwrap_or(0) & NFT_LOOKUP_F_INV != 0,
        },
        "fib" => Expr::Fib {
            dreg: reg(NFTA_FIB_DREG)?,
            result: fib_result(find32(data, NFTA_FIB_RESULT)?),
            flags: FibFlags(find32(data, NFTA_FIB_FLAGS)?),
        },
        "nat" => Expr::Nat {
            kind: match find32(data, NFTA_NAT_TYPE)? {
                NFT_NAT_SNAT => NatType::Snat,
                NFT_NAT_DNAT => NatType::Dnat,
                _ => return None,
            },
            family: match u8::try_from(find32(data, NFTA_NAT_FAMILY)?).ok()? {
                NFPROTO_IPV4 => Family::V4,
                NFPROTO_IPV6 => Family::V6,
                _ => return None,
            },
            addr: reg(NFTA_NAT_REG_ADDR_MIN)?,
            proto: reg(NFTA_NAT_REG_PROTO_MIN),
        },
        "masq" if kinds.is_empty() => Expr::Masq,
        "counter" => Expr::Counter {
            bytes: find(data, NFTA_COUNTER_BYTES).and_then(be64)?,
            packets: find(data, NFTA_COUNTER_PACKETS).and_then(be64)?,
        },
        "immediate" => {
            let immediate = find(data, NFTA_IMMEDIATE_DATA)?;
            match find(immediate, NFTA_DATA_VERDICT) {
                Some(v) => Expr::Verdict(verdict(v)?),
                None => Expr::Immediate {
                    dreg: reg(NFTA_IMMEDIATE_DREG)?,
                    data: find(immediate, NFTA_DATA_VALUE)?.to_vec(),
                },
            }
        }
        "match" => Expr::Match {
            name: text(find(data, NFTA_MATCH_NAME)?),
            rev: find32(data, NFTA_MATCH_REV).unwrap_or(0),
            info: find(data, NFTA_MATCH_INFO).unwrap_or_default().to_vec(),
        },
        "target" => Expr::Target {
            name: text(find(data, NFTA_TARGET_NAME)?),
            rev: find32(data, NFTA_TARGET_REV).unwrap_or(0),
            info: find(data, NFTA_TARGET_INFO).unwrap_or_default().to_vec(),
        },
        _ => return None,
    };
    Some(expr)
}

fn meta_key(key: u32) -> MetaKey {
    match key {
        NFT_META_MARK => MetaKey::Mark,
        NFT_META_IIFNAME => MetaKey::IifName,
        NFT_META_OIFNAME => MetaKey::OifName,
        NFT_META_NFPROTO => MetaKey::NfProto,
        NFT_META_L4PROTO => MetaKey::L4Proto,
        other => MetaKey::Other(other),
    }
}

fn cmp_op(op: u32) -> Option<CmpOp> {
    Some(match op {
        NFT_CMP_EQ => CmpOp::Eq,
        NFT_CMP_NEQ => CmpOp::Neq,
        NFT_CMP_LT => CmpOp::Lt,
        NFT_CMP_LTE => CmpOp::Lte,
        NFT_CMP_GT => CmpOp::Gt,
        NFT_CMP_GTE => CmpOp::Gte,
        _ => return None,
    })
}

fn payload_base(base: u32) -> Option<PayloadBase> {
    Some(match base {
        NFT_PAYLOAD_LL_HEADER => PayloadBase::LinkLayer,
        NFT_PAYLOAD_NETWORK_HEADER => PayloadBase::Network,
        NFT_PAYLOAD_TRANSPORT_HEADER => PayloadBase::Transport,
        _ => return None,
    })
}

fn ct_key(key: u32) -> CtKey {
    match key {
        NFT_CT_STATUS => CtKey::Status,
        other => CtKey::Other(other),
    }
}

fn fib_result(result: u32) -> FibResult {
    match result {
        NFT_FIB_RESULT_ADDRTYPE => FibResult::AddrType,
        other => FibResult::Other(other),
    }
}

/// A verdict's nested attributes (code, and a jump's chain).
fn verdict(v: &[u8]) -> Option<Verdict> {
    const ACCEPT: i32 = NF_ACCEPT as i32;
    const DROP: i32 = NF_DROP as i32;
    let code = find32(v, NFTA_VERDICT_CODE)? as i32;
    let chain = || find(v, NFTA_VERDICT_CHAIN).map(text).unwrap_or_default();
    Some(match code {
        ACCEPT => Verdict::Accept,
        DROP => Verdict::Drop,
        NFT_RETURN => Verdict::Return,
        NFT_JUMP => Verdict::Jump(chain()),
        NFT_GOTO => Verdict::Goto(chain()),
        other => Verdict::Other(other),
    })
}

/// The elements of one NEWSETELEM reply.
pub fn elements(payload: &[u8]) -> Vec<Element> {
    let mut found = Vec::new();
    let lists = attributes(payload).filter(|(k, _)| *k == NFTA_SET_ELEM_LIST_ELEMENTS);
    for (_, list) in lists {
        for (_, element) in attributes(list).filter(|(k, _)| *k == NFTA_LIST_ELEM) {
            let (mut key, mut data, mut comment) = (None, None, String::new());
            for (kind, bytes) in attributes(element) {
                let inner = || find(bytes, NFTA_DATA_VALUE).map(<[u8]>::to_vec);
                match kind {
                    NFTA_SET_ELEM_KEY => key = inner(),
                    NFTA_SET_ELEM_DATA => data = inner(),
                    NFTA_SET_ELEM_USERDATA => comment = comment_of(bytes).unwrap_or_default(),
                    _ => {}
                }
            }
            if let Some(key) = key {
                found.push(Element { key, data, comment });
            }
        }
    }
    found
}

/// A NEWSET reply.
pub fn set(payload: &[u8]) -> SetInfo {
    let mut info = SetInfo::default();
    for (kind, value) in attributes(payload) {
        match kind {
            NFTA_SET_KEY_TYPE => info.key_type = be32(value),
            NFTA_SET_KEY_LEN => info.key_len = be32(value),
            NFTA_SET_FLAGS => info.flags = be32(value).unwrap_or(0),
            NFTA_SET_TIMEOUT => info.timeout = true,
            NFTA_SET_DATA_TYPE => info.data_type = be32(value),
            NFTA_SET_OBJ_TYPE => info.object_map = true,
            NFTA_SET_EXPR | NFTA_SET_EXPRESSIONS => info.expressions = true,
            _ => {}
        }
    }
    info
}

/// A NEWCHAIN reply.
pub fn chain(payload: &[u8]) -> ChainInfo {
    let policy = find32(payload, NFTA_CHAIN_POLICY).map(|code| match code as i32 {
        c if c == NF_ACCEPT as i32 => Verdict::Accept,
        c if c == NF_DROP as i32 => Verdict::Drop,
        other => Verdict::Other(other),
    });
    ChainInfo { policy }
}

#[cfg(test)]
mod tests {
    use super::super::encode;
    use super::super::model::*;
    use super::*;
    use crate::netlink::nfnetlink::Attrs;

    /// Every expression the model writes reads back as itself: one encoder, one decoder.
    #[test]
    fn every_expression_reads_back_as_written() {
        let exprs = vec![
            Expr::meta(MetaKey::NfProto, Reg::R1),
            Expr::IptablesMeta {
                key: MetaKey::OifName,
                dreg: Reg::R1,
            },
            Expr::MetaSet {
                key: MetaKey::Mark,
                sreg: Reg::R1,
            },
            Expr::cmp(Reg::R1, CmpOp::Neq, vec![2]),
            Expr::payload(PayloadBase::Network, 12, 4, Reg::R1),
            Expr::Ct {
                key: CtKey::Status,
                dreg: Reg::R1,
            },
            Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R2,
                mask: vec![255, 0, 0, 0],
                xor: vec![0; 4],
            },
            Expr::lookup("s", Reg::R1, 0, true),
            Expr::Lookup {
                set: "m".into(),
                sreg: Reg::R1,
                dreg: Some(Reg::R1),
                set_id: 3,
                inverted: false,
            },
            Expr::Fib {
                dreg: Reg::R1,
                result: FibResult::AddrType,
                flags: FibFlags::DADDR,
            },
            Expr::Nat {
                kind: NatType::Dnat,
                family: Family::V6,
                addr: Reg::R1,
                proto: Some(Reg::r32(4)),
            },
            Expr::Masq,
            Expr::counter(),
            Expr::Verdict(Verdict::Jump("CNI-x".into())),
            Expr::Verdict(Verdict::Drop),
            Expr::Immediate {
                dreg: Reg::R2,
                data: vec![1, 2, 3, 4],
            },
            Expr::Match {
                name: "comment".into(),
                rev: 0,
                info: vec![b'a', 0, 0, 0],
            },
            Expr::Target {
                name: "MASQUERADE".into(),
                rev: 0,
                info: vec![0; 8],
            },
            Expr::Other {
                name: "limit".into(),
                data: vec![8, 0, 1, 0, 0, 0, 0, 1],
            },
        ];
        let table = Table::inet("t");
        let written = Rule {
            table,
            chain: "c".into(),
            handle: 7,
            comment: Some("owner".into()),
            exprs,
        };
        let mut reply = encode::op(&Op::AddRule(written.clone())).attrs;
        reply.be64(NFTA_RULE_HANDLE, 7);
        assert_eq!(rule(&reply.0, table), Some(written));
    }

    #[test]
    fn elements_decode_from_a_set_element_reply() {
        let mut reply = Attrs::default();
        let owned = Element {
            key: vec![10, 1, 2, 3],
            data: Some(vec![2, 0, 0, 0, 0, 9]),
            comment: "owner".into(),
        };
        encode::element_list(&mut reply, "t", "s", |list| {
            encode::element(list, &owned);
            encode::element(list, &Element::key(vec![10, 1, 2, 4]));
        });
        assert_eq!(
            elements(&reply.0),
            vec![owned, Element::key(vec![10, 1, 2, 4])]
        );
    }

    /// element_len counts what element writes, so batches split where they did.
    #[test]
    fn an_element_s_length_is_counted_as_written() {
        for (key, data, comment) in [
            (vec![10, 1, 2, 3], None, ""),
            (vec![1; 17], Some(vec![2; 6]), "n:c:eth0"),
            (vec![1; 36], Some(vec![2; 18]), "é"),
        ] {
            let element = Element {
                key,
                data,
                comment: comment.into(),
            };
            let mut list = Attrs::default();
            encode::element(&mut list, &element);
            assert_eq!(encode::element_len(&element), list.0.len());
        }
    }

    #[test]
    fn a_set_and_a_chain_read_as_shown() {
        let mut a = Attrs::default();
        a.str(NFTA_SET_NAME, "n-v4");
        a.be32(NFTA_SET_KEY_TYPE, TYPE_IPV4_ADDR);
        a.be32(NFTA_SET_KEY_LEN, 4);
        a.be32(NFTA_SET_FLAGS, 0x10);
        a.be64(NFTA_SET_TIMEOUT, 60_000);
        let info = set(&a.0);
        assert_eq!(info.key_type, Some(TYPE_IPV4_ADDR));
        assert_eq!(info.key_len, Some(4));
        assert_eq!(info.flags, 0x10);
        assert!(info.timeout && !info.expressions && info.data_type.is_none());
        let mut c = Attrs::default();
        c.str(NFTA_CHAIN_NAME, "FORWARD");
        c.be32(NFTA_CHAIN_POLICY, NF_DROP);
        assert_eq!(chain(&c.0).policy, Some(Verdict::Drop));
    }
}
