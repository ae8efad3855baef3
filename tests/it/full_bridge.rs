//! A full bridge (issue 36 item 2): a Linux bridge takes at most 1,023 ports, and the ADD
//! beyond that fails with code 11 naming the bridge, its ports and its limit, leaving
//! nothing behind (no veth, no reservation, no nf_tables element); STATUS answers 50 while
//! the bridge is full; `academy status` and the watch's metrics show the bridge's ports
//! against its limit.
//!
//! The bridge is filled cheaply in a private node netns: one academy container, then ifb
//! links (one link each, no peer) enslaved by one `ip -batch`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;
use crate::metrics::{python_in, Daemon, GET};

/// A Linux bridge's port numbers run 1..1023 (BR_MAX_PORTS 1024, port 0 unused).
const LIMIT: usize = 1023;

/// The lab's network in the node with every kind that leaves an element per container:
/// ipMasq, the MAC filter and a published port.
fn network(lab: &Lab) -> Value {
    let mut c = lab.config("1.1.0");
    c["ipMasq"] = json!(true);
    c["macspoofchk"] = json!(true);
    c["capabilities"] = json!({"portMappings": true});
    c
}

fn with_port(config: &Value, host_port: u16) -> Value {
    let mut c = config.clone();
    c["runtimeConfig"] = json!({"portMappings": [
        {"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}
    ]});
    c
}

/// Enslaves `count` ifb links named fbNNNN to `bridge` in the node, in one `ip -batch`.
fn add_ports(lab: &Lab, node: &Node, bridge: &str, count: usize) {
    let batch: String = (0..count)
        .map(|i| format!("link add fb{i} master {bridge} type ifb\n"))
        .collect();
    let file = lab.root.join("ports.batch");
    std::fs::write(&file, batch).unwrap();
    let out = run(
        "ip",
        &["-n", &node.ns, "-batch", file.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.code, 0, "filling the bridge:\n{out}");
}

fn ports_of(node: &Node, bridge: &str) -> usize {
    run(
        "ip",
        &["-n", &node.ns, "-br", "link", "show", "master", bridge],
        &[],
    )
    .stdout
    .lines()
    .count()
}

/// `academy status --json` in the node: the lab's network.
fn status_of(lab: &Lab, node: &Node) -> Value {
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["status", "--conf-dir", conf_dir, "--json"]);
    assert_eq!(out.code, 0, "{out}");
    let status: Value = serde_json::from_str(&out.stdout).expect("status --json is JSON");
    status["networks"][0].clone()
}

#[test]
fn the_add_beyond_a_full_bridge_says_so_and_leaves_nothing() {
    let lab = Lab::new("fullbr");
    let node = Node::new(&lab);
    let config = network(&lab);
    lab.write_conflist(
        "1.1.0",
        "academy",
        json!({"ipMasq": true, "macspoofchk": true}),
    );
    let first = lab.attachment("a");
    node.call("ADD", &first, &with_port(&config, 20080))
        .expect_result("the first ADD");
    let status = status_of(&lab, &node);
    assert_eq!(
        status["bridgePorts"],
        json!({"ports": 1, "limit": LIMIT}),
        "{status}"
    );

    add_ports(&lab, &node, &lab.bridge, LIMIT - 1);
    assert_eq!(ports_of(&node, &lab.bridge), LIMIT);
    let links_before = node.links();
    let ruleset_before = node.nft(&["list", "ruleset"]).stdout;
    let reservations_before = lab.reservations();
    assert!(ruleset_before.contains(&format!("{}:eth0", first.cid)));

    let next = lab.attachment("b");
    let out = node.call("ADD", &next, &with_port(&config, 20081));
    let err = assert_cni_error(
        &out,
        11,
        &[
            &format!("bridge {}", lab.bridge),
            "1023 ports",
            "at most 1023",
        ],
    );
    println!("the ADD beyond: {}", out.stdout.trim());
    assert!(
        !out.stderr.contains("undoing"),
        "the undoing failed:\n{out}"
    );
    let details = err["details"].as_str().unwrap();
    assert!(
        details.contains("another network") && details.contains("second bridge"),
        "{err}"
    );
    assert_eq!(node.links(), links_before, "no veth left in the node");
    assert_eq!(
        netns_link_names(&next.netns),
        ["lo"],
        "no interface left in the container"
    );
    assert_eq!(
        lab.reservations(),
        reservations_before,
        "no reservation held"
    );
    assert_eq!(
        node.nft(&["list", "ruleset"]).stdout,
        ruleset_before,
        "nothing left in nf_tables"
    );

    // STATUS holds ADDs off while the bridge is full.
    let status = node.run(&lab.call_for("STATUS", &next).config(&config));
    assert_cni_error(&status, 50, &[&lab.bridge, "1023", "full"]);
    let view = status_of(&lab, &node);
    assert_eq!(
        view["bridgePorts"],
        json!({"ports": LIMIT, "limit": LIMIT}),
        "{view}"
    );
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let text = node.academy(&["status", "--conf-dir", conf_dir]);
    let row = text
        .stdout
        .lines()
        .find(|l| l.starts_with(&lab.network))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(" 1023/1023 "), "{text}");
    // The watch's exposition, on the node's own loopback.
    let metrics = "127.0.0.1:9604";
    let _watch = Daemon::start(
        &node,
        "academy watch",
        plugin(),
        &["watch", "--conf-dir", conf_dir, "--metrics", metrics],
    );
    let url = format!("http://{metrics}/metrics");
    let scrape = || python_in(&node, GET, &[&url]);
    assert!(
        wait_until(Duration::from_secs(10), || scrape().code == 0),
        "the watch does not answer on {metrics}"
    );
    let page = scrape();
    for want in [
        format!("academy_bridge_ports{{bridge=\"{}\"}} {LIMIT}", lab.bridge),
        format!(
            "academy_bridge_port_limit{{bridge=\"{}\"}} {LIMIT}",
            lab.bridge
        ),
    ] {
        assert!(
            page.stdout.lines().any(|l| l == want),
            "no {want} in\n{page}"
        );
    }

    // One port freed: the same ADD goes through, and STATUS serves again.
    run("ip", &["-n", &node.ns, "link", "del", "fb0"], &[]);
    node.run(&lab.call_for("STATUS", &next).config(&config))
        .expect_silent_success("STATUS with a free port");
    node.call("ADD", &next, &with_port(&config, 20081))
        .expect_result("ADD into the freed port");
    let ruleset = node.nft(&["list", "ruleset"]).stdout;
    assert!(ruleset.contains(&format!("{}:eth0", next.cid)), "{ruleset}");
}
