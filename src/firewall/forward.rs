//! Forwarding on a host whose iptables FORWARD policy drops (as with Docker installed):
//! ADD makes sure the network's bridge is accepted there, in both families, so the
//! `firewall` plugin is not needed in academy's chain. Without such a policy nothing is
//! written. The rules are the bridge's, shared by its containers like the bridge itself:
//! they go with the network's last attachment (network.rs), and an iptables reload that
//! dropped them is reported by CHECK and STATUS and repaired by the restore command
//! (netlink/nftables/forward.rs).

use super::{Diff, Wired};
use crate::cni::Result;
use crate::config::Config;
use crate::netlink::{Family, Nftables, Object};

pub fn accept(nft: &mut Nftables, conf: &Config) -> Result<()> {
    for family in [Family::V4, Family::V6] {
        if nft.forward_drops(family)? && nft.accept_forwarding(family, &conf.bridge)? {
            eprintln!(
                "academy: iptables' FORWARD policy drops: accepted bridge {}'s forwarding there ({family:?})",
                conf.bridge
            );
        }
    }
    Ok(())
}

/// Whether the network routes for its containers (so a dropping FORWARD concerns it).
fn routed(conf: &Config) -> bool {
    conf.is_gateway || conf.ip_masq || conf.publishes_ports
}

/// The families whose FORWARD policy drops and whose accepts for the bridge are missing.
fn lacking(nft: &mut Nftables, conf: &Config) -> Result<Vec<Family>> {
    let mut lacking = Vec::new();
    if !routed(conf) {
        return Ok(lacking);
    }
    for family in [Family::V4, Family::V6] {
        if nft.forward_drops(family)? && nft.forward_rules(family, &conf.bridge)?.len() < 2 {
            lacking.push(family);
        }
    }
    Ok(lacking)
}

fn words(conf: &Config, family: Family) -> String {
    format!(
        "the accept rules of bridge {} in iptables' {} FORWARD chain, whose policy drops",
        conf.bridge,
        match family {
            Family::V4 => "ip",
            Family::V6 => "ip6",
        }
    )
}

/// CHECK: where FORWARD drops, the bridge's accepts are there.
pub fn check(nft: &mut Nftables, conf: &Config) -> Result<Vec<Diff>> {
    Ok(lacking(nft, conf)?
        .into_iter()
        .map(|family| Diff {
            text: format!("{} are missing", words(conf, family)),
            restorable: true,
        })
        .collect())
}

/// STATUS: the same, for a network with wired attachments.
pub fn missing(nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Vec<String>> {
    if !wired.bridge_in_use {
        return Ok(Vec::new());
    }
    Ok(lacking(nft, conf)?
        .into_iter()
        .map(|family| words(conf, family))
        .collect())
}

pub fn restore(nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Vec<String>> {
    let missing = missing(nft, conf, wired)?;
    if !missing.is_empty() {
        accept(nft, conf)?;
    }
    Ok(missing)
}

/// The bridge's accept rules, in both families.
pub fn objects(nft: &mut Nftables, conf: &Config) -> Result<Vec<Object>> {
    let mut objects = Vec::new();
    for family in [Family::V4, Family::V6] {
        objects.extend(
            nft.forward_rules(family, &conf.bridge)?
                .into_iter()
                .map(Object::Rule),
        );
    }
    Ok(objects)
}
