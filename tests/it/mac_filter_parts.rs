//! The MAC filter of a network with live guarded ports, part of it deleted (found by the
//! soak: `nft flush ruleset` beside a restore and the watch left the rule and sets
//! without the map): the restore makes what lacks in place and puts every live port back,
//! a later ADD works, and DEL takes all of a port's elements, even those the map lost.
//! In a private node, whose `bridge academy` the test may cut into.

use std::collections::BTreeSet;

use serde_json::json;

use crate::common::*;

/// Every partial state the kernel allows: a set bound to the rule cannot go, so the
/// sets lose only what the rule has let go of first.
const CUTS: &[(&str, &[&str])] = &[
    ("the map alone", &["map"]),
    ("the rule", &["rule"]),
    ("the rule and the map", &["rule", "map"]),
    (
        "the rule, the map and the guarded set",
        &["rule", "map", "guarded"],
    ),
    ("the rule and the allowed set", &["rule", "allowed"]),
];

fn cut(node: &Node, what: &[&str]) {
    let net = &node.lab.network;
    for part in what {
        match *part {
            "rule" => {
                let out = node.nft(&["-a", "list", "chain", "bridge", "academy", "prerouting"]);
                let comment = format!("academy macspoofchk {net}");
                let handle = out
                    .stdout
                    .lines()
                    .find(|l| l.contains(&comment))
                    .and_then(|l| l.rsplit("handle ").next())
                    .unwrap_or_else(|| panic!("no rule of {net} in {out}"))
                    .trim()
                    .to_string();
                node.nft(&[
                    "delete",
                    "rule",
                    "bridge",
                    "academy",
                    "prerouting",
                    "handle",
                    &handle,
                ]);
            }
            "map" => {
                node.nft(&[
                    "delete",
                    "map",
                    "bridge",
                    "academy",
                    &format!("{net}-ports"),
                ]);
            }
            set => {
                node.nft(&[
                    "delete",
                    "set",
                    "bridge",
                    "academy",
                    &format!("{net}-{set}"),
                ]);
            }
        }
    }
}

fn whole(network: &str) -> BTreeSet<String> {
    [
        format!("map {network}-ports"),
        format!("set {network}-guarded"),
        format!("set {network}-allowed"),
        format!("rule academy macspoofchk {network}"),
    ]
    .into_iter()
    .collect()
}

#[test]
fn a_restore_makes_the_missing_parts_of_a_mac_filter_again() {
    let lab = Lab::new("msparts");
    let node = Node::new(&lab);
    lab.write_conflist("1.1.0", "academy", json!({"macspoofchk": true}));
    let config = lab.config_with("1.1.0", "macspoofchk", json!(true));
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    node.call("ADD", &a, &config).expect_result("ADD a");
    node.call("ADD", &b, &config).expect_result("ADD b");
    let net = &lab.network;
    let want = mac_filter_in(Some(&node.ns), net);
    assert_eq!(want.len(), 6, "{want:?}");
    assert_eq!(mac_filter_objects(Some(&node.ns), net), whole(net));

    for (name, parts) in CUTS {
        cut(&node, parts);
        let out = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(out.code, 0, "restore after deleting {name}:\n{out}");
        assert_eq!(
            mac_filter_objects(Some(&node.ns), net),
            whole(net),
            "objects after deleting {name} and a restore"
        );
        assert_eq!(mac_filter_rules(Some(&node.ns), net), 1, "{name}: one rule");
        assert_eq!(
            mac_filter_in(Some(&node.ns), net),
            want,
            "elements after deleting {name} and a restore"
        );
        let again = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(again.code, 0, "second restore after {name}:\n{again}");
        assert!(again.stderr.contains("complete, nothing to do"), "{again}");
    }

    // The map deleted, and no restore: an ADD completes the filter and is guarded; a
    // DEL of a port the map lost still takes its set elements.
    cut(&node, &["map"]);
    let c = lab.attachment("c");
    node.call("ADD", &c, &config)
        .expect_result("ADD c after the map went");
    assert_eq!(mac_filter_objects(Some(&node.ns), net), whole(net));
    for x in [&a, &b, &c] {
        let out = node.call("DEL", x, &config);
        assert_eq!(out.code, 0, "DEL {}:\n{out}", x.cid);
    }
    assert_eq!(
        mac_filter_in(Some(&node.ns), net),
        BTreeSet::new(),
        "elements after every DEL"
    );
}

