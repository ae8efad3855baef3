//! Services between pods of one node (src/firewall/ports/services.rs), with a kube-proxy-like
//! DNAT of the test's own: a "ClusterIP" in a table the test makes in a private node, as
//! kube-proxy's nftables mode writes one (a DNAT per Service in prerouting, a mark on
//! hairpin connections, masquerade of the mark in postrouting). Pod A reaches pod B of
//! the same bridge through it and the answer comes from the Service address; pod A
//! reaches itself through it. Once with bridged traffic passing netfilter (br_netfilter:
//! B sees A's own address) and once without (academy masquerades DNATed traffic that
//! leaves by its bridge: B sees the gateway).

use std::process::Child;

use serde_json::{json, Value};

use crate::common::nft::nft_in;
use crate::common::outside::{connect, listen};
use crate::common::*;

const TO_B: &str = "10.96.0.10";
const TO_A: &str = "10.96.0.11";

/// A listener that is killed if the test ends before it answered.
struct Listener(Option<Child>);

impl Listener {
    fn start(netns: &str) -> Listener {
        Listener(Some(listen(netns, "0.0.0.0", 8080)))
    }

    /// The peer address it saw.
    fn peer(mut self) -> String {
        let out = self.0.take().unwrap().wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn in_node(node: &Node, argv: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns];
    all.extend_from_slice(argv);
    run("ip", &all, &[])
}

/// kube-proxy's part, as its nftables mode writes it, for two Services.
fn kube_proxy(node: &Node, a: &str, b: &str) {
    let ruleset = format!(
        "table ip kube-test {{\n\
           chain services {{ type nat hook prerouting priority dstnat; policy accept;\n\
             ip daddr {TO_B} tcp dport 80 dnat to {b}:8080\n\
             ip daddr {TO_A} tcp dport 80 ip saddr {a} meta mark set mark or 0x4000\n\
             ip daddr {TO_A} tcp dport 80 dnat to {a}:8080\n\
           }}\n\
           chain masquerading {{ type nat hook postrouting priority srcnat; policy accept;\n\
             meta mark & 0x4000 == 0x4000 masquerade\n\
           }}\n\
         }}\n"
    );
    let file = node.lab.root.join("kube-test.nft");
    std::fs::write(&file, ruleset).unwrap();
    let out = in_node(node, &["nft", "-f", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out}");
}

/// Whether bridged IPv4 and IPv6 traffic passes netfilter in the node.
fn bridged_netfilter(node: &Node, v4: bool, v6: bool) {
    for (family, on) in [("iptables", v4), ("ip6tables", v6)] {
        let value = if on { "1" } else { "0" };
        let key = format!("net.bridge.bridge-nf-call-{family}={value}");
        let out = in_node(node, &["sysctl", "-q", "-w", &key]);
        assert_eq!(out.code, 0, "{out}");
    }
}

fn pods(node: &Node, config: &Value) -> (Attach, String, Attach, String, String) {
    let lab = node.lab;
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let ra = node.call("ADD", &a, config);
    let rb = node.call("ADD", &b, config);
    let (ia, ib) = (
        result_address(&ra.expect_result("ADD a")),
        result_address(&rb.expect_result("ADD b")),
    );
    for x in [&a, &b] {
        let out = run("ip", &["-n", &x.netns, "link", "set", "lo", "up"], &[]);
        assert_eq!(out.code, 0, "{out}");
    }
    (a, ia, b, ib, ra.stderr)
}

/// The lab's network is IPv4 only: bridged IPv4 traffic passing netfilter (`bridged`) is
/// what decides, whatever IPv6's sysctl says (`v6`).
fn walk(bridged: bool, v6: bool) {
    let lab = Lab::new(match (bridged, v6) {
        (true, true) => "svcbr",
        (true, false) => "svcbr4",
        (false, _) => "svcnobr",
    });
    let node = Node::new(&lab);
    bridged_netfilter(&node, bridged, v6);
    let config = lab.config_with("1.1.0", "hairpinMode", json!(true));
    let (a, ia, b, ib, add_log) = pods(&node, &config);
    kube_proxy(&node, &ia, &ib);

    let listener = Listener::start(&b.netns);
    assert_eq!(
        connect(&a.netns, TO_B, 80),
        "hello",
        "A through the Service to B"
    );
    let seen = listener.peer();
    let to_self = Listener::start(&a.netns);
    assert_eq!(
        connect(&a.netns, TO_A, 80),
        "hello",
        "A through the Service to itself"
    );
    drop(to_self);

    let status = || node.run(&lab.call("STATUS").config(&config));
    if bridged {
        assert_eq!(seen, ia, "with br_netfilter B sees A's own address");
        // Nothing on stderr either way (quiet success): the kernel says which.
        assert!(!add_log.contains("netfilter"), "{add_log}");
        let hairpin = nft_in(
            Some(&node.ns),
            &["list", "set", "inet", "academy", "_hairpin"],
        );
        assert!(!hairpin.stdout.contains(&lab.bridge), "no mark: {hairpin}");
        status().expect_silent_success("STATUS");
    } else {
        assert_eq!(
            seen,
            lab.gateway(),
            "without br_netfilter B sees the gateway"
        );
        assert!(!add_log.contains("netfilter"), "{add_log}");
        let hairpin = nft_in(
            Some(&node.ns),
            &["list", "set", "inet", "academy", "_hairpin"],
        );
        assert!(hairpin.stdout.contains(&lab.bridge), "the mark: {hairpin}");
        status().expect_silent_success("STATUS");
        // The mark is the bridge's network state: reported, restored, released.
        let element = format!("{{ {} . {} }}", lab.bridge, lab.bridge);
        node.nft(&["delete", "element", "inet", "academy", "_hairpin", &element]);
        assert_cni_error(&status(), 50, &["hairpin mark", &lab.bridge]);
        lab.write_conflist("1.1.0", "academy", json!({"hairpinMode": true}));
        let conf_dir = lab.conf_dir.to_str().unwrap();
        let out = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(out.code, 0, "{out}");
        status().expect_silent_success("STATUS after restore");
        let listener = Listener::start(&b.netns);
        assert_eq!(connect(&a.netns, TO_B, 80), "hello", "after restore");
        assert_eq!(listener.peer(), lab.gateway());
    }
    for x in [&a, &b] {
        node.call("DEL", x, &config).expect_silent_success("DEL");
    }
    let hairpin = nft_in(
        Some(&node.ns),
        &["list", "set", "inet", "academy", "_hairpin"],
    );
    assert!(!hairpin.stdout.contains(&lab.bridge), "{hairpin}");
}

#[test]
fn services_between_pods_of_one_bridge_with_br_netfilter() {
    walk(true, true);
}

/// An IPv4 network's pods reach IPv4 Services only: bridged IPv6 traffic left out of
/// netfilter does not put them behind the hairpin masquerade (B still sees A).
#[test]
fn services_of_an_ipv4_network_follow_the_ipv4_sysctl_alone() {
    walk(true, false);
}

#[test]
fn services_between_pods_of_one_bridge_without_br_netfilter() {
    walk(false, true);
}
