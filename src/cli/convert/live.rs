//! What the reference left live for a network about to be converted, reported before
//! `academy convert` writes (src/firewall/reference/ is what a DEL does about it), and
//! whether this host must keep the `firewall` plugin.

use crate::config::Config;
use crate::firewall::reference;
use crate::firewall::tables::forward_drops_in_both;
use crate::ipam::store::StoreDir;
use crate::netlink::{Netlink, Nftables};

/// Why this host needs the `firewall` plugin kept, if it does: academy accepts forwarded
/// traffic in iptables-nft's FORWARD chain only. A legacy x_tables table listed in
/// /proc/net/ip{,6}_tables_names means the host's iptables is (or also is) legacy, whose
/// FORWARD policy academy can neither see nor accept past; and without nf_tables there
/// is nowhere to accept at all. Read from files and one netlink lookup: nothing exec'd.
pub(super) fn firewall_stays() -> Option<String> {
    for (file, tool) in [
        ("/proc/net/ip_tables_names", "iptables-legacy"),
        ("/proc/net/ip6_tables_names", "ip6tables-legacy"),
    ] {
        let tables = std::fs::read_to_string(file).unwrap_or_default();
        let tables: Vec<&str> = tables.split_whitespace().collect();
        if !tables.is_empty() {
            return Some(format!(
                "{tool} tables are in use ({file} lists {}): academy accepts forwarding in nf_tables only, and a legacy FORWARD policy would still drop",
                tables.join(", ")
            ));
        }
    }
    let probe = Nftables::open().and_then(|mut nft| forward_drops_in_both(&mut nft));
    match probe {
        Ok(_) => None,
        Err(e) => Some(format!(
            "academy cannot read nf_tables here ({e}), so it cannot accept forwarded traffic where a FORWARD policy drops"
        )),
    }
}

/// What the reference left live for the network, and what DEL through the new conflist
/// does about it; empty when nothing is left. What cannot be read is said so.
pub(super) fn live_state(conf: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    let mut containers = std::collections::BTreeSet::new();
    let mut nft = match Nftables::open() {
        Ok(n) => Some(n),
        Err(e) => {
            lines.push(format!("cannot read iptables' nf_tables state ({e})"));
            None
        }
    };
    if let Some(nft) = nft.as_mut() {
        match reference::survey(nft, &conf.name) {
            Ok(found) => {
                for l in found {
                    let chain = l
                        .chain
                        .map(|c| format!("chain {c}, jumped to from {}", l.from))
                        .unwrap_or_else(|| format!("rule in {}", l.from));
                    lines.push(format!(
                        "  container {}: iptables nat ({:?}) {chain}, comment {:?}",
                        l.container_id, l.family, l.comment
                    ));
                    containers.insert(l.container_id);
                }
            }
            Err(e) => lines.push(format!("cannot read iptables' nat tables: {e}")),
        }
    }
    let mut held = Vec::new();
    if let Some(b) = conf.builtin() {
        let dir = b.data_dir.join(&conf.name);
        match StoreDir::open(&dir).and_then(|s| s.map(|s| s.reservations()).transpose()) {
            Ok(found) => {
                for r in found.unwrap_or_default() {
                    lines.push(format!(
                        "  reservation {} held by {} {} ({})",
                        r.address,
                        r.container_id,
                        r.ifname.as_deref().unwrap_or("(no ifname)"),
                        dir.display()
                    ));
                    containers.insert(r.container_id.clone());
                    held.push(r.address);
                }
            }
            Err(e) => lines.push(format!("cannot read the store {}: {e}", dir.display())),
        }
    }
    if let Some(nft) = nft.as_mut() {
        match reference::firewall_accepts(nft) {
            Ok(accepted) => {
                for a in accepted.iter().filter(|a| held.contains(a)) {
                    lines.push(format!(
                        "  firewall plugin's accepts for {a} in CNI-FORWARD"
                    ));
                }
            }
            Err(e) => lines.push(format!("cannot read iptables' CNI-FORWARD chains: {e}")),
        }
    }
    match bridge_ports(&conf.bridge) {
        Ok(ports) => {
            for (name, academy_s) in ports {
                let whose = if academy_s {
                    "academy's"
                } else {
                    "not academy's: the reference's, or someone else's"
                };
                lines.push(format!("  bridge {} port {name} ({whose})", conf.bridge));
            }
        }
        Err(e) => lines.push(format!("cannot list bridge {}'s ports: {e}", conf.bridge)),
    }
    let found = lines.iter().any(|l| l.starts_with("  "));
    if !found {
        return lines;
    }
    lines.insert(
        0,
        format!(
            "live state of network {} ({} container(s)):",
            conf.name,
            containers.len()
        ),
    );
    lines.push("a DEL through the new conflist of a container the reference made removes its chains and the rules jumping to them, the firewall plugin's accepts for addresses it alone holds, and its interface while its netns lives (when that veth's peer is a port of the bridge), then frees its address".into());
    lines
}

/// The bridge's ports, each with whether academy made it (its alias names an owner).
fn bridge_ports(bridge: &str) -> Result<Vec<(String, bool)>, String> {
    let mut nl = Netlink::open().map_err(|e| e.to_string())?;
    let Some(b) = nl.link(bridge).map_err(|e| e.to_string())? else {
        return Ok(Vec::new());
    };
    let links = nl.links().map_err(|e| e.to_string())?;
    Ok(links
        .into_iter()
        .filter(|l| l.controller == Some(b.index))
        .map(|l| {
            let ours = l
                .alias
                .as_deref()
                .is_some_and(|a| crate::attachment::owner(a).is_some());
            (l.name, ours)
        })
        .collect())
}
