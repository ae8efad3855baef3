//! A container on several networks, through cnitool: two academy networks, and academy
//! beside the reference bridge plugin (Debian's 1.1.1), in one netns.
//!
//! What the reference does, measured here: it adds each route with NLM_F_CREATE and
//! without NLM_F_EXCL (RouteAddEcmp), so the second network's default route goes beside
//! the first one's. IPv4 then holds two default routes, the newer first (it is the one
//! used); IPv6 joins both into one multipath route. academy must leave the same kernel
//! state, CHECK of each network must pass, and DEL of one network must leave the other
//! as it would be alone.
//!
//! Each network is a lab of its own (bridge, subnets, store); the reference runs use a
//! second bridge per lab that [`ReferenceBridge`] deletes. Pings go only from the lab's
//! netns to the labs' own gateways.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

fn v6_subnet(lab: &Lab) -> String {
    format!("{}::/64", lab.slot.v6_prefix())
}

fn v6_gateway(lab: &Lab) -> String {
    format!("{}::1", lab.slot.v6_prefix())
}

/// The bridge plugin of a dual-stack `podman network create --ipv6` network (routes of
/// both families from IPAM, the gateway on the bridge), of type `kind` on `bridge`. The
/// container's addresses are fixed (`args.cni.ips`, one attachment at a time), so that
/// states taken in different runs compare equal.
fn network(lab: &Lab, kind: &str, bridge: &str, data: &Path) -> Value {
    json!({
        "type": kind,
        "bridge": bridge,
        "isGateway": true,
        "hairpinMode": true,
        "args": {"cni": {"ips": [lab.ip(5), format!("{}::5", lab.slot.v6_prefix())]}},
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": lab.subnet(), "gateway": lab.gateway()}],
                       [{"subnet": v6_subnet(lab), "gateway": v6_gateway(lab)}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            "dataDir": data,
        }
    })
}

