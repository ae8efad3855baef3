//! The loopback guard (issue 25, "loopback closed"): publishing an IPv4 port sets
//! route_localnet on the bridge, so without a guard a container with CAP_NET_RAW can
//! send a frame to the bridge's MAC addressed to 127.0.0.1 and reach a node service
//! bound to 127.0.0.1 only (CVE-2020-8558's class). Each test runs in a private node
//! netns (common/node.rs) with a node service of its own on 127.0.0.1 (or ::1); the
//! crafted frames leave only the test's container netns, for the test's bridge.
//!
//! The attacker is a raw AF_PACKET socket in the container writing Ethernet + IP + TCP
//! SYN frames to the bridge's MAC and sniffing for the answer (`SYNACK`: the service
//! was reached; `RST`: the node's TCP answered, nothing listening; `NOTHING`: dropped).
//! Every probe is paired with a control to the gateway's own address, which must
//! answer: it proves the frame, the sniffer and the node's neighbour entry work, so a
//! `NOTHING` for 127.0.0.1 is the guard's.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use super::published::direct_config;
use super::{exchange, host_ports, mapping, write_list};
use crate::common::*;

/// A TCP SYN from the container's `ifname` to dst:port through the bridge's MAC, resent
/// twice a second for two seconds; prints SYNACK, RST or NOTHING.
const PROBE: &str = r#"
import random, socket, struct, sys, time
ifname, dst_mac, src_ip, dst_ip, dport = sys.argv[1:6]
dport = int(dport)
v6 = ':' in dst_ip
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
fam = socket.AF_INET6 if v6 else socket.AF_INET
src, dst = socket.inet_pton(fam, src_ip), socket.inet_pton(fam, dst_ip)
sport, seq = random.randint(40000, 60000), random.randint(0, 2**32 - 1)
tcp = struct.pack('!HHIIBBHHH', sport, dport, seq, 0, 5 << 4, 0x02, 64240, 0, 0)
pseudo = src + dst + (struct.pack('!IxxxB', len(tcp), 6) if v6 else struct.pack('!xBH', 6, len(tcp)))
tcp = tcp[:16] + struct.pack('!H', csum(pseudo + tcp)) + tcp[18:]
if v6:
    ip, ethertype = struct.pack('!IHBB', 6 << 28, len(tcp), 6, 64) + src + dst, 0x86dd
else:
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, src, dst)
    ip, ethertype = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:], 0x0800
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
s.bind((ifname, 0))
frame = bytes.fromhex(dst_mac.replace(':', '')) + s.getsockname()[4] + struct.pack('!H', ethertype) + ip + tcp
s.settimeout(0.1)
deadline, sent = time.time() + 2, 0
while time.time() < deadline:
    if time.time() - sent > 0.5:
        s.send(frame); sent = time.time()
    try:
        f = s.recv(4096)
    except socket.timeout:
        continue
    if struct.unpack('!H', f[12:14])[0] != ethertype:
        continue
    p = f[14:]
    if v6:
        if p[6] != 6 or p[8:24] != dst: continue
        t = p[40:]
    else:
        if p[9] != 6 or p[12:16] != dst: continue
        t = p[(p[0] & 15) * 4:]
    sp, dp, _, ack, _, flags = struct.unpack('!HHIIBB', t[:14])
    if (sp, dp, ack) == (dport, sport, (seq + 1) & 0xffffffff):
        print('SYNACK' if flags & 0x12 == 0x12 else 'RST' if flags & 0x04 else 'flags %#x' % flags)
        sys.exit(0)
print('NOTHING')
"#;

/// A TCP service of the node's own on addr:port (a python3 in the node netns, listening
/// before `start` returns), answering "node"; killed by Drop.
pub(crate) struct NodeService(Child);

