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
    AfSpecInet, AfSpecUnspec, InetDevConf, InfoBridge, InfoData, InfoKind, InfoVeth, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol,
    RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

mod address;
mod learned;
mod link;
mod table;

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
    /// Its link group (IFLA_GROUP), 0 unless someone set one.
    pub group: u32,
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

    /// As `open`, for the container's netns at ADD: a socket that makes changes and one
    /// dump at most (`address_states`, waiting out DAD), whose replies are matched by
    /// link again. It goes without strict checking, one setsockopt fewer: the kernel
    /// then sends the netns's every address instead of one link's, a handful.
    pub fn open_unfiltered() -> NlResult<Netlink> {
        Ok(Netlink {
            socket: NlSocket::open_unfiltered(Subsystem::Rtnetlink)?,
        })
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
        let sequence = self.send_request(msg, extra_flags, reply, what)?;
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

    /// A request whose replies are handed undecoded (each data message, its header
    /// included) to `on_data`: for a large dump of which little is read.
    pub(super) fn request_raw(
        &mut self,
        msg: RouteNetlinkMessage,
        reply: Await,
        what: &str,
        on_data: impl FnMut(&[u8]) -> NlResult<()>,
    ) -> NlResult<()> {
        let sequence = self.send_request(msg, 0, reply, what)?;
        self.socket.receive(sequence, reply, what, on_data)
    }

    fn send_request(
        &mut self,
        msg: RouteNetlinkMessage,
        extra_flags: u16,
        reply: Await,
        what: &str,
    ) -> NlResult<u32> {
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
        Ok(sequence)
    }
}

fn family_of(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}
