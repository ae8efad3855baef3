//! Where the FORWARD policy drops, ADD appends the bridge's three accepts in both
//! families, listed by iptables as iptables itself writes them; where it accepts (or
//! iptables has no table), nothing.

use serde_json::json;

use super::{accepts, deletion, dropping_node, iptables, want_accepts, Peer};
use crate::common::*;

#[test]
fn a_dropping_forward_policy_is_answered_with_the_bridge_s_accept_rules() {
    let lab = Lab::new("fwdrop");
    let node = dropping_node(&lab);
    let outside = Peer::new(&lab, &node, "out", false);
    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let a = lab.attachment("a");
    node.call("ADD", &a, &config)
        .expect_result("ADD behind a dropping FORWARD policy");
    assert!(
        ping_from(&a.netns, &outside.far_v4, 3),
        "the container does not reach the outside through the node"
    );
    // What iptables-nft itself lists, in both families.
    for family in ["4", "6"] {
        assert_eq!(
            accepts(&node, family),
            want_accepts(&lab.bridge),
            "{family}"
        );
        let listed = iptables(&node, family, &["-S", "FORWARD"]).stdout;
        assert!(listed.contains("-P FORWARD DROP"), "{listed}");
    }

    // Negative control: without academy's rules the policy drops the container's traffic.
    // (Deleted as an admin would, by the spec iptables-nft lists for them.)
    for spec in accepts(&node, "4") {
        let out = iptables(&node, "4", &deletion(&spec));
        assert_eq!(out.code, 0, "{spec}: {out}");
    }
    assert!(
        !ping_from(&a.netns, &outside.far_v4, 1),
        "reached the outside with the policy dropping and no accept rule"
    );
    // The next ADD on the network puts them back, once.
    let b = lab.attachment("b");
    node.call("ADD", &b, &config).expect_result("the next ADD");
    node.call("ADD", &b, &config)
        .expect_result("a repeated ADD");
    assert!(ping_from(&a.netns, &outside.far_v4, 3), "not restored");
    assert_eq!(accepts(&node, "4"), want_accepts(&lab.bridge));
    for x in [&a, &b] {
        node.call("DEL", x, &config).expect_silent_success("DEL");
    }
    // The network's last attachment gone, its accepts go too.
    for family in ["4", "6"] {
        assert_eq!(accepts(&node, family), Vec::<String>::new(), "{family}");
    }
}

/// Without a dropping policy (or without iptables' table at all) nothing is written.
#[test]
fn an_accepting_forward_policy_gets_nothing() {
    let lab = Lab::new("fwacc");
    let node = Node::new(&lab);
    let a = lab.attachment("a");
    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    node.call("ADD", &a, &config)
        .expect_result("ADD without iptables");
    let tables = node.nft(&["list", "tables"]).stdout;
    assert!(!tables.contains("ip filter"), "{tables}");
    assert_eq!(iptables(&node, "4", &["-P", "FORWARD", "ACCEPT"]).code, 0);
    let b = lab.attachment("b");
    node.call("ADD", &b, &config)
        .expect_result("ADD with an accepting policy");
    assert!(accepts(&node, "4").is_empty());
    for x in [&a, &b] {
        node.call("DEL", x, &config).expect_silent_success("DEL");
    }
}

/// iptables' tables deleted between ADD's look at the FORWARD policy and its batch (an
/// admin's `nft flush ruleset`, a firewall's reload): the accepts are asked for again,
/// there is no dropping policy left, and ADD succeeds writing nothing there. It failed
/// with code 100 (ENOENT, the chain gone) before: the soak, seed 5151, beside a flush.
#[test]
fn iptables_tables_deleted_before_the_accepts_are_sent_fail_no_add() {
    let lab = Lab::new("fwgone");
    let node = dropping_node(&lab);
    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let a = lab.attachment("a");
    let hold = TestHold::new(&lab.data_dir, "hold-wants");
    let add = start(
        &lab.call_for("ADD", &a).config(&config),
        "ip",
        &["netns", "exec", &node.ns, plugin()],
        &[("ACADEMY_TEST_HOLD_WANTS", hold.path())],
    );
    assert!(
        hold.reached(std::time::Duration::from_secs(20)),
        "ADD never made its FORWARD wants"
    );
    node.nft(&["delete", "table", "ip", "filter"]);
    node.nft(&["delete", "table", "ip6", "filter"]);
    hold.release();
    let result = add
        .finish()
        .expect_result("ADD whose FORWARD chains went meanwhile");
    let tables = node.nft(&["list", "tables"]).stdout;
    assert!(
        !tables.contains("ip filter") && !tables.contains("ip6 filter"),
        "ADD made iptables' tables again:\n{tables}"
    );
    let mut check = config.clone();
    check["prevResult"] = result;
    node.call("CHECK", &a, &check)
        .expect_silent_success("CHECK with no FORWARD policy left");
    node.call("DEL", &a, &config).expect_silent_success("DEL");
}
