//! Under a dropping FORWARD policy: what reaches the containers from a neighbour that
//! routes the pod subnet through the node, what the containers reach, and the loopback
//! guard: a container's crafted frame to 127.0.0.1 through the bridge's MAC
//! (portmap/localnet.rs's probe) towards a node service bound to 127.0.0.1 only.

use super::*;
use crate::portmap::localnet::{loopback_probe, Container, NodeService};

/// The node's service on 127.0.0.1, and the control service on the gateway's address.
const LOOPBACK_SERVICE: u16 = 7001;
const CONTROL_SERVICE: u16 = 7002;

struct Seen {
    unpublished: bool,
    published: bool,
    hairpin: bool,
    outbound: bool,
    loopback: String,
    route_localnet: String,
}

fn look(site: &Site) -> Seen {
    let _service = NodeService::start(&site.node, "127.0.0.1", LOOPBACK_SERVICE);
    let _control = NodeService::start(&site.node, &site.lab.gateway(), CONTROL_SERVICE);
    let container = Container {
        netns: site.a.netns.clone(),
        v4: site.a_v4.clone(),
        v6: String::new(),
    };
    let path = format!("/proc/sys/net/ipv4/conf/{}/route_localnet", site.lab.bridge);
    Seen {
        outbound: site.outbound(),
        hairpin: site.published_hairpin(true),
        published: site.published_from_neighbour(true),
        unpublished: site.unpublished_from_neighbour(),
        loopback: loopback_probe(
            &site.node,
            &container,
            false,
            LOOPBACK_SERVICE,
            CONTROL_SERVICE,
        ),
        route_localnet: in_node(&site.node, &["cat", &path])
            .stdout
            .trim()
            .to_string(),
    }
}

#[test]
fn forward_and_loopback() {
    let (reference_lab, academy_lab) = labs("swfw");
    let reference_site = Site::new(&reference_lab, Side::Reference);
    let reference = look(&reference_site);
    // What `academy convert` says on the reference's node, its containers live: the
    // state a DEL through the converted conflist removes.
    let conflist = reference_site
        .conf_dir
        .join(format!("{}.conflist", reference_lab.network));
    let live = in_node(
        &reference_site.node,
        &[plugin(), "convert", conflist.to_str().unwrap(), "--dry-run"],
    );
    assert_eq!(live.code, 0, "academy convert --dry-run:\n{live}");
    println!(
        "academy convert --dry-run on the reference's live node:\n{}",
        live.stderr
    );
    assert!(
        live.stderr.contains("CNI-"),
        "convert did not list the reference's chains:\n{live}"
    );
    drop(reference_site);
    let academy_site = Site::new(&academy_lab, Side::Academy);
    println!(
        "academy convert on a fresh node:\n{}",
        academy_site.convert_notes
    );
    for note in ["portmap: dropped", "firewall: dropped", "tuning: dropped"] {
        assert!(
            academy_site.convert_notes.contains(note),
            "{note}:\n{}",
            academy_site.convert_notes
        );
    }
    let academy = look(&academy_site);
    let test = "forward::forward_and_loopback";
    let rows = vec![
        Row::closed(
            test,
            "DROP policy: neighbour -> container's unpublished port (routes the pod subnet)",
            reference.unpublished,
            academy.unpublished,
        ),
        Row::works(
            test,
            "DROP policy: neighbour -> published port (node address, DNAT)",
            reference.published,
            academy.published,
        ),
        Row::works(
            test,
            "DROP policy: second container -> published port (hairpin)",
            reference.hairpin,
            academy.hairpin,
        ),
        Row::works(
            test,
            "DROP policy: container -> outside (masqueraded)",
            reference.outbound,
            academy.outbound,
        ),
        Row::closed(
            test,
            "container's crafted frame to 127.0.0.1 -> node service on 127.0.0.1",
            reference.loopback == "SYNACK",
            academy.loopback == "SYNACK",
        )
        .note(format!(
            "raw SYN answered: reference {}, academy {}; route_localnet: reference {}, academy {}",
            reference.loopback, academy.loopback, reference.route_localnet, academy.route_localnet
        )),
    ];
    report(&rows);
}
