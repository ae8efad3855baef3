//! A network's own nf_tables objects live as long as it has attachments, with
//! `releaseUnusedAfter` 0 (src/firewall/network/; network_grace.rs has the grace): after many networks each used and emptied, academy's
//! tables hold nothing of them and the postrouting chain holds the rules of the networks
//! in use only; a DEL of a network's last attachment racing the first ADD of its next
//! one never leaves the new attachment without its rule.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::nft::nft_in;
use crate::common::*;

/// Network `i` of a lab: its own name, bridge and /24 (the node is private, so any
/// subnet will do), with ipMasq; every tenth also with the MAC filter and a published
/// port (each kind's network objects are made and released, at a tenth of the cost).
fn network(lab: &Lab, i: usize) -> Value {
    let (hi, lo) = (16 + i / 256, i % 256);
    if i % 10 != 0 {
        return json!({
            "cniVersion": "1.1.0",
            "name": format!("{}-{i}", lab.network),
            "type": "academy",
            "bridge": format!("nlb{i}"),
            "subnet": format!("172.{hi}.{lo}.0/24"),
            "gateway": format!("172.{hi}.{lo}.1"),
            "dataDir": lab.data_dir.to_str().unwrap(),
            "ipMasq": true,
            "releaseUnusedAfter": 0,
        });
    }
    json!({
        "cniVersion": "1.1.0",
        "name": format!("{}-{i}", lab.network),
        "type": "academy",
        "bridge": format!("nlb{i}"),
        "subnet": format!("172.{hi}.{lo}.0/24"),
        "gateway": format!("172.{hi}.{lo}.1"),
        "dataDir": lab.data_dir.to_str().unwrap(),
        "ipMasq": true,
        "releaseUnusedAfter": 0,
        "macspoofchk": true,
        "capabilities": {"portMappings": true},
        "runtimeConfig": {"portMappings": [
            {"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"}
        ]},
    })
}

fn ruleset(node: &Node) -> Value {
    let out = nft_in(Some(&node.ns), &["-j", "list", "ruleset"]);
    assert_eq!(out.code, 0, "{out}");
    serde_json::from_str(out.stdout.trim()).unwrap()
}

/// The names of academy's per-network sets and the comments of its masquerade and MAC
/// filter rules, in the node.
fn per_network(node: &Node) -> (BTreeSet<String>, Vec<String>) {
    let v = ruleset(node);
    let mut sets = BTreeSet::new();
    let mut rules = Vec::new();
    for item in v["nftables"].as_array().into_iter().flatten() {
        for key in ["set", "map"] {
            if let Some(name) = item[key]["name"].as_str() {
                if !name.starts_with('_') {
                    sets.insert(name.to_string());
                }
            }
        }
        let comment = item["rule"]["comment"].as_str().unwrap_or("");
        if comment.starts_with("academy ipMasq ") || comment.starts_with("academy macspoofchk ") {
            rules.push(comment.to_string());
        }
    }
    (sets, rules)
}

fn in_node(node: &Node, argv: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns];
    all.extend_from_slice(argv);
    run("ip", &all, &[])
}

#[test]
fn a_thousand_networks_used_and_emptied_leave_nothing() {
    let lab = Lab::new("netlife");
    let node = Node::new(&lab);
    // Docker's policy: each network's FORWARD accepts are made, and must go too.
    assert_eq!(
        in_node(&node, &["iptables-nft", "-P", "FORWARD", "DROP"]).code,
        0
    );
    let threads = 4;
    let per_thread = 250;
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (lab, node) = (&lab, &node);
            s.spawn(move || {
                let a = lab.attachment(&format!("t{t}"));
                for k in 0..per_thread {
                    let config = network(lab, t * per_thread + k);
                    node.call("ADD", &a, &config).expect_result("ADD");
                    node.call("DEL", &a, &config).expect_silent_success("DEL");
                }
            });
        }
    });
    eprintln!(
        "{} networks used and emptied in {:?}",
        threads * per_thread,
        started.elapsed()
    );
    let (sets, rules) = per_network(&node);
    assert_eq!(sets, BTreeSet::new(), "per-network sets left");
    assert_eq!(rules, Vec::<String>::new(), "per-network rules left");
    let forward = in_node(&node, &["iptables-nft", "-S", "FORWARD"]);
    assert!(!forward.stdout.contains("academy"), "{forward}");
    let hairpin = nft_in(
        Some(&node.ns),
        &["list", "set", "inet", "academy", "_hairpin"],
    );
    assert!(!hairpin.stdout.contains(&lab.bridge), "{hairpin}");

    // Three networks in use: the chain holds their three rules, nothing more.
    for i in 0..3 {
        let a = lab.attachment(&format!("inuse{i}"));
        node.call("ADD", &a, &network(&lab, 2000 + 10 * i))
            .expect_result("ADD in use");
    }
    let (sets, rules) = per_network(&node);
    assert_eq!(
        rules.len(),
        3 + 3,
        "one masquerade and one MAC filter rule each: {rules:?}"
    );
    assert_eq!(sets.len(), 3 * (1 + 3), "{sets:?}");
}

