//! The table of kinds (src/firewall/mod.rs), walked for each of its six kinds in a
//! private node (the last test checks the cases name every kind STATUS can name): ADD makes it, CHECK passes, what an admin's flush takes is named by
//! STATUS (code 50, with the kind's name and the restore command) and by CHECK, `academy
//! restore` puts it back exactly, GC sweeps the elements of an unlisted attachment,
//! and the network's last DEL leaves nothing of the kind. So each operation of each kind
//! (remove, check, sweep, missing, restore, release) is reached through the verbs.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::nft::nft_in;
use crate::common::*;

/// One kind: the flush that takes its state in the node (commands run in the node, with
/// `{veth}` standing for the first container's host veth) and the name STATUS gives it.
struct Case {
    tag: &'static str,
    flush: &'static [&'static [&'static str]],
    named: &'static str,
}

/// Every name firewall::Kind displays, one per kind: a kind the cases leave out fails
/// `every_kind_has_a_case`.
const KIND_NAMES: [&str; 6] = [
    "outbound NAT",
    "published ports",
    "MAC filter",
    "FORWARD accepts",
    "bandwidth shaping",
    "network isolation",
];

const CASES: &[Case] = &[
    Case {
        tag: "kmasq",
        flush: &[&["nft", "delete", "table", "inet", "academy"]],
        named: "outbound NAT",
    },
    Case {
        tag: "kport",
        flush: &[&["nft", "flush", "chain", "inet", "academy", "prerouting"]],
        named: "published ports",
    },
    Case {
        tag: "kmac",
        flush: &[&["nft", "delete", "table", "bridge", "academy"]],
        named: "MAC filter",
    },
    Case {
        tag: "kfwd",
        flush: &[&["iptables-nft", "-F", "FORWARD"]],
        named: "FORWARD accepts",
    },
    Case {
        tag: "kbw",
        flush: &[&["tc", "qdisc", "del", "dev", "{veth}", "ingress"]],
        named: "bandwidth shaping",
    },
    Case {
        tag: "kiso",
        flush: &[&["nft", "delete", "table", "inet", "academy"]],
        named: "network isolation",
    },
];

fn config(lab: &Lab, case: &Case) -> Value {
    let mut c = lab.config_with("1.1.0", "ipMasq", json!(true));
    match case.tag {
        "kport" => {
            c["capabilities"] = json!({"portMappings": true});
        }
        "kmac" => c["macspoofchk"] = json!(true),
        "kbw" => {
            c["capabilities"] = json!({"bandwidth": true});
            c["runtimeConfig"] = json!({"bandwidth": {
                "ingressRate": 8_000_000, "ingressBurst": 80_000,
                "egressRate": 8_000_000, "egressBurst": 80_000}});
        }
        "kiso" => c["ingressPolicy"] = json!("same-bridge"),
        _ => {}
    }
    c
}

/// The kind's state in the node: nf_tables for all but bandwidth, tc's for it.
fn state(node: &Node, case: &Case) -> BTreeSet<String> {
    match case.tag {
        "kbw" => shaping(node),
        _ => academy_state(node),
    }
}

/// academy's shaping in the node: its ifbs and its tbf and ingress qdiscs.
fn shaping(node: &Node) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = node
        .links()
        .into_iter()
        .filter(|l| l.starts_with("bwp"))
        .map(|l| format!("link {l}"))
        .collect();
    let out = run("tc", &["-n", &node.ns, "qdisc", "show"], &[]);
    for line in out.stdout.lines() {
        if line.contains(" tbf ") || line.contains(" ingress ") {
            found.insert(
                line.split(" refcnt")
                    .next()
                    .unwrap_or(line)
                    .trim()
                    .to_string(),
            );
        }
    }
    found
}

fn with_port(config: &Value, case: &Case, port: u16) -> Value {
    let mut c = config.clone();
    if case.tag == "kport" {
        c["runtimeConfig"] =
            json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]});
    }
    c
}

