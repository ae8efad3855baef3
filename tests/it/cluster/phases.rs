//! The cluster's one test, as named phases in order: each phase says what it proves and
//! leaves the cluster as the next expects. One cluster for all (containerd's start and
//! the pause image are the costly part).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::containerd::CriPod;
use super::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// Ports inside the test's namespaces only.
const POD_PORT: u16 = 8080;
const HOST_PORT: u16 = 30080;
const INTERNET_PORT: u16 = 8081;

/// The pods the phases share.
struct Pods {
    /// Node 1, by the CRI: a1 publishes HOST_PORT -> POD_PORT.
    a1: CriPod,
    a2: CriPod,
    /// Node 2, by cnitool: b2 is deleted, b3 collected by GC.
    b1: (Attach, String),
    b2: (Attach, String),
    b3: (Attach, String),
    /// Node 3, by cnitool.
    c1: (Attach, String),
}

fn path_of(a: &(Attach, String)) -> String {
    a.0.netns_path()
}

#[test]
fn cluster_three_nodes_route_pods_masquerade_out_publish_ports_and_survive_an_upgrade() {
    let t0 = std::time::Instant::now();
    let phase = |name: &str| eprintln!("cluster: {name} at {:.1} s", t0.elapsed().as_secs_f64());
    let release = fresh_release_binary();
    let cluster = Cluster::new();
    phase("the cluster is up");
    topology_has_no_way_back_to_the_pods(&cluster);
    let pods = pods_on_every_node(&cluster);
    phase("pods on every node");
    pods_reach_pods_on_other_nodes_with_their_own_address(&pods);
    pods_reach_the_internet_as_their_node(&cluster, &pods);
    phase("pod to pod, pod to internet");
    host_port_on_node1_answers_other_nodes(&cluster, &pods);
    phase("hostPort");
    del_and_gc_on_node2_leave_the_other_nodes_untouched(&cluster, &pods);
    phase("DEL and GC");
    installer_replaces_node1s_academy_while_its_pods_keep_working(&cluster, &pods, &release);
    phase("upgrade");
    teardown_leaves_every_node_empty(&cluster, &pods);
    phase("teardown");
}

/// The static release binary (what the installer image holds), not older than src/.
fn fresh_release_binary() -> Vec<u8> {
    let bin = Path::new(REPO).join("target/release/academy");
    let built = fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}; run `make build` first", bin.display()));
    fn newest(p: &Path) -> std::time::SystemTime {
        let m = fs::metadata(p).unwrap();
        let mut t = m.modified().unwrap();
        if m.is_dir() {
            for e in fs::read_dir(p).unwrap().flatten() {
                t = t.max(newest(&e.path()));
            }
        }
        t
    }
    assert!(
        built >= newest(&Path::new(REPO).join("src")),
        "{} is older than src/; run `make build` (make test does)",
        bin.display()
    );
    fs::read(&bin).unwrap()
}

/// The rendered conflist is the cluster template's, the routes are the cloud's, and
/// neither the router nor the internet can reach a pod address (so an answer from the
/// internet proves the masquerade).
fn topology_has_no_way_back_to_the_pods(c: &Cluster) {
    let r = &c.rendered;
    assert_eq!(r["cniVersion"], "1.0.0", "{r}");
    let p = &r["plugins"][0];
    assert_eq!(p["bridge"], "cni0", "{r}");
    assert_eq!(p["ipMasq"], true, "{r}");
    assert_eq!(p["nonMasqueradeCIDRs"], json!([CLUSTER_CIDR]), "{r}");
    assert_eq!(
        p["ipam"]["ranges"],
        json!([[{"subnet": "10.244.1.0/24"}]]),
        "{r}"
    );
    assert!(p["ipam"].get("dataDir").is_none(), "the shipped store: {r}");
    for x in &c.nodes {
        let routes = ip(&["-n", &x.ns, "-4", "route", "show"]);
        for y in c.nodes.iter().filter(|y| y.index != x.index) {
            let want = format!("{} via {} dev eth0", y.pod_cidr(), y.underlay_ip());
            assert!(routes.contains(&want), "node {}: {routes}", x.index);
        }
    }
    for ns in [&c.router, &c.internet] {
        let out = run("ip", &["-n", ns, "route", "get", "10.244.1.2"], &[]);
        assert_ne!(out.code, 0, "{ns} has a route to the pods:\n{out}");
    }
}

