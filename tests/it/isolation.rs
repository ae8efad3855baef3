//! `"ingressPolicy": "same-bridge"`: networks that both set it cannot reach each other
//! through the node, either way; the node, the outside, a network's own bridge and the
//! networks without the key are unaffected. The same probes are run against the
//! reference (bridge + host-local + firewall 1.1.1 with the policy, under cnitool) and
//! against academy (the same conflists through `academy convert`, which carries the
//! policy into academy's entry), each in a private node netns of its own with three
//! networks and an outside netns behind the node, and the two outcome tables must be
//! equal. Then academy alone: a flush is reported by STATUS and CHECK and undone by
//! `academy restore`, and a network's last DEL (or GC emptying it) leaves nothing of
//! its isolation.
//! Packets go only between namespaces the test made.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::common::nft::nft_in;
use crate::common::*;

const CNITOOL: &str = "/usr/local/bin/cnitool";

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plugin {
    Reference,
    Academy,
}

/// One network of a site: its CNI name, bridge, subnet and gateway, and whether it sets
/// the key.
#[derive(Clone)]
struct Net {
    key: &'static str,
    name: String,
    bridge: String,
    subnet: String,
    gateway: String,
    isolated: bool,
}

/// A container: its netns and the address its ADD gave it.
struct Container {
    netns: String,
    address: String,
    result: Value,
}

/// One plugin's private node: the networks' conflists in a conf dir of its own, an
/// outside netns joined to the node by a veth (the outside routes everything back
/// through the node), and the plugins run inside the node under cnitool.
struct Site<'a> {
    lab: &'a Lab,
    tag: &'static str,
    plugin: Plugin,
    node: String,
    outside: String,
    far: String,
    conf_dir: PathBuf,
}

