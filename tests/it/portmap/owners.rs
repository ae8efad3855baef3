//! Who may hold a host port: one container on two networks with the same mappings
//! (podman passes them to every network), a hostIP mapping and a wildcard mapping of
//! the same port held by different containers, and a hostIP that the network's families
//! cannot carry. Each in a private node netns (common/node.rs), whose maps are the
//! test's alone; no packet is sent.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::published::direct_config;
use super::{host_ports, mapping};
use crate::common::*;

/// The published ports in the node's maps held by `network`'s attachments, as
/// "<map> <key> <holder>".
fn held_in_node(node: &Node, network: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for map in nft::PORT_MAPS {
        let out = nft::nft_in(
            Some(&node.ns),
            &["-j", "list", "map", "inet", "academy", map],
        );
        if out.code != 0 {
            continue;
        }
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        for item in v["nftables"].as_array().into_iter().flatten() {
            for pair in item["map"]["elem"].as_array().into_iter().flatten() {
                let holder = pair[0]["elem"]["comment"].as_str().unwrap_or("");
                if holder.starts_with(&format!("{}:", network_key(network))) {
                    let key = pair[0]["elem"]["val"].to_string();
                    found.insert(format!("{map} {key} {holder}"));
                }
            }
        }
    }
    found
}

#[test]
fn portmap_one_container_on_two_networks_publishes_its_port_once_and_del_of_one_keeps_it() {
    let (a, b) = (Lab::new("pmown"), Lab::new("pmowb"));
    let node = Node::new(&a);
    let port = host_ports(&a);
    let ports = [mapping(port, None)];
    let (config_a, config_b) = (
        direct_config(&a, "1.1.0", &ports),
        direct_config(&b, "1.1.0", &ports),
    );
    // One container (one id, one netns) on both networks, as `podman run --network a,b
    // -p PORT:8080` attaches it: eth0 on a, eth1 on b, the same portMappings to each.
    let on_a = a.attachment("c");
    let on_b = Attach {
        ifname: "eth1".into(),
        ..on_a.clone()
    };
    let call = |lab: &Lab, verb: &str, who: &Attach, config: &Value| {
        node.run(&lab.call_for(verb, who).config(config))
    };
    call(&a, "ADD", &on_a, &config_a).expect_result("ADD on the first network");
    let first = held_in_node(&node, &a.network);
    assert_eq!(first.len(), 2, "v4 and v6 on the first network: {first:?}");

    let out = call(&b, "ADD", &on_b, &config_b);
    let second = out.expect_result("ADD of the same container on the second network");
    assert!(
        out.stderr.contains("already published for this container")
            && out
                .stderr
                .contains(&owner_comment(&a.network, &on_a.cid, "eth0")),
        "the second ADD does not say which network keeps the port:\n{out}"
    );
    assert_eq!(
        held_in_node(&node, &a.network),
        first,
        "the first network's"
    );
    assert_eq!(
        held_in_node(&node, &b.network),
        BTreeSet::new(),
        "the second network took a port the first one holds"
    );
    // CHECK on the second network: its port is served, by the first network's element.
    let mut check = config_b.clone();
    check["prevResult"] = second;
    call(&b, "CHECK", &on_b, &check).expect_silent_success("CHECK on the second network");

    // Another container still cannot take the port, on either network.
    let other = Attach {
        ifname: "eth0".into(),
        ..b.attachment("d")
    };
    let refused = call(&b, "ADD", &other, &config_b);
    assert_cni_error(
        &refused,
        105,
        &[&format!("tcp/{port}"), &on_a.cid, &a.network],
    );
    call(&b, "DEL", &other, &config_b).expect_silent_success("DEL of the refused one");

    // DEL on the second network (podman network disconnect) keeps the first one's port.
    call(&b, "DEL", &on_b, &config_b).expect_silent_success("DEL on the second network");
    assert_eq!(
        held_in_node(&node, &a.network),
        first,
        "DEL of b took a's port"
    );
    call(&a, "DEL", &on_a, &config_a).expect_silent_success("DEL on the first network");
    assert_eq!(held_in_node(&node, &a.network), BTreeSet::new());
}

