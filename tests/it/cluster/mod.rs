//! A cluster in simulation (issue 26, item 6): three nodes, each a netns of the test's on
//! one underlay, each with its own academy, its own CNI folders and its own
//! /var/lib/cni and /run/academy, and a pod CIDR of one cluster CIDR; routes between the
//! nodes as a cloud route table makes them; an "internet" behind a router that has no
//! route back to any pod CIDR. Node 1 runs containerd 1.6 inside its netns, on the
//! template `academy install --template --cluster-cidr` wrote into its conf dir; nodes 2
//! and 3 have no runtime: their pods are added with cnitool (libcni, as a runtime calls
//! it) on the conflist containerd rendered for node 1 with their own subnet, and GC is a
//! direct invocation of the same conflist at cniVersion 1.1.0 (cnitool 1.1.2 has no GC).
//!
//! | file           | what                                                        |
//! |----------------|-------------------------------------------------------------|
//! | `mod.rs`       | the topology ([`Cluster`]), a node ([`ClusterNode`]), TCP probes |
//! | `containerd.rs`| containerd inside a node's netns                            |
//! | `phases.rs`    | the test: one cluster, its phases in order                  |
//!
//! ```text
//!  internet 192.168.78.10 ── router 192.168.78.1 / 192.168.77.1 (no route to 10.244/16)
//!                                        │
//!        underlay bridge ul0 ────────────┼─────────────────────┐
//!          │                             │                     │
//!   node1 192.168.77.11          node2 192.168.77.12    node3 192.168.77.13
//!   cni0 10.244.1.1/24           cni0 10.244.2.1/24     cni0 10.244.3.1/24
//!   containerd (CRI)             cnitool                cnitool
//! ```
//!
//! The addresses are fixed, not the allocator's: none of them exists outside the test's
//! own namespaces (the nodes, underlay, router and internet are netns of the lab, the
//! pods netns of the lab or of node 1's containerd), so no other test or host network can
//! meet them. Nothing routes out of these namespaces: the router has no default route.
//! Each node's /var/lib/cni (academy's store, libcni's result cache) and
//! /run/academy (academy's network locks) are folders of the test bind-mounted in a
//! private mount namespace of every command run in the node, so the shipped template needs no
//! `dataDir` and two nodes share no file. The lab's guard deletes every netns and the
//! folder; node 1's containerd guard first removes its sandboxes through the CRI.

mod containerd;
mod phases;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::Flock;
use serde_json::Value;

use crate::common::*;
use containerd::NodeContainerd;

pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
const UNDERLAY: &str = "192.168.77";
const INTERNET: &str = "192.168.78";
pub const INTERNET_HOST: &str = "192.168.78.10";
/// The network name and bridge of the shipped template, on every node.
pub const NETWORK: &str = "academy";
/// Serialises runs of this test across processes, as every CRI test does (containerd's
/// shims share /run/containerd; everything else of a run is its own).
const LOCK: &str = "/run/academy-cluster-test.lock";

/// Runs `sh -c` inside a node (`nsenter --net` into its netns, `unshare --mount
/// --propagation slave`): the node's /var/lib/cni and /run/academy bind-mounted in that
/// private mount namespace (nothing propagates to the host), then exec of the arguments
/// after the two folders. Not `ip netns exec`: it mounts a fresh /sys without
/// /sys/fs/cgroup, where runc finds no cgroup ("no cgroup mount found in mountinfo").
/// /sys stays the host's, as for a plugin a runtime runs after `nsenter --net`.
const IN_NODE: &str = r#"mkdir -p /run/academy /var/lib/cni && mount --bind "$1" /var/lib/cni && mount --bind "$2" /run/academy && shift 2 && exec "$@""#;

/// One node: netns `ns`, underlay address 192.168.77.1N, pod CIDR 10.244.N.0/24, and its
/// folders under `root`.
pub struct ClusterNode {
    pub index: u8,
    pub ns: String,
    pub root: PathBuf,
}

