//! The bandwidth capability and the reference bandwidth plugin's keys: a TCP flow to and
//! from a shaped container measured against the configured rate, and an unshaped one
//! beside it; the kind's every operation (CHECK, STATUS, restore, GC, DEL); the
//! reference's refusals; and ADD's netns budget with shaping. Each test runs academy in a
//! private node (common/node.rs) whose tc state and ifbs are its own, and sends packets
//! only between namespaces it made, through the node's bridge.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::*;

/// 8 Mbit/s with a 10 kB bucket, both ways.
const RATE: u64 = 8_000_000;
const BURST: u64 = 80_000;

/// A receiver that prints "ready" once listening, then the bytes of one connection and
/// the seconds from its first byte to its end; a sender that sends for SECONDS.
const FLOW: &str = r#"
import json, socket, sys, time
mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1); print("ready", flush=True)
    s.settimeout(30); c, _ = s.accept(); c.settimeout(30)
    total, first = 0, None
    while True:
        b = c.recv(65536)
        if not b: break
        if first is None: first = time.monotonic()
        total += len(b)
    print(json.dumps({"bytes": total, "seconds": time.monotonic() - (first or time.monotonic())}))
else:
    seconds = float(sys.argv[4]); c = socket.create_connection((addr, port), timeout=10)
    chunk, end = b"x" * 65536, time.monotonic() + seconds
    while time.monotonic() < end: c.sendall(chunk)
    c.close()
"#;

fn shaped_config(lab: &Lab) -> Value {
    let mut c = lab.config("1.1.0");
    for (k, v) in [
        ("ingressRate", RATE),
        ("ingressBurst", BURST),
        ("egressRate", RATE),
        ("egressBurst", BURST),
    ] {
        c[k] = json!(v);
    }
    c
}

/// Bits per second of one TCP flow from netns `from` to `to_addr` in netns `to`.
fn measure(from: &str, to: &str, to_addr: &str, port: u16, seconds: f64) -> f64 {
    let recv = start(
        &Call::bare(),
        "ip",
        &[
            "netns",
            "exec",
            to,
            "/usr/bin/python3",
            "-c",
            FLOW,
            "recv",
            to_addr,
            &port.to_string(),
        ],
        &[],
    );
    // The receiver prints "ready" before it accepts; the sender retries until then.
    let sent = wait_until(std::time::Duration::from_secs(10), || {
        run(
            "ip",
            &[
                "netns",
                "exec",
                from,
                "/usr/bin/python3",
                "-c",
                FLOW,
                "send",
                to_addr,
                &port.to_string(),
                &seconds.to_string(),
            ],
            &[],
        )
        .code
            == 0
    });
    let out = recv.finish();
    assert!(sent, "the sender never connected: {out}");
    let line = out.stdout.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("receiver said: {out}"));
    let (bytes, secs) = (v["bytes"].as_f64().unwrap(), v["seconds"].as_f64().unwrap());
    assert!(secs > 0.5, "the flow lasted {secs} s: {out}");
    bytes * 8.0 / secs
}

/// What of academy's shaping the node holds: its ifbs and its qdiscs other than the
/// kernel's defaults, as `ip` and `tc` list them.
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

fn in_node(node: &Node, argv: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns];
    all.extend_from_slice(argv);
    run("ip", &all, &[])
}

