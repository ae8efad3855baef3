//! The masquerade rule of one network and family, as nf_tables expressions.

use super::MasqNetwork;
use crate::netlink::nftables::attrs::address_bytes;
use crate::netlink::nftables::model::{CmpOp, Expr, MetaKey, PayloadBase, Reg};
use crate::netlink::Family;

/// The rule, as `nft --debug=netlink` shows it for
/// `meta nfproto ipv4 ip saddr @set ip daddr != SUBNET ... ip daddr != NONMASQ ...
/// ip daddr != 224.0.0.0/4 masquerade`.
/// The lookup names the set and its batch id (`set_id`), which the kernel needs of a
/// set made in the same batch.
///
/// One bitwise and one cmp per excluded prefix. A nat chain sees only the first packet
/// of each connection (conntrack keeps the verdict for the rest), and the list is the
/// config's, not the node's containers', so the rule costs O(prefixes in the config)
/// per new connection and nothing per later packet.
pub(super) fn masquerade_rule(network: &MasqNetwork) -> Vec<Expr> {
    let (nfproto, len, saddr, daddr) = network.family.layout();
    let excluded = network.excluded();
    let mut exprs = Vec::with_capacity(6 + 2 * excluded.len());
    exprs.extend([
        Expr::meta(MetaKey::NfProto, Reg::R1),
        Expr::cmp(Reg::R1, CmpOp::Eq, [nfproto]),
        Expr::payload(PayloadBase::Network, saddr, len, Reg::R1),
        Expr::lookup(network.set_name(), Reg::R1, set_id(network.family), false),
        Expr::payload(PayloadBase::Network, daddr, len, Reg::R1),
    ]);
    for subnet in &excluded {
        exprs.push(Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R2,
            mask: address_bytes(subnet.mask()),
            xor: vec![0; len as usize],
        });
        exprs.push(Expr::cmp(
            Reg::R2,
            CmpOp::Neq,
            address_bytes(subnet.network()),
        ));
    }
    exprs.push(Expr::Masq);
    exprs
}

/// The id the network's set of `family` has in a batch that makes it (the kernel
/// requires one of every new set; a lookup in the same batch may name it so).
pub(super) fn set_id(family: Family) -> u32 {
    match family {
        Family::V4 => 1,
        Family::V6 => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::encode::expression_bytes;

    /// The rule's bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here.
    #[test]
    fn the_masquerade_rule_encodes_as_before() {
        let digest = |family, subnets: &[&str]| {
            let network = MasqNetwork {
                network: "n".into(),
                family,
                subnets: subnets.iter().map(|s| s.parse().unwrap()).collect(),
                non_masquerade: Vec::new(),
            };
            let list = expression_bytes(&masquerade_rule(&network));
            hex(&sha256(&list))
        };
        assert_eq!(
            digest(Family::V4, &["10.1.0.0/16"]),
            "71caf27e4d0081adc73c9cd8bcca0e41bfc9938d57a4aa5afcf8087c6081cb10"
        );
        assert_eq!(
            digest(Family::V6, &["fd00::/64", "fd01::/64"]),
            // With its set's batch id since 0.6 (made with none before, when the set was
            // there): the rule is now one form whether or not its batch makes the set.
            "8d6cc1feb19f9cefef3c61202ba7b06efb08d72672281bfa3b9ae4e80b625b67"
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
            expression_bytes(&masquerade_rule(&network))
        };
        let with_kept = bytes(&["10.244.1.0/24"], &["10.244.0.0/16", "10.96.0.0/12"]);
        assert_eq!(
            with_kept,
            bytes(&["10.244.1.0/24", "10.244.0.0/16", "10.96.0.0/12"], &[])
        );
        assert_ne!(with_kept, bytes(&["10.244.1.0/24"], &[]));
    }
}