/// Everything of academy's in the node's nf_tables that names the network, its bridge or
/// its attachments (tables, chains and shared maps themselves aside), as nft lists it.
fn academy_state(node: &Node) -> BTreeSet<String> {
    let out = nft_in(Some(&node.ns), &["-j", "list", "ruleset"]);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    let lab = node.lab;
    let mut found = BTreeSet::new();
    for item in v["nftables"].as_array().into_iter().flatten() {
        let text = item.to_string();
        let ours = text.contains(&lab.network)
            || text.contains(&network_key(&lab.network))
            || text.contains(&format!("\"{}\"", lab.bridge));
        if !ours {
            continue;
        }
        if let Some(set) = item.get("set").or_else(|| item.get("map")) {
            found.insert(format!("set {} {}", set["name"], set["elem"]));
        } else if let Some(rule) = item.get("rule") {
            found.insert(format!(
                "rule {} {} {}",
                rule["family"], rule["chain"], rule["comment"]
            ));
        }
    }
    found
}

fn in_node(node: &Node, argv: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns];
    all.extend_from_slice(argv);
    run("ip", &all, &[])
}

fn walk(case: &Case) {
    walk_named(case, false)
}

/// The walk, with `long`: a network name of 128 bytes (the most a config may give) and
/// container ids of 64, so every owner comparison meets a network name longer than a
/// comment can hold.
fn walk_named(case: &Case, long: bool) {
    let mut lab = Lab::new(case.tag);
    if long {
        let pad = 128 - lab.network.len() - 1;
        lab.network = format!("{}-{}", lab.network, "n".repeat(pad));
    }
    let lab = lab;
    let node = Node::new(&lab);
    // Docker's policy: academy's FORWARD accepts are then needed (and made).
    assert_eq!(
        in_node(&node, &["iptables-nft", "-P", "FORWARD", "DROP"]).code,
        0
    );
    assert_eq!(
        in_node(&node, &["ip6tables-nft", "-P", "FORWARD", "DROP"]).code,
        0
    );
    let config = config(&lab, case);
    lab.write_conflist("1.1.0", "academy", {
        let mut extra = config.clone();
        for k in ["cniVersion", "name", "type"] {
            extra.as_object_mut().unwrap().remove(k);
        }
        extra
    });
    let (mut a, mut b) = (lab.attachment("a"), lab.attachment("b"));
    if long {
        for x in [&mut a, &mut b] {
            let pad = 64 - x.cid.len();
            x.cid = format!("{}{}", "c".repeat(pad), x.cid);
        }
    }
    let (a, b) = (a, b);
    let first = node.call("ADD", &a, &with_port(&config, case, 18180));
    // A network's first ADD makes its objects: nothing to read like a repair.
    for alarming in ["repaired", "re-created", "restored", "put back"] {
        assert!(!first.stderr.contains(alarming), "{}: {first}", case.tag);
    }
    let ra = first.expect_result("ADD a");
    let rb = node
        .call("ADD", &b, &with_port(&config, case, 18181))
        .expect_result("ADD b");
    let check = |x: &Attach, result: &Value, port: u16| {
        let mut c = with_port(&config, case, port);
        c["prevResult"] = result.clone();
        node.call("CHECK", x, &c)
    };
    check(&a, &ra, 18180).expect_silent_success("CHECK after ADD");
    let status = || node.run(&lab.call("STATUS").config(&config));
    status().expect_silent_success("STATUS after ADD");
    let before = state(&node, case);
    assert!(!before.is_empty(), "{}: nothing of the network", case.tag);

    // missing: STATUS and CHECK name what the flush took and the command that restores it.
    let veth = result_host_veth(&ra);
    for argv in case.flush {
        let argv: Vec<&str> = argv
            .iter()
            .map(|a| if *a == "{veth}" { veth.as_str() } else { a })
            .collect();
        let out = in_node(&node, &argv);
        assert_eq!(out.code, 0, "{argv:?}: {out}");
    }
    let error = assert_cni_error(&status(), 50, &[case.named, &lab.network]);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    let error = assert_cni_error(&check(&a, &ra, 18180), 120, &[]);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{}: CHECK's remedy: {error}",
        case.tag
    );

    // restore: the state is back as ADD left it.
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains(case.named), "{}: {out}", case.tag);
    assert_eq!(state(&node, case), before, "{}: after restore", case.tag);
    status().expect_silent_success("STATUS after restore");
    check(&a, &ra, 18180).expect_silent_success("CHECK after restore");
    check(&b, &rb, 18181).expect_silent_success("CHECK of b after restore");

    // sweep: GC listing only b removes a, and a's state with it.
    node.run(&gc_call(&lab, config.clone(), &[(&b.cid, &b.ifname)]))
        .expect_silent_success("GC listing b");
    let after_gc = state(&node, case);
    let a_owner = format!("{}:{}", a.cid, a.ifname);
    assert!(
        !after_gc
            .iter()
            .any(|s| s.contains(&a_owner) || s.contains(&veth)),
        "{}: GC left a's state: {after_gc:?}",
        case.tag
    );
    check(&b, &rb, 18181).expect_silent_success("CHECK of b after GC");

    // remove + release: the network's last DEL takes its own objects too.
    node.call("DEL", &b, &with_port(&config, case, 18181))
        .expect_silent_success("DEL b");
    assert_eq!(
        state(&node, case),
        BTreeSet::new(),
        "{}: the network outlived its last attachment",
        case.tag
    );
}

