//! A container netns as the tests compare it between academy and the reference plugin,
//! and before and after a DEL: its routes of every table and its interfaces' addresses,
//! link state and IPv6 DAD sysctls, each as one readable line.

use serde_json::Value;

use super::kernel::{ip_json, netns_link_names};
use super::process::run;

/// Every unicast route of both families and every table but `local`, in the kernel's
/// order (which decides between routes of equal destination), without the kernel's
/// fe80::/64 routes (they come with every IPv6 interface). A multipath route lists its
/// next hops. Route flags are left out: "linkdown" comes and goes while ports settle.
pub fn netns_routes(netns: &str) -> Vec<String> {
    let mut out = Vec::new();
    for family in ["-4", "-6"] {
        let routes = ip_json(&["-n", netns, family, "-d", "route", "show", "table", "all"]);
        for r in routes.as_array().into_iter().flatten() {
            let dst = r["dst"].as_str().unwrap_or("?");
            let table = r["table"].as_str().unwrap_or("main");
            if table == "local" || dst.starts_with("fe80::") || r["type"] != "unicast" {
                continue;
            }
            let mut line = format!("{dst} table {table}");
            for key in ["gateway", "dev", "protocol", "scope", "metric", "prefsrc"] {
                if let Some(v) = r.get(key).filter(|v| !v.is_null()) {
                    line.push_str(&format!(" {key} {}", plain(v)));
                }
            }
            if let Some(m) = r.get("metrics") {
                line.push_str(&format!(" metrics {m}"));
            }
            for hop in r["nexthops"].as_array().into_iter().flatten() {
                line.push_str(&format!(
                    " nexthop via {} dev {}",
                    plain(&hop["gateway"]),
                    plain(&hop["dev"])
                ));
            }
            out.push(line);
        }
    }
    out
}

/// The routes of `netns_routes` that go through `dev`.
pub fn routes_via(netns: &str, dev: &str) -> Vec<String> {
    let needle = format!("dev {dev}");
    netns_routes(netns)
        .into_iter()
        .filter(|r| r.split(" nexthop ").any(|part| part.contains(&needle)))
        .collect()
}

/// Each interface but lo: up or down, and its addresses (no link-local ones, which come
/// from random MACs) with their flags (tentative, dadfailed).
pub fn netns_interfaces(netns: &str) -> Vec<String> {
    let mut out = Vec::new();
    for dev in netns_link_names(netns).into_iter().filter(|d| d != "lo") {
        out.push(interface_line(netns, &dev));
    }
    out
}

pub fn interface_line(netns: &str, dev: &str) -> String {
    let v = ip_json(&["-n", netns, "addr", "show", "dev", dev]);
    let link = &v[0];
    let up = link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == "UP"));
    let mut line = format!("{dev} {}", if up { "up" } else { "down" });
    for a in link["addr_info"].as_array().into_iter().flatten() {
        if a["scope"] == "link" && a["family"] == "inet6" {
            continue;
        }
        line.push_str(&format!(" {}/{}", plain(&a["local"]), a["prefixlen"]));
        for flag in ["tentative", "dadfailed", "nodad"] {
            if a.get(flag).is_some_and(|f| f == true) {
                line.push_str(&format!(" {flag}"));
            }
        }
    }
    line
}

/// A sysctl of `dev` inside `netns`, e.g. ("ipv6", "accept_dad").
pub fn netns_sysctl(netns: &str, family: &str, dev: &str, key: &str) -> String {
    let path = format!("/proc/sys/net/{family}/conf/{dev}/{key}");
    let out = run("ip", &["netns", "exec", netns, "cat", &path], &[]);
    assert_eq!(out.code, 0, "cannot read {path} in {netns}:\n{out}");
    out.stdout.trim().to_string()
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
