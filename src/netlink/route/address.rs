//! Addresses: added (with or without DAD), deleted, listed with their state.

use super::*;

impl Netlink {
    /// Adds `addr` (address and prefix) to the link. EEXIST when it is already there.
    /// Every address academy puts on the bridge is unique by construction (the gateway
    /// of its own network): an IPv6 one is usable at once (IFA_F_NODAD), not after a
    /// second of duplicate address detection.
    pub fn add_address(&mut self, index: u32, addr: IpNetwork) -> NlResult<()> {
        self.add_address_flagged(index, addr, true)
    }

    /// As the reference adds the container's addresses: without IFA_F_NODAD, so that
    /// the interface's `accept_dad` decides whether an IPv6 one goes through duplicate
    /// address detection.
    pub fn add_container_address(&mut self, index: u32, addr: IpNetwork) -> NlResult<()> {
        self.add_address_flagged(index, addr, false)
    }

    fn add_address_flagged(&mut self, index: u32, addr: IpNetwork, nodad: bool) -> NlResult<()> {
        let mut msg = AddressMessage::default();
        msg.header.family = family_of(addr.ip());
        msg.header.prefix_len = addr.prefix();
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Local(addr.ip()));
        msg.attributes.push(AddressAttribute::Address(addr.ip()));
        match addr {
            IpNetwork::V4(v4) if v4.prefix() < 31 => {
                msg.attributes
                    .push(AddressAttribute::Broadcast(v4.broadcast()));
            }
            IpNetwork::V6(_) if nodad => msg.header.flags |= AddressHeaderFlags::Nodad,
            _ => {}
        }
        self.create(
            RouteNetlinkMessage::NewAddress(msg),
            &format!("add address {addr} to link #{index}"),
        )
    }

    pub fn delete_address(&mut self, index: u32, addr: IpNetwork) -> NlResult<()> {
        let mut msg = AddressMessage::default();
        msg.header.family = family_of(addr.ip());
        msg.header.prefix_len = addr.prefix();
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Local(addr.ip()));
        self.request(
            RouteNetlinkMessage::DelAddress(msg),
            Await::Ack,
            &format!("delete address {addr} from link #{index}"),
        )
        .map(drop)
    }

    /// The addresses on one link, IPv4 and IPv6.
    pub fn addresses(&mut self, index: u32) -> NlResult<Vec<IpNetwork>> {
        Ok(self
            .address_states(index)?
            .into_iter()
            .map(|a| a.address)
            .collect())
    }

    /// The addresses on one link with their DAD state.
    pub fn address_states(&mut self, index: u32) -> NlResult<Vec<AddressState>> {
        let mut msg = AddressMessage::default();
        msg.header.index = index;
        let replies = self.request(
            RouteNetlinkMessage::GetAddress(msg),
            Await::Dump,
            &format!("list addresses of link #{index}"),
        )?;
        Ok(replies
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => to_address(a),
                _ => None,
            })
            .collect())
    }

    /// Every address on every link of this netns, IPv4 and IPv6, in one dump.
    pub fn all_addresses(&mut self) -> NlResult<Vec<IpAddr>> {
        let replies = self.request(
            RouteNetlinkMessage::GetAddress(AddressMessage::default()),
            Await::Dump,
            "list the addresses of every link",
        )?;
        Ok(replies
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => to_address(a),
                _ => None,
            })
            .map(|a| a.address.ip())
            .collect())
    }
}
