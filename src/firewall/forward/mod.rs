//! Forwarding on a host whose iptables FORWARD policy drops (as with Docker installed):
//! the network's bridge is accepted there, in both families, so the `firewall` plugin
//! is not needed in academy's chain. No wider than that plugin: to the bridge only
//! replies (RELATED,ESTABLISHED) and DNATed traffic (published ports), from it
//! everything. Without such a policy nothing is written. The rules are the bridge's,
//! shared by its containers like the bridge itself. What the kind wants is all it says;
//! the engine (../engine/) appends them once the container is wired, reports and puts
//! back what an iptables flush or reload dropped, deletes outdated forms and second
//! copies, and takes them with the last network on the bridge. A reload that re-made
//! them (`iptables-save | iptables-restore`) leaves them recognised by their comment
//! (nft.rs).

use super::engine::{Keys, Want};
use super::tables::forward_drops_in_both;
use crate::cni::Result;
use crate::config::Config;
use crate::netlink::{Family, NftablesOnDemand};

mod nft;

use nft::{accept, outdated, ACCEPTS};

/// The bridge's accepts (the VLAN gateway's too, where it routes) in each family whose
/// FORWARD drops, for a network the host routes for; with every key asked for, in both
/// families whatever their policy, for a release.
pub fn wants(nft: &mut NftablesOnDemand, conf: &Config, keys: Keys) -> Result<Vec<Want>> {
    let mut wants = Vec::new();
    if keys == Keys::AsConfigured && !routed(conf) {
        return Ok(wants);
    }
    let nft = nft.get()?;
    let drops = match keys {
        Keys::AsConfigured => forward_drops_in_both(nft)?,
        Keys::All => [true; 2],
    };
    for (family, drops) in [Family::V4, Family::V6].into_iter().zip(drops) {
        if !drops {
            continue;
        }
        for name in conf.forwarded_interfaces() {
            wants.extend(ACCEPTS.map(|a| accept(family, &name, a)));
            wants.push(outdated(family, &name));
        }
    }
    Ok(wants)
}

/// Whether the network routes for its containers (so a dropping FORWARD concerns it).
fn routed(conf: &Config) -> bool {
    conf.is_gateway || conf.ip_masq || conf.publishes_ports
}