fn pods_on_every_node(c: &Cluster) -> Pods {
    let cri = c.containerd();
    let port = format!("{HOST_PORT}:{POD_PORT}");
    let a1 = cri.run_pod("a1", &[&port]);
    let a2 = cri.run_pod("a2", &[]);
    let pods = Pods {
        a1,
        a2,
        b1: c.cnitool_pod(2, "b1"),
        b2: c.cnitool_pod(2, "b2"),
        b3: c.cnitool_pod(2, "b3"),
        c1: c.cnitool_pod(3, "c1"),
    };
    let by_node: [(u8, Vec<&str>); 3] = [
        (1, vec![&pods.a1.ip, &pods.a2.ip]),
        (2, vec![&pods.b1.1, &pods.b2.1, &pods.b3.1]),
        (3, vec![&pods.c1.1]),
    ];
    for (index, ips) in by_node {
        let node = c.node(index);
        let mut want: Vec<String> = ips.iter().map(|s| s.to_string()).collect();
        want.sort();
        let prefix = format!("10.244.{index}.");
        assert!(
            want.iter().all(|ip| ip.starts_with(&prefix)),
            "node {index}: {want:?}"
        );
        assert_eq!(node.reserved(), want, "node {index}'s store");
        assert_eq!(node.masqueraded(), want, "node {index}'s masquerade set");
        assert_eq!(node.bridge_ports().len(), want.len(), "node {index}'s cni0");
    }
    pods
}

/// Pod to pod across nodes, through the nodes' routes: the receiver sees the sender's
/// own address (nonMasqueradeCIDRs keeps the cluster CIDR unmasqueraded).
fn pods_reach_pods_on_other_nodes_with_their_own_address(p: &Pods) {
    let cases = [
        ("a1 -> b1", p.a1.netns(), &p.a1.ip, path_of(&p.b1), &p.b1.1),
        ("b1 -> c1", path_of(&p.b1), &p.b1.1, path_of(&p.c1), &p.c1.1),
        ("c1 -> a2", path_of(&p.c1), &p.c1.1, p.a2.netns(), &p.a2.ip),
        ("b2 -> a1", path_of(&p.b2), &p.b2.1, p.a1.netns(), &p.a1.ip),
    ];
    for (what, from, from_ip, to, to_ip) in cases {
        let seen = seen_by(&to, &from, to_ip, POD_PORT);
        assert_eq!(&seen, from_ip, "{what}: the receiver saw {seen}");
    }
}

/// Pod to the internet: it leaves as its node (the internet has no route to pods).
fn pods_reach_the_internet_as_their_node(c: &Cluster, p: &Pods) {
    let internet = netns_path(&c.internet);
    for (from, node) in [(p.a1.netns(), 1), (path_of(&p.b1), 2), (path_of(&p.c1), 3)] {
        let seen = seen_by(&internet, &from, INTERNET_HOST, INTERNET_PORT);
        assert_eq!(
            seen,
            c.node(node).underlay_ip(),
            "from a pod of node {node}"
        );
    }
}

/// a1's hostPort (CRI port mapping, academy's portMappings) on node 1's underlay
/// address: from node 2 itself the pod sees node 2's address; from a pod on node 3 it
/// sees node 3's (masqueraded: a node address is outside the cluster CIDR).
fn host_port_on_node1_answers_other_nodes(c: &Cluster, p: &Pods) {
    let n1 = c.node(1).underlay_ip();
    let node2 = netns_path(&c.node(2).ns);
    let from_node2 = seen_through(&p.a1.netns(), POD_PORT, &node2, &n1, HOST_PORT);
    assert_eq!(from_node2, c.node(2).underlay_ip(), "hostPort from node 2");
    let from_pod3 = seen_through(&p.a1.netns(), POD_PORT, &path_of(&p.c1), &n1, HOST_PORT);
    assert_eq!(
        from_pod3,
        c.node(3).underlay_ip(),
        "hostPort from c1 on node 3"
    );
    // The port is node 1's only: node 2's address does not publish it.
    let server = Server::start(&p.a1.netns(), POD_PORT);
    let script = format!(
        "import socket\nsocket.create_connection(('{}', {HOST_PORT}), timeout=2)\n",
        c.node(2).underlay_ip()
    );
    let out = run(
        "nsenter",
        &[
            &format!("--net={}", path_of(&p.c1)),
            "/usr/bin/python3",
            "-c",
            &script,
        ],
        &[],
    );
    assert_ne!(out.code, 0, "node 2 answered node 1's hostPort:\n{out}");
    drop(server);
}

