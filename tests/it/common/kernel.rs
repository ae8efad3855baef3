//! Asking the kernel what it has (through `ip`, as an operator would look), and the few
//! things tests make on their own: plain links, pings from a netns.

use std::path::Path;

use serde_json::{json, Value};

use super::process::run;

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) -> String {
    let out = run("ip", args, &[]);
    assert_eq!(out.code, 0, "ip {} failed:\n{out}", args.join(" "));
    out.stdout
}

/// `ip -j ARGS` as JSON; an empty list when ip prints nothing or the object is missing.
pub fn ip_json(args: &[&str]) -> Value {
    let mut full = vec!["-j"];
    full.extend_from_slice(args);
    let out = run("ip", &full, &[]);
    if out.code != 0 || out.stdout.trim().is_empty() {
        return json!([]);
    }
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| json!([]))
}

/// Every host link with its details (`ip -d -j link show`).
pub fn host_links() -> Vec<Value> {
    match ip_json(&["-d", "link", "show"]) {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// Names of the links in a netns.
pub fn netns_link_names(netns: &str) -> Vec<String> {
    let v = ip_json(&["-n", netns, "link", "show"]);
    let mut names: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Creates a link `name` that is not a bridge and not academy's, in `netns` or on the
/// host: a dummy, else an ifb, else a veth (peer "<peer>"), whichever this kernel has.
pub fn add_plain_link(netns: Option<&str>, name: &str, peer: &str) {
    let mut base: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        base.extend(["-n", ns]);
    }
    base.extend(["link", "add", name, "type"]);
    let mut last = None;
    for kind in [&["dummy"][..], &["ifb"], &["veth", "peer", "name", peer]] {
        let args: Vec<&str> = base.iter().chain(kind).copied().collect();
        let out = run("ip", &args, &[]);
        if out.code == 0 {
            return;
        }
        last = Some(out);
    }
    panic!("cannot create a plain link {name}:\n{}", last.unwrap());
}

pub fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// `ping -c COUNT -W 1 ADDR` from inside a netns; true when it got replies.
pub fn ping_from(netns: &str, addr: &str, count: u32) -> bool {
    let count = count.to_string();
    let out = run(
        "ip",
        &[
            "netns", "exec", netns, "ping", "-n", "-q", "-c", &count, "-W", "1", addr,
        ],
        &[],
    );
    out.code == 0
}

/// Whether a host link of that name exists.
pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The names of the links whose master is `bridge`.
pub fn bridge_ports(bridge: &str) -> Vec<String> {
    ip_json(&["link", "show", "master", bridge])
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .collect()
}

/// The host veth name academy derives for (container id, ifname): "veth" + 11 hex digits
/// of FNV-1a over `id NUL ifname` with a final avalanche. Written here again on purpose,
/// from the README's description rather than by calling academy: the tests hold the
/// naming rule (which DEL, GC and operators rely on) to what is documented.
pub fn derived_host_veth_name(container_id: &str, ifname: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in container_id.bytes().chain([0]).chain(ifname.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    format!("veth{:011x}", hash >> 20)
}

/// `ping -c 1` from inside a netns named by its path (a runtime's netns lives outside
/// /run/netns); Ok, or what ping said.
pub fn ping_from_path(netns_path: &str, addr: &str) -> Result<(), String> {
    let net = format!("--net={netns_path}");
    let out = run(
        "nsenter",
        &[&net, "ping", "-n", "-c", "1", "-W", "2", addr],
        &[],
    );
    if out.code == 0 {
        Ok(())
    } else {
        Err(format!("ping {addr} from {netns_path}:\n{out}"))
    }
}
