//! What nf_tables holds, as academy writes and reads it.

use super::super::consts::{
    NFPROTO_BRIDGE, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFT_SET_MAP,
    NF_BR_PRI_NAT_DST_BRIDGED, NF_IP_PRI_FILTER, NF_IP_PRI_NAT_DST, NF_IP_PRI_NAT_SRC,
};
use super::expr::{Expr, Verdict};
use crate::netlink::nfnetlink::Family;

/// A table: its family (nfproto) and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub nfproto: u8,
    pub name: &'static str,
}

impl Table {
    pub const fn new(nfproto: u8, name: &'static str) -> Table {
        Table { nfproto, name }
    }

    /// A table of the `inet` family (both IP families).
    pub const fn inet(name: &'static str) -> Table {
        Table::new(NFPROTO_INET, name)
    }

    /// A table of the `bridge` family.
    pub const fn bridge(name: &'static str) -> Table {
        Table::new(NFPROTO_BRIDGE, name)
    }

    /// A table of `ip` or `ip6` (iptables-nft's).
    pub fn ip(family: Family, name: &'static str) -> Table {
        Table::new(family.layout().0, name)
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let family = match self.nfproto {
            NFPROTO_INET => "inet",
            NFPROTO_BRIDGE => "bridge",
            NFPROTO_IPV4 => "ip",
            NFPROTO_IPV6 => "ip6",
            _ => "?",
        };
        write!(f, "{family} {}", self.name)
    }
}

/// The netfilter hook of a base chain; the inet and bridge families number theirs alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// A base chain's priority on its hook (enum nf_ip_hook_priorities, nf_br_hook_priorities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority(pub i32);

impl Priority {
    pub const NAT_DST: Priority = Priority(NF_IP_PRI_NAT_DST);
    pub const FILTER: Priority = Priority(NF_IP_PRI_FILTER);
    pub const NAT_SRC: Priority = Priority(NF_IP_PRI_NAT_SRC);
    /// The bridge family's prerouting priority the reference's macspoofchk uses.
    pub const BRIDGE_NAT_DST_BRIDGED: Priority = Priority(NF_BR_PRI_NAT_DST_BRIDGED);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
}

impl ChainType {
    pub fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
        }
    }
}

/// A base chain: its table, name, hook, priority and type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    pub table: Table,
    pub name: &'static str,
    pub hook: Hook,
    pub priority: Priority,
    pub kind: ChainType,
}

/// A chain as the kernel shows it (GETCHAIN): what academy reads of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainInfo {
    /// A base chain's policy.
    pub policy: Option<Verdict>,
}

/// A set, or a map when it has `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub table: Table,
    pub name: String,
    /// The set's id within its creating batch: a rule's lookup in the same batch names
    /// the set so, before it exists (0: none).
    pub id: u32,
    /// (type, length) of the key (nft's datatypes: consts::TYPE_*).
    pub key: (u32, u32),
    /// (type, length) of a map's values.
    pub data: Option<(u32, u32)>,
    /// libnftnl's user data (attrs::name_byteorder), for nft's listing only.
    pub userdata: Option<Vec<u8>>,
    /// NLM_F_EXCL: an existing set of the name refuses the batch (EEXIST). Without it an
    /// identical set is success and a different one EEXIST.
    pub exclusive: bool,
}

impl Set {
    /// How a set the kernel shows differs from this one, in words; none when it has this
    /// one's shape (its key, a map's value type, no flags beyond a map's, no timeout, no
    /// object map, no set expressions). A set of academy's name in another shape is
    /// someone else's: academy neither fills nor empties it.
    pub fn differences(&self, info: &SetInfo) -> Vec<String> {
        let mut differences = Vec::new();
        let (key_type, key_len) = self.key;
        if info.key_type != Some(key_type) || info.key_len != Some(key_len) {
            let shown = |v: Option<u32>| v.map_or("?".to_string(), |v| v.to_string());
            differences.push(format!(
                "key type {} of {} bytes where academy's is {key_type} of {key_len}",
                shown(info.key_type),
                shown(info.key_len)
            ));
        }
        let flags = match self.data {
            Some(_) => NFT_SET_MAP,
            None => 0,
        };
        if info.flags != flags {
            differences.push(format!("flags {:#x}", info.flags));
        }
        if info.timeout {
            differences.push("a timeout".to_string());
        }
        match (self.data, info.data_type) {
            (None, Some(_)) => differences.push("a map's data".to_string()),
            (Some((wanted, _)), Some(seen)) if seen != wanted => {
                differences.push(format!("data type {seen} where academy's is {wanted}"))
            }
            (Some(_), None) => differences.push("no map data".to_string()),
            _ => {}
        }
        if info.object_map {
            differences.push("an object map".to_string());
        }
        if info.expressions {
            differences.push("set expressions".to_string());
        }
        differences
    }
}

