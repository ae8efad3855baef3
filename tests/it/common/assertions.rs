//! The checks tests share: the CNI error contract, an ADD result against the lab and the
//! kernel, and what DEL must have left.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::Value;

use super::kernel::{ip_json, netns_exists, netns_link_names};
use super::lab::{Attach, Lab};
use super::process::Out;

/// The cniVersions academy speaks.
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// No panic message on stderr, no exit code 101 (what a Rust panic exits with).
pub fn assert_no_panic(out: &Out, what: &str) {
    assert!(
        !out.stderr.contains("panicked") && out.code != 101,
        "{what}: the plugin panicked:\n{out}"
    );
}

/// The CNI error object contract: exit 1, stdout exactly one JSON object with exactly
/// cniVersion/code/msg/details, the expected code, a non-empty msg containing every
/// needle, and no panic. Err carries every broken rule.
pub fn check_cni_error(out: &Out, code: u64, needles: &[&str]) -> Result<Value, String> {
    let mut problems = Vec::new();
    if out.code != 1 {
        problems.push(format!("exit code {} instead of 1", out.code));
    }
    if out.stderr.contains("panicked") {
        problems.push("panicked".into());
    }
    let values: Vec<Result<Value, _>> = serde_json::Deserializer::from_str(&out.stdout)
        .into_iter::<Value>()
        .collect();
    let obj = match values.as_slice() {
        [Ok(v @ Value::Object(_))] => v.clone(),
        _ => {
            problems.push("stdout is not exactly one JSON object".into());
            return Err(problems.join("; "));
        }
    };
    let keys: BTreeSet<&str> = obj
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = ["cniVersion", "code", "msg", "details"].into();
    if keys != want {
        problems.push(format!("keys {keys:?} instead of {want:?}"));
    }
    match obj["cniVersion"].as_str() {
        Some(v) if SUPPORTED.contains(&v) => {}
        other => problems.push(format!("cniVersion {other:?} is not a supported version")),
    }
    if obj["code"].as_u64() != Some(code) {
        problems.push(format!("code {} instead of {code}", obj["code"]));
    }
    if !obj["details"].is_string() {
        problems.push("details is not a string".into());
    }
    match obj["msg"].as_str() {
        Some(m) if !m.trim().is_empty() => {
            for n in needles {
                if !m.contains(n) {
                    problems.push(format!("msg does not mention {n:?}"));
                }
            }
        }
        _ => problems.push("msg is missing or empty".into()),
    }
    if problems.is_empty() {
        Ok(obj)
    } else {
        Err(problems.join("; "))
    }
}

