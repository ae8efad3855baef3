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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

const REFERENCE_BIN: &str = "/opt/cni/lab-bin";

/// Held by every test that runs the reference bridge. With isGateway the reference
/// turns on forwarding host-wide (net.ipv6.conf.all.forwarding); [`ReferenceBridge`]
/// puts the old value back before academy's run, and no other reference run may flip
/// it while academy's bridge sysctls are read.
static REFERENCE: Mutex<()> = Mutex::new(());

fn reference_lock() -> std::sync::MutexGuard<'static, ()> {
    REFERENCE.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------
// Helpers this module needs beyond common
// ---------------------------------------------------------------------------------------

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

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unreadable ({e})"))
}

fn write_sysctl(path: &str, value: &str) {
    if read_trimmed(path) != value {
        let _ = std::fs::write(path, value);
    }
}

// ---------------------------------------------------------------------------------------
// The comparison with the reference
// ---------------------------------------------------------------------------------------

// Every normalisation of the comparison, and why:
// - IPv6 link-local addresses, fe80::/64 and multicast routes are left out: the kernel
//   makes them, from MACs that are random in both plugins.
// - MACs and the names of the bridge and host veths are not compared: the bridges differ
//   by design (one per run), the reference names host veths veth%08x at random while
//   academy derives the name from the attachment, and MACs are random.
// - Route `flags` are left out (transient, e.g. "linkdown" while a port settles).
// - A result route without gw is compared as "via the gateway of its family", which is
//   what it means: the reference prints IPAM's route as is, academy fills the gateway in.
//   The kernel routes, compared separately, are identical.
// - Lines are sorted within each fact.
// Everything else (prefix lengths, scopes, route protocol, metric, prefsrc, pref, MTUs,
// up state, result gateways and interface index) is compared as reported.

/// Named facts, each a sorted list of normalised lines.
type State = BTreeMap<String, Vec<String>>;

/// One route of `ip -j route`, the fields that define it. `flags` is left out (it only
/// says e.g. "linkdown" while a port settles).
fn route_text(r: &Value) -> String {
    let mut s = String::new();
    for k in [
        "type", "dst", "gateway", "dev", "scope", "protocol", "metric", "prefsrc", "pref",
    ] {
        if let Some(v) = r.get(k) {
            let text = v.as_str().map(str::to_string).unwrap_or(v.to_string());
            let _ = write!(s, "{k}={text} ");
        }
    }
    s.trim_end().to_string()
}

/// The container's side: addresses (no link-local), main-table routes of both families
/// (no fe80::/64, no multicast), MTU and up state of `ifname`, and the result's ips and
/// routes. A result route without gw means "via the gateway of its family" (the
/// reference prints it so, academy fills the gateway in): normalised to the filled form.
fn container_state(netns: &str, ifname: &str, result: &Value, key: &str, into: &mut State) {
    let l = link(Some(netns), ifname);
    into.insert(
        format!("{key}.link"),
        vec![format!("mtu={} up={}", l["mtu"], has_flag(&l, "UP"))],
    );
    into.insert(format!("{key}.addresses"), addresses(Some(netns), ifname));
    for (family, name) in [("-4", "routes4"), ("-6", "routes6")] {
        let routes = ip_json(&["-n", netns, family, "route", "show"]);
        let mut lines: Vec<String> = routes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                let dst = r["dst"].as_str().unwrap_or("");
                !dst.starts_with("fe80") && !dst.starts_with("ff") && r["type"] != "multicast"
            })
            .map(route_text)
            .collect();
        lines.sort();
        into.insert(format!("{key}.{name}"), lines);
    }
    let ips = result_ips(result);
    let mut lines: Vec<String> = result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            format!(
                "{} gw {} interface {}",
                i["address"].as_str().unwrap_or("-"),
                i["gateway"].as_str().unwrap_or("-"),
                i["interface"]
            )
        })
        .collect();
    lines.sort();
    into.insert(format!("{key}.result.ips"), lines);
    let gateway_of = |dst: &str| -> String {
        let v6 = dst.contains(':');
        ips.iter()
            .find(|(a, g)| a.contains(':') == v6 && !g.is_empty())
            .map(|(_, g)| g.clone())
            .unwrap_or_default()
    };
    let mut lines: Vec<String> = result["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let dst = r["dst"].as_str().unwrap_or("-");
            let gw = r["gw"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| gateway_of(dst));
            format!("{dst} via {gw}")
        })
        .collect();
    lines.sort();
    into.insert(format!("{key}.result.routes"), lines);
}

/// The bridge's side: its addresses (no link-local), MTU, up state, and its ports' MTUs.
fn bridge_state(bridge: &str, into: &mut State) {
    let l = link(None, bridge);
    into.insert(
        "bridge.link".into(),
        vec![format!(
            "kind={} mtu={} up={}",
            l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
            l["mtu"],
            has_flag(&l, "UP")
        )],
    );
    into.insert("bridge.addresses".into(), addresses(None, bridge));
    let ports = ip_json(&["link", "show", "master", bridge]);
    let mut mtus: Vec<String> = ports
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("port mtu={}", p["mtu"]))
        .collect();
    mtus.sort();
    into.insert("bridge.ports".into(), mtus);
}

/// The bridge's sysctls the reference sets: accept_ra 0 ("we want to own the routes for
/// this interface") and, with isGateway, forwarding for each family with a gateway.
fn bridge_sysctls(bridge: &str) -> State {
    let mut s = State::new();
    for (key, path) in [
        (
            "ipv6 accept_ra",
            format!("/proc/sys/net/ipv6/conf/{bridge}/accept_ra"),
        ),
        (
            "ipv4 forwarding",
            format!("/proc/sys/net/ipv4/conf/{bridge}/forwarding"),
        ),
        (
            "ipv6 forwarding",
            format!("/proc/sys/net/ipv6/conf/{bridge}/forwarding"),
        ),
    ] {
        s.insert(format!("bridge {key}"), vec![read_trimmed(&path)]);
    }
    s
}

/// The reference's own bridge, deleted when the reference run ends (or the test
/// panics), and the host-wide forwarding switches the reference may have turned on put
/// back as they were.
struct ReferenceBridge {
    name: String,
    forwarding: Vec<(&'static str, String)>,
}

const FORWARDING: [&str; 2] = [
    "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/net/ipv6/conf/all/forwarding",
];

impl ReferenceBridge {
    fn new(lab: &Lab) -> ReferenceBridge {
        let b = ReferenceBridge {
            name: lab.slot.link_name("acr"),
            forwarding: FORWARDING.iter().map(|p| (*p, read_trimmed(p))).collect(),
        };
        b.remove();
        b
    }

