//! A TCP flow to and from a shaped container keeps to the configured rate, an unshaped
//! one beside it does not, and DEL leaves nothing of the shaping.

use super::*;

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
