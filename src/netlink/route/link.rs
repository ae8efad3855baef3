//! Links: looked up, listed, made (the bridge, the veth pair), labelled, set up, deleted.

use super::*;
use crate::netlink::attributes::attributes;

impl Netlink {
    /// The link called `name`, or None when there is none.
    pub fn link(&mut self, name: &str) -> NlResult<Option<Link>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.get_link(msg, &format!("look up link {name}"))
    }

    pub(in crate::netlink) fn get_link(
        &mut self,
        msg: LinkMessage,
        what: &str,
    ) -> NlResult<Option<Link>> {
        let mut found = None;
        let asked = self.request_raw(RouteNetlinkMessage::GetLink(msg), Await::One, what, |m| {
            found = found.take().or_else(|| link_of(m));
            Ok(())
        });
        match asked {
            Ok(()) => Ok(found),
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
        self.dump_links(LinkMessage::default(), "list links")
    }

    /// The ports of bridge `bridge`: the links whose master (IFLA_MASTER) it is. The
    /// kernel filters the dump by master, so a node of many veths answers with the
    /// bridge's alone; each reply is matched again all the same, since a kernel that
    /// does not know the filter sends every link.
    pub fn ports(&mut self, bridge: u32) -> NlResult<Vec<Link>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::Controller(bridge));
        let links = self.dump_links(msg, &format!("list the ports of link #{bridge}"))?;
        Ok(links
            .into_iter()
            .filter(|l| l.controller == Some(bridge))
            .collect())
    }

    /// How many ports bridge `bridge` has: the same dump as `ports`, each reply read
    /// only as far as its IFLA_MASTER. A link message carries some 1.5 KiB of
    /// attributes (statistics, queues, its kind's data); decoding a thousand of them
    /// took 12 ms of CPU, counting them takes next to none beyond the kernel's own work.
    pub fn port_count(&mut self, bridge: u32) -> NlResult<usize> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::Controller(bridge));
        let what = format!("count the ports of link #{bridge}");
        let mut count = 0;
        self.request_raw(
            RouteNetlinkMessage::GetLink(msg),
            Await::Dump,
            &what,
            |bytes| {
                count += usize::from(master_of(bytes) == Some(bridge));
                Ok(())
            },
        )?;
        Ok(count)
    }

    fn dump_links(&mut self, msg: LinkMessage, what: &str) -> NlResult<Vec<Link>> {
        let mut links = Vec::new();
        self.request_raw(RouteNetlinkMessage::GetLink(msg), Await::Dump, what, |m| {
            links.extend(link_of(m));
            Ok(())
        })?;
        Ok(links)
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

    /// The container's interface, in one request: up (when `up`) and announcing itself
    /// (when `arp_notify`: its IPv4 arp_notify on, a gratuitous ARP whenever it comes up
    /// or changes its MAC). The setting goes in IFLA_AF_SPEC (the kernel's
    /// inet_set_link_af), not through /proc/sys, an open, a write and a close more. The
    /// kernel checks the setting before it changes anything, so a refused request leaves
    /// the link as it was; it refuses it only for a link without IPv4 (inet_validate_link_af,
    /// EAFNOSUPPORT), which could not take the IPv4 address that follows either. Nothing is
    /// sent when there is nothing to set.
    pub fn set_container_link(&mut self, index: u32, up: bool, arp_notify: bool) -> NlResult<()> {
        if !up && !arp_notify {
            return Ok(());
        }
        let what = match (up, arp_notify) {
            (true, true) => format!("set link #{index} up, with arp_notify"),
            (true, false) => format!("set link #{index} up"),
            _ => format!("set arp_notify of link #{index}"),
        };
        self.change_link(container_link(index, up, arp_notify), &what)
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

    /// Puts link `index` in link group `group` (IFLA_GROUP): a mark, no grace period.
    /// ENODEV when it is gone.
    pub fn set_group(&mut self, index: u32, group: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.attributes.push(LinkAttribute::Group(group));
        self.change_link(msg, &format!("put link #{index} in link group {group}"))
    }

    /// Deletes every link of link group `group` in one request (RTM_DELLINK by
    /// IFLA_GROUP, the kernel's rtnl_group_dellink): one unregister batch, so the RCU
    /// grace periods a link's deletion waits out are waited out once for all of them,
    /// where a request per link waits them out once per link. ENODEV when no link is in
    /// the group; EOPNOTSUPP, nothing deleted, when one of them cannot be deleted (a
    /// physical link); EPERM for group 0, every link's default, which is never sent.
    pub fn delete_group(&mut self, group: u32) -> NlResult<()> {
        debug_assert_ne!(group, 0, "group 0 holds every link");
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::Group(group));
        self.request(
            RouteNetlinkMessage::DelLink(msg),
            Await::Ack,
            &format!("delete the links of link group {group}"),
        )
        .map(drop)
    }

    pub(in crate::netlink) fn change_link(&mut self, msg: LinkMessage, what: &str) -> NlResult<()> {
        self.request(RouteNetlinkMessage::NewLink(msg), Await::Ack, what)
            .map(drop)
    }
}

