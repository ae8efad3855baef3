//! A network's masquerade in nf_tables: its set of container addresses, the rule that
//! masquerades them, and their elements with the comment naming each attachment.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::firewall::tables::{suffix, ACADEMY};
use crate::netlink::nftables::attrs::address_from;
use crate::netlink::nftables::dump::RawElement;
use crate::netlink::{stored_comment, Family, Nftables, NlResult};

fn multicast(family: Family) -> IpNetwork {
    match family {
        Family::V4 => "224.0.0.0/4".parse().unwrap(),
        Family::V6 => "ff00::/8".parse().unwrap(),
    }
}

/// Every masquerade rule academy writes has a comment starting so.
pub const RULE_PREFIX: &str = "academy ipMasq ";

/// One network's masquerade in one family: traffic from the set's addresses to anything
/// outside `subnets` and `non_masquerade` (and not multicast) leaves with the host's
/// address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqNetwork {
    pub network: String,
    pub family: Family,
    /// The network's own subnets.
    pub subnets: Vec<IpNetwork>,
    /// The config's `nonMasqueradeCIDRs` of this family (other nodes' pods, the cluster).
    pub non_masquerade: Vec<IpNetwork>,
}

impl MasqNetwork {
    pub fn set_name(&self) -> String {
        set_name(&self.network, self.family)
    }

    /// The rule's comment: academy's mark (RULE_PREFIX), the set, and the destinations
    /// the rule leaves alone, so that a rule made for other ranges reads as outdated:
    /// `academy ipMasq <set> except <subnets>`, then ` nonMasqueradeCIDRs <prefixes>`
    /// when the config has some of this family (without any, the comment is the one
    /// academy wrote before the key existed, so such rules stay current). Capped as
    /// every stored comment is (a network name may be 128 bytes).
    pub fn rule_comment(&self) -> String {
        stored_comment(&format!(
            "{RULE_PREFIX}{} except {}{}",
            self.set_name(),
            joined(&self.subnets),
            self.non_masquerade_tail()
        ))
    }

    /// The part of the rule's comment that names `non_masquerade` ("" without any).
    pub fn non_masquerade_tail(&self) -> String {
        match self.non_masquerade.as_slice() {
            [] => String::new(),
            some => format!(" {NON_MASQUERADE_WORD} {}", joined(some)),
        }
    }

    /// Every destination the rule leaves alone, in the rule's order: the network's
    /// subnets, the nonMasqueradeCIDRs, multicast.
    pub fn excluded(&self) -> Vec<IpNetwork> {
        let mut all = self.subnets.clone();
        all.extend(self.non_masquerade.iter().copied());
        all.push(multicast(self.family));
        all
    }
}

/// Whether a rule comment of academy's ends with `tail` (`non_masquerade_tail`), or has
/// no such part when `tail` is empty; a capped comment, whose tail is cut, does.
pub(super) fn tail_matches(comment: &str, tail: &str) -> bool {
    if is_capped(comment) {
        return true;
    }
    match tail {
        "" => !comment.contains(&format!(" {NON_MASQUERADE_WORD} ")),
        tail => comment.ends_with(tail),
    }
}

/// The word of a rule comment before its nonMasqueradeCIDRs.
const NON_MASQUERADE_WORD: &str = "nonMasqueradeCIDRs";

/// Whether `comment` is a capped one (stored_comment's `#` and 32 hex digits).
fn is_capped(comment: &str) -> bool {
    let b = comment.as_bytes();
    b.len() > 33 && b[b.len() - 33] == b'#' && b[b.len() - 32..].iter().all(u8::is_ascii_hexdigit)
}

fn joined(prefixes: &[IpNetwork]) -> String {
    let texts: Vec<String> = prefixes.iter().map(|s| s.to_string()).collect();
    texts.join(",")
}

pub fn set_name(network: &str, family: Family) -> String {
    format!("{network}-{}", suffix(family))
}

/// A container address in a network's set, and the comment naming its attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqElement {
    pub address: IpAddr,
    pub comment: String,
}

/// Every element of a network's set; none when the set does not exist.
pub fn elements(nft: &mut Nftables, network: &str, family: Family) -> NlResult<Vec<MasqElement>> {
    let found = nft.elements_of(ACADEMY, &set_name(network, family))?;
    Ok(found
        .iter()
        .filter_map(|e| masq_element(e, family))
        .collect())
}

/// A set element as a masquerade element: its key an address of the family.
pub(super) fn masq_element(raw: &RawElement, family: Family) -> Option<MasqElement> {
    Some(MasqElement {
        address: address_from(&raw.key, family)?,
        comment: raw.comment.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(name: &str, subnets: &[&str], kept: &[&str]) -> MasqNetwork {
        let parse = |l: &[&str]| l.iter().map(|s| s.parse().unwrap()).collect();
        MasqNetwork {
            network: name.into(),
            family: Family::V4,
            subnets: parse(subnets),
            non_masquerade: parse(kept),
        }
    }

    /// The comment names every exclusion, so a rule made for other nonMasqueradeCIDRs
    /// reads as outdated; without any, it is the comment rules had before the key.
    #[test]
    fn the_rule_comment_names_the_non_masquerade_cidrs() {
        let plain = network("n", &["10.244.1.0/24"], &[]);
        assert_eq!(
            plain.rule_comment(),
            "academy ipMasq n-v4 except 10.244.1.0/24"
        );
        let kept = network("n", &["10.244.1.0/24"], &["10.244.0.0/16", "10.96.0.0/12"]);
        assert_eq!(
            kept.rule_comment(),
            "academy ipMasq n-v4 except 10.244.1.0/24 nonMasqueradeCIDRs 10.244.0.0/16,10.96.0.0/12"
        );
        let other = network("n", &["10.244.1.0/24"], &["10.244.0.0/16"]);
        assert_ne!(kept.rule_comment(), other.rule_comment());

        // A delegated IPAM compares the nonMasqueradeCIDRs only.
        let matches = |n: &MasqNetwork, c: &str| tail_matches(c, &n.non_masquerade_tail());
        let from_other_subnet = network("n", &["10.9.0.0/24"], &["10.244.0.0/16", "10.96.0.0/12"]);
        assert!(matches(&kept, &from_other_subnet.rule_comment()));
        assert!(!matches(&kept, &other.rule_comment()));
        assert!(!matches(&kept, &plain.rule_comment()));
        assert!(!matches(&plain, &kept.rule_comment()));
        assert!(matches(
            &plain,
            &network("n", &["10.9.0.0/24"], &[]).rule_comment()
        ));

        // A long one is capped like every comment (and then taken as current by a
        // delegated IPAM, which cannot read its tail).
        let long = network(&"x".repeat(100), &["10.244.1.0/24"], &["10.244.0.0/16"]);
        let capped = long.rule_comment();
        assert_eq!(capped.len(), 127, "{capped}");
        assert_ne!(
            capped,
            network(&"x".repeat(100), &["10.244.1.0/24"], &[]).rule_comment()
        );
        assert!(matches(&plain, &capped));
    }

    #[test]
    fn an_element_is_a_masquerade_element_only_with_an_address_of_its_family() {
        let raw = |key: &[u8]| RawElement {
            key: key.to_vec(),
            data: None,
            comment: "owner".into(),
        };
        assert_eq!(
            masq_element(&raw(&[10, 1, 2, 3]), Family::V4),
            Some(MasqElement {
                address: "10.1.2.3".parse().unwrap(),
                comment: "owner".into()
            })
        );
        assert_eq!(masq_element(&raw(&[10, 1, 2, 3]), Family::V6), None);
    }
}
