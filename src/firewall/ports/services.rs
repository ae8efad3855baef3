//! Services between pods of one bridge. kube-proxy DNATs a pod's connection to a Service
//! address in the node's prerouting, and the chosen endpoint may be a pod of the same
//! bridge: its answer then goes straight over the bridge to the client, which never sees
//! the reverse NAT and drops it — unless bridged traffic passes netfilter (br_netfilter,
//! `net.bridge.bridge-nf-call-iptables`), which kubeadm requires and academy cannot turn
//! on without exec (a module load).
//!
//! Where bridged traffic does not pass netfilter, ADD marks its bridge for hairpin in
//! port mapping's `_hairpin` set: DNATed traffic leaving by the bridge it came from is
//! masqueraded (the rule port mapping already has for its own ports), so the endpoint
//! answers the gateway and the answer comes back through the node's conntrack, from the
//! Service address. The price is that the endpoint sees the gateway's address, not the
//! client pod's; with br_netfilter it sees the pod's, and academy leaves it to it. The
//! mark is the Ports kind's network state (checked, reported, restored and released
//! with it: mod.rs).

use super::nft::{hairpin_mark, portmap_rules};
use crate::cni::Result;
use crate::config::Config;
use crate::firewall::engine;
use crate::ipam::store::files;
use crate::netlink::NftablesOnDemand;

/// Whether bridged traffic of the network's families passes netfilter in the calling
/// netns (the sysctls are per netns, and /proc/sys/net is the reader's). A network of
/// one family reaches Services of that family only, so only its sysctl is read; a
/// delegated IPAM's families are unknown here: both.
pub fn bridged_traffic_filtered(conf: &Config) -> bool {
    let (v4, v6) = match conf.builtin() {
        Some(b) => {
            let pools = || b.pools();
            let v4 = pools().any(|p| p.subnet().is_ipv4());
            (v4, pools().any(|p| p.subnet().is_ipv6()))
        }
        None => (true, true),
    };
    let on = |family: &str| {
        files::read_host_file(format!("/proc/sys/net/bridge/bridge-nf-call-{family}"), 32)
            .is_ok_and(|v| v.starts_with(b"1"))
    };
    (!v4 || on("iptables")) && (!v6 || on("ip6tables"))
}

/// Whether the network's bridge needs the hairpin mark for Services.
pub fn need_hairpin(conf: &Config) -> bool {
    conf.is_gateway && !bridged_traffic_filtered(conf)
}

/// ADD: marks the bridge (and makes sure of port mapping's rules that use the mark) where
/// bridged traffic does not pass netfilter. Nothing is sent when the mark is there.
pub fn add(nft: &mut NftablesOnDemand, conf: &Config) -> Result<()> {
    if !need_hairpin(conf) {
        return Ok(());
    }
    let wants = [portmap_rules(), hairpin_mark(&conf.bridge)];
    if engine::complete(nft.get()?, &wants)?.put_back.is_empty() {
        return Ok(());
    }
    crate::log::debug(format_args!(
        "bridged traffic on {} does not pass netfilter (br_netfilter not loaded, or net.bridge.bridge-nf-call-iptables / -ip6tables is 0): a Service whose endpoint is a pod of this bridge is reached through a masquerade, so the endpoint sees the gateway's address; `modprobe br_netfilter` and `sysctl -w net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1` keep the client's",
        conf.bridge
    ));
    Ok(())
}