impl ClusterNode {
    pub fn underlay_ip(&self) -> String {
        format!("{UNDERLAY}.1{}", self.index)
    }

    pub fn pod_cidr(&self) -> String {
        format!("10.244.{}.0/24", self.index)
    }

    pub fn bin(&self) -> PathBuf {
        self.root.join("opt-cni-bin")
    }

    pub fn conf(&self) -> PathBuf {
        self.root.join("etc-cni-net.d")
    }

    fn var_lib_cni(&self) -> PathBuf {
        self.root.join("var-lib-cni")
    }

    /// academy's store of the template's network on this node: the template's ipam has
    /// no dataDir, so it is host-local's folder, /var/lib/cni/networks/academy.
    pub fn store(&self) -> PathBuf {
        self.var_lib_cni().join("networks").join(NETWORK)
    }

    fn in_node_args<'a>(&'a self, dirs: &'a [String; 3], program: &'a str) -> Vec<&'a str> {
        vec![
            &dirs[0],
            "--",
            "unshare",
            "--mount",
            "--propagation",
            "slave",
            "--",
            "sh",
            "-c",
            IN_NODE,
            "in-node",
            &dirs[1],
            &dirs[2],
            program,
        ]
    }

    fn dirs(&self) -> [String; 3] {
        [
            format!("--net={}", netns_path(&self.ns)),
            self.var_lib_cni().display().to_string(),
            self.root.join("run-academy").display().to_string(),
        ]
    }

    /// `program args` run in the node (as on the node's host), for a long-running
    /// process (containerd).
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let dirs = self.dirs();
        let mut cmd = Command::new("nsenter");
        cmd.args(self.in_node_args(&dirs, program)).args(args);
        cmd
    }

    /// `program args` run in the node with the call's environment and stdin.
    pub fn exec(&self, call: &Call, program: &str, args: &[&str]) -> Out {
        let dirs = self.dirs();
        let mut all = self.in_node_args(&dirs, program);
        all.extend_from_slice(args);
        call.spawn("nsenter", &all)
    }

    /// cnitool VERB on the node's conflist for pod netns `pod` (libcni as a runtime),
    /// with the node's CNI folders.
    pub fn cnitool(&self, verb: &str, pod: &str, env: &[(&str, &str)]) -> Out {
        let (bin, conf) = (self.bin(), self.conf());
        let mut call = Call::bare()
            .env("CNI_PATH", bin.to_str().unwrap())
            .env("NETCONFPATH", conf.to_str().unwrap());
        for (k, v) in env {
            call = call.env(k, v);
        }
        let path = netns_path(pod);
        self.exec(&call, "/usr/local/bin/cnitool", &[verb, NETWORK, &path])
    }

    /// The addresses academy's store reserves on this node.
    pub fn reserved(&self) -> Vec<String> {
        let mut found: Vec<String> = fs::read_dir(self.store())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<IpAddr>().is_ok())
            .collect();
        found.sort();
        found
    }

    /// The addresses in the network's masquerade set in this node.
    pub fn masqueraded(&self) -> Vec<String> {
        let mut found: Vec<String> = nft::elements_in(Some(&self.ns), NETWORK)
            .iter()
            .filter_map(|e| e.split(' ').next().map(str::to_string))
            .collect();
        found.sort();
        found
    }

    /// The ports of the node's cni0.
    pub fn bridge_ports(&self) -> Vec<String> {
        let v = ip_json(&["-n", &self.ns, "link", "show", "master", "cni0"]);
        let mut names: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// Waits (up to 10 s) until the kernel's IPv6 duplicate address detection is done on
    /// every link-local address of the node: finishing it drops the address's
    /// `tentative` flag and adds its local route, a change of the kernel's own.
    pub fn settle(&self) {
        let done = wait_until(Duration::from_secs(10), || {
            ip(&["-n", &self.ns, "-6", "addr", "show", "tentative"])
                .trim()
                .is_empty()
        });
        assert!(done, "node {}: DAD still running after 10 s", self.index);
    }

    /// What another node's DEL or GC must not change: the node's whole nf_tables
    /// ruleset, its links and addresses, its routes, and every file of its
    /// /var/lib/cni (store and result cache) and /run/academy.
    pub fn state(&self) -> NodeState {
        let nft = nft::nft_in(Some(&self.ns), &["-j", "list", "ruleset"]);
        assert_eq!(nft.code, 0, "{nft}");
        let mut files = BTreeMap::new();
        for top in [self.var_lib_cni(), self.root.join("run-academy")] {
            collect_files(&top, &top, &mut files);
        }
        NodeState {
            ruleset: nft.json(),
            links: ip_json(&["-n", &self.ns, "addr", "show"]),
            routes: ip_json(&["-n", &self.ns, "route", "show", "table", "all"]),
            files,
        }
    }
}

