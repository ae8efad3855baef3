//! Who may hold a host port: a hostIP that the network's families cannot carry. Each in a private node netns (common/node.rs),
//! whose maps are the test's alone; no packet is sent.

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
                if holder.starts_with(&format!("{network}:")) {
                    let key = pair[0]["elem"]["val"].to_string();
                    found.insert(format!("{map} {key} {holder}"));
                }
            }
        }
    }
    found
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
