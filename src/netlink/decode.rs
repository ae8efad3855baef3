//! academy's plain types for rtnetlink's addresses and routes (`AddressState`, `Route`),
//! and the decoding of the replies into them, apart from the requests that ask for them
//! (route/, which uses these types: the dependency goes one way).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteMetric};

/// A route as the kernel holds it. A multipath route (IPv6 joins routes of equal
/// destination and metric through different gateways into one) is one `Route` per
/// next hop, so that each reads like the single route that was added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNetwork,
    pub gateway: Option<IpAddr>,
    pub oif: Option<u32>,
    pub table: u32,
    /// The metric; IPv6 gives every route one (1024 by default), IPv4 none by default.
    pub priority: Option<u32>,
    pub scope: u8,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
}

/// An address as the kernel holds it, with its duplicate address detection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressState {
    pub address: IpNetwork,
    /// DAD has not finished yet: the address cannot be used.
    pub tentative: bool,
    /// DAD found another host with this address.
    pub dad_failed: bool,
}

pub(super) fn to_address(a: &AddressMessage) -> Option<AddressState> {
    let find = |local: bool| {
        a.attributes.iter().find_map(|attr| match attr {
            AddressAttribute::Local(ip) if local => Some(*ip),
            AddressAttribute::Address(ip) if !local => Some(*ip),
            _ => None,
        })
    };
    let ip = find(true).or_else(|| find(false))?;
    let flags = address_flags(a);
    Some(AddressState {
        address: IpNetwork::new(ip, a.header.prefix_len).ok()?,
        tentative: flags.contains(AddressFlags::Tentative),
        dad_failed: flags.contains(AddressFlags::Dadfailed),
    })
}

/// An address's flags. IFA_FLAGS has all 32 bits; the header's byte is the older,
/// shorter copy.
pub(super) fn address_flags(a: &AddressMessage) -> AddressFlags {
    a.attributes
        .iter()
        .find_map(|attr| match attr {
            AddressAttribute::Flags(f) => Some(*f),
            _ => None,
        })
        .unwrap_or_else(|| AddressFlags::from_bits_retain(u32::from(a.header.flags.bits())))
}

pub(super) fn to_routes(msg: &RouteMessage, ipv6: bool) -> Vec<Route> {
    let mut dst: Option<IpAddr> = None;
    let mut gateway = None;
    let mut oif = None;
    let mut table = u32::from(msg.header.table);
    let mut priority = None;
    let (mut mtu, mut advmss) = (None, None);
    let mut hops = Vec::new();
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Destination(a) => dst = route_ip(a),
            RouteAttribute::Gateway(a) => gateway = route_ip(a),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Priority(p) => priority = Some(*p),
            RouteAttribute::Metrics(metrics) => {
                for m in metrics {
                    match m {
                        RouteMetric::Mtu(v) => mtu = Some(*v),
                        RouteMetric::Advmss(v) => advmss = Some(*v),
                        _ => {}
                    }
                }
            }
            RouteAttribute::MultiPath(next_hops) => {
                for hop in next_hops {
                    let gw = hop.attributes.iter().find_map(|a| match a {
                        RouteAttribute::Gateway(g) => route_ip(g),
                        _ => None,
                    });
                    hops.push((gw, Some(hop.interface_index)));
                }
            }
            _ => {}
        }
    }
    let unspecified = if ipv6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let Ok(dst) = IpNetwork::new(
        dst.unwrap_or(unspecified),
        msg.header.destination_prefix_length,
    ) else {
        return Vec::new();
    };
    if hops.is_empty() {
        hops.push((gateway, oif));
    }
    hops.into_iter()
        .map(|(gateway, oif)| Route {
            dst,
            gateway,
            oif,
            table,
            priority,
            scope: u8::from(msg.header.scope),
            mtu,
            advmss,
        })
        .collect()
}

fn route_ip(addr: &RouteAddress) -> Option<IpAddr> {
    match addr {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}
