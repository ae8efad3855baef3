//! The same network as the reference: one config run under `type: bridge` (with
//! host-local) and under `type: academy`, the container's and the bridge's state compared
//! fact by fact.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use super::*;
use crate::common::*;
use serde_json::{json, Value};

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
    let reference_bridge = ReferenceBridge::new(lab.slot.link_name("acr"));
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
