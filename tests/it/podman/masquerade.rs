//! Outbound NAT (ipMasq) on the network `podman network create` writes, with only its
//! `type` changed: the container reaches an outside as the host, and `-p` answers it.

use serde_json::json;

use super::setup::write;
use super::*;

/// Outbound NAT as a podman user gets it: `podman network create` writes its own
/// conflist (bridge with ipMasq, then portmap, firewall, tuning); only `type` is
/// changed (and podman's shared bridge name, to the lab's). A container reaches an
/// outside that has no route back, which sees the host's address. Returns the network's
/// lab and the outside, for [`published_port`].
pub(super) fn outbound_nat(c: &Ctx) -> (Lab, Outside) {
    let p = &c.guard.podman;
    let t0 = c.t0;
    let masq = Lab::new("podmasq");
    let outside = Outside::new(&masq);
    for chained in ["portmap", "firewall", "tuning"] {
        let _ = std::os::unix::fs::symlink(
            format!("/usr/lib/cni/{chained}"),
            p.plugin_dir().join(chained),
        );
    }
    let v6 = format!("{}::/64", masq.slot.v6_prefix());
    let create = [
        "network",
        "create",
        "--subnet",
        &masq.subnet(),
        "--ipv6",
        "--subnet",
        &v6,
        &masq.network,
    ];
    let created = retried_while_links_vanish(|| p.run(&create));
    assert_eq!(created.code, 0, "podman network create:\n{created}");
    let file = p.conf_dir().join(format!("{}.conflist", masq.network));
    let mut list: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&file).expect("podman's conflist")).unwrap();
    assert_eq!(list["plugins"][0]["type"], "bridge");
    assert_eq!(
        list["plugins"][0]["ipMasq"], true,
        "podman's network sets ipMasq"
    );
    list["plugins"][0]["type"] = json!("academy");
    list["plugins"][0]["bridge"] = json!(masq.bridge);
    write(&file, &serde_json::to_string_pretty(&list).unwrap());
    let reach = format!(
        "ping -c1 -W2 {} && ping -c1 -W2 {} && echo | nc -w 5 {} 8081",
        outside.far_v4, outside.far_v6, outside.far_v4
    );
    let listener = listen(&outside.netns, &outside.far_v4, 8081);
    let out = p.must(&[
        "run",
        "--rm",
        "--network",
        &masq.network,
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        &reach,
    ]);
    let seen = listener.wait_with_output().expect("listener");
    let peer = String::from_utf8_lossy(&seen.stdout).trim().to_string();
    assert!(out.contains("hello"), "the outside did not answer:\n{out}");
    assert_eq!(
        peer, outside.host_v4,
        "the outside saw the container's own address"
    );
    assert!(
        nft::elements(&masq.network).is_empty(),
        "elements after run --rm"
    );
    step(t0, "ipMasq: podman run reached the outside as the host");
    (masq, outside)
}

/// `-p` answers the outside, and `rm` leaves no NAT element and no veth.
pub(super) fn published_port(c: &Ctx, masq: &Lab, outside: &Outside) {
    let p = &c.guard.podman;
    let t0 = c.t0;
    let host_port = (20000 + std::process::id() % 20000 + u32::from(masq.slot.n)).to_string();
    p.must(&[
        "run",
        "-d",
        "--name",
        "academy-published",
        "--network",
        &masq.network,
        "-p",
        &format!("{host_port}:8080"),
        IMAGE,
        "sh",
        "-c",
        "while true; do echo hello | nc -l -p 8080; done",
    ]);
    let got = connect(&outside.netns, &outside.host_v4, host_port.parse().unwrap());
    assert_eq!(got, "hello", "-p {host_port}:8080 from the outside");
    assert_eq!(
        nft::elements(&masq.network).len(),
        2,
        "a v4 and a v6 element while it runs"
    );
    p.must(&["rm", "-f", "-t", "0", "academy-published"]);
    assert!(nft::elements(&masq.network).is_empty(), "elements after rm");
    assert!(masq.lab_veths().is_empty(), "veths after rm");
    p.must(&["network", "rm", &masq.network]);
    step(t0, "ipMasq: -p answered the outside; rm left no element");
}
