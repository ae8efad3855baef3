//! Conntrack over NETLINK_NETFILTER (ctnetlink, subsystem NFNL_SUBSYS_CTNETLINK; the
//! uapi is /usr/include/linux/netfilter/nfnetlink_conntrack.h), encoded by hand as
//! nftables/ is: the removal of the UDP entries that would keep a newly published
//! port's datagrams from its container.
//!
//! NAT is decided on a flow's first packet only. A client that sent datagrams to
//! host:port before the port was published (or while it went to another container)
//! has an entry with no DNAT (or the old one), and every later datagram of that flow
//! follows the entry, not the new map element, for as long as the client keeps
//! sending (the entry's timeout restarts with each one). TCP has no such problem: a new
//! connection is a new flow. The reference portmap and netavark delete these entries too.
//!
//! Stale means: to the port, and to the node itself, where the port is published (its
//! hostIP, or else any address of the node). A container's own flow to a remote server
//! on the same port number is no client of the node: deleting its entry would only
//! forget its masquerade mid-flow (an answer arriving before the container's next
//! datagram finds no entry and is dropped at the node, and that next datagram may leave
//! under another source port, which the server does not know).
//!
//! Per family and port, one dump the kernel filters (CTA_FILTER, Linux 5.8: UDP to the
//! port; one dump of every UDP entry instead for more than PORT_DUMPS_MAX ports), then
//! one sendmsg deleting every entry found by its original tuple. A kernel that refuses
//! the filter gets one unfiltered dump of the family instead; every entry is checked
//! here anyway (a kernel before 5.8 ignores the attribute it does not know and dumps
//! all). When a dump found entries to a port without hostIP, one rtnetlink dump tells
//! which destinations are the node's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};

use super::attributes::attributes;
use super::nfnetlink::{encode, Attrs, Family, HEADERS_LEN};
use super::route::Netlink;
use super::socket::{Await, NlError, NlResult, NlSocket, Subsystem};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;

// enum ctattr_type
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;
// enum ctattr_tuple
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
// enum ctattr_ip
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
// enum ctattr_l4proto
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
// enum ctattr_filter
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_REPLY_FLAGS: u16 = 2;
// The filter's flags are not in the uapi (net/netfilter/nf_internals.h): one bit per
// field of the tuple the dump must match.
const FILTER_IP_DST: u32 = 1 << 1;
const FILTER_PROTO_NUM: u32 = 1 << 3;
const FILTER_PROTO_DST_PORT: u32 = 1 << 5;

const IPPROTO_UDP: u8 = 17;
/// Up to this many ports of a family, a dump each (see [`filtered_dumps`]).
const PORT_DUMPS_MAX: usize = 3;
/// Deletes per sendmsg: their acks (36 bytes each) stay far below the receive buffer.
const DELETES_PER_SEND: usize = 256;

/// A UDP destination being published: `port` on `address`, or on every address of this
/// node (the calling thread's netns) of the family when None.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDestination {
    pub family: Family,
    pub address: Option<IpAddr>,
    pub port: u16,
}

/// What a flush did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Entries deleted (those already gone when their delete came are not counted).
    Deleted(usize),
    /// The kernel has no ctnetlink (nf_conntrack_netlink absent): without it academy
    /// cannot look, and a kernel without conntrack has no entries to keep.
    Unavailable,
}

/// One conntrack entry of a dump: its original tuple as the kernel gave it (sent back
/// to delete it), its zone, and what the tuple says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    tuple: Vec<u8>,
    zone: Option<Vec<u8>>,
    protocol: Option<u8>,
    source: Option<(IpAddr, u16)>,
    destination: Option<(IpAddr, u16)>,
}

impl Entry {
    /// Whether the entry is a flow to `to`: UDP, to its port, and to its address, or
    /// when it has none to one of `node`'s (loopback's included).
    fn goes_to(&self, family: Family, to: &UdpDestination, node: &[IpAddr]) -> bool {
        self.to_port(family, to)
            .is_some_and(|address| match to.address {
                Some(a) => a == address,
                // The whole of 127.0.0.0/8 is local to the kernel (what the DNAT rule's fib
                // lookup sees), whether lo holds 127.0.0.1 or not.
                None => address.is_loopback() || node.contains(&address),
            })
    }