/// DEL (cnitool) and GC (direct, cniVersion 1.1.0, b1 the only valid attachment) on
/// node 2 take b2 and b3 and nothing else: nodes 1 and 3 keep their ruleset, links,
/// addresses, routes and files byte for byte, and b1 still talks to them.
fn del_and_gc_on_node2_leave_the_other_nodes_untouched(c: &Cluster, p: &Pods) {
    let (n1, n2, n3) = (c.node(1), c.node(2), c.node(3));
    n1.settle();
    n3.settle();
    let before = (n1.state(), n3.state());
    n2.cnitool("del", &p.b2.0.netns, &[])
        .expect_silent_success("cnitool del b2 on node 2");
    let mut config = c.rendered["plugins"][0].clone();
    config["name"] = json!(NETWORK);
    config["cniVersion"] = json!("1.1.0");
    config["cni.dev/valid-attachments"] = json!([{"containerID": p.b1.0.cid, "ifname": "eth0"}]);
    let gc = Call::bare()
        .env("CNI_COMMAND", "GC")
        .env("CNI_PATH", n2.bin().to_str().unwrap())
        .config(&config);
    let academy = n2.bin().join("academy");
    n2.exec(&gc, academy.to_str().unwrap(), &[])
        .expect_silent_success("GC on node 2");
    assert_eq!(
        n2.reserved(),
        vec![p.b1.1.clone()],
        "node 2's store after DEL and GC"
    );
    assert_eq!(
        n2.masqueraded(),
        vec![p.b1.1.clone()],
        "node 2's set after DEL and GC"
    );
    assert_eq!(n2.bridge_ports().len(), 1, "{:?}", n2.bridge_ports());
    assert!(
        netns_link_names(&p.b3.0.netns) == vec!["lo".to_string()],
        "GC left b3's eth0: {:?}",
        netns_link_names(&p.b3.0.netns)
    );
    let after = (n1.state(), n3.state());
    for (node, b, a) in [(1, &before.0, &after.0), (3, &before.1, &after.1)] {
        assert!(
            b == a,
            "node {node} changed:\n{}",
            state_diff(b, a).join("\n")
        );
    }
    for (to, to_ip) in [(p.a1.netns(), &p.a1.ip), (path_of(&p.c1), &p.c1.1)] {
        assert_eq!(&seen_by(&to, &path_of(&p.b1), to_ip, POD_PORT), &p.b1.1);
    }
}

/// A ping that runs across the upgrade; killed by its PID when dropped.
struct Pinger(Option<std::process::Child>);