#[test]
fn portmap_host_ip_and_wildcard_mappings_of_one_port_conflict_whichever_comes_first() {
    let lab = Lab::new("pmxmap");
    let node = Node::new(&lab);
    let port = host_ports(&lab);
    // An address of the node's own: the hostIP mapping's key.
    let host_ip = lab.gateway();
    let (x, y, z) = (
        lab.attachment("x"),
        lab.attachment("y"),
        lab.attachment("z"),
    );
    let wildcard = direct_config(&lab, "1.1.0", &[mapping(port, None)]);
    let on_ip = direct_config(&lab, "1.1.0", &[mapping(port, Some(&host_ip))]);

    // The wildcard first: the hostIP mapping of another container is refused.
    node.call("ADD", &x, &wildcard)
        .expect_result("the wildcard mapping");
    let held = held_in_node(&node, &lab.network);
    let refused = node.call("ADD", &y, &on_ip);
    let error = assert_cni_error(
        &refused,
        105,
        &[&format!("tcp/{host_ip}:{port}"), &x.cid, "eth0"],
    );
    assert!(
        error["msg"]
            .as_str()
            .unwrap()
            .contains(&format!("as tcp/{port} (v4)")),
        "{error}"
    );
    assert_eq!(held_in_node(&node, &lab.network), held, "the refused ADD");
    node.call("DEL", &y, &on_ip).expect_silent_success("DEL");
    node.call("DEL", &x, &wildcard).expect_silent_success("DEL");

    // The hostIP mapping first: the wildcard mapping of another container is refused.
    node.call("ADD", &y, &on_ip)
        .expect_result("the hostIP mapping");
    let held = held_in_node(&node, &lab.network);
    let refused = node.call("ADD", &x, &wildcard);
    assert_cni_error(&refused, 105, &[&format!("tcp/{port} (v4)"), &y.cid]);
    assert_eq!(held_in_node(&node, &lab.network), held, "the refused ADD");
    node.call("DEL", &x, &wildcard).expect_silent_success("DEL");

    // The same container may hold both: the hostIP one wins on its address.
    let both = direct_config(
        &lab,
        "1.1.0",
        &[mapping(port + 1, None), mapping(port + 1, Some(&host_ip))],
    );
    node.call("ADD", &z, &both)
        .expect_result("one container, both mappings");
    node.call("DEL", &z, &both).expect_silent_success("DEL");
    node.call("DEL", &y, &on_ip).expect_silent_success("DEL");
    assert_eq!(held_in_node(&node, &lab.network), BTreeSet::new());
}

#[test]
fn portmap_host_ip_the_network_cannot_carry_is_refused_as_invalid_config() {
    let lab = Lab::new("pmfam");
    let node = Node::new(&lab);
    let port = host_ports(&lab);
    let v4_only = |ports: &[Value]| {
        let mut c = direct_config(&lab, "1.1.0", ports);
        c["ipam"]["ranges"] = json!([[{"subnet": lab.subnet()}]]);
        c["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
        c
    };
    let a = lab.attachment("a");
    let cases = [
        (
            mapping(port, Some("fd00:99::1")),
            vec!["hostIP fd00:99::1 is an IPv6 address", "no IPv6 address"],
        ),
        (
            mapping(port, Some("::")),
            vec!["hostIP :: asks for IPv6 only"],
        ),
        (
            mapping(port, Some("::ffff:10.1.2.3")),
            vec!["IPv4-mapped", "10.1.2.3"],
        ),
    ];
    for (m, needles) in cases {
        let config = v4_only(&[m]);
        let out = node.call("ADD", &a, &config);
        let error = assert_cni_error(&out, 7, &needles);
        assert!(
            !error["details"].as_str().unwrap_or("").is_empty(),
            "no remedy given: {error}"
        );
        assert_eq!(held_in_node(&node, &lab.network), BTreeSet::new(), "{out}");
        assert!(
            lab.reservations().is_empty(),
            "the refused ADD kept an address"
        );
        node.call("DEL", &a, &config).expect_silent_success("DEL");
    }
    // The same mapping on a dual-stack network is published.
    let dual = direct_config(&lab, "1.1.0", &[mapping(port, Some("fd00:99::1"))]);
    node.call("ADD", &a, &dual)
        .expect_result("a v6 hostIP on a dual-stack network");
    assert_eq!(held_in_node(&node, &lab.network).len(), 1);
    node.call("DEL", &a, &dual).expect_silent_success("DEL");
}
