//! What "auto" chooses (issue 26, item 4): the MTU of the interface the node's default
//! route leaves by (per family, the lower of the two; the lowest metric's route), for the
//! bridge and both veth ends; the result reports it, and CHECK recomputes it and says what
//! changed.

use serde_json::json;

use super::*;
use crate::common::*;

#[test]
fn auto_follows_the_default_routes_and_check_says_what_changed() {
    let lab = Lab::new("mtuauto");
    let node = Node::new(&lab);
    let a = lab.attach();
    // GCE's MTU on the IPv4 uplink.
    uplink4(&node, "up4", 1460, 2, 0);
    let result = node.call("ADD", &a, &auto(&lab)).expect_result("ADD");
    assert_eq!(mtus(&lab, &node, &a), [1460; 3]);
    assert_eq!(reported(&result), vec![json!(1460); 3]);
    check(&lab, &node, &a, &result).expect_silent_success("CHECK");

    // An IPv6 default route through a smaller uplink: the lower of the two, for the
    // existing bridge too.
    node.call("DEL", &a, &auto(&lab))
        .expect_silent_success("DEL");
    uplink6(&node, "up6", 1400);
    let result = node.call("ADD", &a, &auto(&lab)).expect_result("ADD");
    assert_eq!(mtus(&lab, &node, &a), [1400; 3]);
    assert_eq!(reported(&result), vec![json!(1400); 3]);
    check(&lab, &node, &a, &result).expect_silent_success("CHECK");

    // The node changes: its uplink goes to 9001, and the IPv6 default route is gone.
    ip(&["-n", &node.ns, "link", "set", "up4", "mtu", "9001"]);
    ip(&["-6", "-n", &node.ns, "route", "del", "default"]);
    let out = check(&lab, &node, &a, &result);
    let host = derived_host_veth_name(&a.cid, &a.ifname);
    assert_cni_error(
        &out,
        120,
        &[
            &format!("bridge {} has MTU 1400", lab.bridge),
            &format!("host veth {host} has MTU 1400"),
            "eth0 has MTU 1400",
            "mtu \"auto\" gives 9001 now: the node's IPv4 default route leaves by up4 with MTU 9001",
            "(ADD chose 1400)",
        ],
    );
    assert_eq!(mtus(&lab, &node, &a), [1400; 3], "CHECK changes nothing");
    node.call("DEL", &a, &auto(&lab))
        .expect_silent_success("DEL");
}

/// Several default routes: the kernel uses the lowest metric's, and so does "auto"; of
/// a multipath route's next hops, the lowest MTU. A node without any (an unreachable
/// default is none) gets the kernel's default and a line saying so.
#[test]
fn auto_takes_the_lowest_metric_s_route_and_1500_without_one() {
    let lab = Lab::new("mtumetric");
    let node = Node::new(&lab);
    let a = lab.attach();
    route(&node, &["unreachable", "default", "metric", "1"]);
    route(&node, &["unreachable", "::/0", "metric", "1"]);
    let out = node.call("ADD", &a, &auto(&lab));
    let result = out.expect_result("ADD without a default route");
    assert!(
        out.stderr
            .contains("the node has no default route, so the kernel's default 1500"),
        "{out}"
    );
    assert_eq!(mtus(&lab, &node, &a), [1500; 3]);
    check(&lab, &node, &a, &result).expect_silent_success("CHECK");
    node.call("DEL", &a, &auto(&lab))
        .expect_silent_success("DEL");

    uplink4(&node, "upslow", 1300, 3, 200);
    uplink_link(&node, "upfast", 1460, "192.0.4.2/24");
    uplink_link(&node, "upmid", 1450, "192.0.5.2/24");
    route(
        &node,
        &[
            "default",
            "metric",
            "100",
            "nexthop",
            "via",
            "192.0.4.1",
            "dev",
            "upfast",
            "nexthop",
            "via",
            "192.0.5.1",
            "dev",
            "upmid",
        ],
    );
    let result = node.call("ADD", &a, &auto(&lab)).expect_result("ADD");
    assert_eq!(mtus(&lab, &node, &a), [1450; 3]);
    check(&lab, &node, &a, &result).expect_silent_success("CHECK");
    node.call("DEL", &a, &auto(&lab))
        .expect_silent_success("DEL");
}

/// A bridge that exists with another MTU (set by hand, or by "auto" when the uplink had
/// another): "auto" sets it, since CHECK compares it, but never above its smallest
/// port's (live_bridge.rs says why); a number leaves it, as the reference does. (An MTU
/// given when the bridge is made is not one set by hand: the kernel lowers such a bridge
/// to its smallest port's as ports join.)
#[test]
fn auto_sets_an_existing_bridge_s_mtu() {
    let lab = Lab::new("mtubridge");
    let node = Node::new(&lab);
    uplink4(&node, "up4", 1460, 2, 0);
    let ns = node.ns.as_str();
    ip(&["-n", ns, "link", "add", &lab.bridge, "type", "bridge"]);
    ip(&["-n", ns, "link", "set", &lab.bridge, "mtu", "9000"]);
    let fixed = lab.config_with("1.1.0", "mtu", json!(1400));
    let a = lab.attachment("fixed");
    node.call("ADD", &a, &fixed).expect_result("ADD, mtu 1400");
    assert_eq!(mtus(&lab, &node, &a), [9000, 1400, 1400]);

    // The port of mtu 1400 holds the bridge there: lowered from 9000, not set to 1460.
    let b = lab.attachment("auto");
    let result = node.call("ADD", &b, &auto(&lab)).expect_result("ADD");
    assert_eq!(mtus(&lab, &node, &b), [1400; 3]);
    assert_eq!(reported(&result), vec![json!(1400); 3]);
    let out = check(&lab, &node, &b, &result);
    assert_cni_error(&out, 120, &["mtu \"auto\" gives 1460 now"]);
    for (x, config) in [(&a, &fixed), (&b, &auto(&lab))] {
        node.call("DEL", x, config).expect_silent_success("DEL");
    }

    // Without ports, the bridge (still of mtu 1400, which academy set) takes the node's.
    let result = node.call("ADD", &b, &auto(&lab)).expect_result("ADD");
    assert_eq!(mtus(&lab, &node, &b), [1460; 3]);
    assert_eq!(reported(&result), vec![json!(1460); 3]);
    check(&lab, &node, &b, &result).expect_silent_success("CHECK");
    node.call("DEL", &b, &auto(&lab))
        .expect_silent_success("DEL");
}