/// What differs between two states of a node, line by line (empty: nothing).
pub fn state_diff(before: &NodeState, after: &NodeState) -> Vec<String> {
    let lines = |s: &NodeState| -> std::collections::BTreeSet<String> {
        format!("{s:#?}").lines().map(str::to_string).collect()
    };
    let (b, a) = (lines(before), lines(after));
    let mut out: Vec<String> = b.difference(&a).map(|l| format!("- {l}")).collect();
    out.extend(a.difference(&b).map(|l| format!("+ {l}")));
    out
}

#[derive(Debug, PartialEq)]
pub struct NodeState {
    ruleset: Value,
    links: Value,
    routes: Value,
    files: BTreeMap<String, String>,
}

fn collect_files(top: &Path, dir: &Path, into: &mut BTreeMap<String, String>) {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        let name = path.strip_prefix(top).unwrap().display().to_string();
        if path.is_dir() {
            into.insert(format!("{name}/"), String::new());
            collect_files(top, &path, into);
        } else {
            into.insert(
                name,
                String::from_utf8_lossy(&fs::read(&path).unwrap_or_default()).into(),
            );
        }
    }
}

/// The cluster: the lab (its netns and folder), three nodes, the underlay, the router
/// and the internet, node 1's containerd.
pub struct Cluster {
    /// Dropped first (in Drop): sandboxes removed while the netns still exist.
    pub containerd: Option<NodeContainerd>,
    pub nodes: Vec<ClusterNode>,
    pub router: String,
    pub internet: String,
    /// The rendered conflist of node 1 (containerd's), as the other nodes got it.
    pub rendered: Value,
    pub lab: Lab,
    _lock: Flock<fs::File>,
}

fn ip_in(ns: &str, args: &[&str]) {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    ip(&all);
}

fn sysctl_in(ns: &str, setting: &str) {
    let out = run("ip", &["netns", "exec", ns, "sysctl", "-qw", setting], &[]);
    assert_eq!(out.code, 0, "sysctl {setting} in {ns}:\n{out}");
}

