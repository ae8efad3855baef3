//! `ipMasq`: the container's addresses in its network's nf_tables sets, so that its
//! traffic to anything outside the network's subnets (multicast aside) leaves with the
//! host's address. What it wants of nf_tables is declared in wants.rs (the engine's
//! one look serves ADD, CHECK, STATUS, the restore and the release); nat.rs sends ADD's
//! one batch; nft.rs, rule.rs and inspect.rs say how its objects look. This module
//! decides what goes in and names the owners.
//!
//! An element's comment is its attachment's owner (`Attachment::owner`). Every removal
//! compares it before it removes (never by address alone: an address can have passed to
//! another attachment). An element never outlives its reservation: ADD adds it after
//! reserving (nat.rs sends it in ADD's one batch), the one removal takes it before
//! releasing. The network's rule and sets go with its last attachment (network/).

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::engine::{self, AttachmentSet, Look, Want, Wanted};
use super::network::repair_lock;
use super::{Adding, Checking, Diff, Looking, Releasing, Removing, Repair, Wired};
use crate::attachment::{container_of, of_network};
use crate::cni::Result;
use crate::config::{Config, Ipam};
use crate::firewall::tables::ACADEMY;
use crate::netlink::nftables::attrs::address_bytes;
use crate::netlink::{Family, Nftables, Object};

mod change;
mod inspect;
pub mod nat;
mod nft;
mod rule;
mod wants;

use change::apply;
pub use change::{NatChange, SetElement};
pub use inspect::SetShape;
use inspect::{element, set_shape};
use nft::elements;
pub use nft::{set_name, MasqElement, MasqNetwork};
use wants::{element_wants, rule_wants, set_of};

/// ADD, for the one batch: the attachment's addresses go in its network's sets (ipMasq).
pub fn add(a: &mut Adding) -> Result<()> {
    a.batch.masquerade = a.conf.ip_masq;
    Ok(())
}

/// For a legacy reservation that names its container only: the elements whose comment
/// names that container (in any owner form: the network's part compared whole).
pub fn remove_of_container(conf: &Config, container_id: &str, addresses: &[IpAddr]) -> Result<()> {
    let legacy = format!("{container_id}:");
    let sets = keyed_sets(conf, addresses);
    let taken = engine::take(&mut Nftables::open()?, &sets, |c| {
        c.starts_with(&legacy)
            || (of_network(&conf.name, c) && container_of(c) == Some(container_id))
    });
    super::said(conf, taken, true).map(drop)
}

/// The one removal's step for the masquerade: the attachment's elements among
/// `r.addresses`, or, when those are unknown (a delegated IPAM without prevResult),
/// wherever its owner names them (one dump per family). Each element is looked up and
/// its comment compared, so an element that is now another attachment's (its address
/// reclaimed and given again) stays. One lookup per address, then one batch.
///
/// The kernel frees removed elements only after an RCU grace period, and closing the
/// socket that removed them waits for that (measured here: 6 to 22 ms on the close): the
/// one removal keeps `nft` open across its slow step, the veth deletion, by which time
/// the wait is over.
pub fn remove(r: &mut Removing) -> Result<()> {
    if !r.address_state {
        return Ok(());
    }
    let (conf, nft) = (r.conf, r.nft.get()?);
    let sets = match r.addresses {
        [] => attachment_sets(conf),
        known => keyed_sets(conf, known),
    };
    let taken = engine::take(nft, &sets, |c| r.who.owns(c));
    super::said(conf, taken, true).map(drop)
}

/// The network's sets of the families of `addresses`, each to look up only those.
fn keyed_sets(conf: &Config, addresses: &[IpAddr]) -> Vec<AttachmentSet> {
    let mut sets = Vec::new();
    for (family, set) in [Family::V4, Family::V6]
        .into_iter()
        .zip(attachment_sets(conf))
    {
        let keys: Vec<Vec<u8>> = addresses
            .iter()
            .filter(|a| Family::of(**a) == family)
            .map(|a| address_bytes(*a))
            .collect();
        if !keys.is_empty() {
            sets.push(set.only(keys));
        }
    }
    sets
}

