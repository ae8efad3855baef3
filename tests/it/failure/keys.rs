//! Failure atomicity of the requests the reference's newer keys add to ADD (issue 20):
//! routes with every attribute (their own table, metric, scope, RTAX_MTU/RTAX_ADVMSS
//! metrics), and the address dumps with which `enabledad` waits for duplicate address
//! detection. Each netlink request refused or killed in turn, as netlink.rs does for
//! the plain ADD: a refused ADD leaves nothing, a killed one is undone by DEL or GC.

use serde_json::{json, Value};

use super::netlink::{killed_at_every_point, netlink_fault, refused_at_every_point};
use super::{expect_clean, warm_up};
use crate::common::*;

/// The lab in the reference's ipam form, its routes using every attribute.
fn lab_with_route_attributes(tag: &str) -> Lab {
    let lab = Lab::new(tag);
    for key in ["subnet", "gateway", "dataDir"] {
        lab.always_config(key, Value::Null);
    }
    lab.always_config("isGateway", json!(true));
    lab.always_config(
        "ipam",
        json!({
            "type": "host-local",
            "subnet": lab.subnet(),
            "dataDir": lab.data_dir,
            "routes": [
                {"dst": "0.0.0.0/0", "priority": 100},
                {"dst": "198.51.100.0/24", "priority": 50, "mtu": 1400, "advmss": 1360},
                {"dst": "203.0.113.0/24", "table": 100},
                {"dst": "192.0.2.0/24", "scope": 200},
            ],
        }),
    );
    lab
}

#[test]
fn refused_netlink_request_at_every_point_of_an_add_with_route_attributes_is_undone() {
    refused_at_every_point(lab_with_route_attributes("nlrefrt"));
}

#[test]
fn kill_at_every_netlink_request_of_an_add_with_route_attributes_is_recovered() {
    killed_at_every_point(lab_with_route_attributes("nlkillrt"));
}

/// With enabledad, ADD polls the container's addresses until DAD ends, so how many
/// requests it makes depends on timing: the requests up to the first poll are the same
/// every run, and the first poll is refused, then killed.
#[test]
fn enabledad_wait_refused_or_killed_is_undone() {
    let lab = Lab::new("nldad");
    for key in ["subnet", "gateway", "dataDir"] {
        lab.always_config(key, Value::Null);
    }
    lab.always_config("enabledad", json!(true));
    lab.always_config(
        "ipam",
        json!({
            "type": "host-local",
            "ranges": [[{"subnet": lab.subnet()}],
                       [{"subnet": format!("{}::/64", lab.slot.v6_prefix())}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            "dataDir": lab.data_dir,
        }),
    );
    let shim = build_shim(&lab);
    warm_up(&lab);
    let file = lab.root.join("clean-dad.trace");
    let (out, text) = run_strace(&lab.call("ADD"), &file, "sendto", None);
    out.expect_result("clean ADD with enabledad under strace");
    lab.call("DEL").run().expect_silent_success("DEL");
    let requests: Vec<Syscall> = parse_trace(&text)
        .into_iter()
        .filter(|c| c.line.contains("NETLINK"))
        .collect();
    let last_address = requests
        .iter()
        .rposition(|c| c.nlmsg_type() == "RTM_NEWADDR")
        .unwrap_or_else(|| panic!("no RTM_NEWADDR:\n{text}"));
    let first_poll = last_address + 1;
    assert_eq!(
        requests.get(first_poll).map(Syscall::nlmsg_type).as_deref(),
        Some("RTM_GETADDR"),
        "the request after the container's addresses is not DAD's first poll:\n{text}"
    );
    let k = first_poll + 1;
    let base = settled_snapshot(&lab);

    let mut p = Vec::new();
    let (out, via) = netlink_fault(&lab, &shim, &requests, k, false, &mut p);
    if let Err(e) = check_cni_error(&out, 100, &["kernel refused", "Operation not permitted"]) {
        p.push(format!("{e}:\n{out}"));
    }
    expect_clean(&lab, &base, "after the refused poll", false, &mut p);

    let (out, _) = netlink_fault(&lab, &shim, &requests, k, true, &mut p);
    if !out.stdout.trim().is_empty() {
        p.push(format!("a killed ADD printed a result:\n{out}"));
    }
    lab.call("DEL")
        .run()
        .expect_silent_success("DEL after the kill");
    expect_clean(&lab, &base, "after the kill and DEL", true, &mut p);
    assert!(
        p.is_empty(),
        "request {k} faulted via {via}:\n{}",
        p.join("\n\n")
    );
}
