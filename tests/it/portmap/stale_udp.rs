//! A UDP client that keeps sending from one source port keeps its conntrack entry, and
//! with it where its datagrams went before the port was published (the host itself) or
//! to whom (the container that held it before). academy's ADD deletes those entries
//! after publishing a UDP port (on its hostIP only, when given), so the same client
//! reaches the new container; a kernel that refuses the dump's filter gets a plain dump
//! instead; a refused flush does not fail the ADD.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use super::published::direct_config;
use super::{academy_entry, host_ports, mapping, udp_exchange, write_list};
use crate::common::*;

/// The client's fixed source port, in the test's own outside netns.
const SOURCE_PORT: u16 = 41234;

fn udp_mapping(port: u16) -> Value {
    let mut udp = mapping(port, None);
    udp["protocol"] = json!("udp");
    udp
}

fn udp_caps(port: u16) -> String {
    json!({ "portMappings": [udp_mapping(port)] }).to_string()
}

/// A UDP server on the container's 8080 answering one datagram with "hello" and
/// printing the peer as address:port.
fn serve_once(container: &str) -> Child {
    let script = "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.bind(('0.0.0.0', 8080)); s.settimeout(20)\n\
         data, peer = s.recvfrom(64); s.sendto(b'hello', peer)\n\
         print('%s:%d' % peer, flush=True)\n";
    Command::new("ip")
        .args(["netns", "exec", container, "python3", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3")
}

/// Up to `count` datagrams from `from`'s port `source` to addr:port, half a second apart
/// (each one keeps the flow's conntrack entry alive), until one is answered: the
/// answer, "" for none.
fn send_from_source_port(from: &str, source: u16, addr: &str, port: u16, count: u32) -> String {
    let script = format!(
        "import socket\n\
         c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         c.bind(('0.0.0.0', {source})); c.settimeout(0.5)\n\
         for _ in range({count}):\n\
         \x20   c.sendto(b'ping', ('{addr}', {port}))\n\
         \x20   try:\n\
         \x20       print(c.recv(16).decode()); break\n\
         \x20   except OSError:\n\
         \x20       pass\n"
    );
    let out = run(
        "ip",
        &["netns", "exec", from, "python3", "-c", &script],
        &[],
    );
    assert_eq!(out.code, 0, "the client failed:\n{out}");
    out.stdout.trim().to_string()
}

/// The client's datagrams to addr:port answered by the container's server: what came
/// back, and the peer the server saw.
fn exchange_from_source_port(
    container: &str,
    from: &str,
    source: u16,
    addr: &str,
    port: u16,
) -> (String, String) {
    let mut server = serve_once(container);
    let got = send_from_source_port(from, source, addr, port, 10);
    if got.is_empty() {
        let _ = server.kill();
    }
    let out = server.wait_with_output().unwrap();
    (got, String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn v4_of(result: &Value) -> String {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str())
        .find(|a| !a.contains(':'))
        .and_then(|a| a.split('/').next())
        .expect("a v4 address in the result")
        .to_string()
}

#[test]
fn portmap_udp_client_that_sent_before_the_port_was_published_reaches_the_container() {
    let lab = Lab::new("pmctnew");
    let out = Outside::new(&lab);
    write_list(&lab, vec![academy_entry(&lab)]);
    // Four ports (more than academy asks a dump each for): the kernel is asked for every
    // UDP entry, and academy matches them. One source port per flow: two flows from one
    // would have one reply tuple (the same container port), and conntrack would change
    // the second one's source port to tell them apart.
    let port = host_ports(&lab);
    let flows: Vec<(u16, u16)> = (0..4).map(|i| (port + i, SOURCE_PORT + i)).collect();
    // Nothing on the host listens there: the datagrams make entries to the host itself.
    for &(p, source) in &flows {
        let before = send_from_source_port(&out.netns, source, &out.host_v4, p, 3);
        assert_eq!(before, "", "something on the host answers udp port {p}");
    }

    let all: Vec<Value> = flows.iter().map(|(p, _)| udp_mapping(*p)).collect();
    let caps = json!({ "portMappings": all });
    let caps = caps.to_string();
    let env = [("CAP_ARGS", caps.as_str())];
    let added = lab.cnitool("add", &lab.netns, &env);
    added.expect_result("cnitool add publishing the udp ports");
    for &(p, source) in &flows {
        let (got, peer) =
            exchange_from_source_port(&lab.netns, &out.netns, source, &out.host_v4, p);
        assert_eq!(
            (got.as_str(), peer.as_str()),
            ("hello", format!("{}:{source}", out.far_v4).as_str()),
            "the client that sent to port {p} before it was published, from the same source port, must reach the container (ADD:\n{added})"
        );
    }
    // The outside's flows, v4 only (nothing sent over v6).
    assert!(
        added
            .stderr
            .contains("academy: deleted 4 stale conntrack entries of the published udp ports"),
        "ADD did not report the four stale entries it deleted:\n{added}"
    );
    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("DEL");
}

#[test]
fn portmap_udp_client_of_a_deleted_container_reaches_the_next_one_on_its_port() {
    let lab = Lab::new("pmctnext");
    let out = Outside::new(&lab);
    write_list(&lab, vec![academy_entry(&lab)]);
    let port = host_ports(&lab);
    let caps = udp_caps(port);
    let env = [("CAP_ARGS", caps.as_str())];
    let first = lab
        .cnitool("add", &lab.netns, &env)
        .expect_result("cnitool add of the first container");
    let far = format!("{}:{SOURCE_PORT}", out.far_v4);
    let (got, peer) =
        exchange_from_source_port(&lab.netns, &out.netns, SOURCE_PORT, &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", far.as_str()),
        "the first container"
    );
    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("DEL of the first container");

    let next = lab.add_netns("next");
    let added = lab.cnitool("add", &next, &env);
    let second = added.expect_result("cnitool add of the next container on the same port");
    assert_ne!(
        v4_of(&first),
        v4_of(&second),
        "the next container's address"
    );
    let (got, peer) = exchange_from_source_port(&next, &out.netns, SOURCE_PORT, &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", far.as_str()),
        "the same client, from the same source port, must reach the next container on the port, not the deleted one's address"
    );
    assert!(
        added
            .stderr
            .contains("academy: deleted 1 stale conntrack entries of the published udp ports"),
        "ADD did not report the one stale entry (to the deleted container) it deleted:\n{added}"
    );
    lab.cnitool("del", &next, &env)
        .expect_silent_success("DEL of the next container");
}

#[test]
fn portmap_udp_flush_of_a_mapping_with_host_ip_keeps_other_addresses_entries() {
    let lab = Lab::new("pmcthip");
    let out = Outside::new(&lab);
    write_list(&lab, vec![academy_entry(&lab)]);
    let port = host_ports(&lab);
    let before = send_from_source_port(&out.netns, SOURCE_PORT, &out.host_v4, port, 3);
    assert_eq!(before, "", "something on the host answers udp port {port}");
    let caps_on = |host_ip: &str| {
        let mut udp = mapping(port, Some(host_ip));
        udp["protocol"] = json!("udp");
        json!({ "portMappings": [udp] }).to_string()
    };

    // Published on another host address (the lab's gateway): the client's entry, to
    // the outside veth's address, is not that port's.
    let elsewhere = caps_on(&lab.gateway());
    let env = [("CAP_ARGS", elsewhere.as_str())];
    let added = lab.cnitool("add", &lab.netns, &env);
    added.expect_result("cnitool add publishing the udp port on the gateway's address");
    assert!(
        !added.stderr.contains("stale conntrack"),
        "an entry to another host address was deleted:\n{added}"
    );
    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("DEL");

    let here = caps_on(&out.host_v4);
    let env = [("CAP_ARGS", here.as_str())];
    let added = lab.cnitool("add", &lab.netns, &env);
    added.expect_result("cnitool add publishing the udp port on the client's destination");
    assert!(
        added
            .stderr
            .contains("academy: deleted 1 stale conntrack entries of the published udp ports"),
        "ADD did not report the one stale entry it deleted:\n{added}"
    );
    let (got, peer) =
        exchange_from_source_port(&lab.netns, &out.netns, SOURCE_PORT, &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", format!("{}:{SOURCE_PORT}", out.far_v4).as_str()),
        "the client reaches the container on the address it sent to"
    );
    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("DEL");
}

/// `action` at an ADD's first conntrack dump (the first filtered one), found in a clean
/// ADD under strace. The first ADD also makes the bridge: the requests are counted on the
/// second, as every later ADD makes them.
fn at_first_conntrack_dump(call: &dyn Fn(&str) -> Call, file: &Path, action: Action) -> Inject {
    call("ADD")
        .run()
        .expect_result("the ADD that makes the bridge");
    call("DEL").run().expect_silent_success("its DEL");
    let (clean, text) = run_strace(&call("ADD"), file, "sendto", None);
    clean.expect_result("clean ADD publishing a udp port, under strace");
    call("DEL")
        .run()
        .expect_silent_success("DEL of the clean ADD");
    let calls = parse_trace(&text);
    let i = calls
        .iter()
        .position(|c| c.line.contains("IPCTNL_MSG_CT_GET"))
        .unwrap_or_else(|| panic!("no conntrack dump in the ADD's trace:\n{text}"));
    assert!(
        strace_reaches(&calls, i),
        "strace cannot reach the conntrack dump alone:\n{text}"
    );
    Inject {
        syscall: "sendto".into(),
        when: rank_in_thread(&calls, i),
        action,
    }
}

#[test]
fn portmap_refused_conntrack_flush_is_logged_and_the_add_keeps_its_udp_port() {
    let lab = Lab::new("pmctfail");
    let out = Outside::new(&lab);
    let port = host_ports(&lab);
    let config = direct_config(&lab, "1.1.0", &[udp_mapping(port)]);
    let call = |command: &str| lab.call(command).config(&config);
    let file = lab.root.join("conntrack.trace");
    let inject = at_first_conntrack_dump(&call, &file, Action::Fail("EPERM"));

    let (added, text) = run_strace(&call("ADD"), &file, "sendto", Some(&inject));
    let injected: Vec<Syscall> = parse_trace(&text)
        .into_iter()
        .filter(Syscall::injected)
        .collect();
    assert!(
        injected.len() == 1 && injected[0].line.contains("IPCTNL_MSG_CT_GET"),
        "the refusal must hit the conntrack dump and nothing else:\n{text}"
    );
    added.expect_result("ADD whose conntrack dump is refused");
    assert!(
        added
            .stderr
            .contains("academy: warning: stale udp conntrack entries may remain"),
        "the refused flush is not logged:\n{added}"
    );
    let (got, peer) = udp_exchange(&lab.netns, &out.netns, &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", out.far_v4.as_str()),
        "the port the ADD published answers"
    );
    call("DEL").run().expect_silent_success("DEL");
}

#[test]
fn portmap_kernel_that_refuses_the_conntrack_filter_gets_one_plain_dump_and_the_flush() {
    let lab = Lab::new("pmctplain");
    let out = Outside::new(&lab);
    let port = host_ports(&lab);
    let config = direct_config(&lab, "1.1.0", &[udp_mapping(port)]);
    let call = |command: &str| lab.call(command).config(&config);
    let file = lab.root.join("conntrack.trace");
    // The kernel's answer to a filter it does not know (before Linux 5.8 it is ignored
    // instead, which the matching of every entry covers).
    let inject = at_first_conntrack_dump(&call, &file, Action::Fail("EINVAL"));

    // A flow to the unpublished port: an entry to the host itself.
    let before = send_from_source_port(&out.netns, SOURCE_PORT, &out.host_v4, port, 3);
    assert_eq!(before, "", "something on the host answers udp port {port}");
    let (added, text) = run_strace(&call("ADD"), &file, "sendto", Some(&inject));
    let traced = parse_trace(&text);
    let refused = traced
        .iter()
        .position(Syscall::injected)
        .unwrap_or_else(|| panic!("nothing was refused:\n{text}"));
    assert!(
        traced[refused].line.contains("IPCTNL_MSG_CT_GET"),
        "the refusal must hit the filtered dump:\n{text}"
    );
    let after: Vec<&Syscall> = traced[refused + 1..].iter().collect();
    // A dump with no attribute at all: the nfnetlink header alone.
    assert!(
        after.iter().any(|c| c.line.contains("IPCTNL_MSG_CT_GET")
            && c.line.contains("nlmsg_len=20,")
            && !c.injected()),
        "no plain dump followed the refused filter:\n{text}"
    );
    assert!(
        after
            .iter()
            .any(|c| c.line.contains("IPCTNL_MSG_CT_DELETE")),
        "no delete followed the plain dump:\n{text}"
    );
    added.expect_result("ADD whose conntrack filter is refused");
    assert!(
        added
            .stderr
            .contains("academy: deleted 1 stale conntrack entries of the published udp ports"),
        "the plain dump's match did not delete the client's entry:\n{added}"
    );
    let (got, peer) =
        exchange_from_source_port(&lab.netns, &out.netns, SOURCE_PORT, &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", format!("{}:{SOURCE_PORT}", out.far_v4).as_str()),
        "the client that sent before the port was published reaches the container"
    );
    call("DEL").run().expect_silent_success("DEL");
}
