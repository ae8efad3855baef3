//! Reading the masquerade's nf_tables objects back: the shape of a network's set, one
//! element. How academy recognises a set of its own from one that only carries its
//! name (its rules are looked at by the engine, by the set they look up).

use std::net::IpAddr;

use super::nft::{masq_element, set_name, MasqElement};
use crate::firewall::tables::ACADEMY;
use crate::netlink::nftables::attrs::address_bytes;
use crate::netlink::nftables::consts::{TYPE_IPV4_ADDR, TYPE_IPV6_ADDR};
use crate::netlink::nftables::model::SetInfo;
use crate::netlink::{Family, Nftables, NlResult};

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

/// Whether the network's set is missing, academy's, or something else of that name.
pub fn set_shape(nft: &mut Nftables, network: &str, family: Family) -> NlResult<SetShape> {
    let set = set_name(network, family);
    Ok(match nft.set_info(ACADEMY, &set)? {
        None => SetShape::Missing,
        Some(info) => judge_set(&info, family),
    })
}

/// The element of `address` in its network's set, with its comment; None when absent.
pub fn element(
    nft: &mut Nftables,
    network: &str,
    address: IpAddr,
) -> NlResult<Option<MasqElement>> {
    let family = Family::of(address);
    let set = set_name(network, family);
    let what = format!("look up {address} in nf_tables set {ACADEMY} {set}");
    let found = nft.element_of(ACADEMY, &set, &address_bytes(address), &what)?;
    Ok(found.and_then(|raw| masq_element(&raw, family)))
}

/// academy's own sets are plain address sets; anything more is someone else's.
fn judge_set(info: &SetInfo, family: Family) -> SetShape {
    let (key_type, key_len) = match family {
        Family::V4 => (TYPE_IPV4_ADDR, 4),
        Family::V6 => (TYPE_IPV6_ADDR, 16),
    };
    let mut differences = Vec::new();
    if info.flags != 0 {
        differences.push(format!("flags {:#x}", info.flags));
    }
    if info.timeout {
        differences.push("a timeout".to_string());
    }
    if info.data_type.is_some() {
        differences.push("a map's data".to_string());
    }
    if info.object_map {
        differences.push("an object map".to_string());
    }
    if info.expressions {
        differences.push("set expressions".to_string());
    }
    let (seen_type, seen_len) = (info.key_type, info.key_len);
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

    #[test]
    fn a_set_is_academy_s_only_when_it_is_a_plain_set_of_the_family_s_addresses() {
        let set = SetInfo {
            key_type: Some(TYPE_IPV4_ADDR),
            key_len: Some(4),
            ..SetInfo::default()
        };
        assert_eq!(judge_set(&set, Family::V4), SetShape::Ours);
        assert!(matches!(judge_set(&set, Family::V6), SetShape::Foreign(_)));
        let timed = SetInfo {
            flags: 0x10,
            timeout: true,
            ..set
        };
        match judge_set(&timed, Family::V4) {
            SetShape::Foreign(why) => assert!(why.contains("timeout"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
