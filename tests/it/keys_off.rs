//! A key turned off since ADD (issue 31): DEL and GC through a config that no longer sets
//! `macspoofchk`, `ipMasq` or the bandwidth keys still remove what ADD made for them, and
//! the network's last removal still releases its objects. Each in a private node
//! (common/node.rs); packets go only to the gateway of the test's own bridge.

use serde_json::{json, Value};

use crate::common::*;

/// What of the MAC filter names `a` in the node.
fn filter_of(node: &Node, a: &Attach) -> Vec<String> {
    let owner = owner_comment(&node.lab.network, &a.cid, &a.ifname);
    mac_filter_in(Some(&node.ns), &node.lab.network)
        .into_iter()
        .filter(|e| e.ends_with(&owner))
        .collect()
}

#[test]
fn del_without_macspoofchk_removes_the_filter_and_a_readded_container_passes() {
    let lab = Lab::new("offmac");
    let node = Node::new(&lab);
    let guarded = lab.config_with("1.1.0", "macspoofchk", json!(true));
    let plain = lab.config("1.1.0");
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    node.call("ADD", &a, &guarded).expect_result("ADD a");
    // b keeps the network's rule, so a's stale elements would drop a's new frames.
    node.call("ADD", &b, &guarded).expect_result("ADD b");
    assert_eq!(filter_of(&node, &a).len(), 3, "a's three elements");

    // The VRRP case: macspoofchk taken out of the conflist, the container re-created.
    node.call("DEL", &a, &plain)
        .expect_silent_success("DEL a, key off");
    let left = filter_of(&node, &a);
    assert!(left.is_empty(), "DEL without the key kept {left:?}");
    node.call("ADD", &a, &plain)
        .expect_result("ADD a again, key off");
    assert!(
        ping_eventually(&a.netns, &lab.gateway()),
        "the re-added container's frames are dropped"
    );

    // The last DEL, key off, releases the network's rule, map and sets.
    for x in [&a, &b] {
        node.call("DEL", x, &plain)
            .expect_silent_success("DEL, key off");
    }
    let objects = mac_filter_objects(Some(&node.ns), &lab.network);
    assert!(objects.is_empty(), "the release kept {objects:?}");
}

#[test]
fn del_without_ipmasq_removes_the_masquerade_element() {
    let lab = Lab::new("offmasq");
    let node = Node::new(&lab);
    let masq = lab.config_with("1.1.0", "ipMasq", json!(true));
    let plain = lab.config("1.1.0");
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let ra = node.call("ADD", &a, &masq).expect_result("ADD a");
    node.call("ADD", &b, &masq).expect_result("ADD b");
    let address = result_address(&ra);
    let has_a = |node: &Node| node.elements().iter().any(|e| e.starts_with(&address));
    assert!(has_a(&node), "{:?}", node.elements());

    node.call("DEL", &a, &plain)
        .expect_silent_success("DEL a, ipMasq off");
    assert!(
        !has_a(&node),
        "DEL without ipMasq kept {:?}",
        node.elements()
    );

    node.call("DEL", &b, &plain)
        .expect_silent_success("DEL b, ipMasq off");
    assert!(node.elements().is_empty(), "{:?}", node.elements());
    for family in ["v4", "v6"] {
        assert!(
            node.rules(family).is_empty(),
            "{family}: the rule outlived b"
        );
    }
}

fn shaped(lab: &Lab) -> Value {
    let mut c = lab.config("1.1.0");
    for k in ["ingressRate", "egressRate"] {
        c[k] = json!(8_000_000);
    }
    for k in ["ingressBurst", "egressBurst"] {
        c[k] = json!(80_000);
    }
    c
}

fn ifb_of(result: &Value) -> String {
    let ifb = result["interfaces"][3]["name"].as_str().unwrap_or("");
    assert!(ifb.starts_with("bwp"), "no ifb in {result}");
    ifb.to_string()
}

#[test]
fn del_and_gc_without_the_bandwidth_keys_remove_the_ifb() {
    let lab = Lab::new("offbw");
    let node = Node::new(&lab);
    let (shaped, plain) = (shaped(&lab), lab.config("1.1.0"));
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let ifb_a = ifb_of(&node.call("ADD", &a, &shaped).expect_result("ADD a"));
    let ifb_b = ifb_of(&node.call("ADD", &b, &shaped).expect_result("ADD b"));
    assert!(node.links().contains(&ifb_a), "{:?}", node.links());

    node.call("DEL", &a, &plain)
        .expect_silent_success("DEL a, keys off");
    assert!(!node.links().contains(&ifb_a), "DEL kept {ifb_a}");

    // GC listing nothing, keys off: b goes, its ifb with it.
    node.run(&gc_call(&lab, plain, &[]))
        .expect_silent_success("GC, keys off");
    assert!(!node.links().contains(&ifb_b), "GC kept {ifb_b}");
}
