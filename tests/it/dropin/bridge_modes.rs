//! The reference's meaning of the implemented bridge keys: forceAddress, hairpinMode,
//! promiscMode.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::{json, Value};

/// Creates the lab's bridge by hand with `address` on it, as a stale earlier network
/// would have left it.
fn precreate_bridge(lab: &Lab, address: &str) {
    ip(&["link", "add", &lab.bridge, "type", "bridge"]);
    ip(&["addr", "add", address, "dev", &lab.bridge]);
    ip(&["link", "set", &lab.bridge, "up"]);
}

fn bridge_v4(lab: &Lab) -> Vec<String> {
    addresses(None, &lab.bridge)
        .into_iter()
        .filter(|a| a.starts_with("inet "))
        .collect()
}

/// The bridge holds another IPv4 address (here in another, overlapping subnet): ADD
/// without forceAddress is refused (7, naming the old address) and changes nothing;
/// with forceAddress the old address is replaced by the gateway.
#[test]
fn force_address_refused_then_replaced() {
    let lab = Lab::new("dforce");
    let old = format!("{}/25", lab.ip(129));
    precreate_bridge(&lab, &old);
    let plugin = |force: bool| {
        standalone(
            &lab,
            "1.0.0",
            &academy(
                &lab,
                json!({
                    "isDefaultGateway": true,
                    "forceAddress": force,
                    "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
                }),
            ),
        )
    };
    let a = lab.attach();
    let before = lab.snapshot();
    let out = direct(&lab, "ADD", &a, &plugin(false)).run();
    assert_cni_error(&out, 7, &[&old]);
    // Only the store's housekeeping (network folder, last_reserved_ip) may appear.
    let diff = lab.snapshot().diff_allowing_store_housekeeping(&before);
    assert!(diff.is_empty(), "the refused ADD left:\n{diff}");
    assert_eq!(bridge_v4(&lab), [format!("inet {old} scope global")]);
    assert_eq!(lab.reservations(), Vec::<String>::new());

    let result = direct(&lab, "ADD", &a, &plugin(true))
        .run()
        .expect_result("ADD with forceAddress");
    assert_eq!(
        bridge_v4(&lab),
        [format!("inet {}/24 scope global", lab.gateway())],
        "forceAddress must replace {old} with the gateway"
    );
    assert_eq!(result_ips(&result)[0].1, lab.gateway());
    assert!(
        ping_until(&lab.netns, &lab.gateway(), Duration::from_secs(3)),
        "no reply from the gateway"
    );
    let mut del = plugin(true);
    del["prevResult"] = result;
    direct(&lab, "DEL", &a, &del)
        .run()
        .expect_silent_success("DEL");
    assert_clean(&lab, &[&lab.netns]);
}

/// The common stale case: the old address is in the gateway's own subnet (a gateway
/// moved from .254 to .1). Like the reference, forceAddress must leave exactly the new
/// gateway on the bridge, and the container must reach it.
#[test]
fn force_address_in_the_same_subnet_keeps_the_gateway() {
    let lab = Lab::new("dforce24");
    let old = format!("{}/24", lab.ip(254));
    precreate_bridge(&lab, &old);
    let config = standalone(
        &lab,
        "1.0.0",
        &academy(
            &lab,
            json!({
                "isDefaultGateway": true,
                "forceAddress": true,
                "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
            }),
        ),
    );
    let a = lab.attach();
    let out = direct(&lab, "ADD", &a, &config).run();
    out.expect_result("ADD with forceAddress");
    let bridge = bridge_v4(&lab);
    let reachable = ping_until(&lab.netns, &lab.gateway(), Duration::from_secs(2));
    direct(&lab, "DEL", &a, &config)
        .run()
        .expect_silent_success("DEL");
    assert_eq!(
        bridge,
        [format!("inet {}/24 scope global", lab.gateway())],
        "forceAddress must replace {old} with the gateway {}/24",
        lab.gateway()
    );
    assert!(reachable, "the container cannot reach its gateway");
}

#[test]
fn hairpin_and_promisc_modes() {
    let lab = Lab::new("dhairpin");
    let conf = |extra: Value| {
        let mut p = academy(
            &lab,
            json!({ "isGateway": true, "ipam": host_local(&lab, json!({ "subnet": lab.subnet() })) }),
        );
        merge(&mut p, extra);
        p
    };
    let hairpin_of =
        |veth: &str| read_trimmed(&format!("/sys/class/net/{veth}/brport/hairpin_mode"));

    write_list(&lab, vec![conf(json!({ "hairpinMode": true }))]);
    let first = lab.netns.clone();
    let result = tool_add(&lab, &first, &[]);
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        hairpin_of(&veth),
        "1",
        "hairpinMode true: {veth} has no hairpin"
    );
    assert!(
        !has_flag(&link(None, &lab.bridge), "PROMISC"),
        "the bridge is promiscuous without promiscMode"
    );
    tool_quiet(&lab, "del", &first, &[]);

    write_list(&lab, vec![conf(json!({ "promiscMode": true }))]);
    let second = lab.add_netns("promisc");
    let result = tool_add(&lab, &second, &[]);
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        has_flag(&link(None, &lab.bridge), "PROMISC"),
        "promiscMode true: bridge {} is not PROMISC",
        lab.bridge
    );
    assert_eq!(hairpin_of(&veth), "0", "hairpin on without hairpinMode");
    tool_quiet(&lab, "del", &second, &[]);

    // Both at once: the reference refuses it too.
    let both = standalone(
        &lab,
        "1.0.0",
        &conf(json!({ "hairpinMode": true, "promiscMode": true })),
    );
    assert_cni_error(
        &direct(&lab, "ADD", &lab.attach(), &both).run(),
        7,
        &["hairpinMode", "promiscMode"],
    );
    assert_clean(&lab, &[&first, &second]);
}