/// DEL of a network's last attachment and the first ADD of its next one, at once, many
/// times: whichever wins, the new attachment ends with its element and the network's one
/// rule, and its CHECK passes.
#[test]
fn the_last_del_racing_a_first_add_never_loses_the_rule() {
    let lab = Lab::new("netrace");
    let node = Node::new(&lab);
    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    node.call("ADD", &a, &config).expect_result("ADD a");
    let (mut holder, mut next) = (&a, &b);
    for round in 0..30 {
        let (del, add) = std::thread::scope(|s| {
            let del = s.spawn(|| node.call("DEL", holder, &config));
            let add = s.spawn(|| node.call("ADD", next, &config));
            (del.join().unwrap(), add.join().unwrap())
        });
        del.expect_silent_success("DEL of the last attachment");
        let result = add.expect_result("the first ADD of the next");
        let rules = node.rules("v4");
        assert_eq!(rules.len(), 1, "round {round}: rules {rules:?}");
        let element = format!(
            "{} {}",
            result_address(&result),
            owner_comment(&lab.network, &next.cid, "eth0")
        );
        assert_eq!(node.elements(), BTreeSet::from([element]), "round {round}");
        let mut check = config.clone();
        check["prevResult"] = result.clone();
        node.call("CHECK", next, &check)
            .expect_silent_success("CHECK of the new attachment");
        std::mem::swap(&mut holder, &mut next);
    }
    node.call("DEL", holder, &config)
        .expect_silent_success("DEL of the last");
    assert_eq!(node.rules("v4"), Vec::<String>::new());
}

/// A network's first ADD beside another ipMasq network sends no NEWCHAIN for the
/// postrouting chain that already holds academy's rules: the kernel keeps such an update
/// for an RCU grace period, which the nf_tables socket's close then waited out (8-12 ms,
/// the first ADD 2.1 times an ordinary one).
#[test]
fn a_first_add_beside_another_network_does_not_remake_the_chain() {
    let lab = Lab::new("nlchain");
    let node = Node::new(&lab);
    let (one, two) = (network(&lab, 1), network(&lab, 2));
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    node.call("ADD", &a, &one)
        .expect_result("ADD a, the first network's");
    let file = lab.root.join("first-add.trace");
    let mut args = vec![
        "netns".to_string(),
        "exec".into(),
        node.ns.clone(),
        "strace".into(),
    ];
    args.extend(strace_args(&file, "sendto", None));
    args.insert(4, "-v".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    lab.call_for("ADD", &b)
        .config(&two)
        .spawn("ip", &args)
        .expect_result("the second network's first ADD, under strace");
    let trace = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        trace.contains("NFT_MSG_NEWSET"),
        "the first ADD's batch made no set, or strace no longer decodes it:\n{trace}"
    );
    assert!(
        !trace.contains("NFT_MSG_NEWCHAIN"),
        "the first ADD sent the existing chain again:\n{trace}"
    );
    let chain = node.nft(&["list", "chain", "inet", "academy", "postrouting"]);
    assert_eq!(chain.stdout.matches(" masquerade ").count(), 2, "{chain}");
    node.call("DEL", &b, &two).expect_silent_success("DEL b");
    node.call("DEL", &a, &one).expect_silent_success("DEL a");
}
