//! The masquerade rule of one network and family, as nf_tables expressions.

use super::attrs::address_bytes;
use super::consts::{
    NFTA_BITWISE_DREG, NFTA_BITWISE_LEN, NFTA_BITWISE_MASK, NFTA_BITWISE_SREG, NFTA_BITWISE_XOR,
    NFTA_CMP_DATA, NFTA_CMP_OP, NFTA_CMP_SREG, NFTA_DATA_VALUE, NFTA_EXPR_DATA, NFTA_EXPR_NAME,
    NFTA_LIST_ELEM, NFTA_LOOKUP_SET, NFTA_LOOKUP_SET_ID, NFTA_LOOKUP_SREG, NFTA_META_DREG,
    NFTA_META_KEY, NFTA_PAYLOAD_BASE, NFTA_PAYLOAD_DREG, NFTA_PAYLOAD_LEN, NFTA_PAYLOAD_OFFSET,
    NFT_CMP_EQ, NFT_CMP_NEQ, NFT_META_NFPROTO, NFT_PAYLOAD_NETWORK_HEADER, NFT_REG_1, NFT_REG_2,
};
use super::MasqNetwork;
use crate::netlink::nfnetlink::Attrs;

/// The rule, as `nft --debug=netlink` shows it for
/// `meta nfproto ipv4 ip saddr @set ip daddr != SUBNET ... ip daddr != NONMASQ ...
/// ip daddr != 224.0.0.0/4 masquerade`.
/// `set_id` is the set's NFTA_SET_ID when the same batch creates it (0: it exists).
///
/// One bitwise and one cmp per excluded prefix. A nat chain sees only the first packet
/// of each connection (conntrack keeps the verdict for the rest), and the list is the
/// config's, not the node's containers', so the rule costs O(prefixes in the config)
/// per new connection and nothing per later packet.
pub(super) fn masquerade_rule(list: &mut Attrs, network: &MasqNetwork, set_id: u32) {
    let (nfproto, len, saddr, daddr) = network.family.layout();
    expr(list, "meta", |e| {
        e.be32(NFTA_META_DREG, NFT_REG_1);
        e.be32(NFTA_META_KEY, NFT_META_NFPROTO);
    });
    cmp(list, NFT_REG_1, NFT_CMP_EQ, &[nfproto]);
    payload(list, saddr, len);
    expr(list, "lookup", |e| {
        e.str(NFTA_LOOKUP_SET, &network.set_name());
        e.be32(NFTA_LOOKUP_SREG, NFT_REG_1);
        // The set may be new in this batch.
        if set_id != 0 {
            e.be32(NFTA_LOOKUP_SET_ID, set_id);
        }
    });
    payload(list, daddr, len);
    for subnet in &network.excluded() {
        let mask = address_bytes(subnet.mask());
        expr(list, "bitwise", |e| {
            e.be32(NFTA_BITWISE_SREG, NFT_REG_1);
            e.be32(NFTA_BITWISE_DREG, NFT_REG_2);
            e.be32(NFTA_BITWISE_LEN, len);
            e.nested(NFTA_BITWISE_MASK, |m| m.put(NFTA_DATA_VALUE, &mask));
            e.nested(NFTA_BITWISE_XOR, |x| {
                x.put(NFTA_DATA_VALUE, &vec![0; len as usize])
            });
        });
        cmp(
            list,
            NFT_REG_2,
            NFT_CMP_NEQ,
            &address_bytes(subnet.network()),
        );
    }
    expr(list, "masq", |_| {});
}

pub(super) fn expr(list: &mut Attrs, name: &str, data: impl FnOnce(&mut Attrs)) {
    list.nested(NFTA_LIST_ELEM, |e| {
        e.str(NFTA_EXPR_NAME, name);
        e.nested(NFTA_EXPR_DATA, data);
    });
}

pub(super) fn cmp(list: &mut Attrs, register: u32, op: u32, value: &[u8]) {
    expr(list, "cmp", |e| {
        e.be32(NFTA_CMP_SREG, register);
        e.be32(NFTA_CMP_OP, op);
        e.nested(NFTA_CMP_DATA, |d| d.put(NFTA_DATA_VALUE, value));
    });
}

fn payload(list: &mut Attrs, offset: u32, len: u32) {
    expr(list, "payload", |e| {
        e.be32(NFTA_PAYLOAD_DREG, NFT_REG_1);
        e.be32(NFTA_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
        e.be32(NFTA_PAYLOAD_OFFSET, offset);
        e.be32(NFTA_PAYLOAD_LEN, len);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::Family;

    /// The rule's bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here.
    #[test]
    fn the_masquerade_rule_encodes_as_before() {
        let digest = |family, subnets: &[&str], set_id| {
            let network = MasqNetwork {
                network: "n".into(),
                family,
                subnets: subnets.iter().map(|s| s.parse().unwrap()).collect(),
                non_masquerade: Vec::new(),
            };
            let mut list = Attrs::default();
            masquerade_rule(&mut list, &network, set_id);
            hex(&sha256(&list.0))
        };
        assert_eq!(
            digest(Family::V4, &["10.1.0.0/16"], 1),
            "71caf27e4d0081adc73c9cd8bcca0e41bfc9938d57a4aa5afcf8087c6081cb10"
        );
        assert_eq!(
            digest(Family::V6, &["fd00::/64", "fd01::/64"], 0),
            "d6c2fab164b65d5aa4ba5585a1c8a70a1244df97002ca6fc6c208af7f705479f"
        );
    }

    /// The nonMasqueradeCIDRs are one more `daddr != PREFIX` each, after the network's
    /// own subnets and before multicast: the rule for subnets [a] and nonMasqueradeCIDRs
    /// [b, c] is, byte for byte, the rule for subnets [a, b, c].
    #[test]
    fn non_masquerade_cidrs_are_excluded_like_the_network_s_subnets() {
        let bytes = |subnets: &[&str], kept: &[&str]| {
            let parse = |l: &[&str]| l.iter().map(|s| s.parse().unwrap()).collect();
            let network = MasqNetwork {
                network: "n".into(),
                family: Family::V4,
                subnets: parse(subnets),
                non_masquerade: parse(kept),
            };
            let mut list = Attrs::default();
            masquerade_rule(&mut list, &network, 0);
            list.0
        };
        let with_kept = bytes(&["10.244.1.0/24"], &["10.244.0.0/16", "10.96.0.0/12"]);
        assert_eq!(
            with_kept,
            bytes(&["10.244.1.0/24", "10.244.0.0/16", "10.96.0.0/12"], &[])
        );
        assert_ne!(with_kept, bytes(&["10.244.1.0/24"], &[]));
    }
}