#[test]
fn kinds_masquerade_walks_every_operation() {
    walk(&CASES[0]);
}

#[test]
fn kinds_published_ports_walk_every_operation() {
    walk(&CASES[1]);
}

#[test]
fn kinds_mac_filter_walks_every_operation() {
    walk(&CASES[2]);
}

#[test]
fn kinds_forward_accepts_walk_every_operation() {
    walk(&CASES[3]);
}

#[test]
fn kinds_bandwidth_shaping_walks_every_operation() {
    walk(&CASES[4]);
}

#[test]
fn kinds_network_isolation_walks_every_operation() {
    walk(&CASES[5]);
}

#[test]
fn every_kind_has_a_case() {
    let named: BTreeSet<&str> = CASES.iter().map(|c| c.named).collect();
    assert_eq!(named, KIND_NAMES.into_iter().collect());
}

/// Every kind through every operation again, with a 128-byte network name and 64-byte
/// container ids (owners compared whole, never by a prefix of a cut comment).
#[test]
fn kinds_walk_every_operation_with_the_longest_names() {
    for case in CASES {
        walk_named(case, true);
    }
}

/// A host port held on a 128-byte network by a 64-byte container id: another container's
/// ADD of it is refused (105) naming the holder, and the holder's DEL frees it.
#[test]
fn a_port_conflict_names_its_holder_with_the_longest_names() {
    let mut lab = Lab::new("klong");
    let pad = 128 - lab.network.len() - 1;
    lab.network = format!("{}-{}", lab.network, "n".repeat(pad));
    let lab = lab;
    let node = Node::new(&lab);
    let mut config = lab.config("1.1.0");
    config["capabilities"] = json!({"portMappings": true});
    config["runtimeConfig"] =
        json!({"portMappings": [{"hostPort": 18190, "containerPort": 80, "protocol": "tcp"}]});
    let (mut a, mut b) = (lab.attachment("a"), lab.attachment("b"));
    for x in [&mut a, &mut b] {
        let pad = 64 - x.cid.len();
        x.cid = format!("{}{}", "c".repeat(pad), x.cid);
    }
    node.call("ADD", &a, &config).expect_result("ADD a");
    assert_cni_error(&node.call("ADD", &b, &config), 105, &[&a.cid]);
    node.call("DEL", &a, &config).expect_silent_success("DEL a");
    node.call("ADD", &b, &config)
        .expect_result("ADD b once a is gone");
    node.call("DEL", &b, &config).expect_silent_success("DEL b");
}
