//! Routes: added to a container's interface, and the kernel's routes listed (CHECK's look,
//! the default routes "mtu": "auto" follows).

use super::*;

impl Netlink {
    /// Adds a route, in the main table unless `attrs` names another. As the reference
    /// plugin (RouteAddEcmp: NLM_F_CREATE without NLM_F_EXCL), a route of the same
    /// destination and metric through another gateway is added beside the one there
    /// (IPv4 puts the new one first, IPv6 makes one multipath route of both); EEXIST
    /// only when this very route (same next hop) is already there.
    pub fn add_route(
        &mut self,
        dst: IpNetwork,
        gateway: IpAddr,
        oif: u32,
        attrs: &RouteAttrs,
    ) -> NlResult<()> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = family_of(dst.ip());
        msg.header.destination_prefix_length = dst.prefix();
        let table = attrs.table.unwrap_or(MAIN_TABLE);
        // The header has 8 bits; RTA_TABLE carries any table and wins over the header.
        msg.header.table = u8::try_from(table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
        msg.attributes.push(RouteAttribute::Table(table));
        msg.header.protocol = RouteProtocol::Boot;
        msg.header.scope = RouteScope::from(attrs.scope.unwrap_or(0));
        msg.header.kind = RouteType::Unicast;
        if dst.prefix() > 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(
                    dst.network(),
                )));
        }
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::from(gateway)));
        msg.attributes.push(RouteAttribute::Oif(oif));
        if let Some(p) = attrs.priority {
            msg.attributes.push(RouteAttribute::Priority(p));
        }
        let mut metrics = Vec::new();
        if let Some(m) = attrs.mtu {
            metrics.push(RouteMetric::Mtu(m));
        }
        if let Some(m) = attrs.advmss {
            metrics.push(RouteMetric::Advmss(m));
        }
        if !metrics.is_empty() {
            msg.attributes.push(RouteAttribute::Metrics(metrics));
        }
        self.request_flags(
            RouteNetlinkMessage::NewRoute(msg),
            NLM_F_CREATE,
            Await::Ack,
            &format!("add route {dst} via {gateway}"),
        )
        .map(drop)
    }

    /// Every route of one family (4 or 6), of every table.
    pub fn routes(&mut self, ipv6: bool) -> NlResult<Vec<Route>> {
        Ok(self
            .route_messages(ipv6, "list routes")?
            .iter()
            .flat_map(|r| to_routes(r, ipv6))
            .collect())
    }

    /// The default routes of one family in the main table (0.0.0.0/0 or ::/0, unicast,
    /// with an output interface): a multipath route gives one per next hop. The kernel
    /// filters a dump by table only on a strict-checking socket, so this one is read
    /// whole and filtered here. A kernel without IPv6 has none of that family.
    pub fn default_routes(&mut self, ipv6: bool) -> NlResult<Vec<Route>> {
        let messages = match self.route_messages(ipv6, "list the default routes") {
            Err(e) if ipv6 && e.is(libc::EAFNOSUPPORT) => return Ok(Vec::new()),
            other => other?,
        };
        Ok(messages
            .iter()
            // Not an unreachable, blackhole or prohibit default (IPv6 shows those on lo).
            .filter(|r| {
                r.header.kind == RouteType::Unicast && r.header.destination_prefix_length == 0
            })
            .flat_map(|r| to_routes(r, ipv6))
            .filter(|r| r.table == MAIN_TABLE && r.oif.is_some())
            .collect())
    }

    /// One family's RTM_GETROUTE dump; a kernel that answers another family's routes
    /// (one without IPv6 dumps every family) has them dropped.
    pub(super) fn route_messages(&mut self, ipv6: bool, what: &str) -> NlResult<Vec<RouteMessage>> {
        let family = if ipv6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        let mut msg = RouteMessage::default();
        msg.header.address_family = family;
        let replies = self.request(RouteNetlinkMessage::GetRoute(msg), Await::Dump, what)?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) if r.header.address_family == family => Some(r),
                _ => None,
            })
            .collect())
    }
}