    /// The original destination of a UDP entry of the family to `to`'s port.
    fn to_port(&self, family: Family, to: &UdpDestination) -> Option<IpAddr> {
        let (address, port) = self.destination?;
        let udp = self.protocol == Some(IPPROTO_UDP)
            && Family::of(address) == family
            && to.family == family
            && port == to.port;
        udp.then_some(address)
    }

    fn text(&self) -> String {
        let end = |e: Option<(IpAddr, u16)>| match e {
            Some((IpAddr::V6(a), p)) => format!("[{a}]:{p}"),
            Some((a, p)) => format!("{a}:{p}"),
            None => "?".into(),
        };
        format!("udp {} -> {}", end(self.source), end(self.destination))
    }
}

/// Deletes the UDP conntrack entries whose original destination is one of
/// `destinations`, in the calling thread's network namespace. One socket for all of it.
pub fn flush_udp(destinations: &[UdpDestination]) -> NlResult<Flushed> {
    let mut socket = NlSocket::open(Subsystem::Conntrack)?;
    let mut stale: Vec<(Family, Entry)> = Vec::new();
    let mut kernel_filters = true;
    // Asked for once, and only when an entry's address must be told apart.
    let mut node: Option<Vec<IpAddr>> = None;
    for family in [Family::V4, Family::V6] {
        let wanted: Vec<&UdpDestination> =
            destinations.iter().filter(|d| d.family == family).collect();
        if wanted.is_empty() {
            continue;
        }
        let mut found = None;
        if kernel_filters {
            match filtered_dumps(&mut socket, family, &wanted) {
                Ok(entries) => found = Some(entries),
                // A kernel before 5.8 knows no filter; or ctnetlink is absent (its
                // subsystem unknown: EINVAL too), which the plain dump tells.
                Err(e) if e.is(libc::EINVAL) => kernel_filters = false,
                Err(e) => return unavailable_or(e),
            }
        }
        let found = match found {
            Some(found) => found,
            None => match dump(&mut socket, family, None) {
                Ok(entries) => entries,
                Err(e) if e.is(libc::EINVAL) => return Ok(Flushed::Unavailable),
                Err(e) => return unavailable_or(e),
            },
        };
        let to_unaddressed_port = |e: &Entry| {
            wanted
                .iter()
                .any(|to| to.address.is_none() && e.to_port(family, to).is_some())
        };
        if node.is_none() && found.iter().any(to_unaddressed_port) {
            node = Some(node_addresses()?);
        }
        let node = node.as_deref().unwrap_or_default();
        for entry in found {
            let stale_one = wanted.iter().any(|to| entry.goes_to(family, to, node));
            if stale_one && !stale.iter().any(|(_, e)| e.tuple == entry.tuple) {
                stale.push((family, entry));
            }
        }
    }
    delete(&mut socket, &stale).map(Flushed::Deleted)
}

/// The family's entries to `wanted` as the kernel filters them. Every dump walks the
/// whole conntrack hash table however little it returns (sized by the host's memory:
/// 262,144 buckets, about 14 ms here), and each entry sent adds to it (20,000 added
/// about 65 ms): a dump per port for a few ports, else one dump of every UDP entry,
/// matched here.
fn filtered_dumps(
    socket: &mut NlSocket,
    family: Family,
    wanted: &[&UdpDestination],
) -> NlResult<Vec<Entry>> {
    if wanted.len() > PORT_DUMPS_MAX {
        return dump(socket, family, Some(Filter::Udp));
    }
    let mut found = Vec::new();
    for to in wanted {
        found.extend(dump(socket, family, Some(Filter::Destination(to)))?);
    }
    Ok(found)
}

/// The addresses of this node, the calling thread's netns: where a port without hostIP
/// is published. Read over rtnetlink, not from /sys or /proc/net, which may be another
/// netns's.
fn node_addresses() -> NlResult<Vec<IpAddr>> {
    let mut addresses = Netlink::open()?.all_addresses()?;
    addresses.extend([
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ]);
    Ok(addresses)
}

/// ctnetlink's absence (its module missing or not loadable) is no failure.
fn unavailable_or(e: NlError) -> NlResult<Flushed> {
    match e.errno {
        libc::EPROTONOSUPPORT | libc::ENOENT | libc::EOPNOTSUPP => Ok(Flushed::Unavailable),
        _ => Err(e),
    }
}