/// A set as the kernel shows it (GETSET): what tells academy's own from another's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetInfo {
    pub key_type: Option<u32>,
    pub key_len: Option<u32>,
    /// Its flags (0 when none are shown).
    pub flags: u32,
    pub timeout: bool,
    pub data_type: Option<u32>,
    pub object_map: bool,
    /// Set expressions (NFTA_SET_EXPR or _EXPRESSIONS).
    pub expressions: bool,
}

/// One element: its key, a map's value, and a comment ("" for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub key: Vec<u8>,
    pub data: Option<Vec<u8>>,
    pub comment: String,
}

impl Element {
    /// An element named by its key alone (a removal, a lookup).
    pub fn key(key: Vec<u8>) -> Element {
        Element {
            key,
            data: None,
            comment: String::new(),
        }
    }
}

/// A rule: where it is (or goes), its comment (libnftnl's user data) and expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub table: Table,
    pub chain: String,
    /// The kernel's handle of a rule read back (0 for one to add).
    pub handle: u64,
    pub comment: Option<String>,
    pub exprs: Vec<Expr>,
}

impl Rule {
    /// Its comments in both forms: user data (nft's), and each `-m comment` xt match
    /// (iptables-nft 1.8.9 keeps its comments so, and lists a user-data one as such a
    /// match, so a reload turns one form into the other).
    pub fn comments(&self) -> Vec<String> {
        let mut comments: Vec<String> = self.comment.iter().cloned().collect();
        for expr in &self.exprs {
            if let Expr::Match { name, info, .. } = expr {
                if name == "comment" {
                    let text = info.split(|b| *b == 0).next().unwrap_or(info);
                    comments.push(String::from_utf8_lossy(text).into_owned());
                }
            }
        }
        comments
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::consts::{TYPE_IPV4_ADDR, TYPE_IPV6_ADDR};
    use super::*;

    fn set(data: Option<(u32, u32)>) -> Set {
        Set {
            table: Table::inet("t"),
            name: "s".into(),
            id: 0,
            key: (TYPE_IPV4_ADDR, 4),
            data,
            userdata: None,
            exclusive: false,
        }
    }

    #[test]
    fn a_set_of_another_shape_is_told_from_one_as_academy_makes_it() {
        let plain = SetInfo {
            key_type: Some(TYPE_IPV4_ADDR),
            key_len: Some(4),
            ..SetInfo::default()
        };
        assert!(set(None).differences(&plain).is_empty());
        let v6 = SetInfo {
            key_type: Some(TYPE_IPV6_ADDR),
            key_len: Some(16),
            ..plain.clone()
        };
        assert_eq!(set(None).differences(&v6).len(), 1);
        let timed = SetInfo {
            flags: 0x10,
            timeout: true,
            ..plain.clone()
        };
        let why = set(None).differences(&timed).join(", ");
        assert_eq!(why, "flags 0x10, a timeout");
        let map = SetInfo {
            flags: NFT_SET_MAP,
            data_type: Some(7),
            ..plain.clone()
        };
        assert!(set(Some((7, 4))).differences(&map).is_empty());
        assert_eq!(set(Some((8, 4))).differences(&map).len(), 1);
        assert_eq!(set(None).differences(&map).len(), 2, "a map is no set");
        assert_eq!(
            set(Some((7, 4))).differences(&plain).len(),
            2,
            "nor a set a map"
        );
    }
}
