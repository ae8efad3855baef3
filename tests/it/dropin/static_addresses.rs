//! Static addresses and MAC, asked for through runtimeConfig, args.cni and CNI_ARGS,
//! and the clean refusal (111) when another container holds the address.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::{json, Value};

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