    fn remove(&self) {
        if Path::new("/sys/class/net").join(&self.name).exists() {
            let _ = run("ip", &["link", "del", &self.name], &[]);
        }
        for (path, value) in &self.forwarding {
            write_sysctl(path, value);
        }
    }
}

impl Drop for ReferenceBridge {
    fn drop(&mut self) {
        self.remove();
    }
}

/// What one run gave.
struct Run {
    state: State,
    sysctls: State,
}

/// Writes the conflist with `plugin`, ADDs `containers` containers through cnitool (a
/// fresh netns each), captures their state and the bridge's, DELs them.
fn run_network(lab: &Lab, plugin: &Value, containers: usize, tag: &str) -> Run {
    write_list(lab, vec![plugin.clone()]);
    let kind = plugin["type"].as_str().unwrap();
    let bridge = plugin["bridge"].as_str().unwrap();
    let mut state = State::new();
    let mut netns = Vec::new();
    for i in 0..containers {
        let ns = lab.add_netns(&format!("{tag}{i}"));
        let out = tool(lab, "add", &ns, &[]);
        let result = out.expect_result(&format!("{kind}: cnitool add #{i}"));
        container_state(&ns, "eth0", &result, &format!("container{i}"), &mut state);
        netns.push(ns);
    }
    bridge_state(bridge, &mut state);
    let sysctls = bridge_sysctls(bridge);
    for ns in &netns {
        tool(lab, "del", ns, &[]).expect_silent_success(&format!("{kind}: cnitool del in {ns}"));
    }
    Run { state, sysctls }
}

/// Runs `plugin(type, bridge, dataDir)` with type "bridge" on a bridge of its own and
/// an empty store, then with type "academy" on the lab's bridge and another empty
/// store (so both hand out the same first addresses).
fn reference_and_academy(
    lab: &Lab,
    containers: usize,
    plugin: impl Fn(&str, &str, &Path) -> Value,
) -> (Run, Run) {
    let _serial = reference_lock();
    let reference_bridge = ReferenceBridge::new(lab);
    let reference_data = lab.root.join("reference-data");
    let reference = run_network(
        lab,
        &plugin("bridge", &reference_bridge.name, &reference_data),
        containers,
        "ref",
    );
    reference_bridge.remove();
    let ours = run_network(
        lab,
        &plugin("academy", &lab.bridge, &lab.data_dir),
        containers,
        "ours",
    );
    assert_eq!(
        lab.lab_veths(),
        Vec::<String>::new(),
        "academy left host veths"
    );
    assert_eq!(
        lab.reservations(),
        Vec::<String>::new(),
        "academy's store not empty"
    );
    (reference, ours)
}

fn show(s: &State) -> String {
    let mut out = String::new();
    for (k, v) in s {
        let _ = writeln!(out, "  {k}: {v:?}");
    }
    out
}

/// Fails with a readable, per-fact diff when academy's state is not the reference's.
fn assert_same(what: &str, reference: &State, ours: &State) {
    let keys: BTreeSet<&String> = reference.keys().chain(ours.keys()).collect();
    let mut diff = String::new();
    for k in keys {
        let empty = Vec::new();
        let (r, o) = (
            reference.get(k).unwrap_or(&empty),
            ours.get(k).unwrap_or(&empty),
        );
        if r != o {
            let _ = writeln!(diff, "  {k}:");
            for line in r.iter().filter(|l| !o.contains(l)) {
                let _ = writeln!(diff, "    - reference only: {line}");
            }
            for line in o.iter().filter(|l| !r.contains(l)) {
                let _ = writeln!(diff, "    + academy only:   {line}");
            }
            if r.iter().all(|l| o.contains(l)) && o.iter().all(|l| r.contains(l)) {
                let _ = writeln!(diff, "    (same lines, different count or order)");
            }
        }
    }
    assert!(
        diff.is_empty(),
        "academy's {what} differs from the reference bridge's:\n{diff}\nreference:\n{}academy:\n{}",
        show(reference),
        show(ours)
    );
}

/// A guard against a vacuous comparison: the reference really configured something.
fn assert_reference_configured(reference: &State, containers: usize) {
    for i in 0..containers {
        let addrs = &reference[&format!("container{i}.addresses")];
        assert!(
            !addrs.is_empty(),
            "the reference gave container {i} no address:\n{}",
            show(reference)
        );
    }
}

#[test]
fn same_network_as_the_reference_v4() {
    let lab = Lab::new("dsame4");
    let (reference, ours) = reference_and_academy(&lab, 1, |kind, bridge, data| {
        json!({
            "type": kind,
            "bridge": bridge,
            "isGateway": true,
            "isDefaultGateway": true,
            "mtu": 1400,
            "ipam": {
                "type": "host-local",
                "subnet": lab.subnet(),
                "dataDir": data,
                "routes": [
                    { "dst": "192.168.77.0/24" },
                    { "dst": "172.30.0.0/16", "gw": lab.ip(254) }
                ]
            }
        })
    });
    assert_reference_configured(&reference.state, 1);
    assert!(
        reference.state["container0.link"][0].starts_with("mtu=1400"),
        "the reference did not set mtu 1400: {:?}",
        reference.state["container0.link"]
    );
    assert_same("v4 network", &reference.state, &ours.state);
}

#[test]
fn same_network_as_the_reference_dual_stack() {
    let lab = Lab::new("dsame46");
    let (reference, ours) = reference_and_academy(&lab, 1, |kind, bridge, data| {
        json!({
            "type": kind,
            "bridge": bridge,
            "isDefaultGateway": true,
            "ipam": {
                "type": "host-local",
                "dataDir": data,
                "ranges": [
                    [{ "subnet": lab.subnet() }],
                    [{ "subnet": v6_subnet(&lab) }]
                ]
            }
        })
    });
    assert_reference_configured(&reference.state, 1);
    assert_eq!(
        reference.state["container0.addresses"].len(),
        2,
        "the reference did not give one address of each family"
    );
    assert_same("dual-stack network", &reference.state, &ours.state);
}

/// Two ranges in one set (rangeStart/rangeEnd, two addresses in the first), and an
/// IPv6 set with a range: three containers, so the third comes from the second range.
#[test]
fn same_network_as_the_reference_ranges() {
    let lab = Lab::new("dsamerg");
    let (reference, ours) = reference_and_academy(&lab, 3, |kind, bridge, data| {
        json!({
            "type": kind,
            "bridge": bridge,
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "dataDir": data,
                "ranges": [
                    [
                        { "subnet": lab.subnet(), "rangeStart": lab.ip(10), "rangeEnd": lab.ip(11), "gateway": lab.gateway() },
                        { "subnet": lab.subnet(), "rangeStart": lab.ip(100), "rangeEnd": lab.ip(101), "gateway": lab.gateway() }
                    ],
                    [
                        { "subnet": v6_subnet(&lab), "rangeStart": v6_ip(&lab, "a"), "rangeEnd": v6_ip(&lab, "c") }
                    ]
                ],
                "routes": [{ "dst": "0.0.0.0/0" }, { "dst": "::/0" }]
            }
        })
    });
    assert_reference_configured(&reference.state, 3);
    assert!(
        reference.state["container2.result.ips"]
            .iter()
            .any(|l| l.starts_with(&format!("{}/24", lab.ip(100)))),
        "the reference did not take the third address from the second range:\n{}",
        show(&reference.state)
    );
    assert_same("ranges network", &reference.state, &ours.state);
}

