//! Reading academy's nf_tables objects back: the rules of its chain, the shape of a
//! network's set, one element. How academy recognises what is its own, and what only
//! carries its names.

use std::net::IpAddr;

use super::nft::{masq_element, set_name, MasqElement, RULE_PREFIX};
use crate::firewall::tables::{ACADEMY, POSTROUTING};
use crate::netlink::nftables::attrs::{address_bytes, comment_of};
use crate::netlink::nftables::consts::{
    NFPROTO_INET, NFTA_EXPR_DATA, NFTA_EXPR_NAME, NFTA_LIST_ELEM, NFTA_LOOKUP_SET, NFTA_RULE_CHAIN,
    NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_RULE_USERDATA,
    NFTA_SET_DATA_TYPE, NFTA_SET_EXPR, NFTA_SET_EXPRESSIONS, NFTA_SET_FLAGS, NFTA_SET_KEY_LEN,
    NFTA_SET_KEY_TYPE, NFTA_SET_NAME, NFTA_SET_OBJ_TYPE, NFTA_SET_TABLE, NFTA_SET_TIMEOUT,
    NFT_MSG_GETRULE, NFT_MSG_GETSET, TYPE_IPV4_ADDR, TYPE_IPV6_ADDR,
};
use crate::netlink::{attributes, Attrs, Family, Nftables, NlResult};

/// A rule of academy's chain that academy wrote: its comment starts with RULE_PREFIX.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqRule {
    pub handle: u64,
    /// The set its lookup names (empty if it has none).
    pub set: String,
    pub comment: String,
}

/// What stands under a network's set name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetShape {
    Missing,
    /// An address set as academy makes it: the family's address type, no flags, no
    /// timeout, no data, no expressions.
    Ours,
    /// Something else under academy's name, and how it differs.
    Foreign(String),
}

impl Nftables {
    /// academy's rules in its chain (one small dump); none when the table or chain is gone.
    pub fn masquerade_rules(&mut self) -> NlResult<Vec<MasqRule>> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_RULE_TABLE, ACADEMY.name);
        attrs.str(NFTA_RULE_CHAIN, POSTROUTING);
        let what = format!("list the rules of nf_tables chain {ACADEMY} {POSTROUTING}");
        self.dump(NFPROTO_INET, NFT_MSG_GETRULE, attrs, &what, |p, found| {
            found.extend(decode_rule(p))
        })
    }

    /// Whether the network's set is missing, academy's, or something else of that name.
    pub fn set_shape(&mut self, network: &str, family: Family) -> NlResult<SetShape> {
        let set = set_name(network, family);
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_TABLE, ACADEMY.name);
        attrs.str(NFTA_SET_NAME, &set);
        let what = format!("look up nf_tables set {ACADEMY} {set}");
        let mut shape = SetShape::Missing;
        let result = self.get(NFPROTO_INET, NFT_MSG_GETSET, attrs, &what, |p| {
            shape = judge_set(p, family);
        });
        match result {
            Err(e) if e.is(libc::ENOENT) => Ok(SetShape::Missing),
            other => other.map(|()| shape),
        }
    }

    /// The element of `address` in its network's set, with its comment; None when absent.
    pub fn element(&mut self, network: &str, address: IpAddr) -> NlResult<Option<MasqElement>> {
        let family = Family::of(address);
        let set = set_name(network, family);
        let what = format!("look up {address} in nf_tables set {ACADEMY} {set}");
        let found = self.element_of(ACADEMY, &set, &address_bytes(address), &what)?;
        Ok(found.and_then(|raw| masq_element(&raw, family)))
    }
}