fn nfproto(family: Family) -> u8 {
    match family {
        Family::V4 => libc::AF_INET as u8,
        Family::V6 => libc::AF_INET6 as u8,
    }
}

fn message_type(kind: u16) -> u16 {
    NFNL_SUBSYS_CTNETLINK << 8 | kind
}

fn family_text(family: Family) -> &'static str {
    match family {
        Family::V4 => "v4",
        Family::V6 => "v6",
    }
}

/// What a dump asks the kernel for.
#[derive(Debug, Clone, Copy)]
enum Filter<'a> {
    /// UDP entries to this port (and address, when it has one).
    Destination(&'a UdpDestination),
    /// Every UDP entry.
    Udp,
}

/// The attributes of a dump of the family's entries that `filter` lets through.
fn filter_attrs(filter: Filter) -> Attrs {
    let mut attrs = Attrs::default();
    let mut flags = FILTER_PROTO_NUM;
    attrs.nested(CTA_TUPLE_ORIG, |tuple| {
        let to = match filter {
            Filter::Destination(to) => Some(to),
            Filter::Udp => None,
        };
        if let Some(address) = to.and_then(|to| to.address) {
            flags |= FILTER_IP_DST;
            tuple.nested(CTA_TUPLE_IP, |ip| match address {
                IpAddr::V4(a) => ip.put(CTA_IP_V4_DST, &a.octets()),
                IpAddr::V6(a) => ip.put(CTA_IP_V6_DST, &a.octets()),
            });
        }
        tuple.nested(CTA_TUPLE_PROTO, |proto| {
            proto.put(CTA_PROTO_NUM, &[IPPROTO_UDP]);
            if let Some(to) = to {
                flags |= FILTER_PROTO_DST_PORT;
                proto.put(CTA_PROTO_DST_PORT, &to.port.to_be_bytes());
            }
        });
    });
    attrs.nested(CTA_FILTER, |f| {
        f.put(CTA_FILTER_ORIG_FLAGS, &flags.to_ne_bytes());
        f.put(CTA_FILTER_REPLY_FLAGS, &0u32.to_ne_bytes());
    });
    attrs
}

/// The family's entries, those `filter` lets through when given (the kernel filters).
fn dump(socket: &mut NlSocket, family: Family, filter: Option<Filter>) -> NlResult<Vec<Entry>> {
    let family_text = family_text(family);
    let (attrs, what) = match filter {
        Some(filter @ Filter::Destination(to)) => (
            filter_attrs(filter),
            format!(
                "list conntrack's udp entries to port {} ({family_text})",
                to.port
            ),
        ),
        Some(filter @ Filter::Udp) => (
            filter_attrs(filter),
            format!("list conntrack's udp entries ({family_text})"),
        ),
        None => (
            Attrs::default(),
            format!("list conntrack's entries ({family_text})"),
        ),
    };
    let sequence = socket.next_sequence();
    let mut bytes = Vec::new();
    encode(
        &mut bytes,
        message_type(IPCTNL_MSG_CT_GET),
        NLM_F_REQUEST | NLM_F_DUMP,
        sequence,
        nfproto(family),
        0,
        attrs.0,
    );
    socket.send(&bytes, &what)?;
    let mut found = Vec::new();
    socket.receive(sequence, Await::Dump, &what, |message| {
        if let Some(entry) = message.get(HEADERS_LEN..).and_then(decode_entry) {
            found.push(entry);
        }
        Ok(())
    })?;
    Ok(found)
}