/// The host side of isGateway: the reference sets accept_ra=0 on the bridge (so no
/// container can steer the host's routes with router advertisements) and turns on
/// forwarding for each family that has a gateway.
#[test]
fn bridge_sysctls_as_the_reference() {
    let lab = Lab::new("dsysctl");
    let (reference, ours) = reference_and_academy(&lab, 1, |kind, bridge, data| {
        json!({
            "type": kind,
            "bridge": bridge,
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "dataDir": data,
                "ranges": [
                    [{ "subnet": lab.subnet() }],
                    [{ "subnet": v6_subnet(&lab) }]
                ]
            }
        })
    });
    assert_eq!(
        reference.sysctls["bridge ipv6 accept_ra"],
        ["0"],
        "the reference did not turn accept_ra off (not the plugin this test expects)"
    );
    assert_same("bridge sysctls", &reference.sysctls, &ours.sysctls);
}

// ---------------------------------------------------------------------------------------
// Dual stack and IPv6-only
// ---------------------------------------------------------------------------------------

#[test]
fn dual_stack_addresses_routes_and_gateways() {
    let lab = Lab::new("ddual");
    write_list(
        &lab,
        vec![academy(
            &lab,
            json!({
                "isDefaultGateway": true,
                "ipam": host_local(&lab, json!({
                    "ranges": [[{ "subnet": lab.subnet() }], [{ "subnet": v6_subnet(&lab) }]]
                }))
            }),
        )],
    );
    let ns = lab.netns.clone();
    let (gw4, gw6) = (lab.gateway(), v6_ip(&lab, "1"));
    let result = tool_add(&lab, &ns, &[]);
    assert_eq!(
        result_ips(&result),
        [
            (format!("{}/24", lab.ip(2)), gw4.clone()),
            (format!("{}/64", v6_ip(&lab, "2")), gw6.clone())
        ],
        "one address of each family, with its gateway: {result:#}"
    );
    assert_eq!(
        addresses(Some(&ns), "eth0"),
        [
            format!("inet {}/24 scope global", lab.ip(2)),
            format!("inet6 {}/64 scope global", v6_ip(&lab, "2"))
        ]
    );
    assert_eq!(
        default_route(&ns, false),
        Some(format!("via {gw4} dev eth0"))
    );
    assert_eq!(
        default_route(&ns, true),
        Some(format!("via {gw6} dev eth0"))
    );
    let on_bridge = addresses(None, &lab.bridge);
    for gw in [format!("inet {gw4}/24"), format!("inet6 {gw6}/64")] {
        assert!(
            on_bridge.iter().any(|a| a.starts_with(&gw)),
            "bridge {} does not hold {gw}: {on_bridge:?}",
            lab.bridge
        );
    }
    assert!(
        ping_until(&ns, &gw4, Duration::from_secs(3)),
        "no reply from {gw4}"
    );
    assert!(
        ping_until(&ns, &gw6, Duration::from_secs(3)),
        "no reply from {gw6}"
    );
    tool_quiet(&lab, "check", &ns, &[]);
    tool_quiet(&lab, "del", &ns, &[]);
    assert_clean(&lab, &[&ns]);
    tool_quiet(&lab, "del", &ns, &[]);
}

#[test]
fn ipv6_only_network() {
    let lab = Lab::new("dv6only");
    write_list(
        &lab,
        vec![academy(
            &lab,
            json!({
                "isDefaultGateway": true,
                "ipam": host_local(&lab, json!({ "ranges": [[{ "subnet": v6_subnet(&lab) }]] }))
            }),
        )],
    );
    let ns = lab.netns.clone();
    let gw6 = v6_ip(&lab, "1");
    let result = tool_add(&lab, &ns, &[]);
    assert_eq!(
        result_ips(&result),
        [(format!("{}/64", v6_ip(&lab, "2")), gw6.clone())],
        "{result:#}"
    );
    assert_eq!(
        addresses(Some(&ns), "eth0"),
        [format!("inet6 {}/64 scope global", v6_ip(&lab, "2"))]
    );
    assert_eq!(
        default_route(&ns, true),
        Some(format!("via {gw6} dev eth0"))
    );
    assert_eq!(default_route(&ns, false), None, "an IPv4 default route");
    assert_eq!(
        addresses(None, &lab.bridge),
        [format!("inet6 {gw6}/64 scope global")],
        "the bridge must hold the IPv6 gateway and no IPv4 address"
    );
    assert!(
        ping_until(&ns, &gw6, Duration::from_secs(3)),
        "no reply from {gw6}"
    );
    tool_quiet(&lab, "check", &ns, &[]);
    tool_quiet(&lab, "del", &ns, &[]);
    assert_clean(&lab, &[&ns]);
}

// ---------------------------------------------------------------------------------------
// Static addresses and MAC
// ---------------------------------------------------------------------------------------

