//! academy as a drop-in for the reference bridge plugin with host-local IPAM: the same
//! conflist with only `"type"` changed must give the same network. Root only.
//!
//! What is proved here, against real namespaces and the real reference plugins
//! (/opt/cni/lab-bin: bridge, host-local, portmap; Debian's /usr/lib/cni: tuning, static):
//! - the container's addresses, routes and MTU (and the bridge's gateways and MTUs) are
//!   the same under `type: bridge` and `type: academy`, for a v4, a dual-stack and a
//!   ranges config, and the bridge's host-side sysctls are the reference's;
//! - dual stack and IPv6-only networks: both families, default routes, gateways on the
//!   bridge, reachable from the container;
//! - static addresses and MAC through runtimeConfig (capabilities), args.cni and
//!   CNI_ARGS, and a clean refusal (code 111) when another container holds the address;
//! - unimplemented reference keys are refused with code 2 naming them, their "off"
//!   values and the reference's explicit defaults are accepted;
//! - forceAddress, hairpinMode, promiscMode;
//! - delegated IPAM (a real `static`, and a logging wrapper that proves ADD, CHECK, GC,
//!   STATUS and DEL are forwarded);
//! - chaining with portmap and tuning under cnitool.
//!
//! The IPv6 addresses live on the lab's bridge and in the lab's netns, which the Lab
//! guard deletes; the reference runs use a second bridge that [`ReferenceBridge`]
//! deletes (also on panic). Network safety: every ping goes from a lab netns to that
//! lab's own gateway; portmap's DNAT is for one unusual host port (47000 + the lab's slot) and is
//! removed by DEL.
//!
//! | file                  | subject                                                     |
//! |-----------------------|-------------------------------------------------------------|
//! | `reference.rs`        | the same network as the reference: state compared per fact  |
//! | `dual_stack.rs`       | dual stack and IPv6-only: both families, routes, gateways   |
//! | `static_addresses.rs` | static addresses and MAC: runtimeConfig, args.cni, CNI_ARGS |
//! | `keys.rs`             | the reference's keys: refused, or accepted when "off"       |
//! | `bridge_modes.rs`     | forceAddress, hairpinMode, promiscMode                      |
//! | `delegated_ipam.rs`   | delegated IPAM: a real `static`, and every verb forwarded   |
//! | `chaining.rs`         | chained with portmap and tuning under cnitool               |
//!
//! What those files share is below.

mod bridge_modes;
mod chaining;
mod delegated_ipam;
mod dual_stack;
mod keys;
mod reference;
mod static_addresses;

use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

/// The folder of Debian's containernetworking-plugins (tuning, static).
fn debian_plugins() -> &'static str {
    ["/usr/lib/cni", "/usr/libexec/cni", "/opt/cni/bin"]
        .into_iter()
        .find(|d| Path::new(d).join("tuning").is_file() && Path::new(d).join("static").is_file())
        .expect("tuning and static not found in /usr/lib/cni, /usr/libexec/cni or /opt/cni/bin: install containernetworking-plugins")
}

/// The lab's CNI_PATH (academy first: /opt/cni/lab-bin holds an installed academy too),
/// then the reference plugins, then Debian's.
fn cni_path(lab: &Lab) -> String {
    format!(
        "{}:{REFERENCE_BIN}:{}",
        lab.bin_dir.display(),
        debian_plugins()
    )
}

/// "fd00:A:n": the lab's IPv6 /64 without its interface part.
fn v6(lab: &Lab) -> String {
    lab.slot.v6_prefix()
}

fn v6_subnet(lab: &Lab) -> String {
    format!("{}::/64", v6(lab))
}

fn v6_ip(lab: &Lab, host: &str) -> String {
    format!("{}::{host}", v6(lab))
}

/// A locally administered MAC unique to the lab and `last`.
fn lab_mac(lab: &Lab, last: u8) -> String {
    format!("02:ac:de:00:{:02x}:{last:02x}", lab.slot.n)
}

/// `{"type": "academy", "bridge": <lab bridge>}` plus `extra`.
fn academy(lab: &Lab, extra: Value) -> Value {
    let mut p = json!({ "type": "academy", "bridge": lab.bridge });
    merge(&mut p, extra);
    p
}

/// A host-local ipam block with the lab's data dir, plus `extra`.
fn host_local(lab: &Lab, extra: Value) -> Value {
    let mut p = json!({ "type": "host-local", "dataDir": lab.data_dir });
    merge(&mut p, extra);
    p
}

fn merge(into: &mut Value, extra: Value) {
    for (k, v) in extra.as_object().unwrap() {
        into[k] = v.clone();
    }
}

/// (Re)writes the lab's only conflist, cniVersion 1.0.0 (the newest cnitool and the
/// Debian plugins speak).
fn write_list(lab: &Lab, plugins: Vec<Value>) {
    let list = json!({ "cniVersion": "1.0.0", "name": lab.network, "plugins": plugins });
    std::fs::write(
        lab.conf_dir.join("10-lab.conflist"),
        serde_json::to_string_pretty(&list).unwrap(),
    )
    .unwrap();
}

