//! A layer-2 network: no `ipam` block, as the reference bridge serves it (KubeVirt and
//! Multus secondary networks). The container gets its interface on the bridge and no
//! address; what it puts on the wire itself crosses the bridge. Compared with the
//! reference 1.1.1 on the same config.

use serde_json::{json, Value};

use crate::common::*;

/// The lab's network with no IPAM (the flat form's keys dropped).
fn layer2(lab: &Lab) -> Value {
    // 1.0.0: the newest the reference 1.1.1 speaks.
    let mut c = lab.config("1.0.0");
    for key in ["subnet", "gateway", "dataDir"] {
        c.as_object_mut().unwrap().remove(key);
    }
    c
}

fn attach(lab: &Lab, name: &str) -> Attach {
    Attach {
        cid: format!("{}-{name}", lab.cid),
        ifname: "eth0".into(),
        netns: lab.add_netns(name),
    }
}

#[test]
fn a_network_without_ipam_wires_interfaces_without_addresses() {
    let lab = Lab::new("l2");
    let conf = layer2(&lab);
    let (a, b) = (attach(&lab, "a"), attach(&lab, "b"));
    let mut results = Vec::new();
    for x in [&a, &b] {
        let r = lab
            .call_for("ADD", x)
            .config(&conf)
            .run()
            .expect_result("layer-2 ADD");
        assert!(r["ips"].as_array().is_none_or(Vec::is_empty), "{r:#}");
        let names: Vec<&str> = r["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 3, "{r:#}");
        assert_eq!(names[0], lab.bridge);
        assert_eq!(names[2], "eth0");
        let inside = ip(&["-n", &x.netns, "-4", "-o", "addr", "show", "dev", "eth0"]);
        assert!(inside.trim().is_empty(), "eth0 got an address: {inside}");
        results.push(r);
    }
    // The bridge carries what the containers address themselves (as a VM would).
    let (ip_a, ip_b) = ("192.0.2.10", "192.0.2.11");
    ip(&[
        "-n",
        &a.netns,
        "addr",
        "add",
        &format!("{ip_a}/24"),
        "dev",
        "eth0",
    ]);
    ip(&[
        "-n",
        &b.netns,
        "addr",
        "add",
        &format!("{ip_b}/24"),
        "dev",
        "eth0",
    ]);
    assert!(
        ping_from(&a.netns, ip_b, 2),
        "a does not reach b over the bridge"
    );

    // CHECK of the result passes; DEL removes the pair and is idempotent.
    let mut check = conf.clone();
    check["prevResult"] = results[0].clone();
    lab.call_for("CHECK", &a)
        .config(&check)
        .run()
        .expect_silent_success("CHECK of a layer-2 attachment");
    for x in [&a, &b] {
        for _ in 0..2 {
            lab.call_for("DEL", x)
                .config(&conf)
                .run()
                .expect_silent_success("layer-2 DEL");
        }
    }
    assert_unwired(&lab, &a);
    assert_unwired(&lab, &b);
}

#[test]
fn a_network_without_ipam_refuses_what_needs_addresses() {
    let lab = Lab::new("l2no");
    let a = attach(&lab, "a");
    let before = lab.snapshot();
    for (key, value) in [
        ("isGateway", json!(true)),
        ("isDefaultGateway", json!(true)),
        ("ipMasq", json!(true)),
    ] {
        let mut c = layer2(&lab);
        c[key] = value;
        let out = lab.call_for("ADD", &a).config(&c).run();
        assert_cni_error(&out, 7, &[key, "layer-2"]);
    }
    let out = lab
        .call_for("ADD", &a)
        .env("CNI_ARGS", "IP=192.0.2.5")
        .config(&layer2(&lab))
        .run();
    assert_cni_error(&out, 7, &["layer-2"]);
    let diff = lab.snapshot().diff(&before);
    assert!(diff.is_empty(), "a refused ADD left:\n{diff}");
}

#[test]
fn a_network_without_ipam_matches_the_reference() {
    let lab = Lab::new("l2ref");
    let _serial = reference_lock();
    let reference_bridge = ReferenceBridge::new(lab.slot.link_name("acr"));
    let a = attach(&lab, "a");
    let r = attach(&lab, "r");
    let mut reference = layer2(&lab);
    reference["type"] = json!("bridge");
    reference["bridge"] = json!(reference_bridge.name);
    let ours = lab
        .call_for("ADD", &a)
        .config(&layer2(&lab))
        .run()
        .expect_result("academy's layer-2 ADD");
    let theirs = lab
        .call_for("ADD", &r)
        .env("CNI_PATH", REFERENCE_BIN)
        .config(&reference)
        .spawn(&format!("{REFERENCE_BIN}/bridge"), &[])
        .expect_result("the reference's layer-2 ADD");
    let shape = |v: &Value| {
        json!({
            "ips": v["ips"].as_array().map_or(0, Vec::len),
            "routes": v["routes"].as_array().map_or(0, Vec::len),
            "interfaces": v["interfaces"].as_array().map_or(0, Vec::len),
            "sandbox": v["interfaces"][2]["sandbox"].is_string(),
        })
    };
    assert_eq!(shape(&ours), shape(&theirs), "{ours:#}\n{theirs:#}");
    let addrs = |ns: &str| ip(&["-n", ns, "-4", "-o", "addr", "show", "dev", "eth0"]);
    assert_eq!(addrs(&a.netns), addrs(&r.netns));
    let state = |ns: &str| ip(&["-n", ns, "-o", "link", "show", "dev", "eth0"]).contains("UP");
    assert_eq!(state(&a.netns), state(&r.netns));
    lab.call_for("DEL", &r)
        .env("CNI_PATH", REFERENCE_BIN)
        .config(&reference)
        .spawn(&format!("{REFERENCE_BIN}/bridge"), &[])
        .expect_silent_success("the reference's DEL");
    lab.call_for("DEL", &a)
        .config(&layer2(&lab))
        .run()
        .expect_silent_success("academy's DEL");
    assert_unwired(&lab, &a);
}

/// KubeVirt's secondary network: layer 2 with the container interface left down (the
/// VM's own interface takes over); DEL removes it.
#[test]
fn a_network_without_ipam_can_leave_the_interface_down() {
    let lab = Lab::new("l2down");
    let mut conf = layer2(&lab);
    conf["disableContainerInterface"] = json!(true);
    let a = attach(&lab, "a");
    lab.call_for("ADD", &a)
        .config(&conf)
        .run()
        .expect_result("layer-2 ADD with the interface down");
    let link = ip(&["-n", &a.netns, "-o", "link", "show", "dev", "eth0"]);
    assert!(link.contains("state DOWN"), "{link}");
    lab.call_for("DEL", &a)
        .config(&conf)
        .run()
        .expect_silent_success("DEL");
    assert_unwired(&lab, &a);
}
