//! Routes with every attribute of CNI 1.1 (`priority`, `table`, `scope`, `mtu`,
//! `advmss`) in `ipam.routes`: applied to the container's routes as the spec means them
//! (the metric, the routing table, the route scope, the RTAX_MTU and RTAX_ADVMSS
//! metrics), reported in the result, compared by CHECK, gone with DEL; and what cannot
//! be applied refused with code 2 before anything is made. The reference 1.1.1 predates
//! these keys (it drops them silently), so the expected kernel routes are written here
//! from the spec's meaning, as `ip route` shows them.

use serde_json::{json, Value};

use crate::common::*;

fn v6(lab: &Lab) -> String {
    lab.slot.v6_prefix()
}

/// A dual-stack host-local network of `version` with `routes`.
fn config(lab: &Lab, version: &str, routes: Value) -> Value {
    json!({
        "cniVersion": version,
        "name": lab.network,
        "type": "academy",
        "bridge": lab.bridge,
        "isGateway": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": lab.subnet()}], [{"subnet": format!("{}::/64", v6(lab))}]],
            "routes": routes,
            "dataDir": lab.data_dir,
        }
    })
}

fn every_attribute(lab: &Lab) -> Value {
    json!([
        {"dst": "0.0.0.0/0", "priority": 100},
        {"dst": "198.51.100.0/24", "priority": 50, "mtu": 1400, "advmss": 1360},
        {"dst": "203.0.113.0/24", "table": 100, "priority": 7},
        {"dst": "192.0.2.0/24", "scope": 200},
        {"dst": format!("{}:ffff::/64", v6(lab)), "table": 101, "priority": 9, "mtu": 1280},
    ])
}

fn call(lab: &Lab, command: &str, config: &Value) -> Call {
    lab.call(command).config(config)
}

/// The container's routes through eth0, as `ip -d -j route show table all` lists them.
fn eth0_routes(lab: &Lab) -> Vec<String> {
    routes_via(&lab.netns, "eth0")
}

#[test]
fn every_route_attribute_is_applied_reported_and_checked() {
    let lab = Lab::new("rtall");
    let conf = config(&lab, "1.1.0", every_attribute(&lab));
    let result = call(&lab, "ADD", &conf).run().expect_result("ADD");
    let (gw, gw6) = (lab.gateway(), format!("{}::1", v6(&lab)));
    let routes = eth0_routes(&lab);
    let metrics = |m: Value| format!("metrics {m}");
    for want in [
        format!("default table main gateway {gw} dev eth0 protocol boot scope global metric 100"),
        format!(
            "198.51.100.0/24 table main gateway {gw} dev eth0 protocol boot scope global metric 50 {}",
            metrics(json!([{"mtu": 1400, "advmss": 1360}]))
        ),
        format!("203.0.113.0/24 table 100 gateway {gw} dev eth0 protocol boot scope global metric 7"),
        format!("192.0.2.0/24 table main gateway {gw} dev eth0 protocol boot scope site"),
        format!(
            "{}:ffff::/64 table 101 gateway {gw6} dev eth0 protocol boot scope global metric 9 {}",
            v6(&lab),
            metrics(json!([{"mtu": 1280}]))
        ),
    ] {
        assert!(
            routes.contains(&want),
            "missing route:\n  {want}\nthe container has:\n  {}",
            routes.join("\n  ")
        );
    }
    // The result says what was applied, each route with its gateway filled in.
    let reported: Vec<Value> = result["routes"].as_array().unwrap().clone();
    assert_eq!(
        reported[1],
        json!({"dst": "198.51.100.0/24", "gw": gw, "priority": 50, "mtu": 1400, "advmss": 1360})
    );
    assert_eq!(
        reported[2],
        json!({"dst": "203.0.113.0/24", "gw": gw, "priority": 7, "table": 100})
    );
    assert_eq!(reported[3]["scope"], 200);

    let mut check = conf.clone();
    check["prevResult"] = result.clone();
    call(&lab, "CHECK", &check)
        .run()
        .expect_silent_success("CHECK as ADD left it");
    let mut stripped = check.clone();
    for r in stripped["prevResult"]["routes"].as_array_mut().unwrap() {
        r.as_object_mut()
            .unwrap()
            .retain(|k, _| k == "dst" || k == "gw");
    }
    call(&lab, "CHECK", &stripped)
        .run()
        .expect_silent_success("CHECK with a prevResult of dst and gw only");

    // Each attribute is compared: the route put back without its mtu, the table's route
    // gone.
    let ns = lab.netns.clone();
    ip(&["-n", &ns, "route", "del", "198.51.100.0/24"]);
    ip(&[
        "-n",
        &ns,
        "route",
        "add",
        "198.51.100.0/24",
        "via",
        &gw,
        "metric",
        "50",
        "advmss",
        "1360",
    ]);
    ip(&["-n", &ns, "route", "del", "203.0.113.0/24", "table", "100"]);
    // With a prevResult of dst and gw only, the config's attributes are compared.
    for prev in [&check, &stripped] {
        let out = call(&lab, "CHECK", prev).run();
        assert_cni_error(
            &out,
            120,
            &[
                "route 198.51.100.0/24 via",
                "mtu 1400",
                "route 203.0.113.0/24 via",
                "table 100",
            ],
        );
    }

    call(&lab, "DEL", &conf).run().expect_silent_success("DEL");
    assert_eq!(
        netns_routes(&ns),
        Vec::<String>::new(),
        "routes left after DEL"
    );
    assert_eq!(lab.reservations(), Vec::<String>::new());
}

