//! NAT that repairs itself (issue 19, item 3): after an admin's `nft flush chain`,
//! `nft flush table` or `nft delete table` of academy's table, the next ADD puts the
//! network's rule back (and, when the set had to be re-made, every wired container's
//! element), `academy restore` rebuilds everything from the store, STATUS reports
//! what is missing, CHECK names the command, and the rule follows the network's
//! current ranges. Each test runs academy in a private node netns (common/node.rs): it
//! flushes or deletes academy's table there, never the host's.

use serde_json::{json, Value};

use crate::common::*;

fn masq_config(lab: &Lab) -> Value {
    lab.config_with("1.1.0", "ipMasq", json!(true))
}

/// ADDs `n` attachments in the node; returns them with their "address cid:eth0" elements.
fn add_some(node: &Node, tag: &str, n: usize, config: &Value) -> Vec<(Attach, String)> {
    (0..n)
        .map(|i| {
            let a = node.lab.attachment(&format!("{tag}{i}"));
            let result = node
                .call("ADD", &a, config)
                .expect_result("ADD with ipMasq");
            let element = format!(
                "{} {}",
                result_address(&result),
                owner_comment(&node.lab.network, &a.cid, "eth0")
            );
            (a, element)
        })
        .collect()
}

fn points_to_restore(error: &Value) {
    let details = error["details"].as_str().unwrap_or("");
    assert!(details.contains("academy restore"), "{error}");
}

fn with_prev(config: &Value, result: &Value) -> Value {
    let mut c = config.clone();
    c["prevResult"] = result.clone();
    c
}

#[test]
fn a_flushed_chain_is_reported_by_check_and_status_and_repaired_by_the_next_add() {
    let lab = Lab::new("nrflush");
    let node = Node::new(&lab);
    let config = masq_config(&lab);
    let a = lab.attachment("c0");
    let first = node.call("ADD", &a, &config).expect_result("first ADD");
    assert_eq!(node.rules("v4").len(), 1);

    node.nft(&["flush", "chain", "inet", "academy", "postrouting"]);
    assert!(node.rules("v4").is_empty());

    let check = node.call("CHECK", &a, &with_prev(&config, &first));
    points_to_restore(&assert_cni_error(&check, 120, &["masquerade rule"]));
    let status = node.run(&lab.call("STATUS").config(&config));
    points_to_restore(&assert_cni_error(&status, 50, &["masquerade rule"]));

    let b = lab.attachment("c1");
    let second = node
        .call("ADD", &b, &config)
        .expect_result("ADD after the flush");
    assert_eq!(node.rules("v4").len(), 1, "one rule, re-created by ADD");
    let want = [
        format!(
            "{} {}",
            result_address(&first),
            owner_comment(&lab.network, &a.cid, "eth0")
        ),
        format!(
            "{} {}",
            result_address(&second),
            owner_comment(&lab.network, &b.cid, "eth0")
        ),
    ];
    assert_eq!(node.elements(), want.into_iter().collect());
    node.call("CHECK", &a, &with_prev(&config, &first))
        .expect_silent_success("CHECK after the repair");
    node.run(&lab.call("STATUS").config(&config))
        .expect_silent_success("STATUS after the repair");
    for x in [&a, &b] {
        node.call("DEL", x, &config).expect_silent_success("DEL");
    }
    assert!(node.elements().is_empty());
}

#[test]
fn a_deleted_table_comes_back_with_every_wired_element_on_the_next_add() {
    let lab = Lab::new("nrdel");
    let node = Node::new(&lab);
    let config = masq_config(&lab);
    let before = add_some(&node, "r", 3, &config);
    node.nft(&["delete", "table", "inet", "academy"]);
    assert!(node.elements().is_empty());
    let status = node.run(&lab.call("STATUS").config(&config));
    let error = assert_cni_error(&status, 50, &["masquerade rule", "3 element(s)"]);
    points_to_restore(&error);

    let after = add_some(&node, "n", 1, &config);
    let want: std::collections::BTreeSet<String> = before
        .iter()
        .chain(&after)
        .map(|(_, e)| e.clone())
        .collect();
    assert_eq!(
        node.elements(),
        want,
        "the wired containers' elements restored"
    );
    assert_eq!(node.rules("v4").len(), 1);
    node.run(&lab.call("STATUS").config(&config))
        .expect_silent_success("STATUS after the repair");
}

