//! `nonMasqueradeCIDRs` end to end (issue 26, item 1): a pod on a private node netns
//! where academy runs, and two peers of the node, each a netns of the test's joined to
//! the node by a veth. One stands for another node's pods (the node routes that pod CIDR
//! to it, and it routes this node's pod CIDR back, as a routed cluster does): its
//! listener must see the pod's own address. The other stands for the internet (no route
//! back to any pod): its listener must see the node's address. Then the rule's
//! exclusions follow the config: CHECK and STATUS name a rule made for other ranges, the
//! next ADD replaces it, and `academy restore` puts the config's back. Packets go
//! only between the test's own namespaces.

use serde_json::{json, Value};

use crate::common::*;

/// A peer of the node: netns `peer`, veth `node_end` in the node (`.1` of a slot of its
/// own) and `eth0` in the peer (`.2`).
struct Peer {
    netns: String,
    node_side: String,
    far: String,
}

fn peer(node: &Node, suffix: &str, node_end: &str) -> Peer {
    let netns = node.lab.add_netns(suffix);
    let v4 = Slot::take().v4_prefix();
    let (node_side, far) = (format!("{v4}.1"), format!("{v4}.2"));
    // The pair dies with the peer's netns (the lab deletes it), the node's end included.
    let in_node = |args: &[&str]| {
        let mut all = vec!["-n", node.ns.as_str()];
        all.extend_from_slice(args);
        ip(&all);
    };
    in_node(&[
        "link", "add", node_end, "type", "veth", "peer", "name", "eth0", "netns", &netns,
    ]);
    in_node(&["addr", "add", &format!("{node_side}/24"), "dev", node_end]);
    in_node(&["link", "set", node_end, "up"]);
    in_peer(
        &netns,
        &["addr", "add", &format!("{far}/24"), "dev", "eth0"],
    );
    in_peer(&netns, &["link", "set", "eth0", "up"]);
    in_peer(&netns, &["link", "set", "lo", "up"]);
    Peer {
        netns,
        node_side,
        far,
    }
}

fn in_peer(netns: &str, args: &[&str]) {
    let mut all = vec!["-n", netns];
    all.extend_from_slice(args);
    ip(&all);
}

fn with_prev(config: &Value, result: &Value) -> Value {
    let mut c = config.clone();
    c["prevResult"] = result.clone();
    c
}

/// The source address `listener_ns` sees for a TCP connection from the pod to `to`.
fn seen_from_pod(pod: &Attach, listener_ns: &str, to: &str) -> String {
    let (got, peer) = peer_seen(listener_ns, to, 8082, &pod.netns);
    assert_eq!(got, "hello", "no answer from {to} in {listener_ns}");
    peer
}