const RTM_NEWLINK: u16 = 16;
/// nlmsghdr, then ifinfomsg (family, pad, type: 4 bytes; index, flags, change: 4 each).
const HEADERS: usize = 16 + 16;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_IFALIAS: u16 = 20;
const IFLA_GROUP: u16 = 27;
const IFLA_INFO_KIND: u16 = 1;
const IFF_UP: u32 = 0x1;
const IFF_PROMISC: u32 = 0x100;

/// The attributes of an RTM_NEWLINK message (netlink header included), read in place;
/// none when it is another message or too short.
fn link_attributes(message: &[u8]) -> Option<impl Iterator<Item = (u16, &[u8])>> {
    let kind = u16::from_ne_bytes(message.get(4..6)?.try_into().ok()?);
    (kind == RTM_NEWLINK && message.len() >= HEADERS).then(|| attributes(&message[HEADERS..]))
}

fn u32_of(value: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(value.get(..4)?.try_into().ok()?))
}

/// A string attribute, without the NUL the kernel ends it with.
fn string_of(value: &[u8]) -> String {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

/// IFLA_MASTER of an RTM_NEWLINK message, read in place.
fn master_of(message: &[u8]) -> Option<u32> {
    link_attributes(message)?.find_map(|(kind, value)| match kind {
        IFLA_MASTER => u32_of(value),
        _ => None,
    })
}

/// A link from an RTM_NEWLINK message (netlink header included), reading in place the
/// attributes `Link` holds and no other. The crate's decoder builds every attribute of
/// the message (some 1.5 KiB: statistics, queues, each family's configuration), which
/// was 7% of a steady ADD's CPU for the four links it looks up (perf, 150 ADDs).
fn link_of(message: &[u8]) -> Option<Link> {
    let found = link_attributes(message)?;
    let index = u32_of(&message[20..])?;
    let flags = u32_of(&message[24..])?;
    let mut link = Link {
        index,
        name: String::new(),
        kind: LinkKind::None,
        mac: None,
        mtu: None,
        up: flags & IFF_UP != 0,
        promisc: flags & IFF_PROMISC != 0,
        controller: None,
        alias: None,
        group: 0,
    };
    for (kind, value) in found {
        match kind {
            IFLA_IFNAME => link.name = string_of(value),
            IFLA_ADDRESS => link.mac = value.try_into().ok(),
            IFLA_MTU => link.mtu = u32_of(value),
            IFLA_MASTER => link.controller = u32_of(value),
            IFLA_IFALIAS => link.alias = Some(string_of(value)),
            IFLA_GROUP => link.group = u32_of(value).unwrap_or(0),
            IFLA_LINKINFO => {
                for (info, value) in attributes(value) {
                    if info == IFLA_INFO_KIND {
                        link.kind = match string_of(value).as_str() {
                            "bridge" => LinkKind::Bridge,
                            "veth" => LinkKind::Veth,
                            other => LinkKind::Other(other.to_string()),
                        };
                    }
                }
            }
            _ => {}
        }
    }
    Some(link)
}

/// `set_container_link`'s request.
fn container_link(index: u32, up: bool, arp_notify: bool) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.index = index;
    if up {
        set_flags(&mut msg, LinkFlags::Up, true);
    }
    if arp_notify {
        // Only the fields that are not zero go out (the crate's DevConfRequest):
        // arp_notify alone, the link's other settings left as they are.
        let mut conf = InetDevConf::default();
        conf.arp_notify = 1;
        msg.attributes
            .push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet(vec![
                AfSpecInet::DevConfRequest(conf),
            ])]));
    }
    msg
}

