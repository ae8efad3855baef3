//! The rules of port mapping, as nf_tables expressions (what `nft --debug=netlink`
//! shows for the rules quoted on each function).

use super::elements::{PortMap, HAIRPIN_SET};
use crate::netlink::nftables::consts::{
    IPS_DST_NAT, NFTA_FIB_DREG, NFTA_FIB_FLAGS, NFTA_FIB_F_DADDR, NFTA_FIB_RESULT,
    NFTA_LOOKUP_DREG, NFTA_LOOKUP_SET, NFTA_LOOKUP_SET_ID, NFTA_LOOKUP_SREG, NFTA_META_KEY,
    NFTA_META_SREG, NFTA_NAT_FAMILY, NFTA_NAT_REG_ADDR_MIN, NFTA_NAT_REG_PROTO_MIN, NFTA_NAT_TYPE,
    NFT_CMP_EQ, NFT_CMP_NEQ, NFT_CT_STATUS, NFT_FIB_RESULT_ADDRTYPE, NFT_META_IIFNAME,
    NFT_META_L4PROTO, NFT_META_MARK, NFT_META_NFPROTO, NFT_META_OIFNAME, NFT_NAT_DNAT,
    NFT_PAYLOAD_NETWORK_HEADER, NFT_PAYLOAD_TRANSPORT_HEADER, NFT_REG32_00, NFT_REG_1, NFT_REG_2,
    RTN_LOCAL,
};
use crate::netlink::nftables::expr::{self, cmp, ct, expr, lookup, meta, payload};
use crate::netlink::{Attrs, Family};

/// The packet mark bit asking for masquerade (the reference portmap's default, 13).
const MASQ_MARK: u32 = 1 << 13;

/// `meta nfproto F fib daddr type local dnat F to [ip daddr .] meta l4proto . th dport
/// map @MAP`: traffic to one of the host's own addresses (127.0.0.1 included, in
/// output) whose protocol and port (and address, for the hostIP map) are published goes
/// to the container address and port the map gives; a miss ends the rule.
pub(super) fn dnat_rule(list: &mut Attrs, map: PortMap, set_id: u32) {
    let (nfproto, len, _, daddr) = map.family.layout();
    meta(list, NFT_REG_1, NFT_META_NFPROTO);
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &[nfproto]);
    expr(list, "fib", |e| {
        e.be32(NFTA_FIB_DREG, NFT_REG_1);
        e.be32(NFTA_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE);
        e.be32(NFTA_FIB_FLAGS, NFTA_FIB_F_DADDR);
    });
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &RTN_LOCAL.to_ne_bytes());
    // The key, one field after another in 32-bit registers from NFT_REG_1 on.
    let mut next = NFT_REG32_00;
    if map.by_host_ip {
        payload(list, NFT_PAYLOAD_NETWORK_HEADER, daddr, len, NFT_REG_1);
        next += len / 4;
        meta(list, next, NFT_META_L4PROTO);
    } else {
        meta(list, NFT_REG_1, NFT_META_L4PROTO);
    }
    payload(list, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, next + 1);
    expr(list, "lookup", |e| {
        e.str(NFTA_LOOKUP_SET, &map.name());
        e.be32(NFTA_LOOKUP_SREG, NFT_REG_1);
        // address . port
        e.be32(NFTA_LOOKUP_DREG, NFT_REG_1);
        // The map may be new in this batch.
        e.be32(NFTA_LOOKUP_SET_ID, set_id);
    });
    // The data: the address from NFT_REG_1, the port in the register after it.
    let port_register = NFT_REG32_00 + len / 4;
    expr(list, "nat", |e| {
        e.be32(NFTA_NAT_TYPE, NFT_NAT_DNAT);
        e.be32(NFTA_NAT_FAMILY, u32::from(nfproto));
        e.be32(NFTA_NAT_REG_ADDR_MIN, NFT_REG_1);
        e.be32(NFTA_NAT_REG_PROTO_MIN, port_register);
    });
}