/// A 1.0.0 conflist through cnitool: priority, table and scope are 1.x result keys, so
/// they apply there too. cnitool (libcni 1.1, as podman 4 and containerd 1.7) re-encodes
/// the result with routes of dst and gw only, so its CHECK's prevResult has lost them:
/// CHECK takes them from the config and still finds the route in its table.
#[test]
fn priority_table_and_scope_through_cnitool_1_0_0() {
    let lab = Lab::new("rt100");
    let mut plugin = config(
        &lab,
        "1.0.0",
        json!([{"dst": "203.0.113.0/24", "table": 102, "priority": 3, "scope": 0}]),
    );
    plugin.as_object_mut().unwrap().remove("cniVersion");
    plugin.as_object_mut().unwrap().remove("name");
    let list = json!({"cniVersion": "1.0.0", "name": lab.network, "plugins": [plugin]});
    std::fs::write(lab.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
    let result = lab
        .cnitool("add", &lab.netns, &[])
        .expect_result("cnitool add");
    assert_eq!(
        result["routes"][0],
        json!({"dst": "203.0.113.0/24", "gw": lab.gateway()}),
        "libcni 1.1 dropped the attributes (if it keeps them now, CHECK compares those)"
    );
    let want = format!(
        "203.0.113.0/24 table 102 gateway {} dev eth0 protocol boot scope global metric 3",
        lab.gateway()
    );
    assert!(
        eth0_routes(&lab).contains(&want),
        "{:#?}",
        eth0_routes(&lab)
    );
    lab.cnitool("check", &lab.netns, &[])
        .expect_silent_success("cnitool check");
    lab.cnitool("del", &lab.netns, &[])
        .expect_silent_success("cnitool del");
    assert_eq!(netns_link_names(&lab.netns), ["lo"]);
}

/// What academy cannot apply is refused with code 2 naming it, and nothing is made.
#[test]
fn route_attributes_that_cannot_be_applied_are_refused() {
    let lab = Lab::new("rtrefuse");
    let before = lab.snapshot();
    let v6_dst = format!("{}:ffff::/64", v6(&lab));
    for (version, route, needles) in [
        (
            "1.1.0",
            json!({"dst": "198.51.100.0/24", "metric": 5}),
            &["ipam.routes[0].metric"][..],
        ),
        (
            "1.1.0",
            json!({"dst": "198.51.100.0/24", "onlink": true}),
            &["onlink"],
        ),
        (
            "1.0.0",
            json!({"dst": "198.51.100.0/24", "mtu": 1400}),
            &["mtu", "1.1.0"],
        ),
        (
            "1.0.0",
            json!({"dst": "198.51.100.0/24", "advmss": 1360}),
            &["advmss", "1.1.0"],
        ),
        (
            "0.4.0",
            json!({"dst": "198.51.100.0/24", "table": 100}),
            &["table", "1.0.0"],
        ),
        (
            "1.1.0",
            json!({"dst": v6_dst, "scope": 253}),
            &["scope", "IPv6"],
        ),
    ] {
        let conf = config(&lab, version, json!([route]));
        let out = call(&lab, "ADD", &conf).run();
        assert_cni_error(&out, 2, needles);
        let diff = lab.snapshot().diff(&before);
        assert!(diff.is_empty(), "refusing {route} left:\n{diff}");
    }
}

/// GC of an attachment it does not list: the veth goes, and with it every route of the
/// container, in every table.
#[test]
fn gc_leaves_no_route_in_any_table() {
    let lab = Lab::new("rtgc");
    let conf = config(&lab, "1.1.0", every_attribute(&lab));
    call(&lab, "ADD", &conf).run().expect_result("ADD");
    assert!(eth0_routes(&lab).iter().any(|r| r.contains("table 101")));
    gc_call(&lab, conf, &[])
        .run()
        .expect_silent_success("GC with an empty valid list");
    assert_eq!(netns_routes(&lab.netns), Vec::<String>::new());
    assert_eq!(netns_link_names(&lab.netns), ["lo"]);
    assert_eq!(lab.reservations(), Vec::<String>::new());
    assert_eq!(lab.lab_veths(), Vec::<String>::new());
}
