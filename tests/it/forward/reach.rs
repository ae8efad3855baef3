//! What the accepts let through a dropping FORWARD, and what they do not: from a
//! neighbour that routes the pods' subnet through the node, a container's published port
//! answers and its unpublished one does not; the container reaches an outside; a second
//! container of the bridge reaches the first (br_netfilter sends bridged frames through
//! FORWARD too).

use std::time::Duration;

use super::{
    accepts, answers, config, deletion, dropping_node, iptables, Peer, Server, HOST_PORT,
    PUBLISHED, UNPUBLISHED,
};
use crate::common::*;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn forward_accepts_replies_and_published_ports_but_not_an_unpublished_port() {
    let lab = Lab::new("fwreach");
    let node = dropping_node(&lab);
    let neighbour = Peer::new(&lab, &node, "nbr", true);
    let outside = Peer::new(&lab, &node, "out", false);
    let publishing = config(&lab, &[(HOST_PORT, PUBLISHED)]);
    let quiet = config(&lab, &[]);
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let added = node
        .call("ADD", &a, &publishing)
        .expect_result("ADD publishing a port");
    let a_v4 = result_address(&added);
    node.call("ADD", &b, &quiet)
        .expect_result("ADD of a second container");
    let _server = Server::start(&a.netns, &[PUBLISHED, UNPUBLISHED]);

    // Controls: both ports listen (from the node itself: OUTPUT, not FORWARD).
    for port in [PUBLISHED, UNPUBLISHED] {
        assert!(
            answers(&node.ns, &a_v4, port, WAIT),
            "port {port} does not listen"
        );
    }
    assert!(
        answers(&neighbour.netns, &neighbour.node_v4, HOST_PORT, WAIT),
        "the published port does not answer the neighbour through a dropping FORWARD"
    );
    for port in [UNPUBLISHED, PUBLISHED] {
        assert!(
            !answers(&neighbour.netns, &a_v4, port, Duration::ZERO),
            "the neighbour reached {a_v4}:{port} directly, unpublished, through a dropping FORWARD:\n{:#?}",
            accepts(&node, "4")
        );
    }
    assert!(
        ping_from(&a.netns, &outside.far_v4, 3),
        "the container does not reach the outside"
    );
    let _outside_server = Server::start(&outside.netns, &[UNPUBLISHED]);
    assert!(
        answers(&a.netns, &outside.far_v4, UNPUBLISHED, WAIT),
        "no TCP answer from the outside"
    );
    // Between two containers of the bridge: through FORWARD (br_netfilter is on in a
    // new netns), accepted by `-i BRIDGE`.
    let bridged = run(
        "ip",
        &[
            "netns",
            "exec",
            &node.ns,
            "sysctl",
            "-n",
            "net.bridge.bridge-nf-call-iptables",
        ],
        &[],
    );
    assert_eq!(
        bridged.stdout.trim(),
        "1",
        "br_netfilter is off in the node: {bridged}"
    );
    assert!(
        answers(&b.netns, &a_v4, UNPUBLISHED, WAIT),
        "a second container of the bridge does not reach the first"
    );

    // Controls of the controls. With the policy accepting, the neighbour does reach the
    // unpublished port: it was FORWARD that dropped it, not a missing route.
    assert_eq!(iptables(&node, "4", &["-P", "FORWARD", "ACCEPT"]).code, 0);
    assert!(
        answers(&neighbour.netns, &a_v4, UNPUBLISHED, WAIT),
        "the neighbour has no route to the container"
    );
    assert_eq!(iptables(&node, "4", &["-P", "FORWARD", "DROP"]).code, 0);
    // Without the DNAT accept the published port is dropped (replies alone do not let
    // a new connection in); the next ADD puts that one rule back, alone.
    let dnat: Vec<String> = accepts(&node, "4")
        .into_iter()
        .filter(|l| l.contains("--ctstate DNAT"))
        .collect();
    assert_eq!(dnat.len(), 1, "{dnat:?}");
    assert_eq!(iptables(&node, "4", &deletion(&dnat[0])).code, 0);
    assert!(
        !answers(
            &neighbour.netns,
            &neighbour.node_v4,
            HOST_PORT,
            Duration::ZERO
        ),
        "the published port answered without the DNAT accept"
    );
    let c = lab.attachment("c");
    node.call("ADD", &c, &quiet).expect_result("the next ADD");
    assert_eq!(accepts(&node, "4").len(), 3, "{:#?}", accepts(&node, "4"));
    assert!(
        answers(&neighbour.netns, &neighbour.node_v4, HOST_PORT, WAIT),
        "the published port does not answer again"
    );
    for (x, conf) in [(&a, &publishing), (&b, &quiet), (&c, &quiet)] {
        node.call("DEL", x, conf).expect_silent_success("DEL");
    }
}