/// Deletes each entry by its original tuple, DELETES_PER_SEND to a sendmsg; one
/// already gone (it timed out, another ADD flushed it) is not an error. Every delete is
/// tried; the first failure is returned.
fn delete(socket: &mut NlSocket, stale: &[(Family, Entry)]) -> NlResult<usize> {
    let mut deleted = 0;
    let mut first_error = None;
    for chunk in stale.chunks(DELETES_PER_SEND) {
        let mut bytes = Vec::new();
        let first = socket.next_sequence();
        for (i, (family, entry)) in chunk.iter().enumerate() {
            let sequence = if i == 0 {
                first
            } else {
                socket.next_sequence()
            };
            let mut attrs = Attrs::default();
            attrs.nested(CTA_TUPLE_ORIG, |t| t.0.extend_from_slice(&entry.tuple));
            if let Some(zone) = &entry.zone {
                attrs.put(CTA_ZONE, zone);
            }
            encode(
                &mut bytes,
                message_type(IPCTNL_MSG_CT_DELETE),
                NLM_F_REQUEST | NLM_F_ACK,
                sequence,
                nfproto(*family),
                0,
                attrs.0,
            );
        }
        let end = first + chunk.len() as u32;
        let what = format!("delete {} stale conntrack entries", chunk.len());
        socket.send(&bytes, &what)?;
        socket.receive_each_ack(first..end, &what, |sequence, result| match result {
            Ok(()) => deleted += 1,
            Err(e) if e.is(libc::ENOENT) => {}
            Err(mut e) => {
                let entry = &chunk[(sequence - first) as usize].1;
                e.request = format!("delete the stale conntrack entry {}", entry.text());
                first_error.get_or_insert(e);
            }
        })?;
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(deleted),
    }
}

