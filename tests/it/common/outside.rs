//! The "outside" of an outbound-NAT test: a netns joined to the host by a veth, with no
//! route back to any pod subnet, so an answer from it proves the masquerade. Plus the
//! small TCP exchange that shows which source address the outside saw. Packets go only
//! to addresses of the test's own namespaces.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::alloc::Slot;
use super::kernel::{ip, ping_from};
use super::lab::Lab;
use super::process::run;

/// The outside world of one test: netns "<lab netns>-out" joined to the host by a veth,
/// on a slot of its own: .2 (and ::2) outside, .1 (and ::1) on the host end.
pub struct Outside {
    pub netns: String,
    pub host_v4: String,
    pub far_v4: String,
    pub host_v6: String,
    pub far_v6: String,
}

impl Outside {
    pub fn new(lab: &Lab) -> Outside {
        Outside::joined_to(lab, None)
    }

    /// The same joined to `node` (a node netns, the host when None): its .1 and ::1
    /// are on the node's end.
    pub fn joined_to(lab: &Lab, node: Option<&str>) -> Outside {
        let netns = lab.add_netns("out");
        let slot = Slot::take();
        let (v4, v6) = (slot.v4_prefix(), slot.v6_prefix());
        let host_end = slot.link_name("aco");
        let run_in = |ns: Option<&str>, args: &[&str]| {
            let mut all: Vec<&str> = ns.map_or(Vec::new(), |ns| vec!["-n", ns]);
            all.extend_from_slice(args);
            ip(&all);
        };
        // The pair dies with the netns (the lab deletes it), host end included.
        run_in(
            node,
            &[
                "link", "add", &host_end, "type", "veth", "peer", "name", "out0", "netns", &netns,
            ],
        );
        for (ns, dev, host) in [
            (node, host_end.as_str(), 1),
            (Some(netns.as_str()), "out0", 2),
        ] {
            run_in(ns, &["addr", "add", &format!("{v4}.{host}/24"), "dev", dev]);
            run_in(
                ns,
                &[
                    "addr",
                    "add",
                    &format!("{v6}::{host}/64"),
                    "dev",
                    dev,
                    "nodad",
                ],
            );
            run_in(ns, &["link", "set", dev, "up"]);
        }
        run_in(Some(&netns), &["link", "set", "lo", "up"]);
        Outside {
            netns,
            host_v4: format!("{v4}.1"),
            far_v4: format!("{v4}.2"),
            host_v6: format!("{v6}::1"),
            far_v6: format!("{v6}::2"),
        }
    }
}

/// A TCP listener in `netns` that accepts one connection, answers "hello" and prints
/// the peer's address.
pub fn listen(netns: &str, addr: &str, port: u16) -> Child {
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_INET6 if ':' in '{addr}' else socket.AF_INET)\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('{addr}', {port})); s.listen(1); s.settimeout(20)\n\
         c, peer = s.accept(); c.sendall(b'hello'); c.close()\n\
         print(peer[0], flush=True)\n"
    );
    Command::new("ip")
        .args(["netns", "exec", netns, "python3", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3")
}

/// Connects from `netns` to addr:port (retrying while the listener starts); what it read.
pub fn connect(netns: &str, addr: &str, port: u16) -> String {
    let script = format!(
        "import socket\n\
         c = socket.create_connection(('{addr}', {port}), timeout=3)\n\
         print(c.recv(16).decode())\n"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = run(
            "ip",
            &["netns", "exec", netns, "python3", "-c", &script],
            &[],
        );
        if out.code == 0 || Instant::now() > deadline {
            return out.stdout.trim().to_string();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The peer address the listener saw for one connection from `from` to `to`.
pub fn peer_seen(listen_ns: &str, to: &str, port: u16, from: &str) -> (String, String) {
    let listener = listen(listen_ns, to, port);
    let got = connect(from, to, port);
    let out = listener.wait_with_output().unwrap();
    (got, String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn ping_eventually(netns: &str, addr: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        if ping_from(netns, addr, 1) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
    }
}