impl Drop for Pinger {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The DaemonSet's installer run again on node 1 with a newer image: the release binary
/// runs `academy install` with the same arguments. It replaces node 1's academy (another
/// build: the tests' debug binary was installed) by a rename, leaves the template
/// alone, and pods keep talking through it without a lost packet; containerd's next ADD
/// and DEL run the new binary, and the pods from before still reach each other.
fn installer_replaces_node1s_academy_while_its_pods_keep_working(
    c: &Cluster,
    p: &Pods,
    release: &[u8],
) {
    let n1 = c.node(1);
    let installed = n1.bin().join("academy");
    let old_inode = fs::metadata(&installed).unwrap().ino();
    assert_ne!(
        fs::read(&installed).unwrap(),
        release,
        "the release build is another binary"
    );
    let ping = Command::new("nsenter")
        .arg(format!("--net={}", p.a1.netns()))
        .args([
            "ping", "-n", "-q", "-i", "0.1", "-c", "30", "-W", "1", &p.b1.1,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ping");
    let mut ping = Pinger(Some(ping));
    std::thread::sleep(Duration::from_secs(1));
    // The new image's binary, copied into the node as the image would bring it.
    let image = n1.root.join("new-image-academy");
    fs::write(&image, release).unwrap();
    fs::set_permissions(&image, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args = install_args(n1);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = n1.exec(&Call::bare(), image.to_str().unwrap(), &args);
    assert_eq!(out.code, 0, "{out}");
    let (files, networks) = out.stdout.split_at(
        out.stdout
            .match_indices('\n')
            .nth(1)
            .map_or(0, |(i, _)| i + 1),
    );
    assert_eq!(
        files,
        format!(
            "installed {}\nunchanged {}\n",
            installed.display(),
            n1.conf().join("academy.conflist.tmpl").display()
        )
    );
    // Then the network containerd rendered from the template, with pods: made by this
    // release's state version already, so nothing is missing (src/firewall/upgrade.rs).
    let up_to_date = format!("network {NETWORK}: up to date (state version ");
    assert!(
        networks.starts_with(&up_to_date)
            && networks.ends_with("), nothing missing\n")
            && networks.lines().count() == 1,
        "the installer's report of the node's networks:\n{out}"
    );
    assert_eq!(
        fs::read(&installed).unwrap(),
        release,
        "node 1's academy after the upgrade"
    );
    assert_ne!(
        fs::metadata(&installed).unwrap().ino(),
        old_inode,
        "replaced, not rewritten"
    );
    let names: Vec<String> = fs::read_dir(n1.bin())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| n == "academy" || n == "loopback"),
        "{names:?}"
    );
    let done = ping.0.take().unwrap();
    let out = Out::from(done.wait_with_output().unwrap());
    assert!(
        out.stdout.contains("30 packets transmitted, 30 received"),
        "a1 -> b1 across the upgrade:\n{out}"
    );

    // containerd's next pod: ADD by the new binary; it reaches node 2 and is seen as
    // itself; DEL by the new binary leaves nothing of it.
    let cri = c.containerd();
    let a3 = cri.run_pod("a3", &[]);
    assert!(a3.ip.starts_with("10.244.1."), "{}", a3.ip);
    assert_eq!(
        seen_by(&path_of(&p.b1), &a3.netns(), &p.b1.1, POD_PORT),
        a3.ip
    );
    cri.stop_and_remove(&a3);
    let mut want = vec![p.a1.ip.clone(), p.a2.ip.clone()];
    want.sort();
    assert_eq!(n1.reserved(), want, "node 1's store after a3");
    assert_eq!(n1.masqueraded(), want, "node 1's set after a3");
    assert_eq!(n1.bridge_ports().len(), 2, "{:?}", n1.bridge_ports());
    // The pods from before the upgrade, across nodes and on node 1.
    assert_eq!(
        seen_by(&path_of(&p.c1), &p.a2.netns(), &p.c1.1, POD_PORT),
        p.a2.ip
    );
    assert_eq!(
        seen_by(&p.a2.netns(), &p.a1.netns(), &p.a2.ip, POD_PORT),
        p.a1.ip
    );
    let n1_ip = n1.underlay_ip();
    let seen = seen_through(&p.a1.netns(), POD_PORT, &path_of(&p.b1), &n1_ip, HOST_PORT);
    assert_eq!(
        seen,
        c.node(2).underlay_ip(),
        "a1's hostPort after the upgrade"
    );
}

/// Every pod removed as its runtime would (CRI Stop and Remove; cnitool del): no
/// reservation, no bridge port, no masquerade element on any node; containerd has no
/// sandbox left.
fn teardown_leaves_every_node_empty(c: &Cluster, p: &Pods) {
    let cri = c.containerd();
    cri.stop_and_remove(&p.a1);
    cri.stop_and_remove(&p.a2);
    assert!(cri.sandboxes().is_empty(), "{:?}", cri.sandboxes());
    for (index, a) in [(2u8, &p.b1), (3, &p.c1)] {
        c.node(index)
            .cnitool("del", &a.0.netns, &[])
            .expect_silent_success("cnitool del");
    }
    for node in &c.nodes {
        assert_eq!(node.reserved(), Vec::<String>::new(), "node {}", node.index);
        assert_eq!(
            node.masqueraded(),
            Vec::<String>::new(),
            "node {}",
            node.index
        );
        assert_eq!(
            node.bridge_ports(),
            Vec::<String>::new(),
            "node {}",
            node.index
        );
        let published = nft::nft_in(
            Some(&node.ns),
            &["-j", "list", "map", "inet", "academy", "_ports-v4"],
        );
        if published.code == 0 {
            let v: Value = published.json();
            let elems = v["nftables"][1]["map"]["elem"].as_array().map(Vec::len);
            assert!(elems.unwrap_or(0) == 0, "node {}: {v}", node.index);
        }
    }
}
