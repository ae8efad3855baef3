//! A host whose iptables FORWARD policy drops (Docker sets it): academy accepts its
//! bridge's forwarding there itself, no wider than the `firewall` plugin, in the form
//! iptables-nft lists and reloads. Every test runs in a private node netns (its own `ip
//! filter` and `ip6 filter` tables, never the host's FORWARD chain) with peers of the
//! test's own behind it; packets go only to namespaces the test made.
//!
//! - `policy`: the accepts appear where the policy drops, and only there;
//! - `reach`: what passes (replies, published ports, the containers' own traffic, the
//!   bridge's own) and what does not (a container's unpublished port);
//! - `reload`: `iptables-save | iptables-restore` and `iptables -F` in the node: no
//!   second copies, CHECK and STATUS name what is missing, `academy restore` puts
//!   it back; an earlier academy's wider accept is replaced;
//! - `reference`: the same looks at the reference bridge, portmap and firewall chain.

mod policy;
mod reach;
mod reference;
mod reload;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// `iptables-nft ARGS` (`ip6tables-nft` for "6") inside the node.
pub fn iptables(node: &Node, family: &str, args: &[&str]) -> Out {
    let tool = if family == "6" {
        "ip6tables-nft"
    } else {
        "iptables-nft"
    };
    let mut all = vec!["netns", "exec", &node.ns, tool];
    all.extend_from_slice(args);
    run("ip", &all, &[])
}

/// The node's `iptables -S FORWARD` lines that name the lab's bridge.
pub fn accepts(node: &Node, family: &str) -> Vec<String> {
    let listed = iptables(node, family, &["-S", "FORWARD"]);
    assert_eq!(listed.code, 0, "{listed}");
    let bridge = format!(" {} ", node.lab.bridge);
    listed
        .stdout
        .lines()
        .filter(|l| l.contains(&bridge))
        .map(str::to_string)
        .collect()
}

/// The three lines academy's accepts list as, for the lab's bridge.
pub fn want_accepts(bridge: &str) -> Vec<String> {
    vec![
        format!("-A FORWARD -o {bridge} -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment \"academy: replies to bridge {bridge}\" -j ACCEPT"),
        format!("-A FORWARD -o {bridge} -m conntrack --ctstate DNAT -m comment --comment \"academy: published ports of bridge {bridge}\" -j ACCEPT"),
        format!("-A FORWARD -i {bridge} -m comment --comment \"academy: forwarding from bridge {bridge}\" -j ACCEPT"),
    ]
}

/// A node that forwards (both families) and whose iptables FORWARD policy drops in
/// both families, as Docker leaves a host.
pub fn dropping_node(lab: &Lab) -> Node<'_> {
    let node = Node::new(lab);
    for sysctl in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
        let out = run(
            "ip",
            &["netns", "exec", &node.ns, "sysctl", "-qw", sysctl],
            &[],
        );
        assert_eq!(out.code, 0, "{out}");
    }
    for family in ["4", "6"] {
        let policy = iptables(&node, family, &["-P", "FORWARD", "DROP"]);
        assert_eq!(policy.code, 0, "{policy}");
    }
    node
}

/// A netns joined to the node by a veth, on a slot of its own: .1 the node's end, .2
/// the peer's; with `routes_pods`, the peer routes the lab's subnet through the node (a
/// neighbour on the node's LAN), else it has no route back (an outside behind NAT).
/// The pair dies with the netns, which the lab deletes.
pub struct Peer {
    pub netns: String,
    pub node_v4: String,
    pub far_v4: String,
}

impl Peer {
    pub fn new(lab: &Lab, node: &Node, suffix: &str, routes_pods: bool) -> Peer {
        let netns = lab.add_netns(suffix);
        let slot = Slot::take();
        let v4 = slot.v4_prefix();
        let node_end = slot.link_name("acf");
        ip(&[
            "-n", &node.ns, "link", "add", &node_end, "type", "veth", "peer", "name", "peer0",
            "netns", &netns,
        ]);
        let node_v4 = format!("{v4}.1");
        let far_v4 = format!("{v4}.2");
        ip(&[
            "-n",
            &node.ns,
            "addr",
            "add",
            &format!("{node_v4}/24"),
            "dev",
            &node_end,
        ]);
        ip(&["-n", &node.ns, "link", "set", &node_end, "up"]);
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{far_v4}/24"),
            "dev",
            "peer0",
        ]);
        ip(&["-n", &netns, "link", "set", "peer0", "up"]);
        ip(&["-n", &netns, "link", "set", "lo", "up"]);
        if routes_pods {
            ip(&["-n", &netns, "route", "add", &lab.subnet(), "via", &node_v4]);
        }
        Peer {
            netns,
            node_v4,
            far_v4,
        }
    }
}

/// A TCP server in a netns answering "hello" on each of `ports` until dropped.
pub struct Server(Child);

impl Server {
    pub fn start(netns: &str, ports: &[u16]) -> Server {
        let script = format!(
            "import select, socket\n\
             ss = []\n\
             for p in {ports:?}:\n\
             \x20   s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             \x20   s.bind(('0.0.0.0', p)); s.listen(16); ss.append(s)\n\
             print('ready', flush=True)\n\
             while True:\n\
             \x20   for s in select.select(ss, [], [])[0]:\n\
             \x20       c, _ = s.accept(); c.sendall(b'hello'); c.close()\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", netns, "python3", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the server in {netns} did not start");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a connection from `from` to addr:port is answered "hello", tried until it is
/// or `limit` passes (Duration::ZERO: one try of 2 s).
pub fn answers(from: &str, addr: &str, port: u16, limit: Duration) -> bool {
    let script = format!(
        "import socket\n\
         c = socket.create_connection(('{addr}', {port}), timeout=2)\n\
         print(c.recv(16).decode())\n"
    );
    let deadline = Instant::now() + limit;
    loop {
        let out = run(
            "ip",
            &["netns", "exec", from, "python3", "-c", &script],
            &[],
        );
        if out.stdout.trim() == "hello" {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The container port every test publishes (as host port [`HOST_PORT`] of the node) and
/// the one it leaves unpublished.
pub const PUBLISHED: u16 = 8080;
pub const HOST_PORT: u16 = 18080;
pub const UNPUBLISHED: u16 = 2222;

/// The lab's flat config: ipMasq, the capability, and `ports` (host port -> container
/// port, tcp) in runtimeConfig.
pub fn config(lab: &Lab, ports: &[(u16, u16)]) -> Value {
    let mut c = lab.config_with("1.1.0", "ipMasq", json!(true));
    c["capabilities"] = json!({"portMappings": true});
    let mappings: Vec<Value> = ports
        .iter()
        .map(|(host, container)| {
            json!({"hostPort": host, "containerPort": container, "protocol": "tcp"})
        })
        .collect();
    c["runtimeConfig"] = json!({ "portMappings": mappings });
    c
}

/// `-A ...` as `-D ...`, split as a shell would: `-A FORWARD -i br -m comment
/// --comment "a b" -j ACCEPT`.
pub fn deletion(line: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        let (word, tail) = match rest.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').unwrap_or(quoted.len());
                (&quoted[..end], quoted.get(end + 1..).unwrap_or(""))
            }
            None => rest.split_at(rest.find(' ').unwrap_or(rest.len())),
        };
        words.push(word);
        rest = tail.trim_start();
    }
    if words.first() == Some(&"-A") {
        words[0] = "-D";
    }
    words
}