/// Whether the network has a masquerade set of academy's shape (one lookup per family):
/// with ipMasq off, whether a removal has elements to look for at all.
pub fn has_sets(nft: &mut Nftables, conf: &Config) -> Result<bool> {
    for family in [Family::V4, Family::V6] {
        if set_shape(nft, &conf.name, family)? == SetShape::Ours {
            return Ok(true);
        }
    }
    Ok(false)
}

/// CHECK: each address is in its set as this attachment's, and the network's rule is
/// in the chain, made for the network's current ranges: one look of the engine (a set
/// of another shape under academy's name aside, which only its owner can mend). A
/// missing rule or element is what an admin's flush takes, which the restore command
/// puts back.
pub fn check(c: &mut Checking) -> Result<Vec<Diff>> {
    if !c.conf.ip_masq {
        return Ok(Vec::new());
    }
    let (conf, who) = (c.conf, c.who);
    let nft = c.nft.get()?;
    let mut diffs = Vec::new();
    let mut usable = Vec::new();
    for network in networks(conf, c.addresses) {
        match set_shape(nft, &conf.name, network.family)? {
            SetShape::Foreign(why) => diffs.push(Diff {
                text: format!(
                    "nf_tables set inet academy {} is not academy's: it has {why}",
                    network.set_name()
                ),
                restorable: false,
            }),
            SetShape::Missing | SetShape::Ours => usable.push(network),
        }
    }
    let addresses: Vec<IpAddr> = c
        .addresses
        .iter()
        .map(|a| a.ip())
        .filter(|a| usable.iter().any(|n| n.family == Family::of(*a)))
        .collect();
    let mut wants = rule_wants(conf, &usable);
    wants.extend(element_wants(&conf.name, who, &addresses));
    let found = engine::look(nft, &wants)?;
    for want in &found.missing {
        let text = match &want.wanted {
            Wanted::Element { .. } => {
                format!("{} is not in {}: {}", want.what, want.place(), want.harm)
            }
            _ => rule_words(&found, want),
        };
        diffs.push(Diff {
            text,
            restorable: true,
        });
    }
    for (want, there) in &found.differing {
        diffs.push(Diff {
            text: format!(
                "{}'s element in {} is {:?}'s, not this attachment's",
                want.what,
                want.place(),
                there.comment
            ),
            restorable: false,
        });
    }
    Ok(diffs)
}

/// What a look found missing, in STATUS's and the restore's words: a rule made for
/// other ranges said as such; one missing element by its address, more counted per set.
fn missing_words(found: &Look) -> Vec<String> {
    let mut words = Vec::new();
    let mut elements: Vec<(&str, Vec<&Want>)> = Vec::new();
    for want in &found.missing {
        match &want.wanted {
            Wanted::Element { set, .. } => match elements.iter_mut().find(|(s, _)| s == set) {
                Some((_, of_set)) => of_set.push(want),
                None => elements.push((set, vec![want])),
            },
            _ => words.push(rule_words(found, want)),
        }
    }
    for (set, of_set) in elements {
        words.push(match of_set.as_slice() {
            [one] => one.missing_words(),
            many => format!("{} element(s) of wired containers in set {set}", many.len()),
        });
    }
    words
}

/// A missing rule in words: made for other ranges (an outdated form is there), or
/// missing.
fn rule_words(found: &Look, want: &Want) -> String {
    let outdated = found.outdated.iter().find(|(w, _)| std::ptr::eq(*w, want));
    match (outdated, &want.wanted) {
        (Some((_, was)), Wanted::Rule { known_as, .. }) => format!(
            "{} in {} was made for other ranges ({was:?}, not {:?})",
            want.what,
            want.place(),
            known_as[0]
        ),
        _ => want.missing_words(),
    }
}

