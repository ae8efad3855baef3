//! nf_tables attributes as bytes: the netlink TLVs written (Attrs) and read
//! (attributes), the addresses in them, and libnftnl's user-data comments.

use std::net::IpAddr;

use super::Family;

pub(super) const NLA_F_NESTED: u16 = 0x8000;
/// libnftnl's user data: a comment is TLV type 0 (for rules and set elements alike),
/// NUL-terminated, at most 128 bytes; nft shows it as `comment "..."`.
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

/// What of `comment` the kernel keeps: nft's comments are at most 127 bytes (cut on a
/// character boundary). An element's comment reads back as exactly this.
pub fn stored_comment(comment: &str) -> &str {
    let mut end = comment.len().min(COMMENT_MAX);
    while !comment.is_char_boundary(end) {
        end -= 1;
    }
    &comment[..end]
}

pub(super) fn comment_udata(comment: &str) -> Vec<u8> {
    let text = stored_comment(comment).as_bytes();
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
pub(super) fn attributes(bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
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

/// Netlink attributes being written: type, length, value, each padded to 4 bytes.
#[derive(Default)]
pub(super) struct Attrs(pub(super) Vec<u8>);

impl Attrs {
    pub(super) fn put(&mut self, kind: u16, value: &[u8]) {
        let len = 4 + value.len();
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

    pub(super) fn nested(&mut self, kind: u16, inner: impl FnOnce(&mut Attrs)) {
        let mut nested = Attrs::default();
        inner(&mut nested);
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
        let capped = comment_of(&comment_udata(&long)).unwrap();
        assert!(capped.len() <= COMMENT_MAX && long.starts_with(&capped));
    }

    #[test]
    fn attributes_stop_at_a_malformed_length() {
        let bytes = [8u8, 0, 1, 0, 1, 2, 3, 4, 200, 0, 2, 0];
        let all: Vec<_> = attributes(&bytes).collect();
        assert_eq!(all, vec![(1u16, &[1u8, 2, 3, 4][..])]);
    }
}
