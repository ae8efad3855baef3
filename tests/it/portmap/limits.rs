//! Any number of mappings in one ADD and any number of stale ports in one GC (issue 25,
//! item 5): the whole range 1-65535 of one protocol, 10,000 stale elements, an error
//! that stays short however many ports its request named. In a private node netns
//! (common/node.rs): the node's maps are the test's alone, so it may publish every port
//! of the range without meeting another test's, and no packet is sent.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::published::direct_config;
use crate::common::*;

/// `count` tcp mappings from `first` on, each to the container's 8080.
fn mappings(first: u32, count: u32, protocol: &str) -> Vec<Value> {
    (first..first + count)
        .map(|p| json!({"hostPort": p, "containerPort": 8080, "protocol": protocol}))
        .collect()
}

/// How many elements the node's map holds, and how many of them name `holder`.
fn held_in(node: &Node, map: &str, holder: &str) -> (usize, usize) {
    let out = node.nft(&["-j", "list", "map", "inet", "academy", map]);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let elements: Vec<&Value> = v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["map"]["elem"].as_array().into_iter().flatten())
        .collect();
    let mine = elements
        .iter()
        .filter(|pair| pair[0]["elem"]["comment"].as_str() == Some(holder))
        .count();
    (elements.len(), mine)
}

fn timed(what: &str, f: impl FnOnce() -> Out) -> (Out, Duration) {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    eprintln!("{what}: {took:?}");
    (out, took)
}

#[test]
fn portmap_the_whole_port_range_in_one_add_and_ten_thousand_stale_ports_in_one_gc() {
    let lab = Lab::new("pmlim");
    let node = Node::new(&lab);
    // ADD's time for 1, 3 and 1,000 mappings, each container removed before the next.
    for count in [1, 3, 1000] {
        let a = lab.attachment(&format!("n{count}"));
        let config = direct_config(&lab, "1.1.0", &mappings(1, count, "tcp"));
        let (out, _) = timed(&format!("ADD of {count} mappings"), || {
            node.call("ADD", &a, &config)
        });
        out.expect_result(&format!("ADD of {count} mappings"));
        let holder = owner_comment(&lab.network, &a.cid, "eth0");
        for map in ["_ports-v4", "_ports-v6"] {
            assert_eq!(held_in(&node, map, &holder).1, count as usize, "{map}");
        }
        node.call("DEL", &a, &config)
            .expect_silent_success("DEL of the mappings");
    }

    // Every port of tcp: 65,535 mappings, one element each per family.
    let all = lab.attachment("all");
    let config = direct_config(&lab, "1.1.0", &mappings(1, 65535, "tcp"));
    let (out, _) = timed("ADD of 65535 mappings", || node.call("ADD", &all, &config));
    out.expect_result("ADD of the whole port range");
    let holder = owner_comment(&lab.network, &all.cid, "eth0");
    for map in ["_ports-v4", "_ports-v6"] {
        assert_eq!(held_in(&node, map, &holder), (65535, 65535), "{map}");
    }
    // Another container asking for the range is refused in a few lines, not hundreds
    // of KB naming every port.
    let other = lab.attachment("other");
    let config_other = direct_config(&lab, "1.1.0", &mappings(1, 65535, "tcp"));
    let (refused, _) = timed("refused ADD of 65535 mappings", || {
        node.call("ADD", &other, &config_other)
    });
    assert_cni_error(&refused, 105, &[&all.cid]);
    assert!(
        refused.stdout.len() + refused.stderr.len() < 2048,
        "the refusal is {} bytes long:\n{refused}",
        refused.stdout.len() + refused.stderr.len()
    );
    for map in ["_ports-v4", "_ports-v6"] {
        assert_eq!(held_in(&node, map, &holder), (65535, 65535), "{map}");
    }
    node.call("DEL", &other, &config_other)
        .expect_silent_success("DEL of the refused one");
    let (out, _) = timed("DEL of 65535 mappings", || node.call("DEL", &all, &config));
    out.expect_silent_success("DEL of the whole port range");
    for map in ["_ports-v4", "_ports-v6"] {
        assert_eq!(held_in(&node, map, &holder), (0, 0), "{map} after DEL");
    }

    // A port held by another container in the last of the ADD's batches: the ADD is
    // refused with 105 and its undo removes what its earlier batches published.
    let last = lab.attachment("last");
    let config_last = direct_config(&lab, "1.1.0", &mappings(65535, 1, "tcp"));
    node.call("ADD", &last, &config_last)
        .expect_result("ADD of tcp/65535");
    let config = direct_config(&lab, "1.1.0", &mappings(1, 65535, "tcp"));
    let refused = node.call("ADD", &all, &config);
    assert_cni_error(&refused, 105, &["tcp/65535", &last.cid]);
    let last_holder = owner_comment(&lab.network, &last.cid, "eth0");
    for map in ["_ports-v4", "_ports-v6"] {
        assert_eq!(
            held_in(&node, map, &last_holder),
            (1, 1),
            "{map}: the refused ADD's earlier batches were left"
        );
    }
    node.call("DEL", &all, &config)
        .expect_silent_success("DEL of the refused one");
    node.call("DEL", &last, &config_last)
        .expect_silent_success("DEL of tcp/65535");

    // 10,000 stale elements (5,000 mappings, both families) in one GC.
    let stale = lab.attachment("stale");
    let config = direct_config(&lab, "1.1.0", &mappings(20000, 5000, "udp"));
    node.call("ADD", &stale, &config)
        .expect_result("ADD of 5000 udp mappings");
    let holder = owner_comment(&lab.network, &stale.cid, "eth0");
    for map in ["_ports-v4", "_ports-v6"] {
        assert_eq!(held_in(&node, map, &holder).1, 5000, "{map}");
    }
    let (out, _) = timed("GC of 10000 stale elements", || {
        node.run(&gc_call(&lab, config.clone(), &[]))
    });
    out.expect_silent_success("GC of 10,000 stale port elements");
    for map in ["_ports-v4", "_ports-v6"] {
        assert_eq!(held_in(&node, map, &holder), (0, 0), "{map} after GC");
    }
}
