//! Delegated IPAM: a real `static` plugin, and a logging wrapper that proves ADD, CHECK,
//! GC, STATUS and DEL are forwarded.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::{json, Value};

fn static_ipam(lab: &Lab) -> Value {
    json!({
        "type": "static",
        "addresses": [{ "address": format!("{}/24", lab.ip(50)), "gateway": lab.gateway() }],
        "routes": [{ "dst": "0.0.0.0/0" }]
    })
}

fn supported_versions(program: &str) -> Vec<String> {
    let out = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .stdin(r#"{"cniVersion":"1.0.0"}"#)
        .spawn(program, &[]);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    v["supportedVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// Debian's real `static` plugin (CNI up to 1.0.0) through cnitool: ADD, CHECK, DEL.
#[test]
fn delegated_ipam_static_plugin() {
    let lab = Lab::new("dstatic");
    write_list(
        &lab,
        vec![academy(
            &lab,
            json!({ "isGateway": true, "ipam": static_ipam(&lab) }),
        )],
    );
    let ns = lab.netns.clone();
    let result = tool_add(&lab, &ns, &[]);
    assert_eq!(
        result_ips(&result),
        [(format!("{}/24", lab.ip(50)), lab.gateway())]
    );
    assert_eq!(
        addresses(Some(&ns), "eth0"),
        [format!("inet {}/24 scope global", lab.ip(50))]
    );
    assert_eq!(
        default_route(&ns, false),
        Some(format!("via {} dev eth0", lab.gateway()))
    );
    assert!(
        ping_until(&ns, &lab.gateway(), Duration::from_secs(3)),
        "no reply from the gateway"
    );
    tool_quiet(&lab, "check", &ns, &[]);
    tool_quiet(&lab, "del", &ns, &[]);
    assert_clean(&lab, &[&ns]);
    assert!(
        !lab.data_dir.join(&lab.network).exists(),
        "delegated IPAM must not touch academy's own store"
    );
    tool_quiet(&lab, "del", &ns, &[]);

    // GC and STATUS need cniVersion 1.1.0. Debian's static (1.1.1) stops at 1.0.0,
    // so academy must pass on static's refusal, not swallow it; the forwarding of
    // both verbs is proved with a wrapper in delegated_ipam_gets_all_five_verbs.
    let static_bin = format!("{}/static", debian_plugins());
    let v11 = standalone(
        &lab,
        "1.1.0",
        &academy(
            &lab,
            json!({ "isGateway": true, "ipam": static_ipam(&lab) }),
        ),
    );
    let status = Call::bare()
        .env("CNI_COMMAND", "STATUS")
        .env("CNI_PATH", &cni_path(&lab))
        .config(&v11)
        .run();
    if supported_versions(&static_bin).iter().any(|v| v == "1.1.0") {
        status.expect_silent_success("STATUS with static");
    } else {
        eprintln!("note: {static_bin} does not support cniVersion 1.1.0; STATUS must fail");
        assert_eq!(status.code, 1, "STATUS hid static's refusal:\n{status}");
        assert!(
            status.stdout.contains("static") && status.stdout.contains("STATUS"),
            "STATUS error does not name the IPAM plugin and verb:\n{status}"
        );
    }

    // An IPAM plugin that is not on CNI_PATH: a clear error, nothing left.
    let before = lab.snapshot();
    let mut missing = v11.clone();
    missing["ipam"] = json!({ "type": "no-such-ipam" });
    let out = direct(&lab, "ADD", &lab.attach(), &missing).run();
    assert_cni_error(&out, 7, &["no-such-ipam"]);
    let diff = lab.snapshot().diff(&before);
    assert!(diff.is_empty(), "the failed ADD left:\n{diff}");
}

/// A logging wrapper around `static` as the IPAM plugin, at cniVersion 1.1.0: every verb
/// academy gets (ADD, CHECK, GC, STATUS, DEL) reaches it with the same environment and
/// config, and its errors come back with their code.
#[test]
fn delegated_ipam_gets_all_five_verbs() {
    let lab = Lab::new("dfive");
    let log = lab.root.join("ipam.log");
    let down = lab.root.join("ipam.down");
    let static_bin = format!("{}/static", debian_plugins());
    lab.install_script(
        "logipam",
        &format!(
            r#"#!/bin/sh
in=$(cat)
valid=$(printf '%s' "$in" | jq -c '."cni.dev/valid-attachments"')
type=$(printf '%s' "$in" | jq -r '.ipam.type')
printf '%s cid=%s ifname=%s netns=%s type=%s valid=%s\n' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_IFNAME" "$CNI_NETNS" "$type" "$valid" >> {log}
case "$CNI_COMMAND" in
GC|STATUS)
    if [ -e {down} ]; then
        printf '{{"cniVersion":"1.1.0","code":50,"msg":"logipam is down","details":"test"}}'
        exit 1
    fi
    exit 0 ;;
esac
# Debian's static speaks CNI up to 1.0.0: the same config (and prevResult) in that
# version.
printf '%s' "$in" | jq -c '.cniVersion = "1.0.0" | if .prevResult then .prevResult.cniVersion = "1.0.0" else . end' | exec {static_bin}
"#,
            log = log.display(),
            down = down.display(),
        ),
    );
    let mut ipam = static_ipam(&lab);
    ipam["type"] = json!("logipam");
    let config = standalone(
        &lab,
        "1.1.0",
        &academy(&lab, json!({ "isGateway": true, "ipam": ipam })),
    );
    let a = lab.attach();
    let result = direct(&lab, "ADD", &a, &config).run().expect_result("ADD");
    assert_eq!(
        result_ips(&result),
        [(format!("{}/24", lab.ip(50)), lab.gateway())]
    );
    let mut with_prev = config.clone();
    with_prev["prevResult"] = result;
    direct(&lab, "CHECK", &a, &with_prev)
        .run()
        .expect_silent_success("CHECK");
    let mut gc = config.clone();
    gc["cni.dev/valid-attachments"] = json!([{ "containerID": a.cid, "ifname": "eth0" }]);
    // GC and STATUS as libcni sends them: only CNI_COMMAND and CNI_PATH.
    let bare = |cmd: &str, c: &Value| {
        Call::bare()
            .env("CNI_COMMAND", cmd)
            .env("CNI_PATH", &cni_path(&lab))
            .config(c)
            .run()
    };
    bare("GC", &gc).expect_silent_success("GC");
    assert_eq!(lab.lab_veths().len(), 1, "GC removed a valid attachment");
    bare("STATUS", &config).expect_silent_success("STATUS");
    std::fs::write(&down, "").unwrap();
    assert_cni_error(&bare("STATUS", &config), 50, &["logipam is down"]);
    assert_cni_error(&bare("GC", &gc), 50, &["logipam is down"]);
    std::fs::remove_file(&down).unwrap();
    direct(&lab, "DEL", &a, &with_prev)
        .run()
        .expect_silent_success("DEL");
    direct(&lab, "DEL", &a, &with_prev)
        .run()
        .expect_silent_success("second DEL");
    assert_clean(&lab, &[&lab.netns]);

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let verbs: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(
        verbs,
        ["ADD", "CHECK", "GC", "STATUS", "STATUS", "GC", "DEL", "DEL"],
        "the IPAM plugin's log:\n{text}"
    );
    let attachment = format!("cid={} ifname=eth0 netns={}", a.cid, a.netns_path());
    for (i, l) in lines.iter().enumerate() {
        assert!(l.contains("type=logipam"), "line {i} lost the config: {l}");
        if ["ADD", "CHECK", "DEL"].contains(&verbs[i]) {
            assert!(l.contains(&attachment), "line {i} lost the attachment: {l}");
        }
        if verbs[i] == "GC" {
            assert!(
                l.contains(&format!(r#""containerID":"{}""#, a.cid)),
                "GC did not forward the valid attachments: {l}"
            );
        }
    }
}