/// A second container asking for `address` (by the same mechanism, through `config`
/// and `cni_args`) is refused with 111 naming the address and its holder, and leaves
/// everything as it was.
fn assert_conflict_is_clean(
    lab: &Lab,
    config: &Value,
    cni_args: Option<&str>,
    address: &str,
    holder: &str,
) {
    let a = lab.attachment("second");
    let (before, held) = (lab.snapshot(), lab.reservations());
    let bridge_before = addresses(None, &lab.bridge);
    let mut call = direct(lab, "ADD", &a, config);
    if let Some(args) = cni_args {
        call = call.env("CNI_ARGS", args);
    }
    let out = call.run();
    assert_cni_error(&out, 111, &[address, holder]);
    let diff = lab.snapshot().diff(&before);
    assert!(diff.is_empty(), "the refused ADD changed things:\n{diff}");
    assert_eq!(
        lab.reservations(),
        held,
        "the refused ADD changed the store"
    );
    assert_eq!(addresses(None, &lab.bridge), bridge_before);
    assert_eq!(netns_link_names(&a.netns), ["lo"]);
}

#[test]
fn static_ips_and_mac_from_runtime_config() {
    let lab = Lab::new("dsrc");
    let plugin = academy(
        &lab,
        json!({
            "capabilities": { "ips": true, "mac": true },
            "isDefaultGateway": true,
            "ipam": host_local(&lab, json!({
                "ranges": [[{ "subnet": lab.subnet() }], [{ "subnet": v6_subnet(&lab) }]]
            }))
        }),
    );
    write_list(&lab, vec![plugin.clone()]);
    let (v4, v6addr, mac) = (lab.ip(77), v6_ip(&lab, "77"), lab_mac(&lab, 1));
    let cap =
        json!({ "ips": [format!("{v4}/24"), format!("{v6addr}/64")], "mac": mac }).to_string();
    let ns = lab.netns.clone();
    let result = tool_add(&lab, &ns, &[("CAP_ARGS", &cap)]);
    assert_eq!(
        result_ips(&result),
        [
            (format!("{v4}/24"), lab.gateway()),
            (format!("{v6addr}/64"), v6_ip(&lab, "1"))
        ]
    );
    assert_eq!(result["interfaces"][2]["mac"], mac.as_str());
    assert_eq!(link(Some(&ns), "eth0")["address"], mac.as_str());
    assert_eq!(
        addresses(Some(&ns), "eth0"),
        [
            format!("inet {v4}/24 scope global"),
            format!("inet6 {v6addr}/64 scope global")
        ]
    );
    tool_quiet(&lab, "check", &ns, &[("CAP_ARGS", &cap)]);

    // The runtime's way for the second container: runtimeConfig on stdin.
    let mut second = standalone(&lab, "1.0.0", &plugin);
    second["runtimeConfig"] = json!({ "ips": [format!("{v4}/24")] });
    let holder = cnitool_container_id(&netns_path(&ns));
    assert_conflict_is_clean(&lab, &second, None, &v4, &holder);
    // And through cnitool, the message reaches the user.
    let other = lab.add_netns("third");
    let out = tool(&lab, "add", &other, &[("CAP_ARGS", &cap)]);
    assert_tool_failed(&out, &[&v4, &holder]);
    assert_eq!(netns_link_names(&other), ["lo"]);

    tool_quiet(&lab, "del", &ns, &[("CAP_ARGS", &cap)]);
    tool_quiet(&lab, "del", &other, &[("CAP_ARGS", &cap)]);
    assert_clean(&lab, &[&ns, &other]);
}

#[test]
fn static_ip_and_mac_from_args_cni() {
    let lab = Lab::new("dsargs");
    let (v4, mac) = (lab.ip(78), lab_mac(&lab, 2));
    let plugin = academy(
        &lab,
        json!({
            "isDefaultGateway": true,
            "args": { "cni": { "ips": [v4], "mac": mac } },
            "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
        }),
    );
    write_list(&lab, vec![plugin.clone()]);
    let ns = lab.netns.clone();
    let result = tool_add(&lab, &ns, &[]);
    assert_eq!(result_ips(&result), [(format!("{v4}/24"), lab.gateway())]);
    assert_eq!(result["interfaces"][2]["mac"], mac.as_str());
    assert_eq!(link(Some(&ns), "eth0")["address"], mac.as_str());
    assert_eq!(
        addresses(Some(&ns), "eth0"),
        [format!("inet {v4}/24 scope global")]
    );
    assert!(
        ping_until(&ns, &lab.gateway(), Duration::from_secs(3)),
        "no reply from the gateway"
    );
    tool_quiet(&lab, "check", &ns, &[]);

    let holder = cnitool_container_id(&netns_path(&ns));
    assert_conflict_is_clean(
        &lab,
        &standalone(&lab, "1.0.0", &plugin),
        None,
        &v4,
        &holder,
    );
    tool_quiet(&lab, "del", &ns, &[]);
    assert_clean(&lab, &[&ns]);
}

/// podman's --ip and --mac-address: CNI_ARGS `IP=` and `MAC=` (with IgnoreUnknown, as
/// podman sends them).
#[test]
fn static_ip_and_mac_from_cni_args() {
    let lab = Lab::new("dscniargs");
    let plugin = academy(
        &lab,
        json!({
            "isDefaultGateway": true,
            "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
        }),
    );
    write_list(&lab, vec![plugin.clone()]);
    let (v4, mac) = (lab.ip(79), lab_mac(&lab, 3));
    let args = format!("IgnoreUnknown=1;IP={v4};MAC={mac}");
    let ns = lab.netns.clone();
    let result = tool_add(&lab, &ns, &[("CNI_ARGS", &args)]);
    assert_eq!(result_ips(&result), [(format!("{v4}/24"), lab.gateway())]);
    assert_eq!(result["interfaces"][2]["mac"], mac.as_str());
    assert_eq!(link(Some(&ns), "eth0")["address"], mac.as_str());
    assert_eq!(
        addresses(Some(&ns), "eth0"),
        [format!("inet {v4}/24 scope global")]
    );
    tool_quiet(&lab, "check", &ns, &[("CNI_ARGS", &args)]);

    let holder = cnitool_container_id(&netns_path(&ns));
    assert_conflict_is_clean(
        &lab,
        &standalone(&lab, "1.0.0", &plugin),
        Some(&format!("IgnoreUnknown=1;IP={v4}")),
        &v4,
        &holder,
    );
    tool_quiet(&lab, "del", &ns, &[("CNI_ARGS", &args)]);
    assert_clean(&lab, &[&ns]);
}

// ---------------------------------------------------------------------------------------
// Keys: refused, accepted, and the reference's meaning of the implemented ones
// ---------------------------------------------------------------------------------------

