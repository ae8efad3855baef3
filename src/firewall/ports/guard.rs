//! The loopback guard: publishing an IPv4 port sets `route_localnet` on the bridge
//! (localnet.rs), so the host routes 127.0.0.0/8 arriving on it; without a
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

use crate::firewall::engine::{Owner, Want, Wanted};
use crate::firewall::tables::{ACADEMY, INPUT};
use crate::netlink::nftables::attrs::{ifname_bytes, name_byteorder};
use crate::netlink::nftables::consts::{IFNAMSIZ, IPS_DST_NAT, TYPE_IFNAME};
use crate::netlink::nftables::model::{
    Chain, ChainType, Change, CmpOp, CtKey, Element, Expr, Hook, MetaKey, PayloadBase, Priority,
    Reg, Rule, Set, Verdict,
};
use crate::netlink::Family;

/// The loopback guard's set of bridges academy set route_localnet on.
pub const LOCALNET_SET: &str = "_localnet";

/// Every rule of the guard's has a comment starting so.
const RULE_PREFIX: &str = "academy localnet";

/// The set's id in the batch that creates it, for the rules' lookups.
const SET_ID: u32 = 1;

/// The guard's two rules, every guarded bridge's (the host's, never released): made
/// whole, in their order, with the table, set and chain they need.
/// `bridge`: the one CHECK or STATUS asks about, named in what a lack opens.
pub fn localnet_rules(bridge: &str) -> Want {
    let input = Chain {
        table: ACADEMY,
        name: INPUT,
        hook: Hook::Input,
        priority: Priority::FILTER,
        kind: ChainType::Filter,
    };
    let mut setup = base();
    setup.push(Change::add_chain(input));
    let rules = [
        (Family::V4, format!("{RULE_PREFIX} 127.0.0.0/8")),
        (Family::V6, format!("{RULE_PREFIX} ::1")),
    ]
    .into_iter()
    .map(|(family, comment)| Rule {
        table: ACADEMY,
        chain: INPUT.to_string(),
        handle: 0,
        comment: Some(comment),
        exprs: localnet_rule(family, SET_ID),
    })
    .collect();
    Want {
        wanted: Wanted::group(RULE_PREFIX, rules, setup),
        owner: Owner::Host,
        what: "the loopback guard".to_string(),
        harm: format!("bridge {bridge} routes 127.0.0.0/8, and its containers {OPEN}"),
    }
}

/// The bridge in `_localnet`: its guard, going with its last network (and its
/// route_localnet, localnet.rs).
pub fn localnet_guard(bridge: &str) -> Want {
    Want {
        wanted: Wanted::element(
            ACADEMY,
            LOCALNET_SET,
            Element::key(ifname_bytes(bridge)),
            base(),
        ),
        owner: Owner::Bridge(bridge.to_string()),
        what: format!("bridge {bridge}"),
        harm: format!("it routes 127.0.0.0/8, and its containers {OPEN}"),
    }
}

/// What the guard keeps closed.
const OPEN: &str = "can reach the host's services bound to 127.0.0.1";

/// The table and the guard's set, made if missing.
fn base() -> Vec<Change> {
    let set = Set {
        table: ACADEMY,
        name: LOCALNET_SET.to_string(),
        id: SET_ID,
        key: (TYPE_IFNAME, IFNAMSIZ as u32),
        data: None,
        userdata: Some(name_byteorder(false)),
        exclusive: false,
    };
    vec![Change::add_table(ACADEMY), Change::add_set(set)]
}

/// `iifname @_localnet ip daddr 127.0.0.0/8 ct status & dnat != dnat drop` (IPv6:
/// `ip6 daddr ::1`), expression for expression as `nft --debug=netlink` shows nft 1.0.6
/// writing it: the name looked up, the family, the destination (one byte for the /8,
/// all sixteen for ::1), then the conntrack status without its DNAT bit.
fn localnet_rule(family: Family, set_id: u32) -> Vec<Expr> {
    let (nfproto, _, _, daddr) = family.layout();
    let loopback: Vec<u8> = match family {
        Family::V4 => vec![127],
        Family::V6 => std::net::Ipv6Addr::LOCALHOST.octets().to_vec(),
    };
    let len = loopback.len() as u32;
    vec![
        Expr::meta(MetaKey::IifName, Reg::R1),
        Expr::lookup(LOCALNET_SET, Reg::R1, set_id, false),
        Expr::meta(MetaKey::NfProto, Reg::R1),
        Expr::cmp(Reg::R1, CmpOp::Eq, [nfproto]),
        Expr::payload(PayloadBase::Network, daddr, len, Reg::R1),
        Expr::cmp(Reg::R1, CmpOp::Eq, loopback),
        Expr::Ct {
            key: CtKey::Status,
            dreg: Reg::R1,
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            mask: IPS_DST_NAT.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        },
        Expr::cmp(Reg::R1, CmpOp::Neq, IPS_DST_NAT.to_ne_bytes()),
        Expr::Verdict(Verdict::Drop),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::digest::{hex, sha256};
    use crate::netlink::nftables::encode::expression_bytes;

    /// The rules' bytes, pinned as their digest: a refactor of the encoding that changes
    /// one byte on the wire fails here. (That they are nft's own expressions is held to
    /// the kernel by tests/it/portmap/localnet.rs, against `nft --debug=netlink`.)
    #[test]
    fn the_loopback_guard_rules_encode_as_before() {
        let digest = |family| {
            let list = expression_bytes(&localnet_rule(family, SET_ID));
            hex(&sha256(&list))
        };
        assert_eq!(
            digest(Family::V4),
            "9842ebc2de05611492452ac98a6b8764f39b91b7d39ddda24deb0a9fad44f76b"
        );
        assert_eq!(
            digest(Family::V6),
            "32240fb1a46be542aa202982249a037dc00dc4eb977c67ea7f55f9da6a7223ba"
        );
        assert_eq!(ifname_bytes("br0"), b"br0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    }
}