#[test]
fn pods_keep_their_address_to_non_masquerade_cidrs_and_are_masqueraded_elsewhere() {
    let lab = Lab::new("nonmasq");
    let node = Node::new(&lab);
    let cluster = peer(&node, "cluster", "tocluster");
    let internet = peer(&node, "inet", "tointernet");
    // Another node's pod CIDR, behind the cluster peer; the peer routes this node's back.
    let remote = Slot::take().v4_prefix();
    let (remote_cidr, remote_pod) = (format!("{remote}.0/24"), format!("{remote}.10"));
    // On the peer's loopback (this kernel has no dummy links): a local address of it.
    in_peer(
        &cluster.netns,
        &["addr", "add", &format!("{remote_pod}/32"), "dev", "lo"],
    );
    in_peer(
        &cluster.netns,
        &["route", "add", &lab.subnet(), "via", &cluster.node_side],
    );
    ip(&[
        "-n",
        &node.ns,
        "route",
        "add",
        &remote_cidr,
        "via",
        &cluster.far,
    ]);
    let route_back = run(
        "ip",
        &["-n", &internet.netns, "route", "get", &lab.ip(2)],
        &[],
    );
    assert_ne!(route_back.code, 0, "the internet peer routes to the pods");

    let kept = lab.config_with("1.1.0", "ipMasq", json!(true));
    let mut config = kept.clone();
    config["nonMasqueradeCIDRs"] = json!([remote_cidr]);
    let pod = lab.attachment("pod");
    let result = node.call("ADD", &pod, &config).expect_result("ADD");
    let pod_ip = result_address(&result);
    let rules = node.rules("v4");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert!(
        rules[0].ends_with(&format!("nonMasqueradeCIDRs {remote_cidr}")),
        "{rules:?}"
    );

    // nft decodes the rule as one more comparison after the network's subnet.
    let listed = node.nft(&["list", "chain", "inet", "academy", "postrouting"]);
    let want = format!(
        "ip daddr != {} ip daddr != {remote_cidr} ip daddr != 224.0.0.0/4 masquerade",
        lab.subnet()
    );
    assert!(listed.stdout.contains(&want), "{want}\n{listed}");
    assert_eq!(
        seen_from_pod(&pod, &cluster.netns, &remote_pod),
        pod_ip,
        "another node's pod sees the pod's own address"
    );
    assert_eq!(
        seen_from_pod(&pod, &internet.netns, &internet.far),
        internet.node_side,
        "the internet sees the node's address"
    );
    node.call("CHECK", &pod, &with_prev(&config, &result))
        .expect_silent_success("CHECK");

    // The config without the key: the rule is one made for other ranges.
    let check = node.call("CHECK", &pod, &with_prev(&kept, &result));
    assert_cni_error(&check, 120, &["other ranges"]);
    let status = node.run(&lab.call("STATUS").config(&with_prev(&kept, &result)));
    assert_cni_error(&status, 50, &["other ranges"]);
    // Its next ADD replaces the rule: now the other node's pods see the node.
    let second = lab.attachment("second");
    node.call("ADD", &second, &kept).expect_result("ADD");
    assert_eq!(
        node.rules("v4"),
        vec![format!(
            "academy ipMasq {}-v4 except {}",
            lab.network,
            lab.subnet()
        )]
    );
    assert_eq!(
        seen_from_pod(&pod, &cluster.netns, &remote_pod),
        cluster.node_side,
        "masqueraded once the rule has no nonMasqueradeCIDRs"
    );

    // restore reads the conflist (with CNI 1.1's cniVersions beside cniVersion, as
    // the shipped template has) and puts its exclusions back.
    let mut plugin = config.clone();
    for key in ["cniVersion", "name"] {
        plugin.as_object_mut().unwrap().remove(key);
    }
    let list = json!({"cniVersion": "1.0.0", "cniVersions": ["1.0.0", "1.1.0"],
                      "name": lab.network, "plugins": [plugin]});
    std::fs::write(lab.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("other ranges"), "{out}");
    assert_eq!(node.rules("v4").len(), 1);
    assert_eq!(
        seen_from_pod(&pod, &cluster.netns, &remote_pod),
        pod_ip,
        "after restore"
    );
    node.call("CHECK", &pod, &with_prev(&config, &result))
        .expect_silent_success("CHECK after restore");

    for (a, c) in [(&pod, &config), (&second, &kept)] {
        node.call("DEL", a, c).expect_silent_success("DEL");
    }
    assert!(node.rules("v4").is_empty(), "the last DEL left the rule");
    assert!(node.elements().is_empty());
}

/// The longest list the config takes (32 prefixes per family), on a network of the
/// longest name (128 characters), is a rule academy reads back: CHECK finds it, and a
/// second ADD does not add it again. Each prefix is two of the rule's expressions; a
/// rule longer than a page would be left out of a fresh netlink socket's first dump.
#[test]
fn the_longest_list_the_config_accepts_is_a_rule_academy_reads_back() {
    let lab = Lab::new("nmlong");
    let node = Node::new(&lab);
    let list: Vec<String> = (0..32).map(|i| format!("172.{}.0.0/16", i)).collect();
    let mut config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let name = format!("{}-{}", lab.network, "x".repeat(127 - lab.network.len()));
    assert_eq!(name.len(), 128);
    config["name"] = json!(name);
    config["nonMasqueradeCIDRs"] = json!(list);
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let result = node.call("ADD", &a, &config).expect_result("ADD");
    node.call("CHECK", &a, &with_prev(&config, &result))
        .expect_silent_success("CHECK");
    node.call("ADD", &b, &config).expect_result("second ADD");
    let listed = node.nft(&["list", "chain", "inet", "academy", "postrouting"]);
    assert_eq!(listed.stdout.matches("masquerade").count(), 1, "{listed}");
    assert_eq!(
        listed.stdout.matches("ip daddr != 172.").count(),
        32,
        "{listed}"
    );
    for x in [&a, &b] {
        node.call("DEL", x, &config).expect_silent_success("DEL");
    }
    let mut over = config.clone();
    over["nonMasqueradeCIDRs"] = json!((0..33)
        .map(|i| format!("172.{}.0.0/16", i))
        .collect::<Vec<_>>());
    let refused = node.call("ADD", &lab.attachment("over"), &over);
    assert_cni_error(&refused, 7, &["at most 32 per family"]);
}
