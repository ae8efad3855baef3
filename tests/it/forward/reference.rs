//! Side by side with the reference chain podman generated before `academy convert`
//! (bridge, portmap, firewall 1.1.1: Debian's containernetworking-plugins), each in a
//! node of its own whose FORWARD policy drops, with the same neighbour, outside, two
//! containers, one published port and one unpublished. The firewall plugin accepts
//! `-d IP --ctstate RELATED,ESTABLISHED` and `-s IP` per container; academy the same per
//! bridge, plus DNATed traffic, so that a published port answers where the reference's
//! does not.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::{answers, config, dropping_node, Peer, Server, HOST_PORT, PUBLISHED, UNPUBLISHED};
use crate::common::*;

const FIREWALL: &str = "/usr/lib/cni/firewall";

/// What got through the node's FORWARD.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// The neighbour, to the node's published port.
    published: bool,
    /// The neighbour, to the container's unpublished port directly.
    unpublished: bool,
    /// The container, to a server in the outside.
    outbound: bool,
    /// The second container of the bridge, to the first's unpublished port.
    bridged: bool,
}

struct Site<'a> {
    lab: &'a Lab,
    node: Node<'a>,
    neighbour: Peer,
    outside: Peer,
    a: Attach,
    b: Attach,
}

impl<'a> Site<'a> {
    fn new(lab: &'a Lab) -> Site<'a> {
        let node = dropping_node(lab);
        let neighbour = Peer::new(lab, &node, "nbr", true);
        let outside = Peer::new(lab, &node, "out", false);
        Site {
            lab,
            node,
            neighbour,
            outside,
            a: lab.attachment("a"),
            b: lab.attachment("b"),
        }
    }

    fn look(&self, a_v4: &str) -> Seen {
        let _server = Server::start(&self.a.netns, &[PUBLISHED, UNPUBLISHED]);
        let _far = Server::start(&self.outside.netns, &[UNPUBLISHED]);
        let wait = Duration::from_secs(3);
        assert!(
            answers(&self.node.ns, a_v4, UNPUBLISHED, wait),
            "the container's listener does not answer the node itself"
        );
        Seen {
            published: answers(
                &self.neighbour.netns,
                &self.neighbour.node_v4,
                HOST_PORT,
                wait,
            ),
            unpublished: answers(&self.neighbour.netns, a_v4, UNPUBLISHED, Duration::ZERO),
            outbound: answers(&self.a.netns, &self.outside.far_v4, UNPUBLISHED, wait),
            bridged: answers(&self.b.netns, a_v4, UNPUBLISHED, wait),
        }
    }

    /// cnitool in the node, on the reference chain's conflist.
    fn cnitool(&self, verb: &str, who: &Attach, caps: &Value) -> Out {
        let conf_dir = self.lab.root.join("reference.d");
        let path = who.netns_path();
        let caps = caps.to_string();
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.node.ns,
                "/usr/local/bin/cnitool",
                verb,
                &self.lab.network,
                &path,
            ],
            &[
                ("CNI_PATH", &format!("{REFERENCE_BIN}:/usr/lib/cni")),
                ("NETCONFPATH", conf_dir.to_str().unwrap()),
                ("CAP_ARGS", &caps),
            ],
        )
    }
}

fn reference_conflist(lab: &Lab) {
    let dir = lab.root.join("reference.d");
    std::fs::create_dir_all(&dir).unwrap();
    let list = json!({
        "cniVersion": "1.0.0",
        "name": lab.network,
        "plugins": [
            {"type": "bridge", "bridge": lab.bridge, "isGateway": true, "isDefaultGateway": true, "ipMasq": true,
             "ipam": {"type": "host-local", "subnet": lab.subnet(),
                      "dataDir": lab.root.join("reference-store").to_str().unwrap()}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": "iptables"}
        ]
    });
    std::fs::write(dir.join("10-reference.conflist"), list.to_string()).unwrap();
}

#[test]
fn forward_beside_the_reference_firewall_plugin_under_a_dropping_policy() {
    assert!(
        Path::new(FIREWALL).exists(),
        "{FIREWALL} is missing: Debian's containernetworking-plugins (make setup)"
    );
    let ports = json!({"portMappings": [
        {"hostPort": HOST_PORT, "containerPort": PUBLISHED, "protocol": "tcp"}
    ]});
    let reference_lab = Lab::new("fwref");
    reference_conflist(&reference_lab);
    let reference = Site::new(&reference_lab);
    let added = reference.cnitool("add", &reference.a, &ports);
    assert_eq!(added.code, 0, "the reference chain's ADD: {added}");
    let a_v4 = result_address(&serde_json::from_str(&added.stdout).unwrap());
    let added_b = reference.cnitool("add", &reference.b, &json!({}));
    assert_eq!(
        added_b.code, 0,
        "the reference chain's second ADD: {added_b}"
    );
    let by_reference = reference.look(&a_v4);

    let academy_lab = Lab::new("fwaca");
    let academy = Site::new(&academy_lab);
    let (publishing, quiet) = (
        config(&academy_lab, &[(HOST_PORT, PUBLISHED)]),
        config(&academy_lab, &[]),
    );
    let added = academy.node.call("ADD", &academy.a, &publishing);
    let a_v4 = result_address(&added.expect_result("academy's ADD"));
    academy
        .node
        .call("ADD", &academy.b, &quiet)
        .expect_result("academy's second ADD");
    let by_academy = academy.look(&a_v4);

    let both = Seen {
        published: false,
        unpublished: false,
        outbound: true,
        bridged: true,
    };
    assert_eq!(by_reference, both, "the reference chain");
    assert_eq!(
        by_academy,
        Seen {
            published: true,
            ..both
        },
        "academy (the reference chain: {by_reference:?})"
    );

    for who in [&reference.a, &reference.b] {
        let out = reference.cnitool("del", who, &ports);
        assert_eq!(out.code, 0, "the reference chain's DEL: {out}");
    }
    academy
        .node
        .call("DEL", &academy.a, &publishing)
        .expect_silent_success("DEL");
    academy
        .node
        .call("DEL", &academy.b, &quiet)
        .expect_silent_success("DEL");
}
