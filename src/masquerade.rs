//! `ipMasq`: the container's addresses in its network's nf_tables sets, so that its
//! traffic to anything outside the network's subnets (multicast aside) leaves with the
//! host's address. What academy creates in nf_tables is described in
//! netlink/nftables.rs; this module decides what goes in and names the owners.
//!
//! An element's comment is its attachment's holder key (`<container id>:<ifname>`), the
//! same identity the address store and GC's valid list use. An element never outlives
//! its reservation: ADD adds it after reserving, every teardown removes it before
//! releasing.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::attachment::Attachment;
use crate::cni::{Error, Result};
use crate::config::{Config, Ipam};
use crate::ipam::Holder;
use crate::netlink::{nftables_set_name, Family, MasqElement, MasqNetwork, Nftables};

/// Adds the container's addresses to its network's sets (creating what is missing).
pub fn add(conf: &Config, holder: &Holder, addresses: &[IpNetwork]) -> Result<()> {
    let networks = networks(conf, addresses);
    let elements: Vec<MasqElement> = addresses
        .iter()
        .map(|a| MasqElement {
            address: a.ip(),
            comment: holder.key(),
        })
        .collect();
    let mut nft = Nftables::open()?;
    Ok(nft.add_elements(&networks, &elements)?)
}

/// Removes the addresses from the network's sets; any already gone is fine.
pub fn remove(conf: &Config, addresses: &[IpAddr]) -> Result<()> {
    Removal::open()?.remove(conf, addresses)
}

/// An open nf_tables socket for a teardown. The kernel frees removed elements only after
/// an RCU grace period, and closing the socket that removed them waits for that
/// (measured here: 6 to 22 ms on the close). A teardown keeps it open across its slow
/// step, the veth deletion, by which time the wait is over.
pub struct Removal(Nftables);

impl Removal {
    pub fn open() -> Result<Removal> {
        Ok(Removal(Nftables::open()?))
    }

    pub fn remove(&mut self, conf: &Config, addresses: &[IpAddr]) -> Result<()> {
        if addresses.is_empty() {
            return Ok(());
        }
        Ok(self.0.delete_elements(&conf.name, addresses)?)
    }
}

/// The addresses in this network's sets whose comment names `holder`: for a DEL that
/// knows no addresses (a delegated IPAM without prevResult). O(set size), so never on
/// the usual paths.
pub fn owned_by(conf: &Config, holder: &Holder) -> Result<Vec<IpAddr>> {
    let key = holder.key();
    let mut nft = Nftables::open()?;
    let mut found = Vec::new();
    for family in [Family::V4, Family::V6] {
        let elements = nft.elements(&conf.name, family)?;
        found.extend(
            elements
                .into_iter()
                .filter(|e| comment_matches(&e.comment, &key))
                .map(|e| e.address),
        );
    }
    Ok(found)
}

/// CHECK: each address is in its set and the network's rule is in the chain.
pub fn check(conf: &Config, addresses: &[IpNetwork], diffs: &mut Vec<String>) -> Result<()> {
    let mut nft = Nftables::open()?;
    for network in networks(conf, addresses) {
        if !nft.has_rule(&network)? {
            diffs.push(format!(
                "the masquerade rule of nf_tables set inet academy {} is missing from chain postrouting",
                network.set_name()
            ));
        }
    }
    for address in addresses {
        if !nft.has_element(&conf.name, address.ip())? {
            diffs.push(format!(
                "address {} is not in nf_tables set inet academy {}: its traffic leaves unmasqueraded",
                address.ip(),
                nftables_set_name(&conf.name, Family::of(address.ip()))
            ));
        }
    }
    Ok(())
}

/// GC: removes every element of the network's sets whose attachment is not in `valid`.
/// Errors are collected; the sweep goes on.
pub fn gc(conf: &Config, valid: &HashSet<(String, String)>, errors: &mut Vec<Error>) {
    let mut nft = match Nftables::open() {
        Ok(nft) => nft,
        Err(e) => return errors.push(e.into()),
    };
    let live: HashSet<String> = valid
        .iter()
        .map(|(cid, ifname)| Attachment::new(&conf.name, cid, ifname).holder().key())
        .collect();
    for family in [Family::V4, Family::V6] {
        let elements = match nft.elements(&conf.name, family) {
            Ok(e) => e,
            Err(e) => {
                errors.push(e.into());
                continue;
            }
        };
        let stale: Vec<&MasqElement> = elements
            .iter()
            .filter(|e| !live.iter().any(|key| comment_matches(&e.comment, key)))
            .collect();
        if stale.is_empty() {
            continue;
        }
        let addresses: Vec<IpAddr> = stale.iter().map(|e| e.address).collect();
        match nft.delete_elements(&conf.name, &addresses) {
            Ok(()) => {
                for e in stale {
                    eprintln!(
                        "academy: GC removed {} from the masquerade (held by {})",
                        e.address, e.comment
                    );
                }
            }
            Err(e) => errors.push(e.into()),
        }
    }
}

/// Per family of `addresses`, the network's subnets in that family: all of academy's
/// own ranges (so the rule made by the first ADD fits every later one), or the
/// addresses' own subnets for a delegated IPAM.
fn networks(conf: &Config, addresses: &[IpNetwork]) -> Vec<MasqNetwork> {
    let mut subnets: BTreeMap<u8, Vec<IpNetwork>> = BTreeMap::new();
    let own: Vec<IpNetwork> = match &conf.ipam {
        Ipam::Builtin(b) => b.range_sets.iter().flatten().map(|p| p.subnet()).collect(),
        Ipam::Delegated(_) => Vec::new(),
    };
    for address in addresses {
        let family = u8::from(address.is_ipv6());
        let list = subnets.entry(family).or_default();
        for subnet in own.iter().filter(|s| s.is_ipv4() == address.is_ipv4()) {
            if !list.contains(subnet) {
                list.push(*subnet);
            }
        }
        let mine = IpNetwork::new(address.network(), address.prefix()).expect("same prefix");
        if !list.iter().any(|s| s.contains(address.ip())) {
            list.push(mine);
        }
    }
    subnets
        .into_iter()
        .map(|(v6, subnets)| MasqNetwork {
            network: conf.name.clone(),
            family: if v6 == 1 { Family::V6 } else { Family::V4 },
            subnets,
        })
        .collect()
}

/// Comments are capped by the kernel's user data limit, so a very long holder key is
/// matched by the part that fits.
fn comment_matches(comment: &str, key: &str) -> bool {
    !comment.is_empty() && (comment == key || (key.starts_with(comment) && comment.len() >= 120))
}