fn decode_rule(payload: &[u8]) -> Option<MasqRule> {
    let mut handle = None;
    let mut comment = None;
    let mut set = String::new();
    for (kind, value) in attributes(payload) {
        match kind {
            NFTA_RULE_HANDLE => handle = value.try_into().ok().map(u64::from_be_bytes),
            NFTA_RULE_USERDATA => comment = comment_of(value),
            NFTA_RULE_EXPRESSIONS => {
                for (_, expr) in attributes(value).filter(|(k, _)| *k == NFTA_LIST_ELEM) {
                    let name = attributes(expr).find(|(k, _)| *k == NFTA_EXPR_NAME);
                    if name.map(|(_, n)| n) != Some(b"lookup\0") {
                        continue;
                    }
                    let data = attributes(expr).find(|(k, _)| *k == NFTA_EXPR_DATA);
                    if let Some((_, data)) = data {
                        if let Some((_, name)) =
                            attributes(data).find(|(k, _)| *k == NFTA_LOOKUP_SET)
                        {
                            set = text(name);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let comment = comment.filter(|c| c.starts_with(RULE_PREFIX))?;
    Some(MasqRule {
        handle: handle?,
        set,
        comment,
    })
}

fn text(bytes: &[u8]) -> String {
    let bytes = bytes.split(|b| *b == 0).next().unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

fn be32(value: &[u8]) -> Option<u32> {
    value.try_into().ok().map(u32::from_be_bytes)
}

/// academy's own sets are plain address sets; anything more is someone else's.
fn judge_set(payload: &[u8], family: Family) -> SetShape {
    let (key_type, key_len) = match family {
        Family::V4 => (TYPE_IPV4_ADDR, 4),
        Family::V6 => (TYPE_IPV6_ADDR, 16),
    };
    let mut differences = Vec::new();
    let mut seen_type = None;
    let mut seen_len = None;
    for (kind, value) in attributes(payload) {
        match kind {
            NFTA_SET_KEY_TYPE => seen_type = be32(value),
            NFTA_SET_KEY_LEN => seen_len = be32(value),
            NFTA_SET_FLAGS => match be32(value) {
                Some(0) | None => {}
                Some(flags) => differences.push(format!("flags {flags:#x}")),
            },
            NFTA_SET_TIMEOUT => differences.push("a timeout".to_string()),
            NFTA_SET_DATA_TYPE => differences.push("a map's data".to_string()),
            NFTA_SET_OBJ_TYPE => differences.push("an object map".to_string()),
            NFTA_SET_EXPR | NFTA_SET_EXPRESSIONS => differences.push("set expressions".to_string()),
            _ => {}
        }
    }
    if seen_type != Some(key_type) || seen_len != Some(key_len) {
        differences.insert(
            0,
            format!(
                "key type {} of {} bytes where academy's is {key_type} of {key_len}",
                seen_type.map_or("?".into(), |t| t.to_string()),
                seen_len.map_or("?".into(), |l| l.to_string()),
            ),
        );
    }
    if differences.is_empty() {
        SetShape::Ours
    } else {
        SetShape::Foreign(differences.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::attrs::comment_udata;

    #[test]
    fn a_set_is_academy_s_only_when_it_is_a_plain_set_of_the_family_s_addresses() {
        let set = |extra: &dyn Fn(&mut Attrs)| {
            let mut a = Attrs::default();
            a.str(NFTA_SET_NAME, "n-v4");
            a.be32(NFTA_SET_KEY_TYPE, TYPE_IPV4_ADDR);
            a.be32(NFTA_SET_KEY_LEN, 4);
            extra(&mut a);
            a.0
        };
        assert_eq!(judge_set(&set(&|_| {}), Family::V4), SetShape::Ours);
        assert!(matches!(
            judge_set(&set(&|_| {}), Family::V6),
            SetShape::Foreign(_)
        ));
        let timed = set(&|a| {
            a.be32(NFTA_SET_FLAGS, 0x10);
            a.be64(NFTA_SET_TIMEOUT, 60_000);
        });
        match judge_set(&timed, Family::V4) {
            SetShape::Foreign(why) => assert!(why.contains("timeout"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rule_is_academy_s_by_its_comment_and_names_its_set() {
        let rule = |comment: &str| {
            let mut a = Attrs::default();
            a.be64(NFTA_RULE_HANDLE, 42);
            a.nested(NFTA_RULE_EXPRESSIONS, |list| {
                list.nested(NFTA_LIST_ELEM, |e| {
                    e.str(NFTA_EXPR_NAME, "lookup");
                    e.nested(NFTA_EXPR_DATA, |d| d.str(NFTA_LOOKUP_SET, "n-v4"));
                })
            });
            a.put(NFTA_RULE_USERDATA, &comment_udata(comment));
            a.0
        };
        assert_eq!(
            decode_rule(&rule("academy ipMasq n-v4")),
            Some(MasqRule {
                handle: 42,
                set: "n-v4".into(),
                comment: "academy ipMasq n-v4".into()
            })
        );
        assert_eq!(decode_rule(&rule("someone else's")), None);
    }
}
