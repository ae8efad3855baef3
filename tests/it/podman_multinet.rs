//! A podman container on two academy networks (podman 4.3, CNI backend): `podman run
//! --network a,b` with a published port, `podman network disconnect` and `podman network
//! connect`, on the conflists `podman network create` writes (bridge with isGateway,
//! ipMasq, a default route from IPAM, then the reference portmap, firewall, tuning) with
//! only `type` changed (and podman's shared bridge name, to the lab's).
//!
//! Every network's default route goes into the container beside the other's, as the
//! reference bridge leaves it; DEL of one network (disconnect) leaves the other's address
//! and routes; the published port answers from an outside that has no route to either
//! subnet. A shim named `academy` records every call and its exit status. The private
//! podman, the labs' and the outside's guards remove everything, also on failure.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;

use nix::fcntl::Flock;
use serde_json::{json, Value};

use crate::common::*;

/// Undoes what the test made, whatever state it stopped in.
struct Guard {
    podman: PrivatePodman,
    netns_before: BTreeSet<String>,
    _lock: Flock<fs::File>,
    /// Last: podman's chained firewall plugin runs in the host's netns.
    _chains: FirewallChains,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.podman.remove_all();
        for ns in podman_netns().difference(&self.netns_before) {
            let _ = run_quiet("ip", &["netns", "delete", ns]);
        }
    }
}

/// Plugins podman finds: academy behind a shim that logs each call, and the reference
/// plugins podman chains after the bridge.
fn install_plugins(p: &PrivatePodman) -> std::path::PathBuf {
    let plugins = p.dir.join("cni-bin");
    fs::create_dir_all(&plugins).unwrap();
    let real = p.dir.join("academy-real");
    copy_executable(env!("CARGO_BIN_EXE_academy"), &real);
    let shim = plugins.join("academy");
    fs::write(
        &shim,
        format!(
            "#!/bin/sh\n'{real}' \"$@\"\nrc=$?\necho \"$CNI_COMMAND $CNI_IFNAME rc=$rc\" >>'{log}'\nexit $rc\n",
            real = real.display(),
            log = p.dir.join("calls.log").display()
        ),
    )
    .unwrap();
    fs::set_permissions(&shim, fs::Permissions::from_mode(0o755)).unwrap();
    for chained in ["portmap", "firewall", "tuning"] {
        std::os::unix::fs::symlink(format!("/usr/lib/cni/{chained}"), plugins.join(chained))
            .unwrap();
    }
    plugins
}

/// A private podman in `lab`'s folder with academy's shim and the reference plugins
/// installed, its image built; the guard and its conf dir.
fn private_podman(lab: &Lab) -> (Guard, std::path::PathBuf) {
    let lock = lock_file(PODMAN_LOCK);
    require_podman_packages();
    let dir = lab.root.join("podman");
    fs::create_dir_all(dir.join("tmp")).unwrap();
    let guard = Guard {
        podman: PrivatePodman { dir },
        netns_before: podman_netns(),
        _lock: lock,
        _chains: FirewallChains::hold(),
    };
    let p = &guard.podman;
    let confs = p.dir.join("net.d");
    fs::create_dir_all(&confs).unwrap();
    let plugins = install_plugins(p);
    p.write_conf(&plugins, &confs);
    p.build_image();
    (guard, confs)
}

/// `podman network create` for the lab, then its bridge plugin switched to academy.
fn create_network(p: &PrivatePodman, confs: &std::path::Path, lab: &Lab) {
    let create = ["network", "create", "--subnet", &lab.subnet(), &lab.network];
    let created = retried_while_links_vanish(|| p.run(&create));
    assert_eq!(created.code, 0, "podman network create:\n{created}");
    let file = confs.join(format!("{}.conflist", lab.network));
    let mut list: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    let plugin = &mut list["plugins"][0];
    assert_eq!(plugin["type"], "bridge", "not a bridge conflist");
    assert_eq!(
        plugin["ipam"]["routes"],
        json!([{"dst": "0.0.0.0/0"}]),
        "podman's IPAM routes every network by default"
    );
    plugin["type"] = json!("academy");
    plugin["bridge"] = json!(lab.bridge);
    fs::write(&file, serde_json::to_string_pretty(&list).unwrap()).unwrap();
}