#[test]
fn unimplemented_reference_keys_are_refused() {
    let lab = Lab::new("drefuse");
    let base = standalone(
        &lab,
        "1.0.0",
        &academy(
            &lab,
            json!({ "isGateway": true, "ipam": host_local(&lab, json!({ "subnet": lab.subnet() })) }),
        ),
    );
    let a = lab.attach();
    let before = lab.snapshot();
    let refused = [
        ("macspoofchk", json!(true)),
        ("enabledad", json!(true)),
        ("disableContainerInterface", json!(true)),
    ];
    for (key, value) in &refused {
        let mut c = base.clone();
        c[*key] = value.clone();
        let out = direct(&lab, "ADD", &a, &c).run();
        assert_cni_error(&out, 2, &[key]);
        let diff = lab.snapshot().diff(&before);
        assert!(diff.is_empty(), "refusing {key} left:\n{diff}");
    }
    let mut c = base.clone();
    c["ipam"]["resolvConf"] = json!("/etc/resolv.conf");
    assert_cni_error(&direct(&lab, "ADD", &a, &c).run(), 2, &["resolvConf"]);

    // Through cnitool the refusal reaches the user too.
    let mut plugin = base.clone();
    plugin["vlan"] = json!(5000);
    write_list(&lab, vec![plugin]);
    assert_tool_failed(&tool(&lab, "add", &lab.netns, &[]), &["VLAN ID 5000"]);
    let diff = lab.snapshot().diff(&before);
    assert!(
        diff.is_empty(),
        "refusing vlan 5000 via cnitool left:\n{diff}"
    );

    // Their off values ask for nothing: accepted.
    let mut c = base.clone();
    for (key, value) in [
        ("ipMasq", json!(false)),
        ("vlan", json!(0)),
        ("macspoofchk", json!(false)),
        ("enabledad", json!(false)),
        ("portIsolation", json!(false)),
        ("disableContainerInterface", json!(false)),
    ] {
        c[key] = value;
    }
    let out = direct(&lab, "ADD", &a, &c).run();
    out.expect_result("ADD with the off values");
    direct(&lab, "DEL", &a, &c)
        .run()
        .expect_silent_success("DEL");
    assert_clean(&lab, &[&lab.netns]);
}

/// A conflist that states the reference's defaults explicitly (as generators do) must
/// be accepted: the reference takes every one of these, and they ask for nothing.
#[test]
fn reference_defaults_stated_explicitly_are_accepted() {
    let lab = Lab::new("ddefaults");
    let defaults = [
        ("mtu", json!(0)),
        ("preserveDefaultVlan", json!(true)),
        ("vlan", json!(0)),
        ("vlanTrunk", json!([])),
        ("ipMasq", json!(false)),
        ("hairpinMode", json!(false)),
        ("promiscMode", json!(false)),
        ("isGateway", json!(false)),
        ("isDefaultGateway", json!(false)),
        ("forceAddress", json!(false)),
        ("macspoofchk", json!(false)),
        ("enabledad", json!(false)),
        ("disableContainerInterface", json!(false)),
        ("portIsolation", json!(false)),
        ("dns", json!({})),
    ];
    let base = |kind: &str, bridge: &str| {
        json!({
            "cniVersion": "1.0.0",
            "name": lab.network,
            "type": kind,
            "bridge": bridge,
            "ipam": host_local(&lab, json!({ "subnet": lab.subnet(), "routes": [] }))
        })
    };
    // The reference takes them all at once (isGateway false: it changes no sysctl).
    {
        let _serial = reference_lock();
        let reference_bridge = ReferenceBridge::new(&lab);
        let mut c = base("bridge", &reference_bridge.name);
        for (k, v) in &defaults {
            c[*k] = v.clone();
        }
        c["ipam"]["dataDir"] = json!(lab.root.join("reference-data"));
        let a = lab.attachment("ref");
        let reference = |cmd: &str| {
            lab.call_for(cmd, &a)
                .env("CNI_PATH", REFERENCE_BIN)
                .config(&c)
                .spawn(&format!("{REFERENCE_BIN}/bridge"), &[])
        };
        reference("ADD").expect_result("the reference bridge's ADD with explicit defaults");
        reference("DEL").expect_silent_success("the reference bridge's DEL");
    }
    let a = lab.attach();
    let mut refused = Vec::new();
    for (k, v) in &defaults {
        let mut c = base("academy", &lab.bridge);
        c[*k] = v.clone();
        let out = direct(&lab, "ADD", &a, &c).run();
        if out.code == 0 {
            direct(&lab, "DEL", &a, &c)
                .run()
                .expect_silent_success("DEL");
        } else {
            refused.push(format!("{k}: {v} -> {}", out.stdout.trim()));
            // A refused config is refused by DEL too: clean with the bare config.
            direct(&lab, "DEL", &a, &base("academy", &lab.bridge))
                .run()
                .expect_silent_success("DEL");
        }
    }
    assert!(
        refused.is_empty(),
        "academy refuses reference defaults the reference accepts:\n  {}",
        refused.join("\n  ")
    );
    assert_clean(&lab, &[&lab.netns]);
}

/// Creates the lab's bridge by hand with `address` on it, as a stale earlier network
/// would have left it.
fn precreate_bridge(lab: &Lab, address: &str) {
    ip(&["link", "add", &lab.bridge, "type", "bridge"]);
    ip(&["addr", "add", address, "dev", &lab.bridge]);
    ip(&["link", "set", &lab.bridge, "up"]);
}

fn bridge_v4(lab: &Lab) -> Vec<String> {
    addresses(None, &lab.bridge)
        .into_iter()
        .filter(|a| a.starts_with("inet "))
        .collect()
}

