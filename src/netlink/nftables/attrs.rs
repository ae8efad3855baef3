//! What nf_tables' attributes hold beyond nfnetlink's TLVs (nfnetlink.rs): the addresses
//! in them, and libnftnl's user-data comments.

use std::net::IpAddr;

use super::digest::{hex, sha256};
use crate::netlink::nfnetlink::Family;

/// libnftnl's user data: a comment is TLV type 0 (for rules and set elements alike),
/// NUL-terminated, at most 128 bytes; nft shows it as `comment "..."`.
pub const UDATA_COMMENT: u8 = 0;
pub const COMMENT_MAX: usize = 127;

pub fn address_bytes(ip: IpAddr) -> Vec<u8> {
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
pub fn comment_udata(comment: &str) -> Vec<u8> {
    let text = comment.as_bytes();
    debug_assert!(text.len() <= COMMENT_MAX, "comment not capped: {comment}");
    let text = &text[..text.len().min(COMMENT_MAX)];
    let mut udata = vec![UDATA_COMMENT, (text.len() + 1) as u8];
    udata.extend_from_slice(text);
    udata.push(0);
    udata
}

pub fn comment_of(udata: &[u8]) -> Option<String> {
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

/// libnftnl's set user data telling nft the byte order of a key that is an interface
/// name (NFTNL_UDATA_SET_KEYBYTEORDER host) and, with `map_data`, of a map's values
/// (NFTNL_UDATA_SET_DATABYTEORDER big endian), as nft writes it for `type ifname`:
/// without it, nft reads a name as a big-endian number and lists it as "". The kernel
/// ignores it.
pub fn name_byteorder(map_data: bool) -> Vec<u8> {
    const KEY_BYTEORDER: u8 = 0;
    const DATA_BYTEORDER: u8 = 1;
    const HOST_ENDIAN: u32 = 1;
    const BIG_ENDIAN: u32 = 2;
    let mut udata = vec![KEY_BYTEORDER, 4];
    udata.extend_from_slice(&HOST_ENDIAN.to_ne_bytes());
    if map_data {
        udata.extend_from_slice(&[DATA_BYTEORDER, 4]);
        udata.extend_from_slice(&BIG_ENDIAN.to_ne_bytes());
    }
    udata
}

/// An interface name NUL-padded to IFNAMSIZ, as the kernel loads `iifname`/`oifname`.
pub fn ifname_bytes(name: &str) -> Vec<u8> {
    let mut bytes = name.as_bytes().to_vec();
    bytes.resize(super::consts::IFNAMSIZ, 0);
    bytes
}

pub fn address_from(bytes: &[u8], family: Family) -> Option<IpAddr> {
    match family {
        Family::V4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        Family::V6 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
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
}
