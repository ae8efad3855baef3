//! A host whose iptables FORWARD policy drops (Docker sets it): academy accepts its
//! bridge's forwarding there itself, in the form iptables-nft lists, so a converted
//! network needs no `firewall` plugin. In a private node netns (its own `ip filter`
//! table) with an outside of the test's own behind it.

use serde_json::json;

use crate::common::*;

/// `iptables-nft ARGS` inside the node.
fn iptables(node: &Node, args: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns, "iptables-nft"];
    all.extend_from_slice(args);
    run("ip", &all, &[])
}

/// `-A FORWARD -i br -m comment --comment "a b" -j ACCEPT` split as a shell would.
fn shell_words(line: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        let (word, tail) = match rest.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').unwrap_or(quoted.len());
                (&quoted[..end], quoted.get(end + 1..).unwrap_or(""))
            }
            None => rest.split_at(rest.find(' ').unwrap_or(rest.len())),
        };
        words.push(word);
        rest = tail.trim_start();
    }
    words
}

#[test]
fn a_dropping_forward_policy_is_answered_with_the_bridge_s_accept_rules() {
    let lab = Lab::new("fwdrop");
    let node = Node::new(&lab);
    // The outside: a netns joined to the node by a veth, no route back to the pods.
    let outside = lab.add_netns("out");
    let (inner, outer) = (lab.slot.link_name("fwi"), lab.slot.link_name("fwo"));
    ip(&[
        "link", "add", &inner, "netns", &node.ns, "type", "veth", "peer", "name", &outer, "netns",
        &outside,
    ]);
    ip(&[
        "-n",
        &node.ns,
        "addr",
        "add",
        "198.51.100.1/24",
        "dev",
        &inner,
    ]);
    ip(&["-n", &node.ns, "link", "set", &inner, "up"]);
    ip(&[
        "-n",
        &outside,
        "addr",
        "add",
        "198.51.100.2/24",
        "dev",
        &outer,
    ]);
    ip(&["-n", &outside, "link", "set", &outer, "up"]);
    let sysctl = run(
        "ip",
        &[
            "netns",
            "exec",
            &node.ns,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ],
        &[],
    );
    assert_eq!(sysctl.code, 0, "{sysctl}");
    let policy = iptables(&node, &["-P", "FORWARD", "DROP"]);
    assert_eq!(policy.code, 0, "{policy}");

    let config = lab.config_with("1.1.0", "ipMasq", json!(true));
    let a = lab.attachment("a");
    node.call("ADD", &a, &config)
        .expect_result("ADD behind a dropping FORWARD policy");
    assert!(
        ping_from(&a.netns, "198.51.100.2", 3),
        "the container does not reach the outside through the node"
    );
    // What iptables-nft itself lists.
    let listed = iptables(&node, &["-S", "FORWARD"]);
    assert_eq!(listed.code, 0, "{listed}");
    for rule in [
        format!("-A FORWARD -i {} ", lab.bridge),
        format!("-A FORWARD -o {} ", lab.bridge),
    ] {
        assert!(listed.stdout.contains(&rule), "{rule:?} not in:\n{listed}");
    }
    assert!(listed.stdout.contains("-P FORWARD DROP"), "{listed}");

    // Negative control: without academy's rules the policy drops the container's traffic.
    // (Deleted as an admin would, by the spec iptables-nft lists for them.)
    for spec in listed.stdout.lines().filter(|l| l.contains(&lab.bridge)) {
        let mut args: Vec<&str> = shell_words(spec);
        args[0] = "-D";
        let out = iptables(&node, &args);
        assert_eq!(out.code, 0, "{spec}: {out}");
    }
    assert!(
        !ping_from(&a.netns, "198.51.100.2", 1),
        "reached the outside with the policy dropping and no accept rule"
    );
    // The next ADD on the network puts them back, once.
    let b = lab.attachment("b");
    node.call("ADD", &b, &config).expect_result("the next ADD");
    node.call("ADD", &b, &config)
        .expect_result("a repeated ADD");
    assert!(ping_from(&a.netns, "198.51.100.2", 3), "not restored");
    let listed = iptables(&node, &["-S", "FORWARD"]).stdout;
    assert_eq!(
        listed.matches(&format!("-i {} ", lab.bridge)).count(),
        1,
        "{listed}"
    );
    for x in [&a, &b] {
        node.call("DEL", x, &config).expect_silent_success("DEL");
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
    assert_eq!(iptables(&node, &["-P", "FORWARD", "ACCEPT"]).code, 0);
    let b = lab.attachment("b");
    node.call("ADD", &b, &config)
        .expect_result("ADD with an accepting policy");
    let listed = iptables(&node, &["-S", "FORWARD"]).stdout;
    assert!(!listed.contains(&lab.bridge), "{listed}");
    for x in [&a, &b] {
        node.call("DEL", x, &config).expect_silent_success("DEL");
    }
}
