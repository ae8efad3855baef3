//! The rules of port mapping, as nf_tables expressions (what `nft --debug=netlink`
//! shows for the rules quoted on each function).

use super::elements::{PortMap, HAIRPIN_SET};
use crate::netlink::nftables::consts::{IPS_DST_NAT, RTN_LOCAL};
use crate::netlink::nftables::model::{
    CmpOp, CtKey, Expr, FibFlags, FibResult, MetaKey, NatType, PayloadBase, Reg,
};
use crate::netlink::Family;

/// The packet mark bit asking for masquerade (the reference portmap's default, 13).
const MASQ_MARK: u32 = 1 << 13;

/// `meta nfproto F fib daddr type local dnat F to [ip daddr .] meta l4proto . th dport
/// map @MAP`: traffic to one of the host's own addresses (127.0.0.1 included, in
/// output) whose protocol and port (and address, for the hostIP map) are published goes
/// to the container address and port the map gives; a miss ends the rule.
pub(super) fn dnat_rule(map: PortMap, set_id: u32) -> Vec<Expr> {
    let (nfproto, len, _, daddr) = map.family.layout();
    let mut exprs = vec![
        Expr::meta(MetaKey::NfProto, Reg::R1),
        Expr::cmp(Reg::R1, CmpOp::Eq, [nfproto]),
        Expr::Fib {
            dreg: Reg::R1,
            result: FibResult::AddrType,
            flags: FibFlags::DADDR,
        },
        Expr::cmp(Reg::R1, CmpOp::Eq, RTN_LOCAL.to_ne_bytes()),
    ];
    // The key, one field after another in 32-bit registers from R1 on.
    let mut next = Reg::r32(0);
    if map.by_host_ip {
        exprs.push(Expr::payload(PayloadBase::Network, daddr, len, Reg::R1));
        next = Reg::r32(len / 4);
        exprs.push(Expr::meta(MetaKey::L4Proto, next));
    } else {
        exprs.push(Expr::meta(MetaKey::L4Proto, Reg::R1));
    }
    exprs.push(Expr::payload(PayloadBase::Transport, 2, 2, Reg(next.0 + 1)));
    exprs.push(Expr::Lookup {
        set: map.name(),
        sreg: Reg::R1,
        // address . port
        dreg: Some(Reg::R1),
        // The map may be new in this batch.
        set_id,
        inverted: false,
    });
    // The data: the address from R1, the port in the register after it.
    exprs.push(Expr::Nat {
        kind: NatType::Dnat,
        family: map.family,
        addr: Reg::R1,
        proto: Some(Reg::r32(len / 4)),
    });
    exprs
}

/// `ct status dnat iifname . oifname @_hairpin meta mark set meta mark | 0x2000`, in
/// chain forward: a container reaching a published port of its own bridge through a
/// host address (hairpin) would get the answer straight from the other container, not
/// through the host, and drop it; the mark has it masqueraded (`masquerade_marked`),
/// so the answer comes back through the host's conntrack. Only here are both
/// interfaces known: postrouting has no input interface. The bit is the reference
/// portmap's, with the same meaning, so the two never contradict each other.
pub(super) fn hairpin_rule(set_id: u32) -> Vec<Expr> {
    let mut exprs = ct_dnat();
    exprs.extend([
        Expr::meta(MetaKey::IifName, Reg::R1),
        Expr::meta(MetaKey::OifName, Reg::R2),
        Expr::lookup(HAIRPIN_SET, Reg::R1, set_id, false),
        Expr::meta(MetaKey::Mark, Reg::R1),
        bitwise(!MASQ_MARK, MASQ_MARK),
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R1,
        },
    ]);
    exprs
}

/// `meta mark & 0x2000 == 0x2000 masquerade`, in postrouting.
pub(super) fn masquerade_marked() -> Vec<Expr> {
    vec![
        Expr::meta(MetaKey::Mark, Reg::R1),
        bitwise(MASQ_MARK, 0),
        Expr::cmp(Reg::R1, CmpOp::Eq, MASQ_MARK.to_ne_bytes()),
        Expr::Masq,
    ]
}

/// `meta nfproto ipv4 ct status dnat ip saddr 127.0.0.0/8 masquerade`: a connection to
/// 127.0.0.1:hostPort, sent on to a container, must leave with an address the container
/// can answer (the reference portmap's localhost masquerade).
pub(super) fn localhost_rule() -> Vec<Expr> {
    let (nfproto, _, saddr, _) = Family::V4.layout();
    let mut exprs = vec![
        Expr::meta(MetaKey::NfProto, Reg::R1),
        Expr::cmp(Reg::R1, CmpOp::Eq, [nfproto]),
    ];
    exprs.extend(ct_dnat());
    exprs.extend([
        Expr::payload(PayloadBase::Network, saddr, 1, Reg::R1),
        Expr::cmp(Reg::R1, CmpOp::Eq, [127]),
        Expr::Masq,
    ]);
    exprs
}

/// `ct status dnat`
fn ct_dnat() -> Vec<Expr> {
    vec![
        Expr::Ct {
            key: CtKey::Status,
            dreg: Reg::R1,
        },
        bitwise(IPS_DST_NAT, 0),
        Expr::cmp(Reg::R1, CmpOp::Neq, [0; 4]),
    ]
}

/// `reg 1 = (reg 1 & mask) ^ xor` on a 32-bit host-order value.
fn bitwise(mask: u32, xor: u32) -> Expr {
    Expr::Bitwise {
        sreg: Reg::R1,
        dreg: Reg::R1,
        mask: mask.to_ne_bytes().to_vec(),
        xor: xor.to_ne_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::encode::expression_bytes;

    /// The rules' bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here.
    #[test]
    fn the_port_mapping_rules_encode_as_before() {
        let digest = |rule: Vec<Expr>| {
            let list = expression_bytes(&rule);
            hex(&sha256(&list))
        };
        let dnat: Vec<String> = PortMap::ALL
            .iter()
            .zip(1..)
            .map(|(map, id)| digest(dnat_rule(*map, id)))
            .collect();
        assert_eq!(
            dnat,
            [
                "8f572262b5601beb8366a2d58da9f4b49cb1e0598580ab0cb7766871e5eddf2a",
                "fbeb55d5c6c6c16caf3cdb858212adf3e000c182fcefcbb501c0b9ce5fc01834",
                "61822eeb7fdcdb1c0e6929180cbdd9627e9567d8b344e0757fc11e14e2e151b6",
                "e2a524566118e0c3b118113e014b79339ad4e4f9a78f86fdaa7da23a7280f754"
            ]
        );
        assert_eq!(
            digest(hairpin_rule(5)),
            "fc9ebd84fe0099c444da13b45cc1b80cb0f786576a38d3955e629666c27548e8"
        );
        assert_eq!(
            digest(masquerade_marked()),
            "b565d61d1ec701f191267f9e7da1d1490a01fb79d405ebffac83c3cd83193673"
        );
        assert_eq!(
            digest(localhost_rule()),
            "bfa3933e3347e78ac0c0c93673c658a1222dc8c266463f33ef4efc12d0988072"
        );
    }
}
