//! The bandwidth capability and the reference bandwidth plugin's keys: a TCP flow to and
//! from a shaped container measured against the configured rate, and an unshaped one
//! beside it; the kind's every operation (CHECK, STATUS, restore, GC, DEL); the
//! reference's refusals; and ADD's netns budget with shaping. Each test runs academy in a
//! private node (common/node.rs) whose tc state and ifbs are its own, and sends packets
//! only between namespaces it made, through the node's bridge.

use std::collections::BTreeSet;
use std::time::Duration;

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

/// DEL of a shaped attachment under strace in `node`, with an optional injection; its
/// output and the RTM_* names of its rtnetlink requests, in order.
fn traced_del(node: &Node, a: &Attach, config: &Value, inject: Option<&Inject>) -> (Out, String) {
    let file = node.lab.root.join(format!("del-{}.trace", a.cid));
    let _ = std::fs::remove_file(&file);
    let mut args = vec![
        "netns".to_string(),
        "exec".into(),
        node.ns.clone(),
        "strace".into(),
    ];
    args.extend(strace_args(&file, "sendto", inject));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = node
        .lab
        .call_for("DEL", a)
        .config(config)
        .spawn("ip", &args);
    (out, std::fs::read_to_string(&file).unwrap_or_default())
}

/// The rtnetlink requests of a trace, by name (RTM_GETLINK, RTM_DELLINK, ...).
fn route_requests(trace: &str) -> Vec<String> {
    parse_trace(trace)
        .iter()
        .filter(|c| c.name == "sendto" && c.line.contains("NETLINK") && !c.injected())
        .map(|c| c.nlmsg_type())
        .filter(|t| t.starts_with("RTM_"))
        .collect()
}

/// The node's links of one attachment: its host veth and its ifb.
fn attachment_links(node: &Node, result: &Value) -> Vec<String> {
    let veth = result_host_veth(result);
    let ifb = format!("bwp{}", &veth[4..]);
    node.links()
        .into_iter()
        .filter(|l| *l == veth || *l == ifb)
        .collect()
}

/// Puts link argv[1] in link group argv[2] (RTM_NEWLINK with IFLA_GROUP).
const SET_GROUP: &str = r#"
import socket, struct, sys
index = socket.if_nametoindex(sys.argv[1])
body = struct.pack("BxHiII", 0, 0, index, 0, 0) + struct.pack("HHI", 8, 27, int(sys.argv[2]))
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
s.send(struct.pack("IHHII", 16 + len(body), 16, 0x5, 1, 0) + body)
error = struct.unpack_from("i", s.recv(4096), 16)[0]
sys.exit(f"errno {-error}" if error else 0)
"#;

/// The host veth and the ifb go in one request, so the kernel waits out the grace
/// periods of a link's deletion once: a DEL with a limit took 2.78 times one without
/// when each went alone.
#[test]
fn del_deletes_the_host_veth_and_the_ifb_in_one_request() {
    let lab = Lab::new("bwdel1");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    let result = node.call("ADD", &a, &config).expect_result("ADD, shaped");
    assert_eq!(attachment_links(&node, &result).len(), 2, "{result}");
    let (out, trace) = traced_del(&node, &a, &config, None);
    out.expect_silent_success("DEL under strace");
    let deletions = route_requests(&trace)
        .into_iter()
        .filter(|t| t == "RTM_DELLINK")
        .count();
    assert_eq!(
        deletions, 1,
        "DEL deleted its links in {deletions} requests:\n{trace}"
    );
    assert_eq!(attachment_links(&node, &result), Vec::<String>::new());
    assert_eq!(shaping(&node), BTreeSet::new(), "after DEL");
    assert_eq!(lab.reservations(), Vec::<String>::new(), "after DEL");
}