/// One entry of a dump reply (the attributes after the nfgenmsg).
fn decode_entry(payload: &[u8]) -> Option<Entry> {
    let (_, tuple) = attributes(payload).find(|(k, _)| *k == CTA_TUPLE_ORIG)?;
    let zone = attributes(payload)
        .find(|(k, _)| *k == CTA_ZONE)
        .map(|(_, z)| z.to_vec());
    let mut entry = Entry {
        tuple: tuple.to_vec(),
        zone,
        protocol: None,
        source: None,
        destination: None,
    };
    let (mut src, mut dst, mut sport, mut dport) = (None, None, None, None);
    for (kind, value) in attributes(tuple) {
        match kind {
            CTA_TUPLE_IP => {
                for (kind, value) in attributes(value) {
                    let address = match value.len() {
                        4 => <[u8; 4]>::try_from(value).ok().map(IpAddr::from),
                        16 => <[u8; 16]>::try_from(value).ok().map(IpAddr::from),
                        _ => None,
                    };
                    match kind {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => src = address,
                        CTA_IP_V4_DST | CTA_IP_V6_DST => dst = address,
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for (kind, value) in attributes(value) {
                    let port = <[u8; 2]>::try_from(value).ok().map(u16::from_be_bytes);
                    match kind {
                        CTA_PROTO_NUM => entry.protocol = value.first().copied(),
                        CTA_PROTO_SRC_PORT => sport = port,
                        CTA_PROTO_DST_PORT => dport = port,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    entry.source = src.zip(sport);
    entry.destination = dst.zip(dport);
    Some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(src: &str, dst: &str, protocol: u8, dport: u16) -> Attrs {
        let (src, dst): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let bytes = |a: IpAddr| match a {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let (s, d) = match src {
            IpAddr::V4(_) => (CTA_IP_V4_SRC, CTA_IP_V4_DST),
            IpAddr::V6(_) => (CTA_IP_V6_SRC, CTA_IP_V6_DST),
        };
        let mut attrs = Attrs::default();
        attrs.nested(CTA_TUPLE_ORIG, |t| {
            t.nested(CTA_TUPLE_IP, |ip| {
                ip.put(s, &bytes(src));
                ip.put(d, &bytes(dst));
            });
            t.nested(CTA_TUPLE_PROTO, |p| {
                p.put(CTA_PROTO_NUM, &[protocol]);
                p.put(CTA_PROTO_SRC_PORT, &40000u16.to_be_bytes());
                p.put(CTA_PROTO_DST_PORT, &dport.to_be_bytes());
            });
        });
        attrs
    }

    fn to(family: Family, address: Option<&str>, port: u16) -> UdpDestination {
        UdpDestination {
            family,
            address: address.map(|a| a.parse().unwrap()),
            port,
        }
    }

    fn addresses(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn an_entry_is_stale_only_for_its_protocol_port_family_and_address() {
        let node = addresses(&["10.9.0.1", "fd00::1"]);
        let udp = decode_entry(&reply("10.9.0.2", "10.9.0.1", 17, 5353).0).unwrap();
        assert_eq!(udp.text(), "udp 10.9.0.2:40000 -> 10.9.0.1:5353");
        assert!(udp.goes_to(Family::V4, &to(Family::V4, None, 5353), &node));
        assert!(udp.goes_to(Family::V4, &to(Family::V4, Some("10.9.0.1"), 5353), &node));
        assert!(!udp.goes_to(Family::V4, &to(Family::V4, Some("10.9.0.7"), 5353), &node));
        assert!(!udp.goes_to(Family::V4, &to(Family::V4, None, 5354), &node));
        assert!(!udp.goes_to(Family::V6, &to(Family::V6, None, 5353), &node));
        let tcp = decode_entry(&reply("10.9.0.2", "10.9.0.1", 6, 5353).0).unwrap();
        assert!(!tcp.goes_to(Family::V4, &to(Family::V4, None, 5353), &node));
        let v6 = decode_entry(&reply("fd00::2", "fd00::1", 17, 5353).0).unwrap();
        assert_eq!(v6.text(), "udp [fd00::2]:40000 -> [fd00::1]:5353");
        assert!(v6.goes_to(Family::V6, &to(Family::V6, None, 5353), &node));
        assert_eq!(v6.zone, None);
    }

    #[test]
    fn without_host_ip_only_an_entry_to_the_node_itself_is_stale() {
        let node = addresses(&["10.9.0.1", "192.0.2.10", "fd00::1"]);
        let any = |family| to(family, None, 5353);
        let stale = |src: &str, dst: &str| {
            let entry = decode_entry(&reply(src, dst, 17, 5353).0).unwrap();
            let family = Family::of(dst.parse().unwrap());
            entry.goes_to(family, &any(family), &node)
        };
        // A container's own flow to a remote server on that port number.
        assert!(!stale("10.9.0.2", "198.51.100.7"));
        assert!(!stale("fd00::2", "2001:db8::7"));
        // Clients of the node: on any of its links, or on loopback, lo up or not.
        assert!(stale("198.51.100.7", "192.0.2.10"));
        assert!(stale("10.9.0.2", "10.9.0.1"));
        assert!(stale("127.0.0.1", "127.0.0.1"));
        assert!(stale("127.0.0.1", "127.0.0.53"));
        assert!(stale("::1", "::1"));
        // A hostIP is that address alone, the node's other addresses not included.
        let entry = decode_entry(&reply("198.51.100.7", "10.9.0.1", 17, 5353).0).unwrap();
        let on = to(Family::V4, Some("192.0.2.10"), 5353);
        assert!(!entry.goes_to(Family::V4, &on, &node));
    }

    #[test]
    fn the_delete_sends_back_the_tuple_the_dump_gave() {
        let mut attrs = reply("10.9.0.2", "10.9.0.1", 17, 5353);
        attrs.put(CTA_ZONE, &7u16.to_be_bytes());
        let entry = decode_entry(&attrs.0).unwrap();
        assert_eq!(entry.zone.as_deref(), Some(&[0u8, 7][..]));
        let (_, tuple) = attributes(&attrs.0).next().unwrap();
        assert_eq!(entry.tuple, tuple);
    }

    #[test]
    fn the_filter_asks_for_udp_to_the_port_and_the_address_when_given() {
        let port = to(Family::V4, None, 5353);
        let attrs = filter_attrs(Filter::Destination(&port));
        let flags = |attrs: &Attrs| {
            let (_, filter) = attributes(&attrs.0)
                .find(|(k, _)| *k == CTA_FILTER)
                .unwrap();
            let (_, orig) = attributes(filter).next().unwrap();
            u32::from_ne_bytes(orig.try_into().unwrap())
        };
        assert_eq!(flags(&attrs), 0b101000);
        let (_, tuple) = attributes(&attrs.0).next().unwrap();
        let (kind, proto) = attributes(tuple).next().unwrap();
        assert_eq!(kind, CTA_TUPLE_PROTO);
        let fields: Vec<(u16, Vec<u8>)> = attributes(proto).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(fields, vec![(1, vec![17]), (3, vec![0x14, 0xe9])]);
        let on_address = to(Family::V4, Some("10.9.0.1"), 5353);
        assert_eq!(
            flags(&filter_attrs(Filter::Destination(&on_address))),
            0b101010
        );
        let udp = filter_attrs(Filter::Udp);
        assert_eq!(flags(&udp), 0b1000);
        let (_, tuple) = attributes(&udp.0).next().unwrap();
        let (_, proto) = attributes(tuple).next().unwrap();
        assert_eq!(attributes(proto).count(), 1, "the protocol alone");
    }
}