/// `ct status dnat iifname . oifname @_hairpin meta mark set meta mark | 0x2000`, in
/// chain forward: a container reaching a published port of its own bridge through a
/// host address (hairpin) would get the answer straight from the other container, not
/// through the host, and drop it; the mark has it masqueraded (`masquerade_marked`),
/// so the answer comes back through the host's conntrack. Only here are both
/// interfaces known: postrouting has no input interface. The bit is the reference
/// portmap's, with the same meaning, so the two never contradict each other.
pub(super) fn hairpin_rule(list: &mut Attrs, set_id: u32) {
    ct_dnat(list);
    meta(list, NFT_REG_1, NFT_META_IIFNAME);
    meta(list, NFT_REG_2, NFT_META_OIFNAME);
    lookup(list, HAIRPIN_SET, NFT_REG_1, set_id, false);
    meta(list, NFT_REG_1, NFT_META_MARK);
    bitwise(list, !MASQ_MARK, MASQ_MARK);
    expr(list, "meta", |e| {
        e.be32(NFTA_META_KEY, NFT_META_MARK);
        e.be32(NFTA_META_SREG, NFT_REG_1);
    });
}

/// `meta mark & 0x2000 == 0x2000 masquerade`, in postrouting.
pub(super) fn masquerade_marked(list: &mut Attrs) {
    meta(list, NFT_REG_1, NFT_META_MARK);
    bitwise(list, MASQ_MARK, 0);
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &MASQ_MARK.to_ne_bytes());
    expr(list, "masq", |_| {});
}

/// `meta nfproto ipv4 ct status dnat ip saddr 127.0.0.0/8 masquerade`: a connection to
/// 127.0.0.1:hostPort, sent on to a container, must leave with an address the container
/// can answer (the reference portmap's localhost masquerade).
pub(super) fn localhost_rule(list: &mut Attrs) {
    let (nfproto, _, saddr, _) = Family::V4.layout();
    meta(list, NFT_REG_1, NFT_META_NFPROTO);
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &[nfproto]);
    ct_dnat(list);
    payload(list, NFT_PAYLOAD_NETWORK_HEADER, saddr, 1, NFT_REG_1);
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &[127]);
    expr(list, "masq", |_| {});
}

/// `ct status dnat`
pub(super) fn ct_dnat(list: &mut Attrs) {
    ct(list, NFT_REG_1, NFT_CT_STATUS);
    bitwise(list, IPS_DST_NAT, 0);
    cmp(list, NFT_REG_1, NFT_CMP_NEQ, &[0; 4]);
}

/// `reg 1 = (reg 1 & mask) ^ xor` on a 32-bit host-order value.
fn bitwise(list: &mut Attrs, mask: u32, xor: u32) {
    expr::bitwise(
        list,
        NFT_REG_1,
        NFT_REG_1,
        &mask.to_ne_bytes(),
        &xor.to_ne_bytes(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};

    /// The rules' bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here.
    #[test]
    fn the_port_mapping_rules_encode_as_before() {
        let digest = |rule: &dyn Fn(&mut Attrs)| {
            let mut list = Attrs::default();
            rule(&mut list);
            hex(&sha256(&list.0))
        };
        let dnat: Vec<String> = PortMap::ALL
            .iter()
            .zip(1..)
            .map(|(map, id)| digest(&|l| dnat_rule(l, *map, id)))
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
            digest(&|l| hairpin_rule(l, 5)),
            "fc9ebd84fe0099c444da13b45cc1b80cb0f786576a38d3955e629666c27548e8"
        );
        assert_eq!(
            digest(&masquerade_marked),
            "b565d61d1ec701f191267f9e7da1d1490a01fb79d405ebffac83c3cd83193673"
        );
        assert_eq!(
            digest(&localhost_rule),
            "bfa3933e3347e78ac0c0c93673c658a1222dc8c266463f33ef4efc12d0988072"
        );
    }
}
