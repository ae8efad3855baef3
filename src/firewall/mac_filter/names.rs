//! The names of a network's MAC filter in `bridge academy`: its chain, map, sets and rule
//! comment, and the keys its elements are stored under.

use crate::netlink::nftables::attrs::{ifname_bytes, COMMENT_MAX};
use crate::netlink::nftables::consts::IFNAMSIZ;
use crate::netlink::stored_comment;

/// The MAC filter's chain in `bridge academy`.
pub const BRIDGE_CHAIN: &str = "prerouting";

/// A MAC in a concatenation takes 8 bytes: each part is padded to 4.
pub(super) const PAIR_LEN: usize = IFNAMSIZ + 8;

/// A port whose frames are checked: its host veth, the source MAC it may send, and the
/// comment naming the attachment it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedPort {
    pub port: String,
    pub mac: [u8; 6],
    pub comment: String,
}

/// The map and sets of a network's MAC filter, by name.
pub fn guard_sets(network: &str) -> [String; 3] {
    [
        ports_map(network),
        guarded_set(network),
        allowed_set(network),
    ]
}

pub fn ports_map(network: &str) -> String {
    format!("{network}-ports")
}

pub fn guarded_set(network: &str) -> String {
    format!("{network}-guarded")
}

pub fn allowed_set(network: &str) -> String {
    format!("{network}-allowed")
}

/// The network's rule's comment, capped as every stored comment is (a network name may
/// be 128 bytes).
pub(super) fn rule_comment(network: &str) -> String {
    stored_comment(&format!("academy macspoofchk {network}"))
}

/// The comment an older academy wrote for a long name: the text cut at nft's 127 bytes.
pub(super) fn cut_rule_comment(network: &str) -> String {
    let mut text = format!("academy macspoofchk {network}");
    let mut end = text.len().min(COMMENT_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

pub(super) fn pair_key(name: &str, mac: [u8; 6]) -> Vec<u8> {
    let mut key = ifname_bytes(name);
    key.extend_from_slice(&mac);
    key.resize(PAIR_LEN, 0);
    key
}
