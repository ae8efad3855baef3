//! rtnetlink: with its sibling bridge.rs, the only user of netlink-packet-route. Its API breaks in almost every minor
//! release, so everything else in academy speaks in the plain types of this module and
//! decode.rs (`Link`, `Route`, `IpNetwork`), and these are the files to port when the
//! crate moves.
//!
//! A `Netlink` is a blocking rtnetlink socket bound to the network namespace of the
//! thread that opened it, with typed helpers for the handful of requests a bridge plugin
//! makes; the request/ack loop itself is `socket`'s.

use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

use ipnetwork::IpNetwork;
use netlink_packet_core::{
    DefaultNla, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoBridge, InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol,
    RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::decode::{to_address, to_routes, AddressState, Route};
use super::socket::{Await, NlError, NlResult, NlSocket, Subsystem};

/// if_link.h: a request's link lives in the netns of this id (kernel 4.20+).
const IFLA_TARGET_NETNSID: u16 = 46;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    Bridge,
    Veth,
    Other(String),
    /// The link has no IFLA_INFO_KIND: a physical device or loopback.
    None,
}

/// What academy needs to know about a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub kind: LinkKind,
    pub mac: Option<[u8; 6]>,
    pub mtu: Option<u32>,
    /// Administratively up (IFF_UP).
    pub up: bool,
    pub promisc: bool,
    /// The bridge this link is a port of.
    pub controller: Option<u32>,
    pub alias: Option<String>,
}

/// What CNI 1.1 lets a route ask for beyond dst and gw (the result's `priority`, `table`,
/// `scope`, `mtu`, `advmss`); None leaves the kernel's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteAttrs {
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u8>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
}

/// The main routing table, where a route without `table` goes.
pub const MAIN_TABLE: u32 = RouteHeader::RT_TABLE_MAIN as u32;

/// A veth pair to create in one request: the host end in this socket's netns, the
/// peer born directly inside another netns (no later move, no rename).
pub struct VethPair<'a> {
    pub host_name: &'a str,
    pub host_mac: [u8; 6],
    pub controller: u32,
    pub peer_name: &'a str,
    pub peer_mac: [u8; 6],
    pub peer_netns: BorrowedFd<'a>,
    pub mtu: Option<u32>,
    /// The host end is created up; down for a caller that adds qdiscs first (a qdisc
    /// change on an up device waits out an RCU grace period) and sets it up after.
    pub host_up: bool,
}

pub struct Netlink {
    socket: NlSocket,
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> NlResult<Netlink> {
        Ok(Netlink {
            socket: NlSocket::open(Subsystem::Rtnetlink)?,
        })
    }

    // ----- links -----