/// The bridge holds another IPv4 address (here in another, overlapping subnet): ADD
/// without forceAddress is refused (7, naming the old address) and changes nothing;
/// with forceAddress the old address is replaced by the gateway.
#[test]
fn force_address_refused_then_replaced() {
    let lab = Lab::new("dforce");
    let old = format!("{}/25", lab.ip(129));
    precreate_bridge(&lab, &old);
    let plugin = |force: bool| {
        standalone(
            &lab,
            "1.0.0",
            &academy(
                &lab,
                json!({
                    "isDefaultGateway": true,
                    "forceAddress": force,
                    "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
                }),
            ),
        )
    };
    let a = lab.attach();
    let before = lab.snapshot();
    let out = direct(&lab, "ADD", &a, &plugin(false)).run();
    assert_cni_error(&out, 7, &[&old]);
    // Only the store's housekeeping (network folder, last_reserved_ip) may appear.
    let diff = lab.snapshot().diff_allowing_store_housekeeping(&before);
    assert!(diff.is_empty(), "the refused ADD left:\n{diff}");
    assert_eq!(bridge_v4(&lab), [format!("inet {old} scope global")]);
    assert_eq!(lab.reservations(), Vec::<String>::new());

    let result = direct(&lab, "ADD", &a, &plugin(true))
        .run()
        .expect_result("ADD with forceAddress");
    assert_eq!(
        bridge_v4(&lab),
        [format!("inet {}/24 scope global", lab.gateway())],
        "forceAddress must replace {old} with the gateway"
    );
    assert_eq!(result_ips(&result)[0].1, lab.gateway());
    assert!(
        ping_until(&lab.netns, &lab.gateway(), Duration::from_secs(3)),
        "no reply from the gateway"
    );
    let mut del = plugin(true);
    del["prevResult"] = result;
    direct(&lab, "DEL", &a, &del)
        .run()
        .expect_silent_success("DEL");
    assert_clean(&lab, &[&lab.netns]);
}

/// The common stale case: the old address is in the gateway's own subnet (a gateway
/// moved from .254 to .1). Like the reference, forceAddress must leave exactly the new
/// gateway on the bridge, and the container must reach it.
#[test]
fn force_address_in_the_same_subnet_keeps_the_gateway() {
    let lab = Lab::new("dforce24");
    let old = format!("{}/24", lab.ip(254));
    precreate_bridge(&lab, &old);
    let config = standalone(
        &lab,
        "1.0.0",
        &academy(
            &lab,
            json!({
                "isDefaultGateway": true,
                "forceAddress": true,
                "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
            }),
        ),
    );
    let a = lab.attach();
    let out = direct(&lab, "ADD", &a, &config).run();
    out.expect_result("ADD with forceAddress");
    let bridge = bridge_v4(&lab);
    let reachable = ping_until(&lab.netns, &lab.gateway(), Duration::from_secs(2));
    direct(&lab, "DEL", &a, &config)
        .run()
        .expect_silent_success("DEL");
    assert_eq!(
        bridge,
        [format!("inet {}/24 scope global", lab.gateway())],
        "forceAddress must replace {old} with the gateway {}/24",
        lab.gateway()
    );
    assert!(reachable, "the container cannot reach its gateway");
}

#[test]
fn hairpin_and_promisc_modes() {
    let lab = Lab::new("dhairpin");
    let conf = |extra: Value| {
        let mut p = academy(
            &lab,
            json!({ "isGateway": true, "ipam": host_local(&lab, json!({ "subnet": lab.subnet() })) }),
        );
        merge(&mut p, extra);
        p
    };
    let hairpin_of =
        |veth: &str| read_trimmed(&format!("/sys/class/net/{veth}/brport/hairpin_mode"));

    write_list(&lab, vec![conf(json!({ "hairpinMode": true }))]);
    let first = lab.netns.clone();
    let result = tool_add(&lab, &first, &[]);
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        hairpin_of(&veth),
        "1",
        "hairpinMode true: {veth} has no hairpin"
    );
    assert!(
        !has_flag(&link(None, &lab.bridge), "PROMISC"),
        "the bridge is promiscuous without promiscMode"
    );
    tool_quiet(&lab, "del", &first, &[]);

    write_list(&lab, vec![conf(json!({ "promiscMode": true }))]);
    let second = lab.add_netns("promisc");
    let result = tool_add(&lab, &second, &[]);
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        has_flag(&link(None, &lab.bridge), "PROMISC"),
        "promiscMode true: bridge {} is not PROMISC",
        lab.bridge
    );
    assert_eq!(hairpin_of(&veth), "0", "hairpin on without hairpinMode");
    tool_quiet(&lab, "del", &second, &[]);

    // Both at once: the reference refuses it too.
    let both = standalone(
        &lab,
        "1.0.0",
        &conf(json!({ "hairpinMode": true, "promiscMode": true })),
    );
    assert_cni_error(
        &direct(&lab, "ADD", &lab.attach(), &both).run(),
        7,
        &["hairpinMode", "promiscMode"],
    );
    assert_clean(&lab, &[&first, &second]);
}

// ---------------------------------------------------------------------------------------
// Delegated IPAM
// ---------------------------------------------------------------------------------------

fn static_ipam(lab: &Lab) -> Value {
    json!({
        "type": "static",
        "addresses": [{ "address": format!("{}/24", lab.ip(50)), "gateway": lab.gateway() }],
        "routes": [{ "dst": "0.0.0.0/0" }]
    })
}

