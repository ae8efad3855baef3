//! The reference's keys at their edges: a value the reference would refuse is refused
//! (code 7, naming the key) and leaves nothing; "off" values and the reference's explicit
//! defaults are accepted. (Every key is implemented; vlan on a kernel without bridge
//! VLAN filtering is vlan.rs's.)

use super::*;
use crate::common::*;
use serde_json::json;

#[test]
fn bad_values_of_reference_keys_are_refused() {
    let lab = Lab::new("drefuse");
    let base = standalone(
        &lab,
        "1.0.0",
        &academy(
            &lab,
            json!({ "isGateway": true, "ipam": host_local(&lab, json!({ "subnet": lab.subnet() })) }),
        ),
    );
    let a = lab.attach();
    let before = lab.snapshot();
    let refused = [
        ("vlan", json!(5000)),
        ("vlanTrunk", json!([{ "id": 5000 }])),
        ("portIsolation", json!("yes")),
        ("macspoofchk", json!(1)),
    ];
    for (key, value) in &refused {
        let mut c = base.clone();
        c[*key] = value.clone();
        let out = direct(&lab, "ADD", &a, &c).run();
        assert_cni_error(&out, 7, &[]);
        let diff = lab.snapshot().diff(&before);
        assert!(diff.is_empty(), "refusing {key} {value} left:\n{diff}");
    }
    // Through cnitool the refusal reaches the user too.
    let mut plugin = base.clone();
    plugin["vlan"] = json!(5000);
    write_list(&lab, vec![plugin]);
    assert_tool_failed(&tool(&lab, "add", &lab.netns, &[]), &["VLAN ID 5000"]);
    let diff = lab.snapshot().diff(&before);
    assert!(
        diff.is_empty(),
        "refusing vlan 5000 via cnitool left:\n{diff}"
    );

    // Their off values ask for nothing: accepted.
    let mut c = base.clone();
    for (key, value) in [
        ("ipMasq", json!(false)),
        ("vlan", json!(0)),
        ("macspoofchk", json!(false)),
        ("enabledad", json!(false)),
        ("portIsolation", json!(false)),
        ("disableContainerInterface", json!(false)),
    ] {
        c[key] = value;
    }
    let out = direct(&lab, "ADD", &a, &c).run();
    out.expect_result("ADD with the off values");
    direct(&lab, "DEL", &a, &c)
        .run()
        .expect_silent_success("DEL");
    assert_clean(&lab, &[&lab.netns]);
}

/// A conflist that states the reference's defaults explicitly (as generators do) must
/// be accepted: the reference takes every one of these, and they ask for nothing.
#[test]
fn reference_defaults_stated_explicitly_are_accepted() {
    let lab = Lab::new("ddefaults");
    let defaults = [
        ("mtu", json!(0)),
        ("preserveDefaultVlan", json!(true)),
        ("vlan", json!(0)),
        ("vlanTrunk", json!([])),
        ("ipMasq", json!(false)),
        ("hairpinMode", json!(false)),
        ("promiscMode", json!(false)),
        ("isGateway", json!(false)),
        ("isDefaultGateway", json!(false)),
        ("forceAddress", json!(false)),
        ("macspoofchk", json!(false)),
        ("enabledad", json!(false)),
        ("disableContainerInterface", json!(false)),
        ("portIsolation", json!(false)),
        ("dns", json!({})),
    ];
    let base = |kind: &str, bridge: &str| {
        json!({
            "cniVersion": "1.0.0",
            "name": lab.network,
            "type": kind,
            "bridge": bridge,
            "ipam": host_local(&lab, json!({ "subnet": lab.subnet(), "routes": [] }))
        })
    };
    // The reference takes them all at once (isGateway false: it changes no sysctl).
    {
        let _serial = reference_lock();
        let reference_bridge = ReferenceBridge::new(lab.slot.link_name("acr"));
        let mut c = base("bridge", &reference_bridge.name);
        for (k, v) in &defaults {
            c[*k] = v.clone();
        }
        c["ipam"]["dataDir"] = json!(lab.root.join("reference-data"));
        let a = lab.attachment("ref");
        let reference = |cmd: &str| {
            lab.call_for(cmd, &a)
                .env("CNI_PATH", REFERENCE_BIN)
                .config(&c)
                .spawn(&format!("{REFERENCE_BIN}/bridge"), &[])
        };
        reference("ADD").expect_result("the reference bridge's ADD with explicit defaults");
        reference("DEL").expect_silent_success("the reference bridge's DEL");
    }
    let a = lab.attach();
    let mut refused = Vec::new();
    for (k, v) in &defaults {
        let mut c = base("academy", &lab.bridge);
        c[*k] = v.clone();
        let out = direct(&lab, "ADD", &a, &c).run();
        if out.code == 0 {
            direct(&lab, "DEL", &a, &c)
                .run()
                .expect_silent_success("DEL");
        } else {
            refused.push(format!("{k}: {v} -> {}", out.stdout.trim()));
            // A refused config is refused by DEL too: clean with the bare config.
            direct(&lab, "DEL", &a, &base("academy", &lab.bridge))
                .run()
                .expect_silent_success("DEL");
        }
    }
    assert!(
        refused.is_empty(),
        "academy refuses reference defaults the reference accepts:\n  {}",
        refused.join("\n  ")
    );
    assert_clean(&lab, &[&lab.netns]);
}