pub fn assert_cni_error(out: &Out, code: u64, needles: &[&str]) -> Value {
    check_cni_error(out, code, needles).unwrap_or_else(|p| panic!("{p}:\n{out}"))
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Checks an ADD result deeply against the lab and the kernel. `version` is the
/// cniVersion the result must be in; `address` the one it must report, if known.
/// Err lists every problem found (so a test can show a bad result being rejected).
pub fn check_result(
    lab: &Lab,
    result: &Value,
    a: &Attach,
    version: &str,
    address: Option<&str>,
) -> Result<(), Vec<String>> {
    let mut p: Vec<String> = Vec::new();
    let Some(obj) = result.as_object() else {
        return Err(vec![format!("result is not a JSON object: {result}")]);
    };
    for k in obj.keys() {
        if !["cniVersion", "interfaces", "ips", "routes", "dns"].contains(&k.as_str()) {
            p.push(format!("unexpected top-level key {k:?}"));
        }
    }
    if result["cniVersion"] != version {
        p.push(format!(
            "cniVersion is {} instead of {version:?}",
            result["cniVersion"]
        ));
    }
    let with_mtu = version == "1.1.0";
    let pre_1_0 = version.starts_with("0.");

    // interfaces: [bridge, host veth, container iface in the sandbox]
    let ifaces = result["interfaces"].as_array().cloned().unwrap_or_default();
    if ifaces.len() != 3 {
        p.push(format!(
            "interfaces has {} entries instead of 3: {}",
            ifaces.len(),
            result["interfaces"]
        ));
    }
    let iface = |i: usize| ifaces.get(i).cloned().unwrap_or(Value::Null);
    let (bridge, host, cont) = (iface(0), iface(1), iface(2));
    if bridge["name"] != lab.bridge.as_str() {
        p.push(format!(
            "interfaces[0].name is {} not {}",
            bridge["name"], lab.bridge
        ));
    }
    let host_name = host["name"].as_str().unwrap_or("").to_string();
    if !(host_name.len() == 15
        && host_name.starts_with("veth")
        && host_name[4..].chars().all(|c| c.is_ascii_hexdigit()))
    {
        p.push(format!(
            "interfaces[1].name {:?} is not veth + 11 hex digits",
            host_name
        ));
    }
    if cont["name"] != a.ifname.as_str() {
        p.push(format!(
            "interfaces[2].name is {} not {}",
            cont["name"], a.ifname
        ));
    }
    for (i, x) in [&bridge, &host].iter().enumerate() {
        if x.get("sandbox").is_some() {
            p.push(format!(
                "interfaces[{i}] is a host interface but has a sandbox"
            ));
        }
    }
    if cont["sandbox"] != a.netns_path().as_str() {
        p.push(format!(
            "interfaces[2].sandbox is {} not {}",
            cont["sandbox"],
            a.netns_path()
        ));
    }
    for (i, x) in ifaces.iter().enumerate() {
        if !x["mac"].as_str().is_some_and(is_mac) {
            p.push(format!("interfaces[{i}].mac {} is not a MAC", x["mac"]));
        }
        if with_mtu != x.get("mtu").is_some() {
            p.push(format!(
                "interfaces[{i}].mtu is {} in cniVersion {version}",
                if with_mtu { "missing" } else { "present" }
            ));
        }
    }

    // ips: non-empty, in the subnet, gateway, interface 2
    let ips = result["ips"].as_array().cloned().unwrap_or_default();
    if ips.is_empty() {
        p.push("ips is missing or empty: the runtime would get no pod IP".into());
    }
    let mut container_ip = None;
    for (i, e) in ips.iter().enumerate() {
        let addr = e["address"].as_str().unwrap_or("");
        let (ip_text, prefix) = addr.split_once('/').unwrap_or((addr, ""));
        match ip_text.parse::<Ipv4Addr>() {
            Ok(ipv4) => {
                let o = ipv4.octets();
                let in_subnet = ipv4.to_string().starts_with(&format!("{}.", lab.prefix));
                if !in_subnet || o[3] == 0 || o[3] == 1 || o[3] == 255 {
                    p.push(format!(
                        "ips[{i}].address {addr} is not a host address of {} other than the gateway",
                        lab.subnet()
                    ));
                }
                container_ip = Some(ipv4.to_string());
            }
            Err(_) => p.push(format!("ips[{i}].address {addr:?} is not an IPv4 address")),
        }
        if prefix != "24" {
            p.push(format!(
                "ips[{i}].address {addr:?} does not have the subnet's /24"
            ));
        }
        if let Some(want) = address {
            if ip_text != want {
                p.push(format!("ips[{i}].address is {addr}, expected {want}"));
            }
        }
        if e["gateway"] != lab.gateway().as_str() {
            p.push(format!(
                "ips[{i}].gateway is {} not {}",
                e["gateway"],
                lab.gateway()
            ));
        }
        if e["interface"] != 2 {
            p.push(format!("ips[{i}].interface is {} not 2", e["interface"]));
        }
        match (pre_1_0, e.get("version")) {
            (true, Some(v)) if v == "4" => {}
            (false, None) => {}
            (_, v) => p.push(format!(
                "ips[{i}].version is {v:?} in cniVersion {version} (\"4\" before 1.0.0, absent after)"
            )),
        }
    }
    let routes = result["routes"].as_array().cloned().unwrap_or_default();
    if !routes
        .iter()
        .any(|r| r["dst"] == "0.0.0.0/0" && r["gw"] == lab.gateway().as_str())
    {
        p.push(format!(
            "routes {} has no default route via {}",
            result["routes"],
            lab.gateway()
        ));
    }
    if !result["dns"].is_object() {
        p.push(format!("dns is {} instead of an object", result["dns"]));
    }

    // The kernel: the container iface, its address and route, inside the netns.
    let inside = ip_json(&["-n", &a.netns, "addr", "show", "dev", &a.ifname]);
    let link = &inside[0];
    if link.is_null() {
        p.push(format!("{} does not exist in netns {}", a.ifname, a.netns));
    } else {
        let up = link["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP"));
        if !up {
            p.push(format!(
                "{} in {} is not up: {}",
                a.ifname, a.netns, link["flags"]
            ));
        }
        if let (Some(k), Some(r)) = (link["address"].as_str(), cont["mac"].as_str()) {
            if !k.eq_ignore_ascii_case(r) {
                p.push(format!("{} has MAC {k} but the result says {r}", a.ifname));
            }
        }
        // Every address of the result must be on the iface (and one must be).
        for e in &ips {
            let addr = e["address"].as_str().unwrap_or("");
            let on = link["addr_info"].as_array().into_iter().flatten().any(|x| {
                format!("{}/{}", x["local"].as_str().unwrap_or(""), x["prefixlen"]) == addr
            });
            if !on {
                p.push(format!(
                    "address {addr} of the result is not on {} in {}: {}",
                    a.ifname, a.netns, link["addr_info"]
                ));
            }
        }
        if ips.is_empty() && link["addr_info"].as_array().is_none_or(|x| x.is_empty()) {
            p.push(format!("{} has no address at all", a.ifname));
        }
    }
    let routes_in = ip_json(&["-n", &a.netns, "route", "show", "default"]);
    if !routes_in
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["gateway"] == lab.gateway().as_str() && r["dev"] == a.ifname.as_str())
    {
        p.push(format!(
            "netns {} has no default route via {} dev {}: {routes_in}",
            a.netns,
            lab.gateway(),
            a.ifname
        ));
    }

    // The kernel: host veth on the bridge, labelled as this attachment's.
    let host_link = ip_json(&["-d", "link", "show", "dev", &host_name]);
    let h = &host_link[0];
    if host_name.is_empty() || h.is_null() {
        p.push(format!("host veth {host_name:?} does not exist"));
    } else {
        if h["master"] != lab.bridge.as_str() {
            p.push(format!(
                "host veth {host_name} has master {} not {}",
                h["master"], lab.bridge
            ));
        }
        let alias = format!("academy:{}:{}:{}", lab.network, a.cid, a.ifname);
        if h["ifalias"] != alias.as_str() {
            p.push(format!(
                "host veth {host_name} has alias {} not {alias}",
                h["ifalias"]
            ));
        }
        if h["linkinfo"]["info_kind"] != "veth" {
            p.push(format!("host link {host_name} is not a veth"));
        }
        if !h["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP"))
        {
            p.push(format!("host veth {host_name} is not up"));
        }
        if let (Some(k), Some(r)) = (h["address"].as_str(), host["mac"].as_str()) {
            if !k.eq_ignore_ascii_case(r) {
                p.push(format!("host veth has MAC {k} but the result says {r}"));
            }
        }
    }
    let ports = ip_json(&["link", "show", "master", &lab.bridge]);
    if !ports
        .as_array()
        .into_iter()
        .flatten()
        .any(|l| l["ifname"] == host_name.as_str())
    {
        p.push(format!(
            "`ip link show master {}` does not list {host_name}",
            lab.bridge
        ));
    }
    let br = ip_json(&["-d", "addr", "show", "dev", &lab.bridge]);
    if br[0]["linkinfo"]["info_kind"] != "bridge" {
        p.push(format!("{} is not a bridge", lab.bridge));
    }
    if !br[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|x| x["local"] == lab.gateway().as_str() && x["prefixlen"] == 24)
    {
        p.push(format!(
            "bridge {} does not hold {}/24",
            lab.bridge,
            lab.gateway()
        ));
    }

    // The store: the address is reserved.
    if let Some(ip) = container_ip {
        if !lab.data_dir.join(&lab.network).join(&ip).exists() {
            p.push(format!("{ip} is not reserved in the store"));
        }
    }

    if p.is_empty() {
        Ok(())
    } else {
        Err(p)
    }
}

pub fn assert_result_valid(
    lab: &Lab,
    result: &Value,
    a: &Attach,
    version: &str,
    address: Option<&str>,
) {
    if let Err(problems) = check_result(lab, result, a, version, address) {
        panic!(
            "the ADD result is not valid:\n  - {}\nresult: {result:#}",
            problems.join("\n  - ")
        );
    }
}

/// After DEL of `a`: its netns holds no iface of that name, no veth of the lab is left,
/// and the store holds nothing.
pub fn assert_unwired(lab: &Lab, a: &Attach) {
    if netns_exists(&a.netns) {
        let names = netns_link_names(&a.netns);
        assert!(
            !names.contains(&a.ifname),
            "{} still exists in {} after DEL: {names:?}",
            a.ifname,
            a.netns
        );
    }
    assert_eq!(
        lab.lab_veths(),
        Vec::<String>::new(),
        "host veths left after DEL"
    );
    assert_eq!(
        lab.reservations(),
        Vec::<String>::new(),
        "store not empty after DEL"
    );
}