#[test]
fn a_shaped_container_s_flows_keep_to_the_rate_and_del_leaves_nothing() {
    let lab = Lab::new("bwrate");
    let node = Node::new(&lab);
    let plain = lab.config("1.1.0");
    let shaped = shaped_config(&lab);
    let (a, peer, c) = (
        lab.attachment("a"),
        lab.attachment("p"),
        lab.attachment("c"),
    );
    let ra = node.call("ADD", &a, &shaped).expect_result("ADD a, shaped");
    let rp = node
        .call("ADD", &peer, &plain)
        .expect_result("ADD the peer");
    let rc = node
        .call("ADD", &c, &plain)
        .expect_result("ADD c, not shaped");
    let ifb = ra["interfaces"][3]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(ifb.starts_with("bwp") && ifb.len() <= 15, "{ra}");
    let (addr_a, addr_p, addr_c) = (
        result_address(&ra),
        result_address(&rp),
        result_address(&rc),
    );
    for x in [&a, &peer, &c] {
        assert!(
            ping_eventually(&x.netns, &lab.gateway()),
            "{} is wired",
            x.cid
        );
    }

    let to_a = measure(&peer.netns, &a.netns, &addr_a, 15001, 4.0);
    let from_a = measure(&a.netns, &peer.netns, &addr_p, 15002, 4.0);
    let to_c = measure(&peer.netns, &c.netns, &addr_c, 15003, 2.0);
    let from_c = measure(&c.netns, &peer.netns, &addr_p, 15004, 2.0);
    eprintln!(
        "bandwidth: to the shaped container {:.2} Mbit/s, from it {:.2}; to the unshaped one {:.1}, from it {:.1} (configured {} Mbit/s)",
        to_a / 1e6,
        from_a / 1e6,
        to_c / 1e6,
        from_c / 1e6,
        RATE / 1_000_000
    );
    let rate = RATE as f64;
    for (what, got) in [("ingress", to_a), ("egress", from_a)] {
        assert!(
            (got - rate).abs() <= 0.2 * rate,
            "{what} of the shaped container: {:.2} Mbit/s, configured {:.2}",
            got / 1e6,
            rate / 1e6
        );
    }
    for (what, got) in [("to", to_c), ("from", from_c)] {
        assert!(
            got > 5.0 * rate,
            "{what} the unshaped container only {:.2} Mbit/s",
            got / 1e6
        );
    }

    node.call("DEL", &a, &shaped).expect_silent_success("DEL a");
    node.call("DEL", &c, &plain).expect_silent_success("DEL c");
    node.call("DEL", &peer, &plain)
        .expect_silent_success("DEL the peer");
    assert_eq!(shaping(&node), BTreeSet::new(), "after DEL");
    node.call("DEL", &a, &shaped)
        .expect_silent_success("a second DEL");
}

#[test]
fn the_bandwidth_kind_walks_every_operation() {
    let lab = Lab::new("bwkind");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    lab.write_conflist("1.1.0", "academy", {
        let mut extra = config.clone();
        for k in ["cniVersion", "name", "type"] {
            extra.as_object_mut().unwrap().remove(k);
        }
        extra
    });
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let ra = node.call("ADD", &a, &config).expect_result("ADD a");
    let rb = node.call("ADD", &b, &config).expect_result("ADD b");
    let check = |x: &Attach, result: &Value, config: &Value| {
        let mut c = config.clone();
        c["prevResult"] = result.clone();
        node.call("CHECK", x, &c)
    };
    let status = || node.run(&lab.call("STATUS").config(&config));
    check(&a, &ra, &config).expect_silent_success("CHECK after ADD");
    status().expect_silent_success("STATUS after ADD");
    let before = shaping(&node);
    let (veth_a, ifb_a) = (
        result_host_veth(&ra),
        ra["interfaces"][3]["name"].as_str().unwrap().to_string(),
    );
    assert!(before.contains(&format!("link {ifb_a}")), "{before:?}");

    // CHECK compares the parameters the config's rates make.
    let mut slower = config.clone();
    slower["egressRate"] = json!(4_000_000);
    assert_cni_error(
        &check(&a, &ra, &slower),
        120,
        &[&ifb_a, "egressRate 4000000", "rate 1000000 B/s"],
    );

    // The redirect taken: named by STATUS and CHECK, put back by restore.
    let out = in_node(&node, &["tc", "filter", "del", "dev", &veth_a, "ingress"]);
    assert_eq!(out.code, 0, "{out}");
    let error = assert_cni_error(&status(), 50, &["bandwidth shaping", &veth_a, &ifb_a]);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    let error = assert_cni_error(&check(&a, &ra, &config), 120, &["redirect", &ifb_a]);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("bandwidth shaping"), "{out}");
    assert_eq!(shaping(&node), before, "after restore");
    check(&a, &ra, &config).expect_silent_success("CHECK after restore");
    status().expect_silent_success("STATUS after restore");

    // A TBF taken (the host veth's and the ifb's): CHECK names it and DEL + ADD as the
    // remedy; STATUS names it from the rates ADD recorded, and restore puts it back.
    for (dev, words) in [
        (&veth_a, format!("the tbf of host veth {veth_a} (ingress, ")),
        (&ifb_a, format!("the tbf of ifb {ifb_a} (egress, ")),
    ] {
        let out = in_node(&node, &["tc", "qdisc", "del", "dev", dev, "root"]);
        assert_eq!(out.code, 0, "{out}");
        let error = assert_cni_error(&check(&a, &ra, &config), 120, &[dev, "no tbf qdisc"]);
        assert!(
            error["details"]
                .as_str()
                .unwrap_or("")
                .contains("DEL and ADD"),
            "{error}"
        );
        assert_cni_error(&status(), 50, &["bandwidth shaping", &words]);
        let out = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(out.code, 0, "{out}");
        let line = format!(
            "network {}: put back: bandwidth shaping: {words}",
            lab.network
        );
        assert!(out.stderr.contains(&line), "{out}");
        assert_eq!(shaping(&node), before, "after the restore of {dev}'s tbf");
        check(&a, &ra, &config).expect_silent_success("CHECK after the tbf's restore");
        status().expect_silent_success("STATUS after the tbf's restore");
    }

    // GC: an unlisted attachment's ifb goes with it; an unlabelled ifb of academy's
    // names whose veth is gone goes; someone else's ifb stays.
    let orphan = "bwp00000000001";
    let foreign = format!("ifbk{}", std::process::id() % 100_000);
    for name in [orphan, foreign.as_str()] {
        let out = in_node(&node, &["ip", "link", "add", name, "type", "ifb"]);
        assert_eq!(out.code, 0, "{out}");
    }
    node.run(&gc_call(&lab, config.clone(), &[(&b.cid, &b.ifname)]))
        .expect_silent_success("GC listing b");
    let links = node.links();
    assert!(!links.contains(&ifb_a), "GC left a's ifb: {links:?}");
    assert!(
        !links.iter().any(|l| l == orphan),
        "GC left the orphan: {links:?}"
    );
    assert!(links.contains(&foreign), "GC took a foreign ifb: {links:?}");
    check(&b, &rb, &config).expect_silent_success("CHECK of b after GC");

    // The one removal: b's ifb and qdiscs go with its DEL.
    node.call("DEL", &b, &config).expect_silent_success("DEL b");
    let left: BTreeSet<String> = shaping(&node)
        .into_iter()
        .filter(|s| !s.contains(&foreign))
        .collect();
    assert_eq!(left, BTreeSet::new(), "after the last DEL");
}

