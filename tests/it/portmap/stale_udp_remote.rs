//! Only a flow to the node itself can be stale when a UDP port is published: a
//! container's own flow to a remote server on that port is no client of the node, and
//! keeps its conntrack entry (deleting it would reset its masquerade mid-flow). In a
//! private node netns (common/node.rs), so the node's addresses and conntrack table are
//! the test's alone; its "remote" is a netns joined to the node by a veth, on addresses
//! of the test's own.

use serde_json::{json, Value};

use super::published::direct_config;
use super::{host_ports, mapping};
use crate::common::*;

/// The container's source port towards the remote server.
const CONTAINER_SOURCE_PORT: u16 = 42301;
/// The source port of the remote client of the node's own address.
const CLIENT_SOURCE_PORT: u16 = 42302;

/// A netns joined to the node by a veth, on a slot of its own: .1 the node's end, .2
/// the remote's. The pair dies with the netns, which the lab deletes.
struct Remote {
    netns: String,
    node_v4: String,
    far_v4: String,
}

impl Remote {
    fn new(lab: &Lab, node: &Node) -> Remote {
        let out = Outside::joined_to(lab, Some(&node.ns));
        Remote {
            netns: out.netns,
            node_v4: out.host_v4,
            far_v4: out.far_v4,
        }
    }
}

fn udp_mapping(port: u16) -> Value {
    let mut udp = mapping(port, None);
    udp["protocol"] = json!("udp");
    udp
}

/// A few datagrams from `from`'s port `source` to addr:port, which nothing answers:
/// they make (and keep alive) one conntrack entry in every netns they cross.
fn send_unanswered(from: &str, source: u16, addr: &str, port: u16) {
    let script = format!(
        "import socket, time\n\
         c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         c.bind(('0.0.0.0', {source}))\n\
         for _ in range(3):\n\
         \x20   c.sendto(b'ping', ('{addr}', {port})); time.sleep(0.1)\n"
    );
    let out = run(
        "ip",
        &["netns", "exec", from, "python3", "-c", &script],
        &[],
    );
    assert_eq!(out.code, 0, "the sender in {from} failed:\n{out}");
}

/// The original tuples of the node's UDP entries to `port`, as "src:sport -> dst:dport",
/// through the conntrack tool (a look from outside academy).
fn entries_to(node: &Node, port: u16) -> Vec<String> {
    let conntrack = which("conntrack");
    let port = port.to_string();
    let out = run(
        "ip",
        &[
            "netns", "exec", &node.ns, &conntrack, "-L", "-f", "ipv4", "-p", "udp", "--dport",
            &port,
        ],
        &[],
    );
    assert_eq!(out.code, 0, "conntrack -L in the node failed:\n{out}");
    out.stdout
        .lines()
        .filter_map(|line| {
            // The original tuple's fields come first on the line.
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|f| f.strip_prefix(key))
                    .map(str::to_string)
            };
            Some(format!(
                "{}:{} -> {}:{}",
                field("src=")?,
                field("sport=")?,
                field("dst=")?,
                field("dport=")?
            ))
        })
        .collect()
}

#[test]
fn portmap_udp_flush_keeps_a_container_s_flow_to_a_remote_server_on_the_port() {
    let lab = Lab::new("pmctrem");
    let node = Node::new(&lab);
    let remote = Remote::new(&lab, &node);
    let port = host_ports(&lab);
    let mut quiet = direct_config(&lab, "1.1.0", &[]);
    // The masquerade turns conntrack on in the node, and is what a container's flow to
    // a remote server goes through.
    quiet["ipMasq"] = json!(true);
    let mut publishing = direct_config(&lab, "1.1.0", &[udp_mapping(port)]);
    publishing["ipMasq"] = json!(true);
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));

    let first = node.call("ADD", &a, &quiet);
    let first = first.expect_result("ADD of the container with a remote server, in the node");
    let a_v4 = result_address(&first);
    send_unanswered(&a.netns, CONTAINER_SOURCE_PORT, &remote.far_v4, port);
    send_unanswered(&remote.netns, CLIENT_SOURCE_PORT, &remote.node_v4, port);
    let container_flow = format!("{a_v4}:{CONTAINER_SOURCE_PORT} -> {}:{port}", remote.far_v4);
    let client_flow = format!(
        "{}:{CLIENT_SOURCE_PORT} -> {}:{port}",
        remote.far_v4, remote.node_v4
    );
    let before = entries_to(&node, port);
    assert!(
        before.contains(&container_flow) && before.contains(&client_flow),
        "the node has not both flows to udp port {port} (want {container_flow} and {client_flow}): {before:?}"
    );

    let added = node.call("ADD", &b, &publishing);
    added.expect_result("ADD of the container publishing the udp port, in the node");
    let after = entries_to(&node, port);
    assert!(
        after.contains(&container_flow),
        "publishing udp port {port} deleted the other container's entry to a remote server ({container_flow}): {after:?}\n{added}"
    );
    assert!(
        !after.contains(&client_flow),
        "the stale entry of the client of the node's own address ({client_flow}) is still there: {after:?}\n{added}"
    );
    assert!(
        added
            .stderr
            .contains("academy: deleted 1 stale conntrack entries of the published udp ports"),
        "ADD did not report the client's one stale entry alone:\n{added}"
    );

    node.call("DEL", &b, &publishing)
        .expect_silent_success("DEL of the publishing container");
    node.call("DEL", &a, &quiet)
        .expect_silent_success("DEL of the other container");
}