/// Where GC finds the network's attachments' elements: its set of each family.
pub fn attachment_sets(conf: &Config) -> Vec<AttachmentSet> {
    [Family::V4, Family::V6]
        .into_iter()
        .map(|family| {
            AttachmentSet::new(set_of(&conf.name, family), move |e| {
                let element = nft::masq_element(e, family)?;
                Some(format!("masquerade of {}", element.address))
            })
        })
        .collect()
}

/// The wants of the network's wired attachments: every wired address's element, and the
/// rule of each family they have addresses of. None for a delegated IPAM: its
/// addresses are that plugin's, and its containers get their masquerade back at their
/// next ADD.
fn wired_wants(conf: &Config, wired: &Wired) -> (Vec<MasqNetwork>, Vec<Want>) {
    if !conf.ip_masq || conf.builtin().is_none() {
        return (Vec::new(), Vec::new());
    }
    let mut elements = Vec::new();
    for a in &wired.attachments {
        elements.extend(element_wants(&conf.name, &a.who(conf), &a.addresses));
    }
    let families: Vec<Family> = wired
        .attachments
        .iter()
        .flat_map(|a| a.addresses.iter().map(|a| Family::of(*a)))
        .collect();
    let networks: Vec<MasqNetwork> = nat::range_networks(conf)
        .into_iter()
        .filter(|n| families.contains(&n.family))
        .collect();
    let mut wants = rule_wants(conf, &networks);
    wants.extend(elements);
    (networks, wants)
}

/// A set of another shape under academy's name refuses the repair, as it refuses ADD:
/// one lookup per family of `networks`.
fn refuse_foreign(nft: &mut Nftables, conf: &Config, networks: &[MasqNetwork]) -> Result<()> {
    for network in networks {
        if let SetShape::Foreign(why) = set_shape(nft, &conf.name, network.family)? {
            return Err(nat::foreign_set(&network.set_name(), &why));
        }
    }
    Ok(())
}

/// STATUS: what the store says the network's masquerade should hold and the kernel lacks.
pub fn missing(l: &mut Looking) -> Result<Vec<String>> {
    let (networks, wants) = wired_wants(l.conf, l.wired);
    if wants.is_empty() {
        return Ok(Vec::new());
    }
    let nft = l.nft.get()?;
    refuse_foreign(nft, l.conf, &networks)?;
    Ok(missing_words(&engine::look(nft, &wants)?))
}

/// The restore command: what `missing` names, put back in one batch, under the host's
/// repair lock (as ADD's repairs: one repairer at a time, or each would add the rules
/// it found missing). An element of a wired address that names another attachment is
/// left, and said.
pub fn restore(l: &mut Looking) -> Result<Repair> {
    let (networks, wants) = wired_wants(l.conf, l.wired);
    if wants.is_empty() {
        return Ok(Repair::default());
    }
    let nft = l.nft.get()?;
    let _lock = repair_lock();
    refuse_foreign(nft, l.conf, &networks)?;
    let found = engine::look(nft, &wants)?;
    let words = missing_words(&found);
    let done = engine::apply(nft, &found)?;
    Ok(Repair {
        put_back: words,
        not_put_back: done.left,
        unrecorded: Vec::new(),
    })
}

/// The network's rules in academy's chain, in every form (made for any ranges), and its
/// sets (those of academy's shape), if the sets are empty.
pub fn objects(r: &mut Releasing) -> Result<Option<Vec<Object>>> {
    let (conf, nft) = (r.conf, r.nft.get()?);
    let any_form = [Family::V4, Family::V6].map(|family| MasqNetwork {
        network: conf.name.clone(),
        family,
        subnets: Vec::new(),
        non_masquerade: Vec::new(),
    });
    let mut objects = engine::present(nft, &rule_wants(conf, &any_form))?;
    for family in [Family::V4, Family::V6] {
        if set_shape(nft, &conf.name, family)? != SetShape::Ours {
            continue;
        }
        if !elements(nft, &conf.name, family)?.is_empty() {
            return Ok(None);
        }
        objects.push(Object::Set(ACADEMY, set_name(&conf.name, family)));
    }
    Ok(Some(objects))
}