/// A plugin config as a runtime hands it over: name and cniVersion injected, no
/// `capabilities` (the spec keeps that key from the plugin).
fn standalone(lab: &Lab, version: &str, plugin: &Value) -> Value {
    let mut c = plugin.clone();
    c["name"] = json!(lab.network);
    c["cniVersion"] = json!(version);
    c.as_object_mut().unwrap().remove("capabilities");
    c
}

/// `cnitool VERB <lab network> <netns>` with the full CNI_PATH.
fn tool(lab: &Lab, verb: &str, netns: &str, env: &[(&str, &str)]) -> Out {
    let path = cni_path(lab);
    let mut all = vec![("CNI_PATH", path.as_str())];
    all.extend_from_slice(env);
    lab.cnitool(verb, netns, &all)
}

fn tool_add(lab: &Lab, netns: &str, env: &[(&str, &str)]) -> Value {
    tool(lab, "add", netns, env).expect_result(&format!("cnitool add in {netns}"))
}

fn tool_quiet(lab: &Lab, verb: &str, netns: &str, env: &[(&str, &str)]) {
    tool(lab, verb, netns, env).expect_silent_success(&format!("cnitool {verb} in {netns}"));
}

/// A direct invocation for `a` with `config` on stdin and the full CNI_PATH.
fn direct(lab: &Lab, command: &str, a: &Attach, config: &Value) -> Call {
    lab.call_for(command, a)
        .env("CNI_PATH", &cni_path(lab))
        .config(config)
}

/// Addresses of `dev` (in `netns`, or on the host) as "family address/prefix", without
/// IPv6 link-local ones (they derive from random MACs).
fn addresses(netns: Option<&str>, dev: &str) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(ns) = netns {
        args.extend(["-n", ns]);
    }
    args.extend(["addr", "show", "dev", dev]);
    let v = ip_json(&args);
    let mut out: Vec<String> = v[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| !(a["family"] == "inet6" && a["scope"] == "link"))
        .map(|a| {
            format!(
                "{} {}/{} scope {}",
                a["family"].as_str().unwrap_or("?"),
                a["local"].as_str().unwrap_or("?"),
                a["prefixlen"],
                a["scope"].as_str().unwrap_or("?")
            )
        })
        .collect();
    out.sort();
    out
}

/// `ip -j link show dev DEV` (in `netns`, or on the host); Null when it does not exist.
fn link(netns: Option<&str>, dev: &str) -> Value {
    let mut args = Vec::new();
    if let Some(ns) = netns {
        args.extend(["-n", ns]);
    }
    args.extend(["-d", "link", "show", "dev", dev]);
    ip_json(&args)[0].clone()
}

fn has_flag(link: &Value, flag: &str) -> bool {
    link["flags"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == flag))
}

/// The default route of a family in a netns, as "via GW dev DEV"; None if absent.
fn default_route(netns: &str, v6: bool) -> Option<String> {
    let family = if v6 { "-6" } else { "-4" };
    let routes = ip_json(&["-n", netns, family, "route", "show", "default"]);
    routes.as_array().and_then(|r| r.first()).map(|r| {
        format!(
            "via {} dev {}",
            r["gateway"].as_str().unwrap_or("-"),
            r["dev"].as_str().unwrap_or("-")
        )
    })
}

/// Pings `addr` from `netns` until a reply comes or `limit` has passed. The bridge's
/// IPv6 address stays tentative for a second or two (DAD on the host side).
fn ping_until(netns: &str, addr: &str, limit: Duration) -> bool {
    let family = if addr.contains(':') { "-6" } else { "-4" };
    let start = Instant::now();
    loop {
        let out = run(
            "ip",
            &[
                "netns", "exec", netns, "ping", family, "-n", "-q", "-c", "1", "-W", "1", addr,
            ],
            &[],
        );
        if out.code == 0 {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        sleep(Duration::from_millis(200));
    }
}

/// After DEL: no eth0 in these netns, no host veth of the lab, nothing reserved.
fn assert_clean(lab: &Lab, netns: &[&str]) {
    for ns in netns {
        assert_eq!(
            netns_link_names(ns),
            ["lo"],
            "netns {ns} is not back to only lo"
        );
    }
    assert_eq!(lab.lab_veths(), Vec::<String>::new(), "host veths left");
    assert_eq!(lab.reservations(), Vec::<String>::new(), "store not empty");
}

/// The CNI error in cnitool's output: `plugin type="academy" failed (add): MSG`.
fn assert_tool_failed(out: &Out, needles: &[&str]) {
    assert_ne!(out.code, 0, "cnitool should have failed:\n{out}");
    assert_no_panic(out, "cnitool");
    for n in needles {
        assert!(
            out.all().contains(n),
            "cnitool's error does not name {n:?}:\n{out}"
        );
    }
}

/// (address, gateway) of each entry of a result's ips.
fn result_ips(result: &Value) -> Vec<(String, String)> {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i["address"].as_str().unwrap_or("").to_string(),
                i["gateway"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}