impl Cluster {
    pub fn new() -> Cluster {
        let lock = lock_file(LOCK);
        let lab = Lab::new("cluster");
        let underlay = lab.add_netns("ul");
        let router = lab.add_netns("rt");
        let internet = lab.add_netns("inet");
        for ns in [&underlay, &router, &internet] {
            ip_in(ns, &["link", "set", "lo", "up"]);
        }
        ip_in(&underlay, &["link", "add", "ul0", "type", "bridge"]);
        ip_in(&underlay, &["link", "set", "ul0", "up"]);
        // A veth from the underlay's bridge to `ns`, named eth0 there.
        let plug = |port: &str, ns: &str| {
            ip_in(
                &underlay,
                &[
                    "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns,
                ],
            );
            ip_in(&underlay, &["link", "set", port, "master", "ul0", "up"]);
            ip_in(ns, &["link", "set", "eth0", "up"]);
        };
        plug("p-rt", &router);
        ip_in(
            &router,
            &["addr", "add", &format!("{UNDERLAY}.1/24"), "dev", "eth0"],
        );
        ip_in(
            &router,
            &[
                "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", &internet,
            ],
        );
        ip_in(
            &router,
            &["addr", "add", &format!("{INTERNET}.1/24"), "dev", "eth1"],
        );
        ip_in(&router, &["link", "set", "eth1", "up"]);
        sysctl_in(&router, "net.ipv4.ip_forward=1");
        ip_in(
            &internet,
            &["addr", "add", &format!("{INTERNET_HOST}/24"), "dev", "eth0"],
        );
        ip_in(&internet, &["link", "set", "eth0", "up"]);
        // The internet answers the nodes' addresses, never a pod's.
        let router_v4 = format!("{INTERNET}.1");
        ip_in(
            &internet,
            &[
                "route",
                "add",
                &format!("{UNDERLAY}.0/24"),
                "via",
                &router_v4,
            ],
        );

        let nodes: Vec<ClusterNode> = (1..=3u8)
            .map(|index| {
                let node = ClusterNode {
                    index,
                    ns: lab.add_netns(&format!("n{index}")),
                    root: lab.root.join(format!("node{index}")),
                };
                for d in [
                    node.bin(),
                    node.conf(),
                    node.var_lib_cni(),
                    node.root.join("run-academy"),
                ] {
                    fs::create_dir_all(d).unwrap();
                }
                ip_in(&node.ns, &["link", "set", "lo", "up"]);
                plug(&format!("p-n{index}"), &node.ns);
                let addr = format!("{}/24", node.underlay_ip());
                ip_in(&node.ns, &["addr", "add", &addr, "dev", "eth0"]);
                ip_in(
                    &node.ns,
                    &["route", "add", "default", "via", &format!("{UNDERLAY}.1")],
                );
                node
            })
            .collect();
        // The cloud's route table: every node routes the other nodes' pod CIDRs to them.
        for x in &nodes {
            for y in nodes.iter().filter(|y| y.index != x.index) {
                ip_in(
                    &x.ns,
                    &["route", "add", &y.pod_cidr(), "via", &y.underlay_ip()],
                );
            }
        }
        let mut cluster = Cluster {
            containerd: None,
            nodes,
            router,
            internet,
            rendered: Value::Null,
            lab,
            _lock: lock,
        };
        cluster.install_and_render();
        cluster
    }

    /// The DaemonSet's init container on every node: `academy install --template
    /// --cluster-cidr` into the node's CNI folders (run by the binary under test). Node 1's
    /// containerd then renders the template from its pod CIDR (kubelet's
    /// UpdateRuntimeConfig); nodes 2 and 3 get that rendered conflist with their own.
    fn install_and_render(&mut self) {
        for node in &self.nodes {
            let args = install_args(node);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = node.exec(&Call::bare(), plugin(), &args);
            assert_eq!(
                out.code, 0,
                "academy install on node {}:\n{out}",
                node.index
            );
            let want = format!(
                "installed {}/academy\ninstalled {}/academy.conflist.tmpl\n",
                node.bin().display(),
                node.conf().display()
            );
            assert_eq!(out.stdout, want, "academy install on node {}", node.index);
        }
        let n1 = &self.nodes[0];
        // make setup installs it.
        copy_executable("/opt/cni/lab-bin/loopback", n1.bin().join("loopback"));
        let c = NodeContainerd::start(n1);
        self.containerd = Some(c);
        let c = self.containerd.as_ref().unwrap();
        c.cri(&["update-cidr", &n1.pod_cidr()]);
        let rendered = fs::read_to_string(n1.conf().join("10-containerd-net.conflist"))
            .expect("containerd's rendered conflist");
        self.rendered = serde_json::from_str(&rendered).expect("rendered JSON");
        for node in &self.nodes[1..] {
            let own = rendered.replace(&n1.pod_cidr(), &node.pod_cidr());
            assert_ne!(own, rendered, "the rendered conflist names node 1's CIDR");
            let tmp = node.conf().join(".10-containerd-net.conflist.tmp");
            fs::write(&tmp, own).unwrap();
            fs::rename(&tmp, node.conf().join("10-containerd-net.conflist")).unwrap();
        }
    }