    /// The link called `name`, or None when there is none.
    pub fn link(&mut self, name: &str) -> NlResult<Option<Link>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.get_link(msg, &format!("look up link {name}"))
    }

    pub(super) fn get_link(&mut self, msg: LinkMessage, what: &str) -> NlResult<Option<Link>> {
        match self.request(RouteNetlinkMessage::GetLink(msg), Await::One, what) {
            Ok(replies) => Ok(replies.into_iter().find_map(|m| match m {
                RouteNetlinkMessage::NewLink(link) => Some(to_link(&link)),
                _ => None,
            })),
            Err(e) if e.is(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The link of index `index`, or None when there is none.
    pub fn link_at(&mut self, index: u32) -> NlResult<Option<Link>> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.get_link(msg, &format!("look up link #{index}"))
    }

    /// The peer of veth `index` (IFLA_LINK); None for a link without one.
    pub fn veth_peer(&mut self, index: u32) -> NlResult<Option<u32>> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        let replies = self.request(
            RouteNetlinkMessage::GetLink(msg),
            Await::One,
            &format!("look up the peer of link #{index}"),
        )?;
        Ok(replies.iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(link) => link.attributes.iter().find_map(|a| match a {
                LinkAttribute::Link(peer) if *peer != index => Some(*peer),
                _ => None,
            }),
            _ => None,
        }))
    }

    /// The MAC of veth `name`'s peer, read in the peer's netns through the netns id the
    /// kernel gave it (IFLA_LINK_NETNSID, then IFLA_TARGET_NETNSID), so no namespace is
    /// entered. None when `name` is not a veth with a peer elsewhere.
    pub fn peer_mac(&mut self, name: &str) -> NlResult<Option<[u8; 6]>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        let what = format!("look up link {name}");
        let replies = match self.request(RouteNetlinkMessage::GetLink(msg), Await::One, &what) {
            Err(e) if e.is(libc::ENODEV) => return Ok(None),
            other => other?,
        };
        let (mut peer, mut nsid) = (None, None);
        for m in &replies {
            if let RouteNetlinkMessage::NewLink(link) = m {
                for a in &link.attributes {
                    match a {
                        LinkAttribute::Link(p) => peer = Some(*p),
                        LinkAttribute::LinkNetNsId(id) => nsid = Some(*id),
                        _ => {}
                    }
                }
            }
        }
        let (Some(peer), Some(nsid)) = (peer, nsid) else {
            return Ok(None);
        };
        let mut msg = LinkMessage::default();
        msg.header.index = peer;
        msg.attributes.push(LinkAttribute::Other(DefaultNla::new(
            IFLA_TARGET_NETNSID,
            nsid.to_ne_bytes().to_vec(),
        )));
        let what = format!("look up the peer of {name} (link #{peer} of netns id {nsid})");
        Ok(self.get_link(msg, &what)?.and_then(|l| l.mac))
    }

    pub fn links(&mut self) -> NlResult<Vec<Link>> {
        let replies = self.request(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            Await::Dump,
            "list links",
        )?;
        Ok(replies
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(link) => Some(to_link(link)),
                _ => None,
            })
            .collect())
    }

    /// Creates a bridge, up (VLAN-filtering when asked). EEXIST when any link of that
    /// name exists; EOPNOTSUPP for VLAN filtering on a kernel built without it.
    /// The MAC is pinned so that the bridge does not take a new one whenever its
    /// lowest-numbered port comes or goes (which would make results go stale).
    pub fn create_bridge(
        &mut self,
        name: &str,
        mac: [u8; 6],
        mtu: Option<u32>,
        promisc: bool,
        vlan_filtering: bool,
    ) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        set_flags(&mut msg, LinkFlags::Up, true);
        if promisc {
            set_flags(&mut msg, LinkFlags::Promisc, true);
        }
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes.push(LinkAttribute::Address(mac.to_vec()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        let mut info = vec![LinkInfo::Kind(InfoKind::Bridge)];
        // Set at creation, so that a kernel without VLAN filtering refuses the whole
        // request and no bridge is left half made.
        if vlan_filtering {
            info.push(LinkInfo::Data(InfoData::Bridge(vec![
                InfoBridge::VlanFiltering(true),
            ])));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(info));
        self.create(
            RouteNetlinkMessage::NewLink(msg),
            &format!("create bridge {name}"),
        )
    }

    /// Creates the pair in one request: the host end up (unless `host_up` is false) and
    /// already a port of `controller`, the peer down inside its netns.
    pub fn create_veth(&mut self, pair: &VethPair) -> NlResult<()> {
        // The peer cannot be created up: veth_open() answers ENOTCONN until both ends
        // exist, and the kernel configures the peer first.
        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(pair.peer_name.to_string()));
        peer.attributes
            .push(LinkAttribute::Address(pair.peer_mac.to_vec()));
        peer.attributes
            .push(LinkAttribute::NetNsFd(pair.peer_netns.as_raw_fd()));
        let mut host = LinkMessage::default();
        set_flags(&mut host, LinkFlags::Up, pair.host_up);
        host.attributes
            .push(LinkAttribute::IfName(pair.host_name.to_string()));
        host.attributes
            .push(LinkAttribute::Address(pair.host_mac.to_vec()));
        host.attributes
            .push(LinkAttribute::Controller(pair.controller));
        if let Some(mtu) = pair.mtu {
            host.attributes.push(LinkAttribute::Mtu(mtu));
            peer.attributes.push(LinkAttribute::Mtu(mtu));
        }
        host.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        self.create(
            RouteNetlinkMessage::NewLink(host),
            &format!("create veth pair {}/{}", pair.host_name, pair.peer_name),
        )
    }

    /// The alias is where academy records which attachment owns a host veth; the kernel
    /// ignores IFLA_IFALIAS on creation, so it takes its own request.
    pub fn set_alias(&mut self, name: &str, alias: &str) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        msg.attributes
            .push(LinkAttribute::IfAlias(alias.to_string()));
        self.change_link(msg, &format!("set alias of link {name}"))
    }

    pub fn set_up(&mut self, index: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        set_flags(&mut msg, LinkFlags::Up, true);
        self.change_link(msg, &format!("set link #{index} up"))
    }

    pub fn set_promisc(&mut self, index: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        set_flags(&mut msg, LinkFlags::Promisc, true);
        self.change_link(msg, &format!("set link #{index} promiscuous"))
    }

    pub fn set_mtu(&mut self, index: u32, mtu: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.attributes.push(LinkAttribute::Mtu(mtu));
        self.change_link(msg, &format!("set the MTU of link #{index} to {mtu}"))
    }

    /// Deletes a link (a veth takes its peer with it). ENODEV when it is already gone.
    pub fn delete_link(&mut self, index: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.request(
            RouteNetlinkMessage::DelLink(msg),
            Await::Ack,
            &format!("delete link #{index}"),
        )
        .map(drop)
    }

    pub(super) fn change_link(&mut self, msg: LinkMessage, what: &str) -> NlResult<()> {
        self.request(RouteNetlinkMessage::NewLink(msg), Await::Ack, what)
            .map(drop)
    }

    // ----- addresses -----

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

    // ----- routes -----

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
    fn route_messages(&mut self, ipv6: bool, what: &str) -> NlResult<Vec<RouteMessage>> {
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

    // ----- the request/ack loop -----

    fn create(&mut self, msg: RouteNetlinkMessage, what: &str) -> NlResult<()> {
        self.request_flags(msg, NLM_F_CREATE | NLM_F_EXCL, Await::Ack, what)
            .map(drop)
    }

    pub(super) fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        reply: Await,
        what: &str,
    ) -> NlResult<Vec<RouteNetlinkMessage>> {
        self.request_flags(msg, 0, reply, what)
    }

    pub(super) fn request_flags(
        &mut self,
        msg: RouteNetlinkMessage,
        extra_flags: u16,
        reply: Await,
        what: &str,
    ) -> NlResult<Vec<RouteNetlinkMessage>> {
        let sequence = self.socket.next_sequence();
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST
            | extra_flags
            | match reply {
                Await::Ack => NLM_F_ACK,
                Await::Dump => NLM_F_DUMP,
                Await::One => 0,
            };
        header.sequence_number = sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        packet.finalize();
        let mut bytes = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut bytes);
        self.socket.send(&bytes, what)?;

        let mut replies = Vec::new();
        self.socket.receive(sequence, reply, what, |bytes| {
            match NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes) {
                Ok(m) => {
                    if let NetlinkPayload::InnerMessage(m) = m.payload {
                        replies.push(m);
                    }
                    Ok(())
                }
                // A dump may hold a link kind this crate cannot decode; that link is
                // none of academy's business, so skip it rather than fail the dump.
                Err(_) if reply == Await::Dump => Ok(()),
                Err(e) => Err(NlError {
                    reason: Some(format!("undecodable reply: {e}")),
                    ..NlError::new(what, libc::EBADMSG)
                }),
            }
        })?;
        Ok(replies)
    }
}