#[test]
fn restore_rebuilds_a_flushed_or_deleted_table_in_one_command() {
    let lab = Lab::new("nrcmd");
    let node = Node::new(&lab);
    lab.write_conflist("1.1.0", "academy", json!({"ipMasq": true}));
    let config = masq_config(&lab);
    let attached = add_some(&node, "k", 2, &config);
    let want: std::collections::BTreeSet<String> =
        attached.iter().map(|(_, e)| e.clone()).collect();
    let conf_dir = lab.conf_dir.to_str().unwrap();

    let set = format!("{}-v4", lab.network);
    for (what, args) in [
        ("flush table", vec!["flush", "table", "inet", "academy"]),
        ("delete table", vec!["delete", "table", "inet", "academy"]),
        ("flush set", vec!["flush", "set", "inet", "academy", &set]),
    ] {
        node.nft(&args);
        let out = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(out.code, 0, "restore after {what}:\n{out}");
        assert!(out.stderr.contains(": put back: "), "after {what}:\n{out}");
        assert_eq!(node.elements(), want, "elements after {what} and restore");
        assert_eq!(node.rules("v4").len(), 1, "rule after {what}");
        let again = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(again.code, 0, "{again}");
        assert!(
            again.stderr.contains("nothing to do"),
            "second run:\n{again}"
        );
    }
    // A container whose veth is gone is not wired: restore does not bring it back.
    let (gone, gone_element) = &attached[0];
    ip(&["netns", "del", &gone.netns]);
    // The kernel tears a deleted netns down (and its veth pair with it) asynchronously.
    let veth = derived_host_veth_name(&gone.cid, &gone.ifname);
    assert!(
        wait_until(std::time::Duration::from_secs(10), || !node
            .links()
            .contains(&veth)),
        "{veth} outlived its container's netns"
    );
    node.nft(&["delete", "table", "inet", "academy"]);
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    let mut rest = want.clone();
    rest.remove(gone_element);
    assert_eq!(node.elements(), rest);
}

/// The rule's excluded destinations are the network's current ranges, not those of its
/// first ADD: a range added later is not masqueraded to, and CHECK holds ADD to it.
#[test]
fn the_rule_follows_the_network_s_current_ranges() {
    let lab = Lab::new("nrrange");
    let node = Node::new(&lab);
    let ipam = |ranges: Value| {
        json!({"cniVersion": "1.1.0", "name": lab.network, "type": "academy",
               "bridge": lab.bridge, "isGateway": true, "ipMasq": true,
               "ipam": {"type": "host-local", "ranges": ranges,
                        "dataDir": lab.data_dir.to_str().unwrap()}})
    };
    // Only inside the node's netns: no route to it exists on the host.
    let extra = "172.31.250.0/24";
    let one = ipam(json!([[{"subnet": lab.subnet()}]]));
    let two = ipam(json!([[{"subnet": lab.subnet()}, {"subnet": extra}]]));
    let a = lab.attachment("a");
    let first = node
        .call("ADD", &a, &one)
        .expect_result("ADD with one range");
    let rules = node.rules("v4");
    assert_eq!(rules.len(), 1);
    assert!(!rules[0].contains(extra), "{rules:?}");

    let check = node.call("CHECK", &a, &with_prev(&two, &first));
    assert_cni_error(&check, 120, &["other ranges"]);
    let b = lab.attachment("b");
    let added = node.call("ADD", &b, &two);
    // A config change is no repair: nothing on stderr says one was made.
    assert!(!added.stderr.contains("repaired"), "{added}");
    added.expect_result("ADD with two ranges");
    let rules = node.rules("v4");
    assert_eq!(rules.len(), 1, "the rule replaced, not doubled: {rules:?}");
    assert!(
        rules[0].contains(extra) && rules[0].contains(&lab.subnet()),
        "{rules:?}"
    );
    let listed = node.nft(&["list", "chain", "inet", "academy", "postrouting"]);
    assert!(listed.stdout.contains(extra), "{listed}");
    node.call("CHECK", &a, &with_prev(&two, &first))
        .expect_silent_success("CHECK with the new ranges");
}

/// An element at a wired container's address that names another attachment is not the
/// restore's to replace: it is left, and the restore says whose it is.
#[test]
fn restore_leaves_and_names_an_element_another_attachment_holds() {
    let lab = Lab::new("nrheld");
    let node = Node::new(&lab);
    lab.write_conflist("1.1.0", "academy", json!({"ipMasq": true}));
    let config = masq_config(&lab);
    let a = lab.attachment("h0");
    let added = node.call("ADD", &a, &config).expect_result("ADD");
    let address = result_address(&added);
    let set = format!("{}-v4", lab.network);
    let key = format!("{{ {address} }}");
    let held_so = format!("{{ {address} comment \"someone else\" }}");
    node.nft(&["delete", "element", "inet", "academy", &set, &key]);
    node.nft(&["add", "element", "inet", "academy", &set, &held_so]);

    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert!(
        out.stderr.contains("could not put back: address")
            && out.stderr.contains("\"someone else\" holds it"),
        "{out}"
    );
    let held = format!("{address} someone else");
    assert_eq!(node.elements(), [held].into_iter().collect());

    node.nft(&["delete", "element", "inet", "academy", &set, &key]);
    node.call("DEL", &a, &config).expect_silent_success("DEL");
    assert!(node.elements().is_empty());
}

