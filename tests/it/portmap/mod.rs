//! Port mapping by academy itself (capability `portMappings`), proven by connections
//! from an "outside" netns (common/outside.rs), from the host, and from another
//! container; and by what nf_tables holds after ADD, a conflict, DEL and GC.
//!
//! - `published`: cnitool and direct exec on a lab network;
//! - `runtimes`: podman on a converted network, containerd's CRI with a hostPort.
//! - `stale_udp`: a UDP client whose conntrack entry predates the container it must reach.
//! - `localnet`: the loopback guard, a container's crafted frame to 127.0.0.1 and ::1.
//! - `limits`: the whole port range in one ADD, 10,000 stale ports in one GC.
//! - `owners`: one container on two networks; hostIP against wildcard; a hostIP the
//!   network's families cannot carry.
//! - `healing`: a leaked container's port freed by healing, whatever the healer publishes.
//!
//! Packets go only to addresses of the tests' own namespaces and to the host's own
//! addresses (the outside veth's host end, 127.0.0.1, the lab's gateway).

mod healing;
mod limits;
pub(crate) mod localnet;
mod owners;
mod published;
mod runtimes;
mod stale_udp;
mod stale_udp_remote;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// A block of four host ports of this lab's own: unique per lab in this process, and
/// away from the ranges other modules publish through the reference portmap.
pub fn host_ports(lab: &Lab) -> u16 {
    30000 + (std::process::id() % 15000) as u16 + 4 * u16::from(lab.slot.n)
}

/// The lab's network as academy alone publishes it: both families, default routes
/// through the gateway, hairpin on, the capability declared.
pub fn academy_entry(lab: &Lab) -> Value {
    json!({
        "type": "academy",
        "bridge": lab.bridge,
        "isGateway": true,
        "hairpinMode": true,
        "capabilities": {"portMappings": true},
        // Released with the last DEL, as these tests expect (network_grace.rs: the grace).
        "releaseUnusedAfter": 0,
        "ipam": {
            "type": "host-local",
            "dataDir": lab.data_dir.to_str().unwrap(),
            "ranges": [[{"subnet": lab.subnet()}], [{"subnet": format!("{}::/64", lab.slot.v6_prefix())}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
        }
    })
}

/// Deletes the node's loopback guard element of the lab's bridge (what a node made by a
/// release before the guard, or an admin's `nft delete element`, leaves).
pub fn delete_guard_element(node: &Node) {
    let element = format!("{{ \"{}\" }}", node.lab.bridge);
    node.nft(&[
        "delete",
        "element",
        "inet",
        "academy",
        "_localnet",
        &element,
    ]);
}

pub fn write_list(lab: &Lab, plugins: Vec<Value>) {
    let list = json!({"cniVersion": "1.0.0", "name": lab.network, "plugins": plugins});
    std::fs::write(lab.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
}

/// One connection to addr:port from `netns` (None: the host itself), tried until it
/// answers or `limit` passes; what it read ("" for no answer).
pub fn reach(netns: Option<&str>, addr: &str, port: u16, limit: Duration) -> String {
    let script = format!(
        "import socket\n\
         c = socket.create_connection(('{addr}', {port}), timeout=2)\n\
         print(c.recv(16).decode())\n"
    );
    let deadline = Instant::now() + limit;
    loop {
        let out = match netns {
            Some(ns) => run("ip", &["netns", "exec", ns, "python3", "-c", &script], &[]),
            None => run("python3", &["-c", &script], &[]),
        };
        if out.code == 0 || Instant::now() > deadline {
            return out.stdout.trim().to_string();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Whether addr:port stays unanswered from `from` while the container listens on 8080
/// (proven first by an answer on `direct`, the container's own address, from the host):
/// the host refuses it, nothing having sent it on.
pub fn unanswered(
    container: &str,
    direct: &str,
    from: Option<&str>,
    addr: &str,
    port: u16,
) -> bool {
    let mut server = serve(container, "0.0.0.0", 2);
    let control = reach(None, direct, 8080, Duration::from_secs(10));
    assert_eq!(
        control, "hello",
        "the container's listener never answered on {direct}"
    );
    let got = reach(from, addr, port, Duration::ZERO);
    let _ = server.kill();
    let _ = server.wait();
    got.is_empty()
}

/// A listener in the container on its port 8080 (`any` is "0.0.0.0" or "::"), the
/// connection made from `from` to addr:port, and the peer the listener saw.
pub fn exchange(
    container: &str,
    any: &str,
    from: Option<&str>,
    addr: &str,
    port: u16,
) -> (String, String) {
    let mut server = serve(container, any, 1);
    let got = reach(from, addr, port, Duration::from_secs(10));
    if got.is_empty() {
        let _ = server.kill();
    }
    let out = server.wait_with_output().unwrap();
    (got, String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A TCP server in `netns` (a name, or a path) on port 8080 answering "hello" to `count` connections and
/// printing each peer's address.
fn serve(netns: &str, any: &str, count: u32) -> Child {
    let family = if any.contains(':') {
        "AF_INET6"
    } else {
        "AF_INET"
    };
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.{family})\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{any}', 8080)); s.listen(4); s.settimeout(20)\n\
         for _ in range({count}):\n\
         \x20   c, peer = s.accept(); c.sendall(b'hello'); c.close()\n\
         \x20   print(peer[0], flush=True)\n"
    );
    // A runtime's netns may be a path of its own (containerd's state folder).
    let mut command = if netns.starts_with('/') {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={netns}"));
        c
    } else {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", netns]);
        c
    };
    command
        .args(["python3", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3")
}

/// The portMappings CAP_ARGS of one mapping to the container's 8080.
pub fn mapping(host_port: u16, host_ip: Option<&str>) -> Value {
    let mut m = json!({"hostPort": host_port, "containerPort": 8080, "protocol": "tcp"});
    if let Some(ip) = host_ip {
        m["hostIP"] = json!(ip);
    }
    m
}

/// One UDP datagram from `from` to addr:port, answered "hello" by a server on the
/// container's 8080: what came back ("" for nothing), and the peer the server saw.
pub fn udp_exchange(container: &str, from: &str, addr: &str, port: u16) -> (String, String) {
    let server = "import socket\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.bind(('0.0.0.0', 8080)); s.settimeout(20)\n\
         data, peer = s.recvfrom(64); s.sendto(b'hello', peer)\n\
         print(peer[0], flush=True)\n";
    let mut server = Command::new("ip")
        .args(["netns", "exec", container, "python3", "-c", server])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let client = format!(
        "import socket\n\
         c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.settimeout(1)\n\
         for _ in range(10):\n\
         \x20   c.sendto(b'ping', ('{addr}', {port}))\n\
         \x20   try:\n\
         \x20       print(c.recv(16).decode()); break\n\
         \x20   except socket.timeout:\n\
         \x20       pass\n"
    );
    let got = run(
        "ip",
        &["netns", "exec", from, "python3", "-c", &client],
        &[],
    );
    let got = got.stdout.trim().to_string();
    if got.is_empty() {
        let _ = server.kill();
    }
    let out = server.wait_with_output().unwrap();
    (got, String::from_utf8_lossy(&out.stdout).trim().to_string())
}
