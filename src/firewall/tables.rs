//! The tables academy keeps its state in, and the chains of `inet academy` that several
//! kinds share. academy owns two tables and writes into one other: iptables-nft's
//! `filter`, whose FORWARD chain Docker's DROP policy makes everyone's business.

use super::engine::{Owner, Want, Wanted};
use crate::netlink::nftables::attrs::ifname_bytes;
use crate::netlink::nftables::consts::{IFNAMSIZ, TYPE_BITS, TYPE_IFNAME};
use crate::netlink::nftables::model::{
    Chain, ChainType, Change, Element, Hook, Priority, Set, Verdict,
};
use crate::netlink::{Family, Nftables, NlResult, Table};

/// The name of academy's own tables.
pub const NAME: &str = "academy";

/// `inet academy`: the masquerade, port mapping, the loopback guard, isolation.
pub const ACADEMY: Table = Table::inet(NAME);

/// `bridge academy`: the MAC filter.
pub const ACADEMY_BRIDGE: Table = Table::bridge(NAME);

/// `ip filter` / `ip6 filter`, iptables-nft's: the FORWARD accepts.
pub fn iptables_filter(family: Family) -> Table {
    Table::ip(family, "filter")
}

/// Whether iptables' FORWARD chain of each family, [IPv4, IPv6], exists and drops by
/// policy (Docker sets it so): then every frame routed to or from a container needs an
/// accept there. Both asked in one sendmsg.
pub fn forward_drops_in_both(nft: &mut Nftables) -> NlResult<[bool; 2]> {
    let what = "look up chain FORWARD of iptables' tables filter (ip, ip6)";
    let chains = [Family::V4, Family::V6].map(|f| (iptables_filter(f), "FORWARD"));
    let found = nft.chain_infos(&chains, what)?;
    let drops = |i: usize| {
        found
            .get(i)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.policy == Some(Verdict::Drop))
    };
    Ok([drops(0), drops(1)])
}

/// The masquerade's chain, which port mapping's postrouting rules share.
pub const POSTROUTING: &str = "postrouting";
/// Port mapping's DNAT chains.
pub const PREROUTING: &str = "prerouting";
pub const OUTPUT: &str = "output";
/// Port mapping's hairpin mark and isolation's drop.
pub const FORWARD: &str = "forward";
/// The loopback guard's chain.
pub const INPUT: &str = "input";

/// `postrouting`, made if missing (the masquerade's and port mapping's).
pub fn postrouting() -> Change {
    Change::add_chain(Chain {
        table: ACADEMY,
        name: POSTROUTING,
        hook: Hook::Postrouting,
        priority: Priority::NAT_SRC,
        kind: ChainType::Nat,
    })
}

/// `forward`, made if missing (port mapping's and isolation's: whichever comes first).
pub fn forward() -> Change {
    Change::add_chain(Chain {
        table: ACADEMY,
        name: FORWARD,
        hook: Hook::Forward,
        priority: Priority::FILTER,
        kind: ChainType::Filter,
    })
}

/// A set of `bridge . bridge` name pairs in `inet academy` (port mapping's hairpin mark,
/// isolation), made if missing; `id` names it in its creating batch.
pub fn bridge_pairs(name: &'static str, id: u32) -> Change {
    Change::add_set(Set {
        table: ACADEMY,
        name: name.to_string(),
        id,
        key: (
            (TYPE_IFNAME << TYPE_BITS) | TYPE_IFNAME,
            2 * IFNAMSIZ as u32,
        ),
        data: None,
        userdata: None,
        exclusive: false,
    })
}

/// `bridge . bridge`, each name NUL-padded to IFNAMSIZ as the kernel loads it: a
/// bridge's key in a set of `bridge_pairs`.
pub fn bridge_pair_key(bridge: &str) -> Vec<u8> {
    let name = ifname_bytes(bridge);
    [name.clone(), name].concat()
}

/// The bridge's element in the `bridge_pairs` set `set` (id `id` in a batch that makes
/// it): the bridge's, going with the last network on it.
pub fn bridge_pair(set: &'static str, id: u32, bridge: &str, what: String, harm: String) -> Want {
    Want {
        wanted: Wanted::element(
            ACADEMY,
            set,
            Element::key(bridge_pair_key(bridge)),
            vec![Change::add_table(ACADEMY), bridge_pairs(set, id)],
        ),
        owner: Owner::Bridge(bridge.to_string()),
        what,
        harm,
    }
}

/// The suffix of a set or map of one family: `<network>-v4`, `_ports-v6`.
pub fn suffix(family: Family) -> &'static str {
    match family {
        Family::V4 => "v4",
        Family::V6 => "v6",
    }
}