impl NodeService {
    pub(crate) fn start(node: &Node, addr: &str, port: u16) -> NodeService {
        let family = if addr.contains(':') {
            "AF_INET6"
        } else {
            "AF_INET"
        };
        let script = format!(
            "import socket\n\
             s = socket.socket(socket.{family})\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('{addr}', {port})); s.listen(16)\n\
             print('ready', flush=True)\n\
             while True:\n\
             \x20   c, _ = s.accept(); c.sendall(b'node'); c.close()\n"
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &node.ns, "python3", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        let _ = BufReader::new(stdout).read_line(&mut line);
        let service = NodeService(child);
        assert_eq!(
            line.trim(),
            "ready",
            "the node service on {addr}:{port} did not start"
        );
        service
    }
}

impl Drop for NodeService {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One container of the lab's network in the node: its netns, its addresses.
pub(crate) struct Container {
    pub(crate) netns: String,
    pub(crate) v4: String,
    pub(crate) v6: String,
}

impl Container {
    fn of(a: &Attach, result: &Value) -> Container {
        let ip = |v6: bool| {
            result["ips"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|ip| ip["address"].as_str()?.split('/').next())
                .find(|a| a.contains(':') == v6)
                .unwrap_or_else(|| {
                    panic!("no {} address in {result}", if v6 { "v6" } else { "v4" })
                })
                .to_string()
        };
        Container {
            netns: a.netns.clone(),
            v4: ip(false),
            v6: ip(true),
        }
    }
}

/// The lab's gateway in `family` (the node's addresses on the bridge).
fn gateway(lab: &Lab, v6: bool) -> String {
    match v6 {
        true => format!("{}::1", lab.slot.v6_prefix()),
        false => lab.gateway(),
    }
}

/// The raw SYN from the container to dst:port through the bridge's MAC: what came back.
/// The container pings the gateway first, so that the node knows its neighbour (an
/// answer needs it; the probe itself makes the node ask from 127.0.0.1, which the
/// container's kernel does not answer).
fn probe(node: &Node, c: &Container, dst: &str, port: u16) -> String {
    let v6 = dst.contains(':');
    let gw = gateway(node.lab, v6);
    let family = if v6 { "-6" } else { "-4" };
    let ping = run(
        "ip",
        &["netns", "exec", &c.netns, "ping", family, "-c1", "-W2", &gw],
        &[],
    );
    assert_eq!(
        ping.code, 0,
        "the container cannot ping its gateway {gw}:\n{ping}"
    );
    let links = ip(&["-n", &node.ns, "-j", "link", "show", &node.lab.bridge]);
    let links: Value = serde_json::from_str(links.trim()).unwrap();
    let mac = links[0]["address"].as_str().expect("the bridge's MAC");
    let src = if v6 { &c.v6 } else { &c.v4 };
    let port = port.to_string();
    let out = run(
        "ip",
        &[
            "netns", "exec", &c.netns, "python3", "-c", PROBE, "eth0", mac, src, dst, &port,
        ],
        &[],
    );
    assert_eq!(out.code, 0, "the probe failed:\n{out}");
    out.stdout.trim().to_string()
}

/// A raw SYN to 127.0.0.1 (or ::1) from the container, after a control SYN to the
/// gateway's address on `control` (a node service there), which must be answered.
pub(crate) fn loopback_probe(
    node: &Node,
    c: &Container,
    v6: bool,
    port: u16,
    control: u16,
) -> String {
    let gw = gateway(node.lab, v6);
    assert_eq!(
        probe(node, c, &gw, control),
        "SYNACK",
        "control: the raw SYN to the gateway's own address {gw} was not answered"
    );
    probe(node, c, if v6 { "::1" } else { "127.0.0.1" }, port)
}

/// The guard's rules as `nft list` shows them in the node.
fn guard_rules(node: &Node) -> Vec<String> {
    let out = nft::nft_in(
        Some(&node.ns),
        &["list", "chain", "inet", "academy", "input"],
    );
    out.stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("_localnet"))
        .map(str::to_string)
        .collect()
}

const GUARD_V4: &str = "iifname @_localnet ip daddr 127.0.0.0/8 ct status & dnat != dnat drop comment \"academy localnet 127.0.0.0/8\"";
const GUARD_V6: &str =
    "iifname @_localnet ip6 daddr ::1 ct status & dnat != dnat drop comment \"academy localnet ::1\"";

/// The bridges of `_localnet` in the node.
fn guarded_bridges(node: &Node) -> Vec<String> {
    let out = nft::nft_in(
        Some(&node.ns),
        &["-j", "list", "set", "inet", "academy", "_localnet"],
    );
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|item| item["set"]["elem"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e.as_str().map(str::to_string))
        .collect()
}

fn route_localnet(node: &Node) -> String {
    let path = format!("/proc/sys/net/ipv4/conf/{}/route_localnet", node.lab.bridge);
    let out = run("ip", &["netns", "exec", &node.ns, "cat", &path], &[]);
    out.stdout.trim().to_string()
}

#[test]
fn portmap_localnet_a_container_s_frame_to_127_0_0_1_no_longer_reaches_a_node_loopback_service() {
    let lab = Lab::new("pmlnv4");
    let node = Node::new(&lab);
    let port = host_ports(&lab);
    let (service_port, control_port) = (port + 1, port + 2);
    let config = direct_config(&lab, "1.1.0", &[mapping(port, None)]);
    let a = lab.attachment("a");
    let result = node
        .call("ADD", &a, &config)
        .expect_result("ADD publishing a v4 port");
    let c = Container::of(&a, &result);
    assert_eq!(
        route_localnet(&node),
        "1",
        "publishing a v4 port sets route_localnet"
    );
    let _service = NodeService::start(&node, "127.0.0.1", service_port);
    let _control = NodeService::start(&node, &lab.gateway(), control_port);

    let got = loopback_probe(&node, &c, false, service_port, control_port);
    assert_eq!(
        got, "NOTHING",
        "the container's frame to 127.0.0.1 reached the node's loopback service"
    );

    // The published port still answers on 127.0.0.1 from the node itself (output, DNAT,
    // the answer back on the bridge to 127.0.0.1 with the DNAT bit), and from another
    // container of the network through the node's address (DNAT, hairpin).
    let (got, _) = exchange(&c.netns, "0.0.0.0", Some(&node.ns), "127.0.0.1", port);
    assert_eq!(
        got, "hello",
        "the published port on 127.0.0.1, from the node"
    );
    let b = lab.attachment("b");
    node.call("ADD", &b, &direct_config(&lab, "1.1.0", &[]))
        .expect_result("ADD of a second container");
    let (got, _) = exchange(&c.netns, "0.0.0.0", Some(&b.netns), &lab.gateway(), port);
    assert_eq!(
        got, "hello",
        "the published port through the node's address, from a container"
    );
    // The node's own connections to its loopback service: untouched.
    let own = super::reach(
        Some(&node.ns),
        "127.0.0.1",
        service_port,
        Duration::from_secs(5),
    );
    assert_eq!(
        own, "node",
        "the node's own connection to its loopback service"
    );
}

#[test]
fn portmap_localnet_v6_guard_is_nft_s_own_rule_and_a_frame_to_v6_loopback_stays_unanswered() {
    let lab = Lab::new("pmlnv6");
    let node = Node::new(&lab);
    let port = host_ports(&lab);
    let (service_port, control_port) = (port + 1, port + 2);
    let config = direct_config(&lab, "1.1.0", &[mapping(port, None)]);
    let a = lab.attachment("a");
    let result = node
        .call("ADD", &a, &config)
        .expect_result("ADD publishing a port");
    let c = Container::of(&a, &result);

    // Both rules, and exactly the expressions nft itself writes for their text.
    assert_eq!(
        guard_rules(&node),
        [GUARD_V4, GUARD_V6],
        "the guard's rules"
    );
    assert_eq!(
        guarded_bridges(&node),
        [lab.bridge.as_str()],
        "the guarded bridges"
    );
    let expressions = |table: &str| {
        let out = nft::nft_in(
            Some(&node.ns),
            &["--debug=netlink", "list", "chain", "inet", table, "input"],
        );
        assert_eq!(out.code, 0, "nft list chain inet {table} input:\n{out}");
        let lines: Vec<String> = out
            .stdout
            .lines()
            .filter(|l| l.trim_start().starts_with('['))
            .map(str::to_string)
            .collect();
        lines
    };
    let reference = format!("ref{}", lab.slot.n);
    for command in [
        format!("add table inet {reference}"),
        format!("add set inet {reference} _localnet {{ type ifname; }}"),
        format!("add chain inet {reference} input {{ type filter hook input priority filter; }}"),
        format!("add rule inet {reference} input iifname @_localnet ip daddr 127.0.0.0/8 ct status & dnat != dnat drop"),
        format!("add rule inet {reference} input iifname @_localnet ip6 daddr ::1 ct status & dnat != dnat drop"),
    ] {
        let args: Vec<&str> = command.split(' ').collect();
        node.nft(&args);
    }
    let want = expressions(&reference);
    node.nft(&["delete", "table", "inet", &reference]);
    assert_eq!(want.len(), 20, "nft's own rules: {want:#?}");
    assert_eq!(
        expressions("academy"),
        want,
        "academy's rules against nft's"
    );

    // The kernel refuses ::1 from the bridge before any hook (a martian), guard or not:
    // this part holds without the fix too.
    let _service = NodeService::start(&node, "::1", service_port);
    let _control = NodeService::start(&node, &gateway(&lab, true), control_port);
    let got = loopback_probe(&node, &c, true, service_port, control_port);
    assert_eq!(
        got, "NOTHING",
        "the container's frame to ::1 reached the node's service"
    );
}

#[test]
fn portmap_localnet_guard_missing_is_reported_restored_and_released_with_route_localnet() {
    let lab = Lab::new("pmlnck");
    let node = Node::new(&lab);
    write_list(&lab, vec![super::academy_entry(&lab)]);
    let conf_dir = lab.conf_dir.to_str().unwrap().to_string();
    let port = host_ports(&lab);
    let (service_port, control_port) = (port + 1, port + 2);
    let config = direct_config(&lab, "1.1.0", &[mapping(port, None)]);
    let a = lab.attachment("a");
    let result = node
        .call("ADD", &a, &config)
        .expect_result("ADD publishing a v4 port");
    let c = Container::of(&a, &result);
    let mut checked = config.clone();
    checked["prevResult"] = result.clone();
    let check = || node.call("CHECK", &a, &checked);
    let status = || node.run(&lab.call("STATUS").config(&config));
    check().expect_silent_success("CHECK with the guard in place");
    status().expect_silent_success("STATUS with the guard in place");
    let _service = NodeService::start(&node, "127.0.0.1", service_port);
    let _control = NodeService::start(&node, &lab.gateway(), control_port);

    // The v4 rule deleted: the hole is open, CHECK and STATUS say so.
    let listed = node.nft(&["-j", "-a", "list", "chain", "inet", "academy", "input"]);
    let listed: Value = serde_json::from_str(listed.stdout.trim()).unwrap();
    let handle = listed["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["rule"]["comment"] == json!("academy localnet 127.0.0.0/8"))
        .and_then(|i| i["rule"]["handle"].as_u64())
        .expect("the guard's v4 rule and its handle");
    let handle = handle.to_string();
    node.nft(&[
        "delete", "rule", "inet", "academy", "input", "handle", &handle,
    ]);
    assert_eq!(
        loopback_probe(&node, &c, false, service_port, control_port),
        "SYNACK",
        "without its rule, the hole is open (the probe would prove nothing otherwise)"
    );
    let error = assert_cni_error(
        &check(),
        120,
        &["academy localnet 127.0.0.0/8", &lab.bridge],
    );
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    assert_cni_error(&status(), 50, &["academy localnet 127.0.0.0/8"]);

    // restore puts it back, and closes the hole.
    let out = node.academy(&["restore", "--conf-dir", &conf_dir]);
    assert_eq!(out.code, 0, "restore:\n{out}");
    assert!(out.stderr.contains("loopback guard"), "restore:\n{out}");
    assert_eq!(guard_rules(&node), [GUARD_V4, GUARD_V6], "restored rules");
    assert_eq!(
        loopback_probe(&node, &c, false, service_port, control_port),
        "NOTHING",
        "the restored guard did not close the hole"
    );
    check().expect_silent_success("CHECK after restore");

    // The bridge's element deleted: reported, and put back by the next ADD publishing.
    super::delete_guard_element(&node);
    assert_cni_error(&check(), 120, &["_localnet", &lab.bridge]);
    assert_cni_error(&status(), 50, &["_localnet"]);
    let b = lab.attachment("b");
    node.call(
        "ADD",
        &b,
        &direct_config(&lab, "1.1.0", &[mapping(port + 3, None)]),
    )
    .expect_result("a second container publishing");
    assert_eq!(
        guarded_bridges(&node),
        [lab.bridge.as_str()],
        "the element after ADD"
    );
    check().expect_silent_success("CHECK after the second ADD");

    // The network's last attachment takes the element, and route_localnet with it: a
    // container attached later without a port (so without the guard) finds 127.0.0.0/8
    // martian again.
    node.call(
        "DEL",
        &b,
        &direct_config(&lab, "1.1.0", &[mapping(port + 3, None)]),
    )
    .expect_silent_success("DEL of the second");
    assert_eq!(
        guarded_bridges(&node),
        [lab.bridge.as_str()],
        "kept while a holds a port"
    );
    node.call("DEL", &a, &config)
        .expect_silent_success("DEL of the last");
    assert!(
        guarded_bridges(&node).is_empty(),
        "the element outlived the network's last attachment"
    );
    assert_eq!(
        route_localnet(&node),
        "0",
        "route_localnet outlived the guard"
    );
    let late = lab.attachment("late");
    let result = node
        .call("ADD", &late, &direct_config(&lab, "1.1.0", &[]))
        .expect_result("ADD of a container without ports");
    let c = Container::of(&late, &result);
    assert_eq!(
        loopback_probe(&node, &c, false, service_port, control_port),
        "NOTHING",
        "a container without ports reached the node's loopback service"
    );
}
