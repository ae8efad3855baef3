//! The bandwidth kind through every operation of the table of kinds: CHECK, STATUS, the
//! restore, GC and DEL.

use super::*;

#[test]
fn the_bandwidth_kind_walks_every_operation() {
    let lab = Lab::new("bwkind");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    lab.write_conflist("1.1.0", "academy", {
        let mut extra = config.clone();
        for k in ["cniVersion", "name", "type"] {
            extra.as_object_mut().unwrap().remove(k);
        }
        extra
    });
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let ra = node.call("ADD", &a, &config).expect_result("ADD a");
    let rb = node.call("ADD", &b, &config).expect_result("ADD b");
    let check = |x: &Attach, result: &Value, config: &Value| {
        let mut c = config.clone();
        c["prevResult"] = result.clone();
        node.call("CHECK", x, &c)
    };
    let status = || node.run(&lab.call("STATUS").config(&config));
    check(&a, &ra, &config).expect_silent_success("CHECK after ADD");
    status().expect_silent_success("STATUS after ADD");
    let before = shaping(&node);
    let (veth_a, ifb_a) = (
        result_host_veth(&ra),
        ra["interfaces"][3]["name"].as_str().unwrap().to_string(),
    );
    assert!(before.contains(&format!("link {ifb_a}")), "{before:?}");

    // CHECK compares the parameters the config's rates make.
    let mut slower = config.clone();
    slower["egressRate"] = json!(4_000_000);
    assert_cni_error(
        &check(&a, &ra, &slower),
        120,
        &[&ifb_a, "egressRate 4000000", "rate 1000000 B/s"],
    );

    // The redirect taken: named by STATUS and CHECK, put back by restore.
    let out = in_node(&node, &["tc", "filter", "del", "dev", &veth_a, "ingress"]);
    assert_eq!(out.code, 0, "{out}");
    let error = assert_cni_error(&status(), 50, &["bandwidth shaping", &veth_a, &ifb_a]);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    let error = assert_cni_error(&check(&a, &ra, &config), 120, &["redirect", &ifb_a]);
    assert!(
        error["details"]
            .as_str()
            .unwrap_or("")
            .contains("academy restore"),
        "{error}"
    );
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("bandwidth shaping"), "{out}");
    assert_eq!(shaping(&node), before, "after restore");
    check(&a, &ra, &config).expect_silent_success("CHECK after restore");
    status().expect_silent_success("STATUS after restore");

    // A TBF taken (the host veth's and the ifb's): CHECK names it and DEL + ADD as the
    // remedy; STATUS names it from the rates ADD recorded, and restore puts it back.
    for (dev, words) in [
        (&veth_a, format!("the tbf of host veth {veth_a} (ingress, ")),
        (&ifb_a, format!("the tbf of ifb {ifb_a} (egress, ")),
    ] {
        let out = in_node(&node, &["tc", "qdisc", "del", "dev", dev, "root"]);
        assert_eq!(out.code, 0, "{out}");
        let error = assert_cni_error(&check(&a, &ra, &config), 120, &[dev, "no tbf qdisc"]);
        assert!(
            error["details"]
                .as_str()
                .unwrap_or("")
                .contains("DEL and ADD"),
            "{error}"
        );
        assert_cni_error(&status(), 50, &["bandwidth shaping", &words]);
        let out = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(out.code, 0, "{out}");
        let line = format!(
            "network {}: put back: bandwidth shaping: {words}",
            lab.network
        );
        assert!(out.stderr.contains(&line), "{out}");
        assert_eq!(shaping(&node), before, "after the restore of {dev}'s tbf");
        check(&a, &ra, &config).expect_silent_success("CHECK after the tbf's restore");
        status().expect_silent_success("STATUS after the tbf's restore");
    }

    // GC: an unlisted attachment's ifb goes with it; an unlabelled ifb of academy's
    // names whose veth is gone goes; someone else's ifb stays.
    let orphan = "bwp00000000001";
    let foreign = format!("ifbk{}", std::process::id() % 100_000);
    for name in [orphan, foreign.as_str()] {
        let out = in_node(&node, &["ip", "link", "add", name, "type", "ifb"]);
        assert_eq!(out.code, 0, "{out}");
    }
    node.run(&gc_call(&lab, config.clone(), &[(&b.cid, &b.ifname)]))
        .expect_silent_success("GC listing b");
    let links = node.links();
    assert!(!links.contains(&ifb_a), "GC left a's ifb: {links:?}");
    assert!(
        !links.iter().any(|l| l == orphan),
        "GC left the orphan: {links:?}"
    );
    assert!(links.contains(&foreign), "GC took a foreign ifb: {links:?}");
    check(&b, &rb, &config).expect_silent_success("CHECK of b after GC");

    // The one removal: b's ifb and qdiscs go with its DEL.
    node.call("DEL", &b, &config).expect_silent_success("DEL b");
    let left: BTreeSet<String> = shaping(&node)
        .into_iter()
        .filter(|s| !s.contains(&foreign))
        .collect();
    assert_eq!(left, BTreeSet::new(), "after the last DEL");
}
