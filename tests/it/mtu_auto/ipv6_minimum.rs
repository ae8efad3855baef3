//! An MTU below 1280, IPv6's minimum, on a network with an IPv6 range (issue 31, item 3):
//! the kernel takes every IPv6 address off a link set below it, so a bridge set there
//! loses its IPv6 gateway under every running container. Refused with code 7 before
//! anything changes: for a number when the config is read, for "auto" once the uplinks
//! are read, before the reservation; with a delegated plugin, once it gave IPv6.

use super::*;
use crate::common::*;

/// The lab's network, dual stack, its gateways on the bridge, with `mtu`.
fn dual_stack(lab: &Lab, mtu: Value) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": lab.network,
        "type": "academy",
        "bridge": lab.bridge,
        "isGateway": true,
        "mtu": mtu,
        "ipam": {
            "type": "host-local",
            "dataDir": lab.data_dir.to_str().unwrap(),
            "ranges": [[{"subnet": lab.subnet()}], [{"subnet": format!("{}::/64", lab.slot.v6_prefix())}]],
        }
    })
}

/// The bridge's MTU and its global IPv6 addresses, in the node.
fn bridge_state(lab: &Lab, node: &Node) -> (u64, Vec<String>) {
    let v6 = ip_json(&["-6", "-n", &node.ns, "addr", "show", "dev", &lab.bridge]);
    let addresses = v6[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["scope"] == "global")
        .filter_map(|a| a["local"].as_str().map(str::to_string))
        .collect();
    (mtu_of(&node.ns, &lab.bridge), addresses)
}

#[test]
fn below_1280_on_a_dual_stack_network_is_refused_before_anything_changes() {
    let lab = Lab::new("mtuv6min");
    let node = Node::new(&lab);
    uplink4(&node, "up4", 1400, 2, 0);
    let auto = dual_stack(&lab, json!("auto"));
    let c1 = lab.attachment("c1");
    node.call("ADD", &c1, &auto).expect_result("ADD c1");
    let gateway6 = format!("{}::1", lab.slot.v6_prefix());
    let before = bridge_state(&lab, &node);
    assert_eq!(before, (1400, vec![gateway6]));
    let (links, reservations) = (node.links(), lab.reservations());

    // The IPv4-only uplink goes below IPv6's minimum.
    ip(&["-n", &node.ns, "link", "set", "up4", "mtu", "1200"]);
    let c2 = lab.attachment("c2");
    for _ in 0..2 {
        let out = node.call("ADD", &c2, &auto);
        assert_cni_error(
            &out,
            7,
            &[
                "mtu \"auto\" gives 1200",
                "below 1280",
                "the node's IPv4 default route leaves by up4 with MTU 1200",
            ],
        );
        assert_eq!(bridge_state(&lab, &node), before, "the bridge is untouched");
        assert_eq!(node.links(), links, "no veth left");
        assert_eq!(lab.reservations(), reservations, "no reservation held");
    }

    let fixed = dual_stack(&lab, json!(1279));
    let out = node.call("ADD", &c2, &fixed);
    assert_cni_error(&out, 7, &["mtu 1279", "below 1280"]);
    assert_eq!(bridge_state(&lab, &node), before, "the bridge is untouched");
    assert_eq!(node.links(), links, "no veth left");
    assert_eq!(lab.reservations(), reservations, "no reservation held");
    node.call("DEL", &c2, &fixed)
        .expect_silent_success("DEL of the refused config");

    node.call("DEL", &c1, &auto).expect_silent_success("DEL c1");
    assert_eq!(lab.reservations(), Vec::<String>::new());
}

/// With a delegated IPAM plugin the config shows no range: the refusal comes once the
/// plugin has given an IPv6 address, before the bridge is made, and the plugin's DEL
/// gives the address back.
#[test]
fn below_1280_with_a_delegated_plugin_s_ipv6_address_is_refused_before_the_bridge() {
    let lab = Lab::new("mtuv6ipam");
    let node = Node::new(&lab);
    uplink4(&node, "up4", 1200, 2, 0);
    let address = format!("{}::50/64", lab.slot.v6_prefix());
    let log = lab.root.join("ipam.log");
    lab.install_script(
        "v6ipam",
        &format!(
            r#"#!/bin/sh
cat >/dev/null
echo "$CNI_COMMAND" >> {log}
[ "$CNI_COMMAND" = ADD ] && printf '{{"cniVersion":"1.1.0","ips":[{{"address":"{address}"}}]}}'
exit 0
"#,
            log = log.display()
        ),
    );
    let mut config = auto(&lab);
    for key in ["subnet", "gateway", "dataDir"] {
        config.as_object_mut().unwrap().remove(key);
    }
    config["ipam"] = json!({"type": "v6ipam"});
    let links = node.links();
    let c1 = lab.attachment("c1");
    let out = node.call("ADD", &c1, &config);
    assert_cni_error(
        &out,
        7,
        &[
            "mtu \"auto\" gives 1200",
            "below 1280",
            &format!("the IPv6 address {address} from IPAM"),
        ],
    );
    assert_eq!(node.links(), links, "no bridge, no veth");
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls.split_whitespace().collect::<Vec<_>>(), ["ADD", "DEL"]);
}