/// Sets or clears one flag, leaving the others as the kernel has them.
pub(super) fn set_flags(msg: &mut LinkMessage, flag: LinkFlags, on: bool) {
    msg.header.change_mask |= flag;
    if on {
        msg.header.flags |= flag;
    } else {
        msg.header.flags &= !flag;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::NetlinkHeader;

    /// The crate's reading of a link, which `link_of` must match.
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
            group: 0,
        };
        for attr in &msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Address(a) => link.mac = a.as_slice().try_into().ok(),
                LinkAttribute::Mtu(m) => link.mtu = Some(*m),
                LinkAttribute::Controller(c) => link.controller = Some(*c),
                LinkAttribute::IfAlias(a) => link.alias = Some(a.clone()),
                LinkAttribute::Group(g) => link.group = *g,
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

    /// A link message of index 7 with `flags` and `attributes`.
    fn message(flags: LinkFlags, attributes: Vec<LinkAttribute>) -> LinkMessage {
        let mut link = LinkMessage::default();
        link.header.index = 7;
        link.header.flags = flags;
        link.attributes = attributes;
        link
    }

    /// `link` as the kernel sends it, serialized by the crate.
    fn serialized(link: LinkMessage) -> Vec<u8> {
        let mut packet = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)),
        );
        packet.finalize();
        let mut bytes = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut bytes);
        bytes
    }

    fn wire(attributes: Vec<LinkAttribute>) -> Vec<u8> {
        serialized(message(LinkFlags::empty(), attributes))
    }

    #[test]
    fn arp_notify_alone_goes_in_the_link_up_request() {
        let bytes = wire(container_link(7, true, true).attributes);
        // After nlmsghdr and ifinfomsg: IFLA_AF_SPEC { AF_INET { IFLA_INET_CONF (nested)
        // { IPV4_DEVCONF_ARP_NOTIFY = 1 } } }, nothing else.
        let mut expected = Vec::new();
        for (len, kind) in [(20u16, 26u16), (16, 2), (12, 1 | 0x8000), (8, 22)] {
            expected.extend_from_slice(&len.to_ne_bytes());
            expected.extend_from_slice(&kind.to_ne_bytes());
        }
        expected.extend_from_slice(&1u32.to_ne_bytes());
        assert_eq!(&bytes[32..], &expected[..]);
        let msg = container_link(7, true, true);
        assert!(msg.header.flags.contains(LinkFlags::Up));
        assert!(msg.header.change_mask.contains(LinkFlags::Up));
        let down = container_link(7, false, true);
        assert!(
            !down.header.change_mask.contains(LinkFlags::Up),
            "left as it is"
        );
        assert!(container_link(7, true, false).attributes.is_empty());
    }

    /// A link message as the kernel sends it, with the crate's own reading of it.
    fn sent(flags: LinkFlags, attributes: Vec<LinkAttribute>) -> (Vec<u8>, Link) {
        let link = message(flags, attributes);
        let read = to_link(&link);
        (serialized(link), read)
    }

    #[test]
    fn a_link_is_read_in_place_as_the_crate_reads_it() {
        let kinds = [
            LinkInfo::Kind(InfoKind::Bridge),
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Kind(InfoKind::Vlan),
            LinkInfo::Kind(InfoKind::Other("ifb".into())),
        ];
        for kind in kinds {
            let (bytes, crate_read) = sent(
                LinkFlags::Up | LinkFlags::Promisc | LinkFlags::Broadcast,
                vec![
                    LinkAttribute::IfName("veth0123456789a".into()),
                    LinkAttribute::Address(vec![2, 0, 0, 0, 0, 9]),
                    LinkAttribute::Mtu(1450),
                    LinkAttribute::Controller(3),
                    LinkAttribute::IfAlias("academy:c1:eth0".into()),
                    LinkAttribute::Group(4),
                    LinkAttribute::LinkInfo(vec![kind]),
                    LinkAttribute::TxQueueLen(1000),
                ],
            );
            let read = link_of(&bytes).expect("a link");
            assert_eq!(read, crate_read);
            assert_eq!(read.alias.as_deref(), Some("academy:c1:eth0"));
            assert!(read.up && read.promisc);
        }
        let (bare, crate_read) = sent(LinkFlags::empty(), vec![LinkAttribute::IfName("lo".into())]);
        let read = link_of(&bare).expect("a link");
        assert_eq!(read, crate_read);
        assert!(matches!(read.kind, LinkKind::None) && !read.up && read.mac.is_none());
        assert!(link_of(&bare[..20]).is_none(), "cut inside the header");
        let mut other = bare.clone();
        other[4] = 20; // RTM_NEWADDR
        assert!(link_of(&other).is_none());
    }

    #[test]
    fn the_master_is_read_in_place_past_other_attributes() {
        let port = wire(vec![
            LinkAttribute::IfName("veth1".into()),
            LinkAttribute::Mtu(1500),
            LinkAttribute::Controller(42),
        ]);
        assert_eq!(master_of(&port), Some(42));
        let alone = wire(vec![LinkAttribute::IfName("lo".into())]);
        assert_eq!(master_of(&alone), None);
        assert_eq!(master_of(&port[..port.len() - 4]), None, "cut short");
        assert_eq!(master_of(&port[..10]), None);
    }
}