/// A second copy of the network's rule (two first ADDs whose repair lock timed out, or
/// an admin's `nft add rule` of the same text): the restore, the engine's completion,
/// deletes it and says so, and the filter stays whole. Before the engine only a missing
/// rule was looked for: the copy stayed.
#[test]
fn a_restore_deletes_a_second_copy_of_the_rule() {
    let lab = Lab::new("mscopy");
    let node = Node::new(&lab);
    lab.write_conflist("1.1.0", "academy", json!({"macspoofchk": true}));
    let config = lab.config_with("1.1.0", "macspoofchk", json!(true));
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let a = lab.attachment("a");
    let result = node.call("ADD", &a, &config).expect_result("ADD a");
    let net = &lab.network;
    let want = mac_filter_in(Some(&node.ns), net);
    let comment = format!("\"academy macspoofchk {net}\"");
    let out = node.nft(&[
        "add",
        "rule",
        "bridge",
        "academy",
        "prerouting",
        "iifname",
        &format!("@{net}-guarded"),
        "iifname",
        ".",
        "ether",
        "saddr",
        "!=",
        &format!("@{net}-allowed"),
        "drop",
        "comment",
        &comment,
    ]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(mac_filter_rules(Some(&node.ns), net), 2, "the copy is made");

    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("second copy"), "{out}");
    assert_eq!(mac_filter_rules(Some(&node.ns), net), 1, "one rule left");
    assert_eq!(mac_filter_objects(Some(&node.ns), net), whole(net));
    assert_eq!(mac_filter_in(Some(&node.ns), net), want);
    let mut checked = config.clone();
    checked["prevResult"] = result;
    node.call("CHECK", &a, &checked)
        .expect_silent_success("CHECK after the restore");
    let out = node.call("DEL", &a, &config);
    assert_eq!(out.code, 0, "{out}");
}

/// The container interface's MAC in an ADD result.
fn container_mac(result: &serde_json::Value) -> String {
    let interfaces = result["interfaces"].as_array().expect("interfaces");
    let container = interfaces.iter().find(|i| i["sandbox"].is_string());
    container.expect("a container interface")["mac"]
        .as_str()
        .expect("its mac")
        .to_string()
}

/// A restore of more ports than the engine looks up one by one (it reads such a set
/// whole): after the filter's table is deleted, every port's three elements come back
/// with their owner comments, CHECK passes for each, and a second restore finds
/// nothing to do; with only some elements gone, only those are put back.
#[test]
fn a_restore_of_many_ports_puts_back_each_port_s_guard() {
    let lab = Lab::new("msmany");
    let node = Node::new(&lab);
    lab.write_conflist("1.1.0", "academy", json!({"macspoofchk": true}));
    let config = lab.config_with("1.1.0", "macspoofchk", json!(true));
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let net = &lab.network;
    let ports: Vec<(Attach, serde_json::Value)> = (0..20)
        .map(|i| {
            let a = lab.attachment(&format!("p{i}"));
            let result = node.call("ADD", &a, &config).expect_result("ADD");
            (a, result)
        })
        .collect();
    let want = mac_filter_in(Some(&node.ns), net);
    assert_eq!(want.len(), 60, "{want:?}");

    let out = node.nft(&["delete", "table", "bridge", "academy"]);
    assert_eq!(out.code, 0, "{out}");
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains("MAC filter of 20 wired container(s)"),
        "{out}"
    );
    assert_eq!(
        mac_filter_in(Some(&node.ns), net),
        want,
        "after the restore"
    );
    assert_eq!(mac_filter_objects(Some(&node.ns), net), whole(net));

    // Three ports' elements of the allowed set only.
    for (_, result) in &ports[..3] {
        let veth = result_host_veth(result);
        let mac = container_mac(result);
        let element = format!("{{ {veth} . {mac} }}");
        let out = node.nft(&[
            "delete",
            "element",
            "bridge",
            "academy",
            &format!("{net}-allowed"),
            &element,
        ]);
        assert_eq!(out.code, 0, "{out}");
    }
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains("MAC filter of 3 wired container(s)"),
        "{out}"
    );
    assert_eq!(
        mac_filter_in(Some(&node.ns), net),
        want,
        "after the second cut"
    );
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert!(out.stderr.contains("complete, nothing to do"), "{out}");
    for (a, result) in &ports {
        let mut checked = config.clone();
        checked["prevResult"] = result.clone();
        node.call("CHECK", a, &checked)
            .expect_silent_success("CHECK after the restores");
    }
    for (a, _) in &ports {
        let out = node.call("DEL", a, &config);
        assert_eq!(out.code, 0, "{out}");
    }
    assert_eq!(mac_filter_in(Some(&node.ns), net), BTreeSet::new());
}
