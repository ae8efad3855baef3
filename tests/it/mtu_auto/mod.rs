//! `"mtu": "auto"`: the bridge and both veth ends take the MTU of the node's way out. In
//! a private node netns (common/node.rs), whose "uplinks" are veths of the node's own
//! (the peer stays in the node) carrying on-link default routes: only routes and MTUs,
//! and the node's own pings to its containers.
//!
//! | file           | subject                                                        |
//! |----------------|----------------------------------------------------------------|
//! | `choice`       | what "auto" chooses (default routes, metrics, multipath, none), |
//! |                | CHECK after the uplink changed, an existing bridge's MTU       |
//! | `live_bridge`  | an uplink that rises under running containers: the bridge waits |
//! |                | for its older ports to go; one that falls lowers it at once    |
//! | `ipv6_minimum` | below 1280 on a network with an IPv6 range: refused, untouched |

mod choice;
mod ipv6_minimum;
mod live_bridge;

use serde_json::{json, Value};

use crate::common::*;

/// A veth `name` of MTU `mtu` in the node, up, with `address` (its peer, up, stays in
/// the node).
fn uplink_link(node: &Node, name: &str, mtu: u32, address: &str) {
    let (ns, mtu) = (node.ns.as_str(), mtu.to_string());
    let peer = format!("{name}p");
    ip(&[
        "-n", ns, "link", "add", name, "mtu", &mtu, "type", "veth", "peer", "name", &peer,
    ]);
    for link in [name, peer.as_str()] {
        ip(&["-n", ns, "link", "set", link, "up"]);
    }
    ip(&["-n", ns, "addr", "add", address, "dev", name, "nodad"]);
}

/// `ip -n NODE ROUTE...`.
fn route(node: &Node, route: &[&str]) {
    let mut args = vec!["-n", node.ns.as_str(), "route", "add"];
    args.extend_from_slice(route);
    ip(&args);
}

/// An IPv4 uplink on 192.0.NET.0/24 carrying a default route (on-link, never answered).
fn uplink4(node: &Node, name: &str, mtu: u32, net: u8, metric: u32) {
    uplink_link(node, name, mtu, &format!("192.0.{net}.2/24"));
    let (via, metric) = (format!("192.0.{net}.1"), metric.to_string());
    route(
        node,
        &["default", "via", &via, "dev", name, "metric", &metric],
    );
}

fn uplink6(node: &Node, name: &str, mtu: u32) {
    uplink_link(node, name, mtu, "2001:db8:6::2/64");
    route(node, &["default", "via", "2001:db8:6::1", "dev", name]);
}

/// The MTU of `link` in `netns`.
fn mtu_of(netns: &str, link: &str) -> u64 {
    let links = ip_json(&["-n", netns, "link", "show", "dev", link]);
    links[0]["mtu"]
        .as_u64()
        .unwrap_or_else(|| panic!("no link {link} in {netns}: {links}"))
}

/// The MTUs of the bridge, the host veth (both in the node) and the container's eth0.
fn mtus(lab: &Lab, node: &Node, a: &Attach) -> [u64; 3] {
    let host = derived_host_veth_name(&a.cid, &a.ifname);
    [
        mtu_of(&node.ns, &lab.bridge),
        mtu_of(&node.ns, &host),
        mtu_of(&a.netns, &a.ifname),
    ]
}

/// The MTU the result reports for each of its interfaces.
fn reported(result: &Value) -> Vec<Value> {
    result["interfaces"]
        .as_array()
        .expect("interfaces")
        .iter()
        .map(|i| i["mtu"].clone())
        .collect()
}

fn auto(lab: &Lab) -> Value {
    lab.config_with("1.1.0", "mtu", json!("auto"))
}

fn check(lab: &Lab, node: &Node, a: &Attach, result: &Value) -> Out {
    let mut config = auto(lab);
    config["prevResult"] = result.clone();
    node.call("CHECK", a, &config)
}
