//! Network isolation (`"ingressPolicy": "same-bridge"`, as podman's `network create
//! --opt isolate=true` asks the reference firewall plugin for): what is forwarded between
//! two networks that both set it is dropped, either way; the node, the outside, a
//! network's own bridge and the networks without the key are not touched. The state is
//! the network's, not an attachment's: the bridge's element in the shared set of
//! isolated bridges, looked up by one shared rule (nft.rs). What the kind wants is all
//! it says; the engine (../engine/) makes it before the container is wired, reports what
//! a flush took, puts it back, and deletes the bridge's element once no network uses the
//! bridge. Where the reference leaves its per-bridge rules behind for good (its DEL
//! cannot know whether the bridge is still in use), academy's release runs once nothing
//! is attached.

use super::engine::{Keys, Want};
use crate::config::Config;

mod nft;

use nft::{isolated_bridge, isolation_rule};

/// The rule and the bridge's element (the VLAN gateway's too, where it routes):
/// nothing without `ingressPolicy` same-bridge, unless every key is asked for.
pub fn wants(conf: &Config, keys: Keys) -> Vec<Want> {
    if keys == Keys::AsConfigured && !conf.same_bridge_ingress {
        return Vec::new();
    }
    let harm = format!(
        "bridge {} (ingressPolicy same-bridge) is reachable from the other isolated networks",
        conf.bridge
    );
    let mut wants = vec![isolation_rule(&harm)];
    for name in conf.forwarded_interfaces() {
        wants.push(isolated_bridge(&name, &harm));
    }
    wants
}