    pub fn containerd(&self) -> &NodeContainerd {
        self.containerd.as_ref().expect("node 1's containerd")
    }

    pub fn node(&self, index: u8) -> &ClusterNode {
        &self.nodes[usize::from(index - 1)]
    }

    /// A pod on node `index` (2 or 3) by cnitool: its own netns of the lab, ADD on the
    /// node's rendered conflist. (The attachment, the pod's address.)
    pub fn cnitool_pod(&self, index: u8, name: &str) -> (Attach, String) {
        let node = self.node(index);
        let netns = self.lab.add_netns(&format!("n{index}-{name}"));
        let out = node.cnitool("add", &netns, &[]);
        let result = out.expect_result(&format!("cnitool add {name} on node {index}"));
        let a = self.lab.cnitool_attach(&netns, "eth0");
        (a, result_address(&result))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Sandboxes and containerd first, while the node's netns is there; then the lab
        // (a field) deletes every netns and the folder.
        drop(self.containerd.take());
    }
}

/// The DaemonSet's installer arguments for a node's folders.
pub fn install_args(node: &ClusterNode) -> Vec<String> {
    [
        "install",
        "--bin-dir",
        node.bin().to_str().unwrap(),
        "--conf-dir",
        node.conf().to_str().unwrap(),
        "--template",
        "--cluster-cidr",
        CLUSTER_CIDR,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A one-connection TCP server in a netns (by path): answers "hello", then prints the
/// peer's address. Killed by its PID when dropped.
pub struct Server {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    pub fn start(netns: &str, port: u16) -> Server {
        let script = format!(
            "import socket\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('0.0.0.0', {port})); s.listen(1); print('ready', flush=True)\n\
             s.settimeout(20); c, peer = s.accept(); c.sendall(b'hello'); c.close()\n\
             print(peer[0], flush=True)\n"
        );
        let mut child = Command::new("nsenter")
            .arg(format!("--net={netns}"))
            .args(["/usr/bin/python3", "-c", &script])
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("nsenter python3");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the server in {netns} did not start");
        Server { child, stdout }
    }

    /// The peer address of the one connection (waits for it, at most 20 s).
    pub fn peer(mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connects from a netns (by path) to addr:port, retrying for up to 10 s; what it read.
pub fn connect(netns: &str, addr: &str, port: u16) -> String {
    let script = format!(
        "import socket\n\
         c = socket.create_connection(('{addr}', {port}), timeout=3)\n\
         print(c.recv(16).decode())\n"
    );
    let net = format!("--net={netns}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = run("nsenter", &[&net, "/usr/bin/python3", "-c", &script], &[]);
        if out.code == 0 || Instant::now() > deadline {
            return out.stdout.trim().to_string();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The source address a server in `server_ns` (listening on `port`) sees for one
/// connection from `client_ns` to `addr:port`.
pub fn seen_by(server_ns: &str, client_ns: &str, addr: &str, port: u16) -> String {
    seen_through(server_ns, port, client_ns, addr, port)
}

/// [`seen_by`] with the server on `listen` and the connection to `addr:port` (a
/// published port).
pub fn seen_through(
    server_ns: &str,
    listen: u16,
    client_ns: &str,
    addr: &str,
    port: u16,
) -> String {
    let server = Server::start(server_ns, listen);
    let got = connect(client_ns, addr, port);
    assert_eq!(
        got, "hello",
        "no answer from {addr}:{port} (served in {server_ns}) to {client_ns}"
    );
    server.peer()
}