/// Concurrent first ADDs of a network (and concurrent ADDs after a flush) each find the
/// rule missing; repairs are serialised, so the network still ends with one rule.
#[test]
fn concurrent_repairs_leave_one_rule() {
    let lab = Lab::new("nrrace");
    let node = Node::new(&lab);
    let config = masq_config(&lab);
    for round in ["first", "after a flush"] {
        let attachments: Vec<Attach> = (0..8)
            .map(|i| lab.attachment(&format!("{}{i}", &round[..1])))
            .collect();
        // Every netlink send of the main thread held 100 ms (strace): the ADDs' looks at
        // the chain and their batches interleave, as on a loaded node.
        std::thread::scope(|s| {
            for a in &attachments {
                let (lab, node, config) = (&lab, &node, &config);
                s.spawn(move || {
                    let call = lab.call_for("ADD", a).config(config);
                    let out = call.spawn(
                        "ip",
                        &[
                            "netns",
                            "exec",
                            &node.ns,
                            "strace",
                            "-qq",
                            "-o",
                            "/dev/null",
                            "-e",
                            "trace=sendto",
                            "-e",
                            "inject=sendto:delay_enter=100000",
                            plugin(),
                        ],
                    );
                    out.expect_result("parallel ADD")
                });
            }
        });
        assert_eq!(node.rules("v4").len(), 1, "rules after the {round} ADDs");
        node.nft(&["flush", "chain", "inet", "academy", "postrouting"]);
    }
    assert_eq!(node.elements().len(), 16);
}

/// Dual stack: both families' sets and rules come back, with IPv6 elements and the
/// IPv6 range excluded.
#[test]
fn restore_rebuilds_both_families() {
    let lab = Lab::new("nrdual");
    let node = Node::new(&lab);
    let v6 = format!("{}::/64", lab.slot.v6_prefix());
    let plugin = json!({"type": "academy", "bridge": lab.bridge, "isGateway": true, "ipMasq": true,
        "ipam": {"type": "host-local", "dataDir": lab.data_dir.to_str().unwrap(),
                 "ranges": [[{"subnet": lab.subnet()}], [{"subnet": v6}]]}});
    let config = lab.install_entry(plugin);
    let a = lab.attachment("d");
    let result = node
        .call("ADD", &a, &config)
        .expect_result("dual-stack ADD");
    let before = node.elements();
    assert_eq!(before.len(), 2, "{result}");
    assert!(before
        .iter()
        .any(|e| e.contains(':') && e.starts_with("fd00")));
    let v6_rules = node.rules("v6");
    assert_eq!(v6_rules.len(), 1);
    assert!(v6_rules[0].contains(&v6), "{v6_rules:?}");

    node.nft(&["delete", "table", "inet", "academy"]);
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(node.elements(), before);
    assert_eq!(node.rules("v4").len(), 1);
    assert_eq!(node.rules("v6"), v6_rules);
    let mut check = config.clone();
    check["prevResult"] = result;
    node.call("CHECK", &a, &check)
        .expect_silent_success("CHECK after the restore");
}

/// Port mapping's rules after `nft flush table` / `flush chain` (which keep the maps and
/// their elements): `academy restore` puts them back, and so does the next ADD that
/// publishes a port; the published elements were never lost.
#[test]
fn published_ports_rules_come_back_after_a_flush() {
    let lab = Lab::new("nrports");
    let node = Node::new(&lab);
    lab.write_conflist("1.1.0", "academy", json!({"ipMasq": true}));
    let with_port = |port: u16| {
        let mut c = masq_config(&lab);
        c["capabilities"] = json!({"portMappings": true});
        c["runtimeConfig"] =
            json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]});
        c
    };
    let port_rules = || {
        let out = node.nft(&["-j", "list", "table", "inet", "academy"]);
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
        v["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["rule"]["comment"].as_str())
            .filter(|c| c.starts_with("academy portmap"))
            .count()
    };
    let published = || {
        node.nft(&["list", "map", "inet", "academy", "_ports-v4"])
            .stdout
    };
    let a = node.lab.attachment("p0");
    node.call("ADD", &a, &with_port(18080))
        .expect_result("ADD publishing a port");
    let all = port_rules();
    assert_eq!(all, 11, "port mapping's rules after the first ADD");
    assert!(published().contains("18080"), "{}", published());

    node.nft(&["flush", "table", "inet", "academy"]);
    assert_eq!(port_rules(), 0);
    assert!(
        published().contains("18080"),
        "a flush keeps the map's elements"
    );
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("port mapping's rules"), "{out}");
    assert_eq!(port_rules(), all, "rules after restore");
    let again = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert!(again.stderr.contains("nothing to do"), "{again}");

    node.nft(&["flush", "chain", "inet", "academy", "prerouting"]);
    let b = node.lab.attachment("p1");
    node.call("ADD", &b, &with_port(18081))
        .expect_result("the next ADD publishing a port");
    assert_eq!(port_rules(), all, "rules after the next ADD");
    let listed = published();
    assert!(
        listed.contains("18080") && listed.contains("18081"),
        "{listed}"
    );
}