fn supported_versions(program: &str) -> Vec<String> {
    let out = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .stdin(r#"{"cniVersion":"1.0.0"}"#)
        .spawn(program, &[]);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    v["supportedVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// Debian's real `static` plugin (CNI up to 1.0.0) through cnitool: ADD, CHECK, DEL.
#[test]
fn delegated_ipam_static_plugin() {
    let lab = Lab::new("dstatic");
    write_list(
        &lab,
        vec![academy(
            &lab,
            json!({ "isGateway": true, "ipam": static_ipam(&lab) }),
        )],
    );
    let ns = lab.netns.clone();
    let result = tool_add(&lab, &ns, &[]);
    assert_eq!(
        result_ips(&result),
        [(format!("{}/24", lab.ip(50)), lab.gateway())]
    );
    assert_eq!(
        addresses(Some(&ns), "eth0"),
        [format!("inet {}/24 scope global", lab.ip(50))]
    );
    assert_eq!(
        default_route(&ns, false),
        Some(format!("via {} dev eth0", lab.gateway()))
    );
    assert!(
        ping_until(&ns, &lab.gateway(), Duration::from_secs(3)),
        "no reply from the gateway"
    );
    tool_quiet(&lab, "check", &ns, &[]);
    tool_quiet(&lab, "del", &ns, &[]);
    assert_clean(&lab, &[&ns]);
    assert!(
        !lab.data_dir.join(&lab.network).exists(),
        "delegated IPAM must not touch academy's own store"
    );
    tool_quiet(&lab, "del", &ns, &[]);

    // GC and STATUS need cniVersion 1.1.0. Debian's static (1.1.1) stops at 1.0.0,
    // so academy must pass on static's refusal, not swallow it; the forwarding of
    // both verbs is proved with a wrapper in delegated_ipam_gets_all_five_verbs.
    let static_bin = format!("{}/static", debian_plugins());
    let v11 = standalone(
        &lab,
        "1.1.0",
        &academy(
            &lab,
            json!({ "isGateway": true, "ipam": static_ipam(&lab) }),
        ),
    );
    let status = Call::bare()
        .env("CNI_COMMAND", "STATUS")
        .env("CNI_PATH", &cni_path(&lab))
        .config(&v11)
        .run();
    if supported_versions(&static_bin).iter().any(|v| v == "1.1.0") {
        status.expect_silent_success("STATUS with static");
    } else {
        eprintln!("note: {static_bin} does not support cniVersion 1.1.0; STATUS must fail");
        assert_eq!(status.code, 1, "STATUS hid static's refusal:\n{status}");
        assert!(
            status.stdout.contains("static") && status.stdout.contains("STATUS"),
            "STATUS error does not name the IPAM plugin and verb:\n{status}"
        );
    }

    // An IPAM plugin that is not on CNI_PATH: a clear error, nothing left.
    let before = lab.snapshot();
    let mut missing = v11.clone();
    missing["ipam"] = json!({ "type": "no-such-ipam" });
    let out = direct(&lab, "ADD", &lab.attach(), &missing).run();
    assert_cni_error(&out, 7, &["no-such-ipam"]);
    let diff = lab.snapshot().diff(&before);
    assert!(diff.is_empty(), "the failed ADD left:\n{diff}");
}

/// A logging wrapper around `static` as the IPAM plugin, at cniVersion 1.1.0: every verb
/// academy gets (ADD, CHECK, GC, STATUS, DEL) reaches it with the same environment and
/// config, and its errors come back with their code.
#[test]
fn delegated_ipam_gets_all_five_verbs() {
    let lab = Lab::new("dfive");
    let log = lab.root.join("ipam.log");
    let down = lab.root.join("ipam.down");
    let static_bin = format!("{}/static", debian_plugins());
    lab.install_script(
        "logipam",
        &format!(
            r#"#!/bin/sh
in=$(cat)
valid=$(printf '%s' "$in" | jq -c '."cni.dev/valid-attachments"')
type=$(printf '%s' "$in" | jq -r '.ipam.type')
printf '%s cid=%s ifname=%s netns=%s type=%s valid=%s\n' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_IFNAME" "$CNI_NETNS" "$type" "$valid" >> {log}
case "$CNI_COMMAND" in
GC|STATUS)
    if [ -e {down} ]; then
        printf '{{"cniVersion":"1.1.0","code":50,"msg":"logipam is down","details":"test"}}'
        exit 1
    fi
    exit 0 ;;
esac
# Debian's static speaks CNI up to 1.0.0: the same config (and prevResult) in that
# version.
printf '%s' "$in" | jq -c '.cniVersion = "1.0.0" | if .prevResult then .prevResult.cniVersion = "1.0.0" else . end' | exec {static_bin}
"#,
            log = log.display(),
            down = down.display(),
        ),
    );
    let mut ipam = static_ipam(&lab);
    ipam["type"] = json!("logipam");
    let config = standalone(
        &lab,
        "1.1.0",
        &academy(&lab, json!({ "isGateway": true, "ipam": ipam })),
    );
    let a = lab.attach();
    let result = direct(&lab, "ADD", &a, &config).run().expect_result("ADD");
    assert_eq!(
        result_ips(&result),
        [(format!("{}/24", lab.ip(50)), lab.gateway())]
    );
    let mut with_prev = config.clone();
    with_prev["prevResult"] = result;
    direct(&lab, "CHECK", &a, &with_prev)
        .run()
        .expect_silent_success("CHECK");
    let mut gc = config.clone();
    gc["cni.dev/valid-attachments"] = json!([{ "containerID": a.cid, "ifname": "eth0" }]);
    // GC and STATUS as libcni sends them: only CNI_COMMAND and CNI_PATH.
    let bare = |cmd: &str, c: &Value| {
        Call::bare()
            .env("CNI_COMMAND", cmd)
            .env("CNI_PATH", &cni_path(&lab))
            .config(c)
            .run()
    };
    bare("GC", &gc).expect_silent_success("GC");
    assert_eq!(lab.lab_veths().len(), 1, "GC removed a valid attachment");
    bare("STATUS", &config).expect_silent_success("STATUS");
    std::fs::write(&down, "").unwrap();
    assert_cni_error(&bare("STATUS", &config), 50, &["logipam is down"]);
    assert_cni_error(&bare("GC", &gc), 50, &["logipam is down"]);
    std::fs::remove_file(&down).unwrap();
    direct(&lab, "DEL", &a, &with_prev)
        .run()
        .expect_silent_success("DEL");
    direct(&lab, "DEL", &a, &with_prev)
        .run()
        .expect_silent_success("second DEL");
    assert_clean(&lab, &[&lab.netns]);

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let verbs: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        verbs,
        ["ADD", "CHECK", "GC", "STATUS", "STATUS", "GC", "DEL", "DEL"],
        "the IPAM plugin's log:\n{text}"
    );
    let attachment = format!("cid={} ifname=eth0 netns={}", a.cid, a.netns_path());
    for (i, l) in lines.iter().enumerate() {
        assert!(l.contains("type=logipam"), "line {i} lost the config: {l}");
        if ["ADD", "CHECK", "DEL"].contains(&verbs[i]) {
            assert!(l.contains(&attachment), "line {i} lost the attachment: {l}");
        }
        if verbs[i] == "GC" {
            assert!(
                l.contains(&format!(r#""containerID":"{}""#, a.cid)),
                "GC did not forward the valid attachments: {l}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Chaining
// ---------------------------------------------------------------------------------------

fn nat_rules() -> String {
    run("iptables-save", &["-t", "nat"], &[]).stdout
}

/// Removes portmap's rules for one container when the test ends, also on panic: the
/// Lab guard knows nothing of iptables. portmap's DEL is idempotent.
struct PortmapGuard {
    config: Value,
    cid: String,
}

impl Drop for PortmapGuard {
    fn drop(&mut self) {
        let _ = Call::bare()
            .env("CNI_COMMAND", "DEL")
            .env("CNI_CONTAINERID", &self.cid)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_NETNS", "/var/run/netns/none")
            .env("CNI_PATH", REFERENCE_BIN)
            .config(&self.config)
            .spawn(&format!("{REFERENCE_BIN}/portmap"), &[]);
    }
}

/// academy first, then the reference portmap and tuning, each behind a wrapper that
/// logs the verb and the addresses of the prevResult it got.
#[test]
fn chained_with_portmap_and_tuning() {
    which("iptables"); // portmap's backend; `make setup` installs it
    let lab = Lab::new("dchain");
    let log = lab.root.join("chain.log");
    // portmap 1.1.1's CHECK also looks for its ip6tables chain when the container has
    // no IPv6 address, and fails (containernetworking/plugins#819, fixed later). Its
    // wrapper lets exactly that failure pass: the IPv4 chain was checked before it, and
    // academy's CHECK, which runs first, is what this test is about.
    let tolerate_819 = r#"if [ "$CNI_COMMAND" = CHECK ]; then
    out=$(printf '%s' "$in" | REAL 2>&1) && exit 0
    rc=$?
    case "$out" in *"could not check ipv6 dnat"*) exit 0 ;; esac
    printf '%s' "$out"
    exit $rc
fi
"#;
    for (name, real, extra) in [
        (
            "chain-academy",
            lab.bin_dir.join("academy").display().to_string(),
            "",
        ),
        (
            "chain-portmap",
            format!("{REFERENCE_BIN}/portmap"),
            tolerate_819,
        ),
        ("chain-tuning", format!("{}/tuning", debian_plugins()), ""),
    ] {
        lab.install_script(
            name,
            &format!(
                r#"#!/bin/sh
in=$(cat)
prev=$(printf '%s' "$in" | jq -c '[.prevResult.ips[]?.address]')
printf '%s {name} %s\n' "$CNI_COMMAND" "$prev" >> {log}
{extra}printf '%s' "$in" | exec {real}
"#,
                log = log.display(),
                extra = extra.replace("REAL", &real),
            ),
        );
    }
    let tuned_mac = lab_mac(&lab, 9);
    let mut first = academy(
        &lab,
        json!({
            "isDefaultGateway": true,
            "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
        }),
    );
    first["type"] = json!("chain-academy");
    write_list(
        &lab,
        vec![
            first,
            json!({ "type": "chain-portmap", "capabilities": { "portMappings": true } }),
            json!({
                "type": "chain-tuning",
                "mac": tuned_mac,
                "mtu": 1300,
                "sysctl": { "net.ipv4.conf.eth0.arp_filter": "1" }
            }),
        ],
    );
    let port = (47000 + u32::from(lab.slot.n)).to_string();
    let cap = json!({
        "portMappings": [{ "hostPort": port.parse::<u32>().unwrap(), "containerPort": 80, "protocol": "tcp" }]
    })
    .to_string();
    let env = [("CAP_ARGS", cap.as_str())];
    let ns = lab.netns.clone();
    let _portmap = PortmapGuard {
        config: json!({
            "cniVersion": "1.0.0",
            "name": lab.network,
            "type": "portmap",
            "runtimeConfig": serde_json::from_str::<Value>(&cap).unwrap()
        }),
        cid: cnitool_container_id(&netns_path(&ns)),
    };
    // This run's rules: the DNAT to the lab's address, the jump commented with the
    // lab's network name.
    let ours = |nat: &str| -> Vec<String> {
        nat.lines()
            .filter(|l| {
                l.contains(&format!("--to-destination {}:80", lab.ip(2)))
                    || l.contains(&format!("dnat name: \\\"{}\\\"", lab.network))
            })
            .map(str::to_string)
            .collect()
    };

    let result = tool_add(&lab, &ns, &env);
    let addr = lab.ip(2);
    assert_eq!(result_ips(&result), [(format!("{addr}/24"), lab.gateway())]);
    let names: Vec<&str> = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names.len(), 3, "academy's interfaces: {result:#}");
    assert_eq!((names[0], names[2]), (lab.bridge.as_str(), "eth0"));
    assert_eq!(
        result["interfaces"][2]["mac"],
        tuned_mac.as_str(),
        "tuning's MAC is not in the final result"
    );
    let eth0 = link(Some(&ns), "eth0");
    assert_eq!(eth0["address"], tuned_mac.as_str());
    assert_eq!(eth0["mtu"], 1300);
    let arp_filter = run(
        "ip",
        &[
            "netns",
            "exec",
            &ns,
            "cat",
            "/proc/sys/net/ipv4/conf/eth0/arp_filter",
        ],
        &[],
    );
    assert_eq!(
        arp_filter.stdout.trim(),
        "1",
        "tuning's sysctl: {arp_filter}"
    );
    let nat = nat_rules();
    let rules = ours(&nat);
    assert!(
        rules.len() == 2 && rules.iter().all(|l| l.contains(port.as_str())),
        "portmap's DNAT for {port} -> {addr}:80 is missing:\n{nat}"
    );

    // CHECK: academy's check passes although tuning changed the MAC and MTU.
    tool_quiet(&lab, "check", &ns, &env);
    tool_quiet(&lab, "del", &ns, &env);
    assert_clean(&lab, &[&ns]);
    let nat = nat_rules();
    assert_eq!(
        ours(&nat),
        Vec::<String>::new(),
        "portmap's rules are left after DEL:\n{nat}"
    );
    tool_quiet(&lab, "del", &ns, &env);

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let ip_list = format!(r#"["{addr}/24"]"#);
    let want: Vec<String> = [
        ("ADD", "chain-academy", "[]"),
        ("ADD", "chain-portmap", ip_list.as_str()),
        ("ADD", "chain-tuning", ip_list.as_str()),
        ("CHECK", "chain-academy", ip_list.as_str()),
        ("CHECK", "chain-portmap", ip_list.as_str()),
        ("CHECK", "chain-tuning", ip_list.as_str()),
        ("DEL", "chain-tuning", ip_list.as_str()),
        ("DEL", "chain-portmap", ip_list.as_str()),
        ("DEL", "chain-academy", ip_list.as_str()),
        // The second DEL: cnitool's cache is gone, so no prevResult.
        ("DEL", "chain-tuning", "[]"),
        ("DEL", "chain-portmap", "[]"),
        ("DEL", "chain-academy", "[]"),
    ]
    .iter()
    .map(|(v, p, prev)| format!("{v} {p} {prev}"))
    .collect();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got, want, "the chain's log (verb, plugin, prevResult ips)");
}