/// A DEL killed at any of its netlink requests (the links marked for their one
/// deletion, or not yet, or gone) leaves what a second DEL removes entirely.
#[test]
fn a_del_killed_at_any_request_leaves_what_a_second_del_removes() {
    let lab = Lab::new("bwdelk");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    node.call("ADD", &a, &config).expect_result("ADD, shaped");
    let (out, clean) = traced_del(&node, &a, &config, None);
    out.expect_silent_success("a clean DEL under strace");
    let sends: Vec<Syscall> = parse_trace(&clean)
        .into_iter()
        .filter(|c| c.name == "sendto")
        .collect();
    let marks = route_requests(&clean)
        .iter()
        .filter(|t| *t == "RTM_NEWLINK")
        .count();
    assert_eq!(marks, 2, "the clean DEL marked no veth and ifb:\n{clean}");
    let mut problems = Vec::new();
    for i in 0..sends.len() {
        if !strace_reaches(&sends, i) {
            continue;
        }
        let result = node.call("ADD", &a, &config).expect_result("ADD again");
        let inject = Inject {
            syscall: "sendto".into(),
            when: rank_in_thread(&sends, i),
            action: Action::Kill,
        };
        let (_, trace) = traced_del(&node, &a, &config, Some(&inject));
        if !killed_by_strace(&trace) {
            problems.push(format!("DEL not killed at request {}:\n{trace}", i + 1));
            continue;
        }
        let out = node.call("DEL", &a, &config);
        if out.code != 0 || !out.stdout.trim().is_empty() {
            problems.push(format!("the DEL after a kill at request {}: {out}", i + 1));
        }
        let links = attachment_links(&node, &result);
        let left = shaping(&node);
        let held = lab.reservations();
        if !links.is_empty() || !left.is_empty() || !held.is_empty() {
            problems.push(format!(
                "killed at request {} ({}), then DEL: left {links:?} {left:?} {held:?}",
                i + 1,
                sends[i].nlmsg_type()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A container's netns torn down while its DEL runs takes the pair with it, in the
/// kernel's own time, after the DEL put the veth and the ifb in their removal group (the
/// soak, seed 38, with the netns deleted before the DEL): the DEL still deletes the ifb.
#[test]
fn a_pair_gone_with_its_netns_during_del_leaves_no_ifb() {
    let lab = Lab::new("bwdelns");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    let result = node.call("ADD", &a, &config).expect_result("ADD, shaped");
    let veth = result_host_veth(&result);
    assert_eq!(attachment_links(&node, &result).len(), 2, "{result}");
    // Held between its kinds' step (the marks) and its veth's.
    let hold = TestHold::new(&lab.data_dir, "hold-removal");
    let del = lab
        .call_for("DEL", &a)
        .config(&config)
        .env("ACADEMY_TEST_HOLD_REMOVAL", hold.path());
    let out = std::thread::scope(|s| {
        let del = s.spawn(|| node.run(&del));
        assert!(
            hold.reached(Duration::from_secs(20)),
            "the DEL never reached its hold"
        );
        run("ip", &["netns", "del", &a.netns], &[]);
        assert!(
            wait_until(Duration::from_secs(10), || !node.links().contains(&veth)),
            "the netns's teardown never took the pair"
        );
        drop(hold);
        del.join().unwrap()
    });
    out.expect_silent_success("DEL with its pair gone meanwhile");
    assert_eq!(attachment_links(&node, &result), Vec::<String>::new());
    assert_eq!(shaping(&node), BTreeSet::new(), "after DEL");
    assert_eq!(lab.reservations(), Vec::<String>::new(), "after DEL");
}

/// A link academy did not mark that shares the attachment's removal group and that the
/// kernel cannot delete (the node's loopback) makes the kernel refuse the one deletion:
/// the veth goes alone, DEL says so, and its retry deletes the ifb.
#[test]
fn a_foreign_link_in_the_removal_group_is_not_deleted_and_a_retry_finishes() {
    let lab = Lab::new("bwdelg");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    let result = node.call("ADD", &a, &config).expect_result("ADD, shaped");
    let veth = result_host_veth(&result);
    // wire::removal_group: the top bit and 31 bits of the name's first 8 hex digits.
    let group = 0x8000_0000 | (u32::from_str_radix(&veth[4..12], 16).unwrap() & 0x7fff_ffff);
    // `ip link set group` takes 0 to 2^31-1 only: a raw request sets academy's range.
    let set_lo = |g: u32| {
        let out = in_node(
            &node,
            &["/usr/bin/python3", "-c", SET_GROUP, "lo", &g.to_string()],
        );
        assert_eq!(out.code, 0, "{out}");
    };
    set_lo(group);
    let error = assert_cni_error(
        &node.call("DEL", &a, &config),
        // KERNEL_REFUSED: the kernel's refusal of the one deletion.
        100,
        &[&format!("link group {group}"), &veth],
    );
    assert!(
        error["details"].as_str().unwrap_or("").contains("retry"),
        "{error}"
    );
    assert!(node.links().iter().any(|l| l == "lo"), "lo was deleted");
    let ifb = format!("bwp{}", &veth[4..]);
    assert_eq!(
        attachment_links(&node, &result),
        vec![ifb],
        "the veth went alone"
    );
    set_lo(0);
    node.call("DEL", &a, &config)
        .expect_silent_success("the retried DEL");
    assert_eq!(attachment_links(&node, &result), Vec::<String>::new());
    assert_eq!(shaping(&node), BTreeSet::new(), "after the retry");
    assert_eq!(lab.reservations(), Vec::<String>::new(), "after the retry");
}