/// Writes the lab's only conflist (cniVersion 1.0.0, the newest cnitool speaks).
fn install(lab: &Lab, plugin: Value) {
    let list = json!({"cniVersion": "1.0.0", "name": lab.network, "plugins": [plugin]});
    std::fs::write(lab.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
}

fn academy_network(lab: &Lab) {
    install(lab, network(lab, "academy", &lab.bridge, &lab.data_dir));
}

/// The reference on a bridge of its own, with a store of its own.
fn reference_network(lab: &Lab) -> ReferenceBridge {
    let bridge = ReferenceBridge::new(lab.slot.link_name("acr"));
    install(
        lab,
        network(lab, "bridge", &bridge.name, &lab.root.join("ref-data")),
    );
    bridge
}

/// `cnitool VERB` of the lab's network for `ifname` in `netns`; academy and the
/// reference plugins on CNI_PATH.
fn tool(lab: &Lab, verb: &str, netns: &str, ifname: &str) -> Out {
    let path = format!("{}:{REFERENCE_BIN}", lab.bin_dir.display());
    lab.cnitool(verb, netns, &[("CNI_IFNAME", ifname), ("CNI_PATH", &path)])
}

fn add(lab: &Lab, netns: &str, ifname: &str) -> Value {
    tool(lab, "add", netns, ifname).expect_result(&format!("ADD of {} on {ifname}", lab.network))
}

fn quiet(lab: &Lab, verb: &str, netns: &str, ifname: &str) {
    tool(lab, verb, netns, ifname)
        .expect_silent_success(&format!("{verb} of {} on {ifname}", lab.network));
}

/// The netns as compared: routes, then interfaces.
fn state(netns: &str) -> Vec<String> {
    let mut s = netns_routes(netns);
    s.extend(netns_interfaces(netns));
    s
}

/// The default routes of the netns, in the kernel's order.
fn defaults(netns: &str) -> Vec<String> {
    netns_routes(netns)
        .into_iter()
        .filter(|r| r.starts_with("default "))
        .collect()
}

fn route_dsts(result: &Value) -> Vec<String> {
    result["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["dst"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn two_academy_networks_in_one_container() {
    let (a, b) = (Lab::new("mn2a"), Lab::new("mn2b"));
    academy_network(&a);
    academy_network(&b);
    let ns = a.netns.clone();
    // What each network alone leaves, to compare with after the other's DEL.
    let b_alone_ns = a.add_netns("balone");
    add(&b, &b_alone_ns, "eth1");
    let b_alone = state(&b_alone_ns);
    quiet(&b, "del", &b_alone_ns, "eth1");

    let ra = add(&a, &ns, "eth0");
    let a_alone = state(&ns);
    let rb = add(&b, &ns, "eth1");
    for r in [&ra, &rb] {
        assert_eq!(route_dsts(r), ["0.0.0.0/0", "::/0"], "{r}");
    }
    let d = defaults(&ns);
    assert_eq!(d.len(), 3, "two IPv4 default routes and one IPv6: {d:#?}");
    assert!(
        d[0].contains(&format!("gateway {} dev eth1", b.gateway()))
            && d[1].contains(&format!("gateway {} dev eth0", a.gateway())),
        "IPv4: the second network's default first, the first's kept: {d:#?}"
    );
    assert!(
        d[2].contains(&format!("nexthop via {} dev eth0", v6_gateway(&a)))
            && d[2].contains(&format!("nexthop via {} dev eth1", v6_gateway(&b))),
        "IPv6: one multipath default route through both: {d:#?}"
    );
    quiet(&a, "check", &ns, "eth0");
    quiet(&b, "check", &ns, "eth1");
    for gw in [a.gateway(), b.gateway()] {
        assert!(ping_from(&ns, &gw, 1), "no answer from gateway {gw}");
    }

    // DEL of one network leaves the other as it is alone, and its CHECK passing.
    quiet(&b, "del", &ns, "eth1");
    assert_eq!(state(&ns), a_alone, "after DEL of the second network");
    quiet(&a, "check", &ns, "eth0");
    add(&b, &ns, "eth1");
    quiet(&a, "del", &ns, "eth0");
    assert_eq!(state(&ns), b_alone, "after DEL of the first network");
    quiet(&b, "check", &ns, "eth1");
    quiet(&b, "del", &ns, "eth1");
    assert_eq!(netns_link_names(&ns), ["lo"]);
    for lab in [&a, &b] {
        assert_eq!(lab.reservations(), Vec::<String>::new(), "{}", lab.network);
        assert_eq!(lab.lab_veths(), Vec::<String>::new(), "{}", lab.network);
    }
}

#[test]
fn two_networks_give_the_kernel_state_the_reference_gives() {
    let (a, b) = (Lab::new("mnra"), Lab::new("mnrb"));
    let _serial = reference_lock();
    let (ref_a, ref_b) = (reference_network(&a), reference_network(&b));
    let ref_ns = a.add_netns("ref");
    let ref_results = [add(&a, &ref_ns, "eth0"), add(&b, &ref_ns, "eth1")];
    let reference = state(&ref_ns);
    quiet(&b, "del", &ref_ns, "eth1");
    let reference_after_del = state(&ref_ns);
    quiet(&a, "del", &ref_ns, "eth0");
    ref_a.remove();
    ref_b.remove();

    academy_network(&a);
    academy_network(&b);
    let ns = a.add_netns("ours");
    let results = [add(&a, &ns, "eth0"), add(&b, &ns, "eth1")];
    assert_eq!(
        state(&ns),
        reference,
        "academy's two networks differ from the reference's"
    );
    for (ours, theirs) in results.iter().zip(&ref_results) {
        assert_eq!(route_dsts(ours), route_dsts(theirs));
        assert_eq!(ours["ips"], theirs["ips"], "the same addresses");
    }
    quiet(&b, "del", &ns, "eth1");
    assert_eq!(state(&ns), reference_after_del, "after DEL of the second");
    quiet(&a, "del", &ns, "eth0");
    assert_eq!(netns_link_names(&ns), ["lo"]);
}

/// academy and the reference in one netns, in both orders: each ADD goes on beside the
/// other network's default routes, academy's CHECK passes, each DEL leaves the other.
#[test]
fn academy_beside_a_reference_network() {
    let (r, o) = (Lab::new("mnxr"), Lab::new("mnxo"));
    let _serial = reference_lock();
    let _bridge = reference_network(&r);
    academy_network(&o);
    let alone = |lab: &Lab, ifname: &str| {
        let ns = r.add_netns(&format!("alone{ifname}"));
        add(lab, &ns, ifname);
        let s = state(&ns);
        quiet(lab, "del", &ns, ifname);
        s
    };

    // The reference first: academy's is the second network.
    let ns = r.add_netns("refirst");
    add(&r, &ns, "eth0");
    let reference_alone = state(&ns);
    add(&o, &ns, "eth1");
    quiet(&o, "check", &ns, "eth1");
    assert!(ping_from(&ns, &o.gateway(), 1), "academy's gateway");
    assert!(ping_from(&ns, &r.gateway(), 1), "the reference's gateway");
    quiet(&o, "del", &ns, "eth1");
    assert_eq!(
        state(&ns),
        reference_alone,
        "academy's DEL touched the reference's network"
    );
    quiet(&r, "del", &ns, "eth0");

    // academy first: the reference's is the second network.
    let ours_alone = alone(&o, "eth0");
    let ns = r.add_netns("ourfirst");
    add(&o, &ns, "eth0");
    add(&r, &ns, "eth1");
    quiet(&o, "check", &ns, "eth0");
    quiet(&r, "del", &ns, "eth1");
    assert_eq!(
        state(&ns),
        ours_alone,
        "the reference's DEL left academy's network changed"
    );
    quiet(&o, "check", &ns, "eth0");
    quiet(&o, "del", &ns, "eth0");
    assert_eq!(netns_link_names(&ns), ["lo"]);
    assert_eq!(o.reservations(), Vec::<String>::new());
}

/// A default route another network (not a CNI one) made: academy's goes beside it, as
/// the reference's would, and its DEL leaves the other.
#[test]
fn a_foreign_default_route_stays_and_academy_adds_its_own() {
    let lab = Lab::new("mnfor");
    add_plain_link(Some(&lab.netns), "other0", "other0-peer");
    ip(&["-n", &lab.netns, "link", "set", "other0", "up"]);
    ip(&[
        "-n",
        &lab.netns,
        "addr",
        "add",
        "192.0.2.2/24",
        "dev",
        "other0",
    ]);
    ip(&[
        "-n",
        &lab.netns,
        "route",
        "add",
        "default",
        "via",
        "192.0.2.1",
    ]);
    let before = netns_routes(&lab.netns);

    let result = lab
        .call("ADD")
        .run()
        .expect_result("ADD beside a default route");
    assert_eq!(result["routes"][0]["dst"], "0.0.0.0/0");
    let d = defaults(&lab.netns);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(
        d[0].contains(&format!("gateway {} dev eth0", lab.gateway())),
        "{d:#?}"
    );
    assert!(d[1].contains("gateway 192.0.2.1 dev other0"), "{d:#?}");
    let mut check = lab.config("1.1.0");
    check["prevResult"] = result;
    lab.call("CHECK")
        .config(&check)
        .run()
        .expect_silent_success("CHECK");
    lab.call("DEL").run().expect_silent_success("DEL");
    assert_eq!(
        netns_routes(&lab.netns),
        before,
        "DEL touched the other route"
    );
}

/// A route that is already there with the same next hop (here: listed twice) is kept
/// rather than an error, the result still lists it, and CHECK finds it.
#[test]
fn a_route_already_there_is_kept_and_checked() {
    let lab = Lab::new("mnsame");
    let conf = json!({
        "cniVersion": "1.1.0",
        "name": lab.network,
        "type": "academy",
        "bridge": lab.bridge,
        "isGateway": true,
        "ipam": {"type": "host-local", "subnet": lab.subnet(), "dataDir": lab.data_dir,
                 "routes": [{"dst": "198.51.100.0/24"}, {"dst": "198.51.100.0/24"}]},
    });
    let result = lab.call("ADD").config(&conf).run().expect_result("ADD");
    assert_eq!(route_dsts(&result), ["198.51.100.0/24", "198.51.100.0/24"]);
    let routes: Vec<String> = netns_routes(&lab.netns)
        .into_iter()
        .filter(|r| r.starts_with("198.51.100.0/24"))
        .collect();
    assert_eq!(routes.len(), 1, "{routes:#?}");
    let mut check = conf.clone();
    check["prevResult"] = result;
    lab.call("CHECK")
        .config(&check)
        .run()
        .expect_silent_success("CHECK");
    lab.call("DEL")
        .config(&conf)
        .run()
        .expect_silent_success("DEL");
    assert_eq!(netns_link_names(&lab.netns), ["lo"]);
}
