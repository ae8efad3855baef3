//! iptables reloads and flushes in the node: `iptables-save | iptables-restore` re-makes
//! every rule (a user-data comment comes back as an xt `comment` match), `iptables -F
//! FORWARD` takes academy's accepts and keeps the dropping policy. academy recognises
//! its accepts by comment in either form, never appends a second copy, reports what a
//! flush took and puts it back with `academy restore`.

use serde_json::{json, Value};

use super::{accepts, dropping_node, iptables, want_accepts, Peer};
use crate::common::*;

/// `iptables-nft-save | iptables-nft-restore` (or ip6tables') in the node.
fn save_and_restore(node: &Node, family: &str) {
    let tool = if family == "6" {
        "ip6tables"
    } else {
        "iptables"
    };
    let out = run(
        "ip",
        &[
            "netns",
            "exec",
            &node.ns,
            "sh",
            "-c",
            &format!("{tool}-nft-save | {tool}-nft-restore"),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{tool}-nft-save | {tool}-nft-restore: {out}");
}

/// The handle of iptables' table `filter` in the node: iptables-nft-restore deletes
/// the table and makes it again, under a new handle.
fn table_handle(node: &Node, family: &str) -> String {
    let table = if family == "6" { "ip6" } else { "ip" };
    let listed = node.nft(&["-a", "list", "table", table, "filter"]).stdout;
    listed
        .lines()
        .find(|l| l.starts_with("table "))
        .and_then(|l| l.split("# handle ").nth(1))
        .unwrap_or_else(|| panic!("no table handle in:\n{listed}"))
        .to_string()
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

fn with_prev(config: &Value, result: &Value) -> Value {
    let mut c = config.clone();
    c["prevResult"] = result.clone();
    c
}

#[test]
fn forward_accepts_survive_iptables_save_and_restore_without_duplicates() {
    let lab = Lab::new("fwsave");
    let node = dropping_node(&lab);
    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let a = lab.attachment("a");
    let first = node.call("ADD", &a, &config).expect_result("first ADD");
    let mut reloaded = Vec::new();
    for family in ["4", "6"] {
        let before = table_handle(&node, family);
        save_and_restore(&node, family);
        let after = table_handle(&node, family);
        assert_ne!(
            before, after,
            "the reload did not re-make the table ({family})"
        );
        reloaded.push(accepts(&node, family));
    }
    // Every ADD looks by comment: five more add nothing.
    let more: Vec<Attach> = (0..5).map(|i| lab.attachment(&format!("m{i}"))).collect();
    for x in &more {
        node.call("ADD", x, &config)
            .expect_result("ADD after the reload");
    }
    for (family, reloaded) in ["4", "6"].into_iter().zip(&reloaded) {
        assert_eq!(
            &accepts(&node, family),
            reloaded,
            "ADDs after the reload changed the accepts ({family})"
        );
        assert_eq!(reloaded, &want_accepts(&lab.bridge), "{family}");
    }
    node.call("CHECK", &a, &with_prev(&config, &first))
        .expect_silent_success("CHECK after the reload");
    node.run(&lab.call("STATUS").config(&config))
        .expect_silent_success("STATUS after the reload");
    for x in more.iter().chain([&a]) {
        node.call("DEL", x, &config).expect_silent_success("DEL");
    }
}

#[test]
fn a_flushed_forward_chain_is_reported_and_restore_puts_it_back() {
    let lab = Lab::new("fwflush");
    let node = dropping_node(&lab);
    let outside = Peer::new(&lab, &node, "out", false);
    lab.write_conflist("1.1.0", "academy", json!({"ipMasq": true}));
    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let a = lab.attachment("a");
    let first = node.call("ADD", &a, &config).expect_result("ADD");
    assert!(ping_from(&a.netns, &outside.far_v4, 3), "no forwarding");
    for family in ["4", "6"] {
        assert_eq!(iptables(&node, family, &["-F", "FORWARD"]).code, 0);
        assert!(accepts(&node, family).is_empty());
    }
    assert!(
        !ping_from(&a.netns, &outside.far_v4, 1),
        "forwarded with the chain flushed and the policy dropping"
    );

    let comments = [
        format!("academy: replies to bridge {}", lab.bridge),
        format!("academy: published ports of bridge {}", lab.bridge),
        format!("academy: forwarding from bridge {}", lab.bridge),
    ];
    let mut needles: Vec<&str> = comments.iter().map(String::as_str).collect();
    needles.extend(["ip filter FORWARD", "ip6 filter FORWARD"]);
    let status = node.run(&lab.call("STATUS").config(&config));
    let error = assert_cni_error(&status, 50, &needles);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    let check = node.call("CHECK", &a, &with_prev(&config, &first));
    let error = assert_cni_error(&check, 120, &needles);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );

    let conf_dir = lab.conf_dir.to_str().unwrap();
    let restored = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(restored.code, 0, "{restored}");
    assert!(restored.stderr.contains("FORWARD accepts"), "{restored}");
    for family in ["4", "6"] {
        assert_eq!(
            accepts(&node, family),
            want_accepts(&lab.bridge),
            "{family}"
        );
    }
    assert!(
        ping_from(&a.netns, &outside.far_v4, 3),
        "no forwarding after restore"
    );
    node.run(&lab.call("STATUS").config(&config))
        .expect_silent_success("STATUS after restore");
    node.call("CHECK", &a, &with_prev(&config, &first))
        .expect_silent_success("CHECK after restore");
    let again = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(again.code, 0, "{again}");
    assert!(again.stderr.contains("nothing to do"), "{again}");
    node.call("DEL", &a, &config).expect_silent_success("DEL");
}

/// An earlier academy wrote `-o BR -j ACCEPT` (all traffic to the bridge) and `-i BR`,
/// with user-data comments. Its `-i` rule is recognised in both forms (as it is, and
/// after a reload turned its comment into a match) and kept; its wider `-o` is deleted.
#[test]
fn an_earlier_academy_s_wider_accept_is_replaced() {
    let lab = Lab::new("fwold");
    let node = dropping_node(&lab);
    let bridge = &lab.bridge;
    for (family, table) in [("4", "ip"), ("6", "ip6")] {
        for (key, direction) in [("oifname", "to"), ("iifname", "from")] {
            let comment = format!("\"academy: forwarding {direction} bridge {bridge}\"");
            node.nft(&[
                "add", "rule", table, "filter", "FORWARD", key, bridge, "counter", "accept",
                "comment", &comment,
            ]);
        }
        assert_eq!(accepts(&node, family).len(), 2, "{family}");
    }
    save_and_restore(&node, "6");
    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let a = lab.attachment("a");
    node.call("ADD", &a, &config)
        .expect_result("ADD over the older rules");
    for family in ["4", "6"] {
        assert_eq!(
            sorted(accepts(&node, family)),
            sorted(want_accepts(bridge)),
            "{family}"
        );
    }
    node.call("DEL", &a, &config).expect_silent_success("DEL");
    for family in ["4", "6"] {
        assert!(accepts(&node, family).is_empty(), "{family}");
    }
}