#[test]
fn shaping_refused_as_the_reference_refuses_it() {
    let lab = Lab::new("bwbad");
    for (keys, text) in [
        (
            json!({"ingressRate": 8000}),
            "if rate is set, burst must also be set",
        ),
        (
            json!({"egressBurst": 8000}),
            "if burst is set, rate must also be set",
        ),
        (
            json!({"egressRate": 8000, "egressBurst": 34_359_738_360u64}),
            "burst cannot be more than 4GB",
        ),
    ] {
        let mut c = lab.config("1.1.0");
        for (k, v) in keys.as_object().unwrap() {
            c[k] = v.clone();
        }
        assert_cni_error(&lab.call("ADD").config(&c).run(), 7, &[text]);
        // The same through the capability.
        let mut c = lab.config("1.1.0");
        c["capabilities"] = json!({"bandwidth": true});
        c["runtimeConfig"] = json!({ "bandwidth": keys });
        assert_cni_error(
            &lab.call("ADD").config(&c).run(),
            7,
            &["runtimeConfig.bandwidth.", text],
        );
    }
    assert!(lab.lab_veths().is_empty(), "a refused ADD wired something");
}

#[test]
fn the_capability_shapes_and_add_still_enters_the_netns_at_most_twice() {
    let lab = Lab::new("bwcap");
    let mut c = lab.config("1.1.0");
    c["capabilities"] = json!({"bandwidth": true});
    c["runtimeConfig"] = json!({"bandwidth": {
        "ingressRate": RATE, "ingressBurst": BURST, "egressRate": RATE, "egressBurst": BURST}});
    let (out, text) = run_strace(
        &lab.call("ADD").config(&c),
        &lab.root.join("add.strace"),
        "setns",
        None,
    );
    let result = out.expect_result("ADD with the capability, under strace");
    let setns = parse_trace(&text)
        .into_iter()
        .filter(|s| s.name == "setns")
        .count();
    assert!(
        (1..=2).contains(&setns),
        "ADD made {setns} setns calls:\n{text}"
    );
    let ifb = result["interfaces"][3]["name"].as_str().unwrap_or("");
    assert!(link_exists(ifb), "no ifb {ifb}: {result}");
    let out = run(
        "tc",
        &["qdisc", "show", "dev", &result_host_veth(&result)],
        &[],
    );
    assert!(
        out.stdout.contains("tbf 1: root") && out.stdout.contains("rate 8Mbit"),
        "{out}"
    );
    lab.call("DEL")
        .config(&c)
        .run()
        .expect_silent_success("DEL");
    assert!(!link_exists(ifb), "DEL left ifb {ifb}");
    assert_unwired(&lab, &lab.attach());
}
