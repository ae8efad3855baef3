//! Chaining under cnitool: academy first, then the reference portmap and tuning.

use super::*;
use crate::common::*;
use serde_json::{json, Value};

fn nat_rules() -> String {
    run("iptables-save", &["-t", "nat"], &[]).stdout
}

/// Removes portmap's rules for one container when the test ends, also on panic: the
/// Lab guard knows nothing of iptables. portmap's DEL is idempotent.
struct PortmapGuard {
    config: Value,
    cid: String,
}

impl Drop for PortmapGuard {
    fn drop(&mut self) {
        let _ = Call::bare()
            .env("CNI_COMMAND", "DEL")
            .env("CNI_CONTAINERID", &self.cid)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_NETNS", "/var/run/netns/none")
            .env("CNI_PATH", REFERENCE_BIN)
            .config(&self.config)
            .spawn(&format!("{REFERENCE_BIN}/portmap"), &[]);
    }
}

/// academy first, then the reference portmap and tuning, each behind a wrapper that
/// logs the verb and the addresses of the prevResult it got.
#[test]
fn chained_with_portmap_and_tuning() {
    which("iptables"); // portmap's backend; `make setup` installs it
    let lab = Lab::new("dchain");
    let log = lab.root.join("chain.log");
    // portmap 1.1.1's CHECK also looks for its ip6tables chain when the container has
    // no IPv6 address, and fails (containernetworking/plugins#819, fixed later). Its
    // wrapper lets exactly that failure pass: the IPv4 chain was checked before it, and
    // academy's CHECK, which runs first, is what this test is about.
    let tolerate_819 = r#"if [ "$CNI_COMMAND" = CHECK ]; then
    out=$(printf '%s' "$in" | REAL 2>&1) && exit 0
    rc=$?
    case "$out" in *"could not check ipv6 dnat"*) exit 0 ;; esac
    printf '%s' "$out"
    exit $rc
fi
"#;
    for (name, real, extra) in [
        (
            "chain-academy",
            lab.bin_dir.join("academy").display().to_string(),
            "",
        ),
        (
            "chain-portmap",
            format!("{REFERENCE_BIN}/portmap"),
            tolerate_819,
        ),
        ("chain-tuning", format!("{}/tuning", debian_plugins()), ""),
    ] {
        lab.install_script(
            name,
            &format!(
                r#"#!/bin/sh
in=$(cat)
prev=$(printf '%s' "$in" | jq -c '[.prevResult.ips[]?.address]')
printf '%s {name} %s\n' "$CNI_COMMAND" "$prev" >> {log}
{extra}printf '%s' "$in" | exec {real}
"#,
                log = log.display(),
                extra = extra.replace("REAL", &real),
            ),
        );
    }
    let tuned_mac = lab_mac(&lab, 9);
    let mut first = academy(
        &lab,
        json!({
            "isDefaultGateway": true,
            "ipam": host_local(&lab, json!({ "subnet": lab.subnet() }))
        }),
    );
    first["type"] = json!("chain-academy");
    write_list(
        &lab,
        vec![
            first,
            json!({ "type": "chain-portmap", "capabilities": { "portMappings": true } }),
            json!({
                "type": "chain-tuning",
                "mac": tuned_mac,
                "mtu": 1300,
                "sysctl": { "net.ipv4.conf.eth0.arp_filter": "1" }
            }),
        ],
    );
    let port = (47000 + u32::from(lab.slot.n)).to_string();
    let cap = json!({
        "portMappings": [{ "hostPort": port.parse::<u32>().unwrap(), "containerPort": 80, "protocol": "tcp" }]
    })
    .to_string();
    let env = [("CAP_ARGS", cap.as_str())];
    let ns = lab.netns.clone();
    let _portmap = PortmapGuard {
        config: json!({
            "cniVersion": "1.0.0",
            "name": lab.network,
            "type": "portmap",
            "runtimeConfig": serde_json::from_str::<Value>(&cap).unwrap()
        }),
        cid: cnitool_container_id(&netns_path(&ns)),
    };
    // This run's rules: the DNAT to the lab's address, the jump commented with the
    // lab's network name.
    let ours = |nat: &str| -> Vec<String> {
        nat.lines()
            .filter(|l| {
                l.contains(&format!("--to-destination {}:80", lab.ip(2)))
                    || l.contains(&format!("dnat name: \\\"{}\\\"", lab.network))
            })
            .map(str::to_string)
            .collect()
    };

    let result = tool_add(&lab, &ns, &env);
    let addr = lab.ip(2);
    assert_eq!(result_ips(&result), [(format!("{addr}/24"), lab.gateway())]);
    let names: Vec<&str> = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names.len(), 3, "academy's interfaces: {result:#}");
    assert_eq!((names[0], names[2]), (lab.bridge.as_str(), "eth0"));
    assert_eq!(
        result["interfaces"][2]["mac"],
        tuned_mac.as_str(),
        "tuning's MAC is not in the final result"
    );
    let eth0 = link(Some(&ns), "eth0");
    assert_eq!(eth0["address"], tuned_mac.as_str());
    assert_eq!(eth0["mtu"], 1300);
    let arp_filter = run(
        "ip",
        &[
            "netns",
            "exec",
            &ns,
            "cat",
            "/proc/sys/net/ipv4/conf/eth0/arp_filter",
        ],
        &[],
    );
    assert_eq!(
        arp_filter.stdout.trim(),
        "1",
        "tuning's sysctl: {arp_filter}"
    );
    let nat = nat_rules();
    let rules = ours(&nat);
    assert!(
        rules.len() == 2 && rules.iter().all(|l| l.contains(port.as_str())),
        "portmap's DNAT for {port} -> {addr}:80 is missing:\n{nat}"
    );

    // CHECK: academy's check passes although tuning changed the MAC and MTU.
    tool_quiet(&lab, "check", &ns, &env);
    tool_quiet(&lab, "del", &ns, &env);
    assert_clean(&lab, &[&ns]);
    let nat = nat_rules();
    assert_eq!(
        ours(&nat),
        Vec::<String>::new(),
        "portmap's rules are left after DEL:\n{nat}"
    );
    tool_quiet(&lab, "del", &ns, &env);

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let ip_list = format!(r#"["{addr}/24"]"#);
    let want: Vec<String> = [
        ("ADD", "chain-academy", "[]"),
        ("ADD", "chain-portmap", ip_list.as_str()),
        ("ADD", "chain-tuning", ip_list.as_str()),
        ("CHECK", "chain-academy", ip_list.as_str()),
        ("CHECK", "chain-portmap", ip_list.as_str()),
        ("CHECK", "chain-tuning", ip_list.as_str()),
        ("DEL", "chain-tuning", ip_list.as_str()),
        ("DEL", "chain-portmap", ip_list.as_str()),
        ("DEL", "chain-academy", ip_list.as_str()),
        // The second DEL: cnitool's cache is gone, so no prevResult.
        ("DEL", "chain-tuning", "[]"),
        ("DEL", "chain-portmap", "[]"),
        ("DEL", "chain-academy", "[]"),
    ]
    .iter()
    .map(|(v, p, prev)| format!("{v} {p} {prev}"))
    .collect();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got, want, "the chain's log (verb, plugin, prevResult ips)");
}