/// Sets or clears one flag, leaving the others as the kernel has them.
fn set_flags(msg: &mut LinkMessage, flag: LinkFlags, on: bool) {
    msg.header.change_mask |= flag;
    if on {
        msg.header.flags |= flag;
    } else {
        msg.header.flags &= !flag;
    }
}

fn family_of(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

fn to_link(msg: &LinkMessage) -> Link {
    let mut link = Link {
        index: msg.header.index,
        name: String::new(),
        kind: LinkKind::None,
        mac: None,
        mtu: None,
        up: msg.header.flags.contains(LinkFlags::Up),
        promisc: msg.header.flags.contains(LinkFlags::Promisc),
        controller: None,
        alias: None,
    };
    for attr in &msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => link.name = n.clone(),
            LinkAttribute::Address(a) => link.mac = a.as_slice().try_into().ok(),
            LinkAttribute::Mtu(m) => link.mtu = Some(*m),
            LinkAttribute::Controller(c) => link.controller = Some(*c),
            LinkAttribute::IfAlias(a) => link.alias = Some(a.clone()),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    if let LinkInfo::Kind(kind) = info {
                        link.kind = match kind {
                            InfoKind::Bridge => LinkKind::Bridge,
                            InfoKind::Veth => LinkKind::Veth,
                            other => LinkKind::Other(other.to_string()),
                        };
                    }
                }
            }
            _ => {}
        }
    }
    link
}
