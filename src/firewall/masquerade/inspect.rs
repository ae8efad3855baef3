//! Reading the masquerade's nf_tables objects back: the shape of a network's set, one
//! element. How academy recognises a set of its own from one that only carries its
//! name (its rules are looked at by the engine, by the set they look up).

use std::net::IpAddr;

use super::nft::{masq_element, set_name, MasqElement};
use super::wants::set_of;
use crate::firewall::tables::ACADEMY;
use crate::netlink::nftables::attrs::address_bytes;
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
        Some(info) => judge_set(&info, network, family),
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

/// academy's own sets are plain address sets of the family; anything more is someone
/// else's.
fn judge_set(info: &SetInfo, network: &str, family: Family) -> SetShape {
    let differences = set_of(network, family).differences(info);
    match differences.is_empty() {
        true => SetShape::Ours,
        false => SetShape::Foreign(differences.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::consts::TYPE_IPV4_ADDR;

    #[test]
    fn a_set_is_academy_s_only_when_it_is_a_plain_set_of_the_family_s_addresses() {
        let set = SetInfo {
            key_type: Some(TYPE_IPV4_ADDR),
            key_len: Some(4),
            ..SetInfo::default()
        };
        assert_eq!(judge_set(&set, "n", Family::V4), SetShape::Ours);
        assert!(matches!(
            judge_set(&set, "n", Family::V6),
            SetShape::Foreign(_)
        ));
        let timed = SetInfo {
            flags: 0x10,
            timeout: true,
            ..set
        };
        match judge_set(&timed, "n", Family::V4) {
            SetShape::Foreign(why) => assert!(why.contains("timeout"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