/// A site's networks, (key, isolated): the first three quarters of the lab's /24, the
/// outside the last. Every site uses the same (each is a node of its own).
pub(crate) type Plan = [(&'static str, bool)];

fn in_ns(netns: &str, argv: &[&str], env: &[(&str, &str)]) -> Out {
    let mut all = vec!["netns", "exec", netns];
    all.extend_from_slice(argv);
    run("ip", &all, env)
}

impl<'a> Site<'a> {
    fn new(lab: &'a Lab, tag: &'static str, plugin: Plugin, plan: &Plan) -> (Site<'a>, Vec<Net>) {
        assert!(plan.len() <= 3, "a site has three networks at most");
        let node = lab.add_netns(&format!("{tag}n"));
        let outside = lab.add_netns(&format!("{tag}o"));
        let o = &lab.prefix;
        let (near, far) = (format!("{o}.193"), format!("{o}.194"));
        ip(&["-n", &node, "link", "set", "lo", "up"]);
        ip(&["-n", &outside, "link", "set", "lo", "up"]);
        ip(&[
            "-n", &node, "link", "add", "out0", "type", "veth", "peer", "name", "eth0", "netns",
            &outside,
        ]);
        let near_26 = format!("{near}/26");
        let far_26 = format!("{far}/26");
        ip(&["-n", &node, "addr", "add", &near_26, "dev", "out0"]);
        ip(&["-n", &node, "link", "set", "out0", "up"]);
        ip(&["-n", &outside, "addr", "add", &far_26, "dev", "eth0"]);
        ip(&["-n", &outside, "link", "set", "eth0", "up"]);
        ip(&["-n", &outside, "route", "add", "default", "via", &near]);
        let conf_dir = lab.root.join(format!("{tag}-net.d"));
        std::fs::create_dir_all(&conf_dir).unwrap();
        let site = Site {
            lab,
            tag,
            plugin,
            node,
            outside,
            far,
            conf_dir,
        };
        let nets = (0u8..)
            .zip(plan)
            .map(|(i, (key, isolated))| Net {
                key,
                name: format!("{}-{tag}{key}", lab.network),
                bridge: format!("iso-{tag}{key}"),
                subnet: format!("{o}.{}/26", 64 * i),
                gateway: format!("{o}.{}", 64 * i + 1),
                isolated: *isolated,
            })
            .collect();
        (site, nets)
    }

    /// The reference's conflist of `net`, podman's shape: bridge + host-local, then the
    /// firewall plugin, with the policy when the network is isolated.
    fn reference_list(&self, net: &Net) -> Value {
        let mut firewall = json!({"type": "firewall", "backend": ""});
        if net.isolated {
            firewall["ingressPolicy"] = json!("same-bridge");
        }
        let data = self.lab.root.join(format!("{}-{}-data", self.tag, net.key));
        json!({"cniVersion": "1.0.0", "name": net.name, "plugins": [
            {"type": "bridge", "bridge": net.bridge, "isGateway": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": net.subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": data}},
            firewall
        ]})
    }

    /// Writes `net`'s conflist into the site's conf dir: the reference's as it is, or
    /// for academy what `academy convert` (run in the node) makes of it.
    fn write(&self, net: &Net) {
        let list = self.reference_list(net);
        let path = self.conf_dir.join(format!("{}.conflist", net.name));
        let text = list.to_string();
        let text = match self.plugin {
            Plugin::Reference => text,
            Plugin::Academy => {
                let source = self
                    .lab
                    .root
                    .join(format!("{}-{}.reference", self.tag, net.key));
                std::fs::write(&source, &text).unwrap();
                let out = in_ns(
                    &self.node,
                    &[plugin(), "convert", source.to_str().unwrap()],
                    &[],
                );
                assert_eq!(out.code, 0, "convert {}:\n{out}", net.name);
                let converted: Value = out.json();
                let plugins = converted["plugins"].as_array().unwrap();
                assert_eq!(plugins.len(), 1, "convert kept a plugin: {converted}");
                let policy = plugins[0].get("ingressPolicy").and_then(Value::as_str);
                assert_eq!(policy, net.isolated.then_some("same-bridge"), "{converted}");
                // These tests expect a network's isolation gone with its last DEL, as
                // the reference's rules go (network_grace.rs tests the grace).
                let mut converted = converted;
                converted["plugins"][0]["releaseUnusedAfter"] = json!(0);
                converted.to_string()
            }
        };
        std::fs::write(path, text).unwrap();
    }

    fn cni_path(&self) -> String {
        match self.plugin {
            Plugin::Reference => REFERENCE_BIN.to_string(),
            Plugin::Academy => self.lab.bin_dir.to_str().unwrap().to_string(),
        }
    }

    fn cnitool(&self, verb: &str, net: &Net, netns: &str) -> Out {
        let path = netns_path(netns);
        let (cni_path, conf_dir) = (self.cni_path(), self.conf_dir.to_str().unwrap().to_string());
        in_ns(
            &self.node,
            &[CNITOOL, verb, &net.name, &path],
            &[("CNI_PATH", &cni_path), ("NETCONFPATH", &conf_dir)],
        )
    }

    /// A container on `net`, in a netns of its own, added by cnitool.
    fn add(&self, net: &Net, n: u8) -> Container {
        let netns = self.lab.add_netns(&format!("{}{}{n}", self.tag, net.key));
        let out = self.cnitool("add", net, &netns);
        let result = out.expect_result(&format!("cnitool add {}", net.name));
        Container {
            netns,
            address: result_address(&result),
            result,
        }
    }

    fn del(&self, net: &Net, c: &Container) {
        let out = self.cnitool("del", net, &c.netns);
        assert_eq!(out.code, 0, "cnitool del {}:\n{out}", net.name);
    }

    /// academy's entry of `net` as a runtime sends it for `verb` (direct invocations).
    fn entry(&self, net: &Net) -> Value {
        let path = self.conf_dir.join(format!("{}.conflist", net.name));
        let list: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut entry = list["plugins"][0].clone();
        entry["cniVersion"] = json!("1.1.0");
        entry["name"] = list["name"].clone();
        entry
    }

    /// academy's `verb` (CHECK, STATUS) for a container of `net`, inside the node.
    fn academy(&self, verb: &str, net: &Net, c: &Container) -> Out {
        let mut config = self.entry(net);
        if verb == "CHECK" {
            config["prevResult"] = c.result.clone();
        }
        let who = cnitool_container_id(&netns_path(&c.netns));
        Call::bare()
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", &who)
            .env("CNI_NETNS", &netns_path(&c.netns))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", &self.cni_path())
            .config(&config)
            .spawn("ip", &["netns", "exec", &self.node, plugin()])
    }

    fn nft(&self, args: &[&str]) -> Out {
        nft_in(Some(&self.node), args)
    }

    /// The elements of `_isolated` in the node, as "a . b".
    fn isolated(&self) -> BTreeSet<String> {
        let out = self.nft(&["-j", "list", "set", "inet", "academy", "_isolated"]);
        if out.code != 0 {
            return BTreeSet::new();
        }
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
        let mut found = BTreeSet::new();
        for item in v["nftables"].as_array().into_iter().flatten() {
            for e in item["set"]["elem"].as_array().into_iter().flatten() {
                let parts: Vec<&str> = e["concat"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                found.insert(parts.join(" . "));
            }
        }
        found
    }

    /// The text of academy's isolation rules in the node's chain forward.
    fn isolation_rules(&self) -> Vec<String> {
        let out = self.nft(&["list", "chain", "inet", "academy", "forward"]);
        out.stdout
            .lines()
            .map(str::trim)
            .filter(|l| l.contains("\"academy isolation\""))
            .map(str::to_string)
            .collect()
    }
}

/// Whether `from` reaches `to`: a pass is waited for (a port settling), a drop is two
/// pings without an answer.
fn reaches(from: &str, to: &str, expect: bool) -> bool {
    match expect {
        true => ping_eventually(from, to),
        false => ping_from(from, to, 2),
    }
}

/// The probes and what the reference's firewall plugin 1.1.1 makes of them.
pub(crate) const PROBES: [(&str, bool); 9] = [
    ("isolated A -> isolated B", false),
    ("isolated B -> isolated A", false),
    ("isolated A -> not-isolated C", true),
    ("not-isolated C -> isolated A", true),
    ("A -> A, its own bridge", true),
    ("node -> A", true),
    ("A -> node (its gateway)", true),
    ("A -> outside", true),
    ("outside -> A", true),
];

/// The outcome table of one plugin: a site with isolated A and B, C without the key,
/// two containers on A, one on B and C.
pub(crate) fn observe(lab: &Lab, tag: &'static str, plugin: Plugin, plan: &Plan) -> Vec<bool> {
    let (site, nets) = Site::new(lab, tag, plugin, plan);
    for net in &nets {
        site.write(net);
    }
    let (a, b, c) = (&nets[0], &nets[1], &nets[2]);
    let (a1, a2, b1, c1) = (
        site.add(a, 1),
        site.add(a, 2),
        site.add(b, 1),
        site.add(c, 1),
    );
    let pairs: [(&str, &str); 9] = [
        (&a1.netns, &b1.address),
        (&b1.netns, &a1.address),
        (&a1.netns, &c1.address),
        (&c1.netns, &a1.address),
        (&a1.netns, &a2.address),
        (&site.node, &a1.address),
        (&a1.netns, &a.gateway),
        (&a1.netns, &site.far),
        (&site.outside, &a1.address),
    ];
    let seen: Vec<bool> = pairs
        .iter()
        .zip(PROBES)
        .map(|((from, to), (_, expect))| reaches(from, to, expect))
        .collect();
    for (net, container) in [(a, &a1), (a, &a2), (b, &b1), (c, &c1)] {
        site.del(net, container);
    }
    seen
}

fn table(reference: &[bool], academy: &[bool]) -> String {
    let word = |b: bool| if b { "passes" } else { "dropped" };
    let mut text = format!("{:<32} {:<10} {}\n", "probe", "reference", "academy");
    for (i, (probe, _)) in PROBES.iter().enumerate() {
        text += &format!(
            "{probe:<32} {:<10} {}\n",
            word(reference[i]),
            word(academy[i])
        );
    }
    text
}

#[test]
fn isolated_networks_cannot_reach_each_other_as_with_the_reference() {
    let lab = Lab::new("isoref");
    let plan = [("a", true), ("b", true), ("c", false)];
    let reference = observe(&lab, "r", Plugin::Reference, &plan);
    let academy = observe(&lab, "a", Plugin::Academy, &plan);
    let text = table(&reference, &academy);
    println!("{text}");
    let expected: Vec<bool> = PROBES.iter().map(|(_, e)| *e).collect();
    assert_eq!(
        reference, expected,
        "the reference's own behaviour changed:\n{text}"
    );
    assert_eq!(
        academy, reference,
        "academy differs from the reference:\n{text}"
    );
}

#[test]
fn a_flush_is_reported_and_restore_puts_the_isolation_back() {
    let lab = Lab::new("isoflush");
    let plan = [("a", true), ("b", true)];
    let (site, nets) = Site::new(&lab, "f", Plugin::Academy, &plan);
    for net in &nets {
        site.write(net);
    }
    let (a, b) = (&nets[0], &nets[1]);
    let (a1, b1) = (site.add(a, 1), site.add(b, 1));
    let whole = site.isolated();
    assert_eq!(
        whole,
        BTreeSet::from([
            format!("{0} . {0}", a.bridge),
            format!("{0} . {0}", b.bridge)
        ])
    );
    let rules = site.isolation_rules();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert!(!reaches(&a1.netns, &b1.address, false), "A reached B");
    site.academy("STATUS", a, &a1)
        .expect_silent_success("STATUS after ADD");
    site.academy("CHECK", a, &a1)
        .expect_silent_success("CHECK after ADD");

    let out = site.nft(&["flush", "ruleset"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        reaches(&a1.netns, &b1.address, true),
        "the flush did not open A to B: the probe proves nothing"
    );
    let error = assert_cni_error(
        &site.academy("STATUS", a, &a1),
        50,
        &["network isolation", &a.name],
    );
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    let error = assert_cni_error(&site.academy("CHECK", a, &a1), 120, &["_isolated"]);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "CHECK's remedy: {error}"
    );

    let conf_dir = site.conf_dir.to_str().unwrap().to_string();
    let out = in_ns(
        &site.node,
        &[plugin(), "restore", "--conf-dir", &conf_dir],
        &[],
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("network isolation"), "{out}");
    assert_eq!(site.isolated(), whole, "after restore");
    assert_eq!(site.isolation_rules(), rules, "after restore");
    assert!(
        !reaches(&a1.netns, &b1.address, false),
        "A reaches B after restore"
    );
    assert!(
        !reaches(&b1.netns, &a1.address, false),
        "B reaches A after restore"
    );
    for (net, c) in [(a, &a1), (b, &b1)] {
        site.academy("STATUS", net, c)
            .expect_silent_success("STATUS after restore");
        site.academy("CHECK", net, c)
            .expect_silent_success("CHECK after restore");
    }
    let out = in_ns(
        &site.node,
        &[plugin(), "restore", "--conf-dir", &conf_dir],
        &[],
    );
    assert!(!out.stderr.contains("put back"), "a second restore: {out}");
    site.del(a, &a1);
    site.del(b, &b1);
}

#[test]
fn the_last_del_of_a_network_leaves_nothing_of_its_isolation() {
    let lab = Lab::new("isodel");
    let plan = [("a", true), ("b", true)];
    let (site, nets) = Site::new(&lab, "d", Plugin::Academy, &plan);
    for net in &nets {
        site.write(net);
    }
    let (a, b) = (&nets[0], &nets[1]);
    let (a1, a2, b1) = (site.add(a, 1), site.add(a, 2), site.add(b, 1));
    let mark = |net: &Net| format!("{0} . {0}", net.bridge);
    assert_eq!(site.isolated(), BTreeSet::from([mark(a), mark(b)]));

    site.del(a, &a1);
    assert_eq!(
        site.isolated(),
        BTreeSet::from([mark(a), mark(b)]),
        "A's isolation went while A2 is attached"
    );
    assert!(!reaches(&a2.netns, &b1.address, false), "A2 reached B");
    site.del(a, &a2);
    assert_eq!(
        site.isolated(),
        BTreeSet::from([mark(b)]),
        "after A's last DEL"
    );
    let ruleset = site.nft(&["list", "ruleset"]).stdout;
    assert!(
        !ruleset.contains(&a.bridge) && !ruleset.contains(&a.name),
        "A's last DEL left:\n{ruleset}"
    );
    // The one rule names no network: B's isolation still holds by it.
    assert_eq!(site.isolation_rules().len(), 1);

    // A network without the key on A's old bridge (and subnet) reaches B: nothing of
    // A's isolation is left to isolate it.
    let d = Net {
        key: "x",
        name: format!("{}-dx", lab.network),
        isolated: false,
        ..a.clone()
    };
    site.write(&d);
    let d1 = site.add(&d, 1);
    assert!(
        reaches(&d1.netns, &b1.address, true),
        "a network without the key on A's bridge cannot reach B:\n{}",
        site.nft(&["list", "ruleset"]).stdout
    );
    site.del(&d, &d1);
    // GC that lists none of B's attachments removes B1, and B's isolation with it.
    let mut gc = site.entry(b);
    gc["cni.dev/valid-attachments"] = json!([]);
    Call::bare()
        .env("CNI_COMMAND", "GC")
        .env("CNI_PATH", &site.cni_path())
        .config(&gc)
        .spawn("ip", &["netns", "exec", &site.node, plugin()])
        .expect_silent_success("GC listing nothing of B");
    assert_eq!(site.isolated(), BTreeSet::new(), "after GC emptied B");
    site.del(b, &b1);
}
