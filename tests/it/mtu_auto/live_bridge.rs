//! An uplink whose MTU changes under running containers (issue 31, item 2). A bridge
//! above its smallest port's MTU sends that port frames the kernel drops at it, with no
//! ICMP to say so: raising waits until the older ports are gone, and the new container
//! gets the bridge's MTU meanwhile; lowering is at once, as before.

use super::*;
use crate::common::*;

/// A ping of 2000 bytes from the node (the bridge's gateway address) to `addr`, which
/// the node may fragment (DF unset): it crosses the bridge as frames of the bridge's MTU.
fn big_ping_answers(node: &Node, addr: &str) -> bool {
    let out = run(
        "ip",
        &[
            "netns", "exec", &node.ns, "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-W", "1", "-s",
            "2000", "-M", "dont", addr,
        ],
        &[],
    );
    out.code == 0
}

#[test]
fn a_rising_uplink_waits_for_the_older_ports_and_a_falling_one_lowers_the_bridge() {
    let lab = Lab::new("mtulive");
    let node = Node::new(&lab);
    uplink4(&node, "up4", 1400, 2, 0);
    let c1 = lab.attachment("c1");
    let r1 = node.call("ADD", &c1, &auto(&lab)).expect_result("ADD c1");
    assert_eq!(mtus(&lab, &node, &c1), [1400; 3]);
    let c1_address = result_address(&r1);
    assert!(
        big_ping_answers(&node, &c1_address),
        "2000 bytes to c1 before the uplink rose"
    );

    ip(&["-n", &node.ns, "link", "set", "up4", "mtu", "9000"]);
    let c2 = lab.attachment("c2");
    let out = node.call("ADD", &c2, &auto(&lab));
    let r2 = out.expect_result("ADD c2 after the uplink rose");
    assert_eq!(
        mtus(&lab, &node, &c2),
        [1400; 3],
        "the bridge stays at c1's MTU, and c2 gets the bridge's"
    );
    assert_eq!(reported(&r2), vec![json!(1400); 3]);
    assert!(
        out.stderr.contains("is held at 1400, the MTU of its port"),
        "ADD says why the bridge stays: {out}"
    );
    assert!(
        big_ping_answers(&node, &c1_address),
        "2000 bytes to c1 after c2's ADD: the bridge must not send c1 frames above its port's MTU"
    );
    let out = check(&lab, &node, &c2, &r2);
    assert_cni_error(
        &out,
        120,
        &[
            "eth0 has MTU 1400",
            "mtu \"auto\" gives 9000 now: the node's IPv4 default route leaves by up4 with MTU 9000",
            "(ADD chose 1400)",
            "once none of its ports has a lower MTU",
        ],
    );

    for c in [&c1, &c2] {
        node.call("DEL", c, &auto(&lab))
            .expect_silent_success("DEL");
    }
    let c3 = lab.attachment("c3");
    let r3 = node.call("ADD", &c3, &auto(&lab)).expect_result("ADD c3");
    assert_eq!(
        mtus(&lab, &node, &c3),
        [9000; 3],
        "the older ports are gone: the bridge rises"
    );
    check(&lab, &node, &c3, &r3).expect_silent_success("CHECK c3");

    // Back down: the bridge follows at once (below c3's port is safe: the node fragments
    // to the bridge's MTU), the new container with it, c3 keeps what it was given.
    ip(&["-n", &node.ns, "link", "set", "up4", "mtu", "1400"]);
    let c4 = lab.attachment("c4");
    node.call("ADD", &c4, &auto(&lab)).expect_result("ADD c4");
    assert_eq!(mtus(&lab, &node, &c4), [1400; 3]);
    assert_eq!(mtus(&lab, &node, &c3), [1400, 9000, 9000]);
    assert!(
        big_ping_answers(&node, &result_address(&r3)),
        "2000 bytes to c3 after the bridge was lowered"
    );
    for c in [&c3, &c4] {
        node.call("DEL", c, &auto(&lab))
            .expect_silent_success("DEL");
    }
}
