//! nf_tables attributes as bytes: the netlink TLVs written (Attrs) and read
//! (attributes), the addresses in them, and libnftnl's user-data comments.

use std::net::IpAddr;

use super::digest::{hex, sha256};
use super::Family;

pub(in crate::netlink) const NLA_F_NESTED: u16 = 0x8000;
/// libnftnl's user data: a comment is TLV type 0 (for rules and set elements alike),
/// NUL-terminated, at most 128 bytes; nft shows it as `comment "..."`.
pub(super) const UDATA_COMMENT: u8 = 0;
pub(super) const COMMENT_MAX: usize = 127;
pub(super) const NFTA_LIST_ELEM: u16 = 1;
pub(super) const NFTA_DATA_VALUE: u16 = 1;

pub(super) fn address_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// The comment academy stores for an identity (an attachment's holder key, a rule's
/// description), made to fit nft's 127 bytes without losing uniqueness: a text that fits
/// is stored as it is; a longer one as its first bytes (cut on a character boundary),
/// '#', and 32 hex digits of the SHA-256 of the whole text. Every reader compares
/// against this form, so two keys that share a long prefix never match each other.
pub fn stored_comment(identity: &str) -> String {
    if identity.len() <= COMMENT_MAX {
        return identity.to_string();
    }
    let digest = hex(&sha256(identity.as_bytes())[..16]);
    let mut end = COMMENT_MAX - 1 - digest.len();
    while !identity.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}#{digest}", &identity[..end])
}

/// `comment` as libnftnl user data; `comment` must already be a stored comment.
pub(super) fn comment_udata(comment: &str) -> Vec<u8> {
    let text = comment.as_bytes();
    debug_assert!(text.len() <= COMMENT_MAX, "comment not capped: {comment}");
    let text = &text[..text.len().min(COMMENT_MAX)];
    let mut udata = vec![UDATA_COMMENT, (text.len() + 1) as u8];
    udata.extend_from_slice(text);
    udata.push(0);
    udata
}

pub(super) fn comment_of(udata: &[u8]) -> Option<String> {
    let mut rest = udata;
    while rest.len() >= 2 {
        let (kind, len) = (rest[0], rest[1] as usize);
        let value = rest.get(2..2 + len)?;
        if kind == UDATA_COMMENT {
            let text = value.split(|b| *b == 0).next().unwrap_or(value);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        rest = &rest[2 + len..];
    }
    None
}

pub(super) fn address_from(bytes: &[u8], family: Family) -> Option<IpAddr> {
    match family {
        Family::V4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        Family::V6 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
    }
}

/// The attributes in `bytes` as (type without flags, value); stops at a malformed one.
pub(in crate::netlink) fn attributes(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        let value = &rest[4..len];
        rest = &rest[((len + 3) & !3).min(rest.len())..];
        Some((kind, value))
    })
}

/// Netlink attributes being written: type, length, value, each padded to 4 bytes. An
/// attribute's length is 16 bits: one that does not fit marks the whole as too long
/// (`too_long`), which the request then refuses to send rather than send garbage.
#[derive(Default)]
pub(in crate::netlink) struct Attrs(pub(in crate::netlink) Vec<u8>, pub(super) bool);

/// netlink's nla_len is a u16.
pub(super) const ATTR_MAX: usize = u16::MAX as usize;

impl Attrs {
    pub(in crate::netlink) fn put(&mut self, kind: u16, value: &[u8]) {
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

    pub(super) fn str(&mut self, kind: u16, value: &str) {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.put(kind, &bytes);
    }

    /// nf_tables' integers are big-endian (NLA_BE32).
    pub(super) fn be32(&mut self, kind: u16, value: u32) {
        self.put(kind, &value.to_be_bytes());
    }

    pub(super) fn be64(&mut self, kind: u16, value: u64) {
        self.put(kind, &value.to_be_bytes());
    }

    pub(in crate::netlink) fn too_long(&self) -> bool {
        self.1
    }

    pub(in crate::netlink) fn nested(&mut self, kind: u16, inner: impl FnOnce(&mut Attrs)) {
        let mut nested = Attrs::default();
        inner(&mut nested);
        self.1 |= nested.1;
        self.put(kind | NLA_F_NESTED, &nested.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_round_trip_and_are_capped() {
        assert_eq!(
            comment_of(&comment_udata("c1:eth0")).as_deref(),
            Some("c1:eth0")
        );
        let long = "é".repeat(100);
        let capped = comment_of(&comment_udata(&stored_comment(&long))).unwrap();
        assert!(capped.len() <= COMMENT_MAX);
        assert_eq!(capped, stored_comment(&long));
    }

    #[test]
    fn long_identities_that_share_the_cut_prefix_stay_distinct() {
        let a = format!("{}:eth0", "c".repeat(200));
        let b = format!("{}:eth1", "c".repeat(200));
        let (sa, sb) = (stored_comment(&a), stored_comment(&b));
        assert_ne!(sa, sb);
        assert!(sa.len() <= COMMENT_MAX && sb.len() <= COMMENT_MAX);
        assert!(sa.starts_with("ccc"));
        // Stable: the same key gives the same comment, and a short one is unchanged.
        assert_eq!(sa, stored_comment(&a));
        assert_eq!(stored_comment("c1:eth0"), "c1:eth0");
        let exact = "x".repeat(COMMENT_MAX);
        assert_eq!(stored_comment(&exact), exact);
        assert_ne!(stored_comment(&format!("{exact}y")), exact);
    }

    #[test]
    fn an_attribute_longer_than_u16_marks_the_whole_as_too_long() {
        let mut a = Attrs::default();
        a.nested(1, |n| n.put(2, &vec![0; ATTR_MAX]));
        assert!(a.too_long());
        let mut b = Attrs::default();
        b.put(2, &vec![0; ATTR_MAX - 4]);
        assert!(!b.too_long());
    }

    #[test]
    fn attributes_stop_at_a_malformed_length() {
        let bytes = [8u8, 0, 1, 0, 1, 2, 3, 4, 200, 0, 2, 0];
        let all: Vec<_> = attributes(&bytes).collect();
        assert_eq!(all, vec![(1u16, &[1u8, 2, 3, 4][..])]);
    }
}