/// The IPv4 default routes inside the container, as `ip -4 route` prints them.
fn defaults(p: &PrivatePodman) -> Vec<String> {
    p.must(&["exec", "multi", "ip", "-4", "route"])
        .lines()
        .filter(|l| l.starts_with("default"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The interfaces of the container's first two ADDs, in the order academy served them
/// (the shim appends a line when each call returns; podman runs them one after another).
fn add_order(p: &PrivatePodman) -> (String, String) {
    let calls = fs::read_to_string(p.dir.join("calls.log")).unwrap_or_default();
    let adds: Vec<String> = calls
        .lines()
        .filter_map(|l| l.strip_prefix("ADD "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    match adds.as_slice() {
        [first, later, ..] => (first.clone(), later.clone()),
        _ => panic!("not two ADDs in the shim's log:\n{calls}"),
    }
}

fn address_in(p: &PrivatePodman, dev: &str) -> String {
    let out = p.must(&[
        "exec", "multi", "ip", "-4", "-o", "addr", "show", "dev", dev,
    ]);
    out.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .unwrap_or_else(|| panic!("no IPv4 address on {dev}:\n{out}"))
        .to_string()
}

fn pings(p: &PrivatePodman, gateway: &str) -> bool {
    p.run(&["exec", "multi", "ping", "-c1", "-W2", gateway])
        .code
        == 0
}

/// The container addresses portmap DNATs `port` to, from the nat table.
fn dnat_targets(port: u16) -> BTreeSet<String> {
    let out = run("iptables-save", &["-t", "nat"], &[]);
    out.stdout
        .lines()
        .filter(|l| l.contains(&format!("--dport {port} ")) && l.contains("--to-destination"))
        .filter_map(|l| l.split("--to-destination ").nth(1))
        .filter_map(|t| t.split(':').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn podman_container_on_two_academy_networks() {
    let (a, b) = (Lab::new("pmna"), Lab::new("pmnb"));
    let outside = Outside::new(&a);
    let (guard, confs) = private_podman(&a);
    let p = &guard.podman;
    create_network(p, &confs, &a);
    create_network(p, &confs, &b);

    let port = 20000 + (std::process::id() % 20000) as u16 + u16::from(b.slot.n);
    let networks = format!("{},{}", a.network, b.network);
    p.must(&[
        "run",
        "-d",
        "--name",
        "multi",
        "--network",
        &networks,
        "--cap-add",
        "NET_RAW",
        "-p",
        &format!("{port}:8080"),
        IMAGE,
        "sh",
        "-c",
        "while true; do echo hello | nc -l -p 8080; done",
    ]);
    // podman names the interfaces in an order of its own (a map's, in 4.3): which of
    // eth0 and eth1 is on which network is read, not assumed.
    let on_a = |dev: &str| address_in(p, dev).starts_with(&format!("{}.", a.prefix));
    let (dev_a, dev_b) = if on_a("eth0") {
        ("eth0", "eth1")
    } else {
        ("eth1", "eth0")
    };
    let (addr_a, addr_b) = (address_in(p, dev_a), address_in(p, dev_b));
    assert!(
        addr_b.starts_with(&format!("{}.", b.prefix)),
        "{dev_b} {addr_b}"
    );
    // podman 4.3 runs the networks' ADDs in a map's order too, unrelated to the names:
    // the order is read from the shim's log. The later ADD's default comes first.
    let gateway_of = |dev: &str| {
        if dev == dev_a {
            a.gateway()
        } else {
            b.gateway()
        }
    };
    let (first, later) = add_order(p);
    let both = defaults(p);
    assert_eq!(
        both,
        [
            format!("default via {} dev {later}", gateway_of(&later)),
            format!("default via {} dev {first}", gateway_of(&first)),
        ],
        "both networks' default routes, the later ADD's first, as the reference leaves them"
    );
    assert!(pings(p, &a.gateway()) && pings(p, &b.gateway()));
    assert_eq!(
        dnat_targets(port),
        BTreeSet::from([addr_a.clone(), addr_b.clone()]),
        "the published port on both networks"
    );
    assert_eq!(
        connect(&outside.netns, &outside.host_v4, port),
        "hello",
        "-p {port}:8080 from the outside"
    );

    p.must(&["network", "disconnect", &b.network, "multi"]);
    assert!(
        p.run(&["exec", "multi", "ip", "link", "show", dev_b]).code != 0,
        "{dev_b} is still there"
    );
    assert_eq!(
        address_in(p, dev_a),
        addr_a,
        "{dev_a}'s address after disconnect"
    );
    assert_eq!(
        defaults(p),
        [format!("default via {} dev {dev_a}", a.gateway())]
    );
    assert!(pings(p, &a.gateway()), "network a after disconnecting b");
    assert_eq!(b.reservations(), Vec::<String>::new(), "b's store");
    assert_eq!(b.lab_veths(), Vec::<String>::new(), "b's host veth");
    assert_eq!(
        connect(&outside.netns, &outside.host_v4, port),
        "hello",
        "-p through network a after the disconnect"
    );

    p.must(&["network", "connect", &b.network, "multi"]);
    assert!(address_in(p, dev_b).starts_with(&format!("{}.", b.prefix)));
    assert_eq!(defaults(p).len(), 2, "{:?}", defaults(p));
    assert!(pings(p, &a.gateway()) && pings(p, &b.gateway()));

    p.must(&["rm", "-f", "-t", "0", "multi"]);
    for lab in [&a, &b] {
        assert_eq!(lab.reservations(), Vec::<String>::new(), "{}", lab.network);
        assert_eq!(lab.lab_veths(), Vec::<String>::new(), "{}", lab.network);
    }
    assert!(dnat_targets(port).is_empty(), "portmap's DNAT left");
    let calls = fs::read_to_string(p.dir.join("calls.log")).unwrap_or_default();
    let failed: Vec<&str> = calls.lines().filter(|l| !l.ends_with("rc=0")).collect();
    assert!(failed.is_empty(), "academy failed:\n{calls}");
    for want in ["ADD eth0", "ADD eth1", "DEL eth1", "DEL eth0"] {
        assert!(calls.contains(want), "no {want} in:\n{calls}");
    }
}

/// The same container on the two networks once `academy convert` made each one academy
/// entry (academy publishes the ports itself): podman passes the same `-p` to both
/// networks' ADDs, and the port is the container's on the network whose ADD came first
/// (docs/ports-and-nat.md), not a conflict with itself (it was 105, naming the container).
#[test]
fn podman_container_on_two_converted_networks_publishes_its_port_once() {
    let (a, b) = (Lab::new("pmca"), Lab::new("pmcb"));
    let outside = Outside::new(&a);
    let (guard, confs) = private_podman(&a);
    let p = &guard.podman;
    for lab in [&a, &b] {
        create_network(p, &confs, lab);
        let file = confs.join(format!("{}.conflist", lab.network));
        let converted = run(
            plugin(),
            &["convert", "--in-place", file.to_str().unwrap()],
            &[],
        );
        assert_eq!(converted.code, 0, "academy convert:\n{converted}");
        let list = fs::read_to_string(&file).unwrap();
        assert!(!list.contains("\"portmap\""), "portmap kept:\n{list}");
    }

    let port = 20000 + (std::process::id() % 20000) as u16 + u16::from(b.slot.n);
    let networks = format!("{},{}", a.network, b.network);
    p.must(&[
        "run",
        "-d",
        "--name",
        "multi",
        "--network",
        &networks,
        "-p",
        &format!("{port}:8080"),
        IMAGE,
        "sh",
        "-c",
        "while true; do echo hello | nc -l -p 8080; done",
    ]);
    assert_eq!(
        connect(&outside.netns, &outside.host_v4, port),
        "hello",
        "-p {port}:8080 from the outside"
    );
    let (first, _) = add_order(p);
    let holder = if address_in(p, &first).starts_with(&format!("{}.", a.prefix)) {
        &a
    } else {
        &b
    };
    let other = if std::ptr::eq(holder, &a) { &b } else { &a };
    let key = format!("tcp . {port} ->");
    let held = |lab: &Lab| {
        nft::published(&lab.network)
            .into_iter()
            .filter(|e| e.contains(&key))
            .count()
    };
    assert_eq!(held(holder), 1, "the first ADD's network holds the port");
    assert_eq!(held(other), 0, "the second network leaves it to the first");

    p.must(&["rm", "-f", "-t", "0", "multi"]);
    for lab in [&a, &b] {
        assert_eq!(held(lab), 0, "{} keeps the port", lab.network);
        assert_eq!(lab.reservations(), Vec::<String>::new(), "{}", lab.network);
        assert_eq!(lab.lab_veths(), Vec::<String>::new(), "{}", lab.network);
    }
    let calls = fs::read_to_string(p.dir.join("calls.log")).unwrap_or_default();
    let failed: Vec<&str> = calls.lines().filter(|l| !l.ends_with("rc=0")).collect();
    assert!(failed.is_empty(), "academy failed:\n{calls}");
}