/// Per family of `addresses`, what the rule leaves alone in that family: the network's
/// subnets (all of academy's own ranges, so the rule's exclusions follow the network's
/// current ranges, or the addresses' own subnets for a delegated IPAM) and the config's
/// nonMasqueradeCIDRs.
pub(crate) fn networks(conf: &Config, addresses: &[IpNetwork]) -> Vec<MasqNetwork> {
    let own: Vec<IpNetwork> = match &conf.ipam {
        Ipam::Builtin(b) => b.subnets(),
        Ipam::Delegated(_) | Ipam::None => Vec::new(),
    };
    let mut networks: Vec<MasqNetwork> = Vec::new();
    for address in addresses {
        let family = Family::of(address.ip());
        let network = match networks.iter().position(|n| n.family == family) {
            Some(i) => &mut networks[i],
            None => {
                let of_family = |s: &&IpNetwork| Family::of(s.ip()) == family;
                let subnets = own.iter().filter(of_family);
                let kept = conf.non_masquerade_cidrs.iter().filter(of_family);
                networks.push(MasqNetwork {
                    network: conf.name.clone(),
                    family,
                    subnets: subnets.copied().collect(),
                    non_masquerade: kept.copied().collect(),
                });
                networks.last_mut().expect("just pushed")
            }
        };
        if !network.subnets.iter().any(|s| s.contains(address.ip())) {
            let subnet = IpNetwork::new(address.network(), address.prefix()).expect("same prefix");
            network.subnets.push(subnet);
        }
    }
    networks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(json: &str) -> Config {
        Config::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn each_family_is_kept_inside_all_of_its_network_s_subnets() {
        let c = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipMasq":true,"ipam":{"type":"host-local",
            "ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.2.0.0/24"}],[{"subnet":"fd00::/64"}]]}}"#,
        );
        let got = networks(
            &c,
            &[
                "10.1.0.5/24".parse().unwrap(),
                "fd00::5/64".parse().unwrap(),
            ],
        );
        let want = |family, subnets: &[&str]| MasqNetwork {
            network: "n".into(),
            family,
            subnets: subnets.iter().map(|s| s.parse().unwrap()).collect(),
            non_masquerade: Vec::new(),
        };
        assert_eq!(
            got,
            vec![
                want(Family::V4, &["10.1.0.0/24", "10.2.0.0/24"]),
                want(Family::V6, &["fd00::/64"]),
            ]
        );
        // The nonMasqueradeCIDRs of each family go with that family.
        let k = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipMasq":true,
            "nonMasqueradeCIDRs":["10.244.0.0/16","fd00:10:244::/56","10.96.0.0/12"],
            "ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]]}}"#,
        );
        let got = networks(
            &k,
            &[
                "10.244.1.5/24".parse().unwrap(),
                "fd00:10:244:1::5/64".parse().unwrap(),
            ],
        );
        let kept = |n: MasqNetwork, kept: &[&str]| MasqNetwork {
            non_masquerade: kept.iter().map(|s| s.parse().unwrap()).collect(),
            ..n
        };
        assert_eq!(
            got,
            vec![
                kept(
                    want(Family::V4, &["10.244.1.0/24"]),
                    &["10.244.0.0/16", "10.96.0.0/12"]
                ),
                kept(
                    want(Family::V6, &["fd00:10:244:1::/64"]),
                    &["fd00:10:244::/56"]
                ),
            ]
        );
        // A delegated IPAM: the subnets of the addresses it gave.
        let d =
            conf(r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipam":{"type":"dhcp"}}"#);
        let got = networks(&d, &["192.168.5.7/16".parse().unwrap()]);
        assert_eq!(got, vec![want(Family::V4, &["192.168.0.0/16"])]);
    }
}
