//! What the kernel learned from IPv6 router advertisements, and on which links: the
//! question asked before IPv6 forwarding goes on (which links would stop listening) and
//! by `academy status` after (which links stopped).

use std::collections::BTreeSet;

use netlink_packet_route::address::AddressFlags;

use super::super::decode::address_flags;
use super::*;

impl Netlink {
    /// The links that hold what an advertisement taught: an IPv6 route the kernel made
    /// from one (protocol `ra`: the default route, a route information option), or an
    /// IPv6 address with a lifetime (not IFA_F_PERMANENT: one SLAAC made from an
    /// advertised prefix, or a DHCPv6 client's, whose network advertises the default
    /// route). An address added by hand or at boot is permanent, and so is every
    /// link-local one. Two dumps; a kernel without IPv6 has no such link.
    pub fn ra_learned_links(&mut self) -> NlResult<BTreeSet<u32>> {
        let routes = match self.route_messages(true, "list the IPv6 routes") {
            Err(e) if e.is(libc::EAFNOSUPPORT) => return Ok(BTreeSet::new()),
            other => other?,
        };
        let mut links: BTreeSet<u32> = routes
            .iter()
            .filter(|r| r.header.protocol == RouteProtocol::Ra)
            .flat_map(|r| to_routes(r, true))
            .filter_map(|r| r.oif)
            .collect();
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet6;
        let replies = self.request(
            RouteNetlinkMessage::GetAddress(msg),
            Await::Dump,
            "list the IPv6 addresses of every link",
        )?;
        links.extend(replies.iter().filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a)
                if a.header.family == AddressFamily::Inet6
                    && !address_flags(a).contains(AddressFlags::Permanent) =>
            {
                Some(a.header.index)
            }
            _ => None,
        }));
        Ok(links)
    }
}
