//! A runtime that entered the node's netns with `nsenter --net` and kept its mount
//! namespace: the /sys it sees was mounted for another netns (the host's), so none of
//! the links academy makes are in it. The reference bridge plugin works from there,
//! since it speaks netlink only; academy must too, hairpinMode included. Root only.

use serde_json::json;

use crate::common::*;

/// The plugin in `netns`, with the test's own mounts: /sys stays the host's.
fn run_in_keeping_sys(netns: &str, call: &Call) -> Out {
    let net = format!("--net={}", netns_path(netns));
    call.spawn("nsenter", &[&net, plugin()])
}

/// The hairpin flag `ip -d` shows for bridge port `veth` in `netns` (None: no such port).
fn hairpin_in(netns: &str, veth: &str) -> Option<bool> {
    let links = ip_json(&["-n", netns, "-d", "link", "show", "dev", veth]);
    links[0]["linkinfo"]["info_slave_data"]["hairpin"].as_bool()
}

#[test]
fn foreign_sys_hairpin_add_check_del_from_a_netns_the_mounted_sys_is_not_for() {
    let lab = Lab::new("fsys");
    let node = Node::new(&lab);
    let a = lab.attach();
    let config = config_with(&lab, &[("hairpinMode", json!(true))]);
    let call = |verb: &str| lab.call_for(verb, &a).config(&config);

    let added = run_in_keeping_sys(&node.ns, &call("ADD"));
    let result = added.expect_result("ADD with hairpinMode from the node's netns, /sys the host's");
    let veth = result_host_veth(&result);
    // The premise: the process's /sys cannot name the port it made.
    assert!(
        !link_exists(&veth),
        "{veth} is in the host's /sys: the ADD did not run in the node"
    );
    assert_eq!(
        hairpin_in(&node.ns, &veth),
        Some(true),
        "hairpinMode true: the node's kernel has no hairpin on {veth}"
    );
    let mut checked = config.clone();
    checked["prevResult"] = result.clone();
    let check = lab.call_for("CHECK", &a).config(&checked);
    run_in_keeping_sys(&node.ns, &check).expect_silent_success("CHECK, /sys the host's");
    run_in_keeping_sys(&node.ns, &call("DEL")).expect_silent_success("DEL, /sys the host's");
    assert!(
        !node.links().contains(&veth),
        "DEL left {veth} in the node: {:?}",
        node.links()
    );
}
