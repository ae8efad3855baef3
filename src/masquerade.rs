//! `ipMasq`: the container's addresses in its network's nf_tables sets, so that its
//! traffic to anything outside the network's subnets (multicast aside) leaves with the
//! host's address. What academy creates in nf_tables is described in
//! netlink/nftables.rs; this module decides what goes in and names the owners.
//!
//! An element's comment is its attachment's holder key (`<container id>:<ifname>`), the
//! same identity the address store and GC's valid list use. An element never outlives
//! its reservation: ADD adds it after reserving, every teardown removes it before
//! releasing.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::attachment::Attachment;
use crate::cni::{Error, Result};
use crate::config::{Config, Ipam};
use crate::ipam::Holder;
use crate::netlink::{
    nftables_set_name, stored_comment, Family, MasqElement, MasqNetwork, Nftables,
};

/// The container's addresses as elements of its network's sets, and those sets: what
/// ADD sends (portmap::add, in one batch with the published ports).
pub fn plan(
    conf: &Config,
    holder: &Holder,
    addresses: &[IpNetwork],
) -> (Vec<MasqNetwork>, Vec<MasqElement>) {
    let elements = addresses
        .iter()
        .map(|a| MasqElement {
            address: a.ip(),
            comment: holder.key(),
        })
        .collect();
    (networks(conf, addresses), elements)
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
                .filter(|e| e.comment == stored_comment(&key))
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
        .map(|(cid, ifname)| {
            let key = Attachment::new(&conf.name, cid, ifname).holder().key();
            stored_comment(&key).to_string()
        })
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
            .filter(|e| !live.contains(&e.comment))
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
    let own: Vec<IpNetwork> = match &conf.ipam {
        Ipam::Builtin(b) => b.range_sets.iter().flatten().map(|p| p.subnet()).collect(),
        Ipam::Delegated(_) => Vec::new(),
    };
    let mut networks: Vec<MasqNetwork> = Vec::new();
    for address in addresses {
        let family = Family::of(address.ip());
        let network = match networks.iter().position(|n| n.family == family) {
            Some(i) => &mut networks[i],
            None => {
                let subnets = own.iter().filter(|s| Family::of(s.ip()) == family);
                networks.push(MasqNetwork {
                    network: conf.name.clone(),
                    family,
                    subnets: subnets.copied().collect(),
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
        };
        assert_eq!(
            got,
            vec![
                want(Family::V4, &["10.1.0.0/24", "10.2.0.0/24"]),
                want(Family::V6, &["fd00::/64"]),
            ]
        );
        // A delegated IPAM: the subnets of the addresses it gave.
        let d =
            conf(r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipam":{"type":"dhcp"}}"#);
        let got = networks(&d, &["192.168.5.7/16".parse().unwrap()]);
        assert_eq!(got, vec![want(Family::V4, &["192.168.0.0/16"])]);
    }
}
