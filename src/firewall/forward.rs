//! Forwarding on a host whose iptables FORWARD policy drops (as with Docker installed):
//! ADD makes sure the network's bridge is accepted there, in both families, so the
//! `firewall` plugin is not needed in academy's chain. Without such a policy nothing is
//! written. The rules are the bridge's, shared by its containers like the bridge itself,
//! and stay when a container goes (netlink/nftables/forward.rs).

use crate::cni::Result;
use crate::config::Config;
use crate::netlink::{Family, Nftables};

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
