//! What every NETLINK_NETFILTER subsystem academy speaks shares (nf_tables in nftables/,
//! ctnetlink in conntrack.rs): the netlink attributes written (Attrs; attributes.rs
//! reads them), one message with its nfgenmsg (encode), and the address family of the
//! tables and entries they address. No crate covers nfnetlink, so it is encoded here.

use std::net::IpAddr;

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable};

/// linux/netlink.h: the attribute holds attributes.
const NLA_F_NESTED: u16 = 0x8000;
/// linux/netfilter/nfnetlink.h: the only version of the nfgenmsg.
const NFNETLINK_V0: u8 = 0;

/// nlmsghdr and nfgenmsg.
pub(super) const HEADERS_LEN: usize = 16 + 4;

/// netlink's nla_len is a u16.
const ATTR_MAX: usize = u16::MAX as usize;

/// An address family of netfilter's, as academy's tables and conntrack's entries use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }
}

/// Netlink attributes being written: type, length, value, each padded to 4 bytes. An
/// attribute's length is 16 bits: one that does not fit marks the whole as too long
/// (`too_long`), which the request then refuses to send rather than send garbage.
#[derive(Default)]
pub struct Attrs(pub Vec<u8>, bool);

impl Attrs {
    pub fn put(&mut self, kind: u16, value: &[u8]) {
        let len = 4 + value.len();
        if len > ATTR_MAX {
            self.1 = true;
            return;
        }
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize((self.0.len() + 3) & !3, 0);
    }

    pub fn str(&mut self, kind: u16, value: &str) {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.put(kind, &bytes);
    }

    /// nf_tables' integers are big-endian (NLA_BE32).
    pub fn be32(&mut self, kind: u16, value: u32) {
        self.put(kind, &value.to_be_bytes());
    }

    pub fn be64(&mut self, kind: u16, value: u64) {
        self.put(kind, &value.to_be_bytes());
    }

    pub fn too_long(&self) -> bool {
        self.1
    }

    pub fn nested(&mut self, kind: u16, inner: impl FnOnce(&mut Attrs)) {
        let mut nested = Attrs::default();
        inner(&mut nested);
        self.1 |= nested.1;
        self.put(kind | NLA_F_NESTED, &nested.0);
    }
}

/// An nfnetlink message as netlink-packet-core serializes it: nfgenmsg, then attributes.
struct NfMessage {
    kind: u16,
    family: u8,
    res_id: u16,
    attrs: Vec<u8>,
}

impl NetlinkSerializable for NfMessage {
    fn message_type(&self) -> u16 {
        self.kind
    }

    fn buffer_len(&self) -> usize {
        4 + self.attrs.len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        buffer[0] = self.family;
        buffer[1] = NFNETLINK_V0;
        buffer[2..4].copy_from_slice(&self.res_id.to_be_bytes());
        buffer[4..].copy_from_slice(&self.attrs);
    }
}

/// Appends one message to `out`: `kind` is the subsystem's number shifted in with its
/// message type, `res_id` the subsystem for a batch's begin and end (else 0).
pub(super) fn encode(
    out: &mut Vec<u8>,
    kind: u16,
    flags: u16,
    sequence: u32,
    family: u8,
    res_id: u16,
    attrs: Vec<u8>,
) {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = sequence;
    let inner = NfMessage {
        kind,
        family,
        res_id,
        attrs,
    };
    let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(inner));
    message.finalize();
    let start = out.len();
    out.resize(start + message.buffer_len(), 0);
    message.serialize(&mut out[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attribute_longer_than_u16_marks_the_whole_as_too_long() {
        let mut a = Attrs::default();
        a.nested(1, |n| n.put(2, &vec![0; ATTR_MAX]));
        assert!(a.too_long());
        let mut b = Attrs::default();
        b.put(2, &vec![0; ATTR_MAX - 4]);
        assert!(!b.too_long());
    }
}
