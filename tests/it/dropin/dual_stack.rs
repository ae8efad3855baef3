//! Dual stack and IPv6-only networks: both families' addresses, default routes and
//! gateways, reachable from the container.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::json;

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
    // The host veth is a bridge port without IPv6 of its own (src/wire/quiet.rs): no
    // link-local address, no route of the node's through it, while the container's IPv6
    // crosses it (the ping above). Turned off too late, the port would have both.
    let host = result["interfaces"][1]["name"].as_str().unwrap();
    let off = std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{host}/disable_ipv6"));
    assert_eq!(off.unwrap().trim(), "1", "IPv6 on host veth {host}");
    let v6 = ip(&["-6", "-o", "addr", "show", "dev", host]);
    assert!(v6.trim().is_empty(), "host veth {host} has IPv6: {v6}");
    let routes = ip(&["-6", "route", "show", "table", "all", "dev", host]);
    assert!(routes.trim().is_empty(), "routes through {host}: {routes}");
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
