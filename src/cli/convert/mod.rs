//! `academy convert`: a reference chain (bridge, then portmap, firewall, tuning, as
//! podman and containerd write them) collapsed into one academy entry where academy
//! does the job itself: `type` bridge becomes academy, a plain `portmap` becomes the
//! entry's `portMappings` capability, a bare `tuning` (nothing but the `mac`
//! capability) is dropped, a `bandwidth` of nothing but its capability and its four
//! rate and burst keys becomes the same in academy's entry (academy shapes the same
//! way, src/firewall/bandwidth/), and so is an iptables `firewall` (academy accepts its
//! bridge's forwarded traffic itself where iptables' FORWARD policy drops it, as on a
//! host with Docker: src/firewall/forward/) unless academy cannot accept there
//! (iptables-legacy, no nf_tables); its `"ingressPolicy": "same-bridge"` (podman's
//! `network create --opt isolate=true`) goes into the academy entry, which isolates the
//! network itself (src/firewall/isolation/). Whatever academy does not replace stays in the
//! chain, said so on stderr: a `portmap`, `tuning`, `bandwidth` or `firewall` with options
//! of their own (a firewalld backend, an admin chain of another name, subnets left
//! unshaped).
//!
//! Before anything is written, stderr lists the live state the reference left for the
//! network's containers (their iptables chains, the store's reservations, the bridge's
//! ports) and what a DEL through the new conflist does about it
//! (src/firewall/reference/).
//!
//! Prints the new conflist; `--dry-run` prints what would change instead, as a diff;
//! `--in-place` rewrites the file (rewrite.rs).

use std::path::Path;

use serde_json::{json, Map, Value};

use super::{CliError, Parsed};
use crate::config::Config;

mod live;
mod rewrite;

use live::{firewall_stays, live_state};
use rewrite::rewrite;

pub fn run(p: &Parsed) -> Result<(), CliError> {
    let path = p.operand();
    if p.has("--in-place") && p.has("--dry-run") {
        return Err(CliError::Usage(
            "--dry-run shows what --in-place would write: give one of them".into(),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Failed(format!("cannot read {path}: {e}")))?;
    let list: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::Failed(format!("{path} is not valid JSON: {e}")))?;
    let (converted, notes) = convert(&list, firewall_stays().as_deref())
        .map_err(|why| CliError::Failed(format!("{path}: {why}")))?;
    let conf = accepted(&converted).map_err(|why| CliError::Failed(format!("{path}: {why}")))?;
    for line in live_state(&conf) {
        eprintln!("academy convert: {line}");
    }
    let new_text = serde_json::to_string_pretty(&converted).expect("JSON serialises") + "\n";
    if p.has("--dry-run") {
        for note in &notes {
            println!("# {note}");
        }
        let old = serde_json::to_string_pretty(&list).expect("JSON serialises");
        print!("{}", diff(&old, &new_text));
        return Ok(());
    }
    for note in &notes {
        eprintln!("academy convert: {note}");
    }
    if !p.has("--in-place") {
        print!("{new_text}");
        return Ok(());
    }
    let target = rewrite(Path::new(path), &new_text)
        .map_err(|e| CliError::Failed(format!("cannot rewrite {path}: {e}")))?;
    if target != Path::new(path) {
        eprintln!(
            "academy convert: rewrote {} (through {path})",
            target.display()
        );
    } else {
        eprintln!("academy convert: rewrote {path}");
    }
    Ok(())
}

/// The converted list and one note per change or kept plugin. `firewall_stays` says why
/// a plain `firewall` must stay on this host, if it must.
pub fn convert(list: &Value, firewall_stays: Option<&str>) -> Result<(Value, Vec<String>), String> {
    let plugins = list
        .get("plugins")
        .and_then(Value::as_array)
        .ok_or("not a conflist: no plugins list")?;
    let Some(Value::Object(first)) = plugins.first() else {
        return Err("its plugins list is empty".into());
    };
    let mut notes = Vec::new();
    let mut entry = first.clone();
    match entry.get("type").and_then(Value::as_str) {
        Some("bridge") => {
            entry.insert("type".into(), json!("academy"));
            notes.push("bridge: type is now academy".into());
        }
        Some("academy") => {}
        other => {
            return Err(format!(
                "its first plugin is {}, not the reference bridge",
                other.unwrap_or("untyped")
            ))
        }
    }
    let mut kept = vec![];
    for plugin in &plugins[1..] {
        let kind = plugin.get("type").and_then(Value::as_str).unwrap_or("?");
        match (kind, plugin.as_object()) {
            ("portmap", Some(p)) if plain_portmap(p) => {
                capability(&mut entry, "portMappings");
                notes.push("portmap: dropped, academy publishes the ports itself (capability portMappings)".into());
            }
            ("tuning", Some(p)) if bare_tuning(p) => {
                if p.get("capabilities").and_then(|c| c.get("mac")) == Some(&json!(true)) {
                    capability(&mut entry, "mac");
                }
                notes.push("tuning: dropped, it set nothing academy does not".into());
            }
            ("bandwidth", Some(p)) if plain_bandwidth(p) && !shapes(&entry) => {
                if p.get("capabilities").and_then(|c| c.get("bandwidth")) == Some(&json!(true)) {
                    capability(&mut entry, "bandwidth");
                }
                for key in BANDWIDTH_KEYS {
                    if let Some(v) = p.get(key) {
                        entry.insert(key.into(), v.clone());
                    }
                }
                notes.push("bandwidth: dropped, academy shapes the container's traffic itself (its keys and capability are academy's now)".into());
            }
            ("bandwidth", Some(p)) if plain_bandwidth(p) => {
                notes.push("bandwidth: kept, the academy entry has shaping keys of its own".into());
                kept.push(plugin.clone());
            }
            ("portmap" | "tuning" | "bandwidth", _) => {
                notes.push(format!("{kind}: kept, its options are not academy's"));
                kept.push(plugin.clone());
            }
            ("firewall", Some(p)) if plain_firewall(p) && firewall_stays.is_some() => {
                let why = firewall_stays.unwrap_or_default();
                notes.push(format!("firewall: kept, {why}"));
                kept.push(plugin.clone());
            }
            ("firewall", Some(p)) if plain_firewall(p) => {
                notes.push("firewall: dropped, academy accepts the bridge's forwarded traffic itself where iptables' FORWARD policy drops it (e.g. with Docker installed)".into());
                if p.get("ingressPolicy") == Some(&json!(SAME_BRIDGE)) {
                    entry.insert("ingressPolicy".into(), json!(SAME_BRIDGE));
                    notes.push(format!("firewall: its ingressPolicy {SAME_BRIDGE} is now academy's (the network's isolation from the other isolated networks)"));
                }
            }
            ("firewall", _) => {
                notes.push("firewall: kept, its options are not academy's".into());
                kept.push(plugin.clone());
            }
            _ => {
                notes.push(format!("{kind}: kept"));
                kept.push(plugin.clone());
            }
        }
    }
    let mut converted = list.clone();
    let mut all = vec![Value::Object(entry)];
    all.extend(kept);
    converted["plugins"] = Value::Array(all);
    Ok((converted, notes))
}

/// A portmap academy replaces: nothing but the capability (and snat at its default).
fn plain_portmap(p: &Map<String, Value>) -> bool {
    p.iter().all(|(k, v)| match k.as_str() {
        "type" => true,
        "snat" => v == &json!(true),
        "capabilities" => v
            .as_object()
            .is_some_and(|c| c.keys().all(|k| k == "portMappings")),
        _ => false,
    })
}

/// The reference bandwidth plugin's keys, which academy's entry takes as they are.
const BANDWIDTH_KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];

/// A bandwidth academy replaces: its capability and its four keys, nothing else (the
/// unshaped or shaped subnets some releases had are not academy's).
fn plain_bandwidth(p: &Map<String, Value>) -> bool {
    p.iter().all(|(k, v)| match k.as_str() {
        "type" => true,
        "capabilities" => v
            .as_object()
            .is_some_and(|c| c.keys().all(|k| k == "bandwidth")),
        k => BANDWIDTH_KEYS.contains(&k),
    })
}

/// Whether academy's entry shapes already (a key or the capability of its own).
fn shapes(entry: &Map<String, Value>) -> bool {
    BANDWIDTH_KEYS.iter().any(|k| entry.contains_key(*k))
        || entry
            .get("capabilities")
            .and_then(|c| c.get("bandwidth"))
            .is_some()
}

/// A firewall academy replaces: the iptables backend (the default) and nothing else.
/// The firewall plugin's ingressPolicy that academy implements (its "isolated" stays
/// the plugin's).
const SAME_BRIDGE: &str = "same-bridge";

/// A firewall academy replaces: the iptables backend (the default) and nothing else but
/// an ingressPolicy academy implements ("open", the default, or "same-bridge").
fn plain_firewall(p: &Map<String, Value>) -> bool {
    p.iter().all(|(k, v)| match k.as_str() {
        "type" => true,
        "backend" => v == &json!("") || v == &json!("iptables"),
        "ingressPolicy" => v == &json!("") || v == &json!("open") || v == &json!(SAME_BRIDGE),
        _ => false,
    })
}

/// A tuning that changes nothing itself: at most the `mac` capability, which academy
/// takes too.
fn bare_tuning(p: &Map<String, Value>) -> bool {
    p.iter().all(|(k, v)| match k.as_str() {
        "type" => true,
        "capabilities" => v.as_object().is_some_and(|c| c.keys().all(|k| k == "mac")),
        _ => false,
    })
}

fn capability(entry: &mut Map<String, Value>, name: &str) {
    let caps = entry.entry("capabilities").or_insert_with(|| json!({}));
    if let Value::Object(caps) = caps {
        caps.insert(name.into(), json!(true));
    }
}

/// The academy entry must be one ADD accepts, with the list's cniVersion and name.
fn accepted(list: &Value) -> Result<Config, String> {
    let mut entry = list["plugins"][0].clone();
    for key in ["cniVersion", "name"] {
        entry[key] = list[key].clone();
    }
    let bytes = serde_json::to_vec(&entry).expect("JSON serialises");
    Config::parse(&bytes)
        .map_err(|e| format!("the converted academy entry is not one academy accepts: {e}"))
}

/// A line diff ("-" old, "+" new, " " both) by longest common subsequence: conflists
/// are a few dozen lines.
fn diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out += &format!("  {}\n", a[i]);
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out += &format!("- {}\n", a[i]);
            i += 1;
        } else {
            out += &format!("+ {}\n", b[j]);
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What podman 4.3 writes for `network create --subnet ... --ipv6 --subnet ...`.
    fn podman() -> Value {
        json!({"cniVersion": "0.4.0", "name": "pmx", "plugins": [
            {"type": "bridge", "bridge": "cni-podman1", "isGateway": true, "ipMasq": true,
             "hairpinMode": true, "capabilities": {"ips": true},
             "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                      "ranges": [[{"subnet": "10.250.9.0/24", "gateway": "10.250.9.1"}],
                                 [{"subnet": "fd00:250:9::/64", "gateway": "fd00:250:9::1"}]]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": ""},
            {"type": "tuning"}
        ]})
    }

    #[test]
    fn podman_s_chain_becomes_one_academy_entry() {
        let (got, notes) = convert(&podman(), None).unwrap();
        let plugins = got["plugins"].as_array().unwrap();
        let types: Vec<&str> = plugins
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["academy"]);
        assert_eq!(
            plugins[0]["capabilities"],
            json!({"ips": true, "portMappings": true})
        );
        assert_eq!(plugins[0]["ipMasq"], true);
        assert_eq!(notes.len(), 4, "{notes:?}");
        accepted(&got).unwrap();
    }

    #[test]
    fn plugins_with_options_of_their_own_stay() {
        let mut list = podman();
        list["plugins"][1]["masqAll"] = json!(true);
        list["plugins"][3]["sysctl"] = json!({"net.core.somaxconn": "500"});
        list["plugins"][2]["backend"] = json!("firewalld");
        let (got, _) = convert(&list, None).unwrap();
        let types: Vec<&str> = got["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["academy", "portmap", "firewall", "tuning"]);
        assert!(got["plugins"][0]
            .get("capabilities")
            .unwrap()
            .get("portMappings")
            .is_none());
        let mut not_bridge = podman();
        not_bridge["plugins"][0]["type"] = json!("macvlan");
        assert!(convert(&not_bridge, None).unwrap_err().contains("macvlan"));
    }

    #[test]
    fn containerd_s_default_network_becomes_one_entry() {
        let list = json!({"cniVersion": "1.0.0", "name": "containerd-net", "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
             "promiscMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]});
        let (got, _) = convert(&list, None).unwrap();
        assert_eq!(got["plugins"].as_array().unwrap().len(), 1);
        assert_eq!(got["plugins"][0]["type"], "academy");
        assert_eq!(
            got["plugins"][0]["capabilities"],
            json!({"portMappings": true})
        );
        accepted(&got).unwrap();
    }

    #[test]
    fn a_plain_firewall_stays_where_academy_cannot_accept_saying_why() {
        let (got, notes) = convert(&podman(), Some("iptables-legacy tables are in use")).unwrap();
        let types: Vec<&str> = got["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["academy", "firewall"]);
        assert!(
            notes.contains(&"firewall: kept, iptables-legacy tables are in use".to_string()),
            "{notes:?}"
        );
    }

    /// What podman 4.3 writes for `network create --opt isolate=true` (args aside).
    fn podman_isolated() -> Value {
        let mut list = podman();
        list["plugins"][2]["ingressPolicy"] = json!("same-bridge");
        list
    }

    #[test]
    fn an_isolating_firewall_becomes_the_entry_s_ingress_policy() {
        let (got, notes) = convert(&podman_isolated(), None).unwrap();
        let plugins = got["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 1, "{got}");
        assert_eq!(plugins[0]["ingressPolicy"], "same-bridge");
        assert!(
            notes
                .iter()
                .any(|n| n.contains("ingressPolicy same-bridge")),
            "{notes:?}"
        );
        assert!(accepted(&got).unwrap().same_bridge_ingress);
        // The default policy, said or not, isolates nothing.
        let mut open = podman();
        open["plugins"][2]["ingressPolicy"] = json!("open");
        let (got, _) = convert(&open, None).unwrap();
        assert_eq!(got["plugins"].as_array().unwrap().len(), 1);
        assert!(got["plugins"][0].get("ingressPolicy").is_none());
    }

    #[test]
    fn a_firewall_with_a_policy_academy_does_not_implement_stays_whole() {
        let mut list = podman();
        list["plugins"][2]["ingressPolicy"] = json!("isolated");
        let (got, _) = convert(&list, None).unwrap();
        let plugins = got["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 2, "{got}");
        assert_eq!(plugins[1]["ingressPolicy"], "isolated");
        assert!(plugins[0].get("ingressPolicy").is_none());
        // A firewall this host needs is kept with its policy, and academy does not
        // isolate a second time.
        let (got, _) = convert(
            &podman_isolated(),
            Some("iptables-legacy tables are in use"),
        )
        .unwrap();
        let plugins = got["plugins"].as_array().unwrap();
        assert_eq!(plugins[1]["ingressPolicy"], "same-bridge");
        assert!(plugins[0].get("ingressPolicy").is_none());
        // firewalld's backend stays the plugin's, policy and all.
        let mut firewalld = podman_isolated();
        firewalld["plugins"][2]["backend"] = json!("firewalld");
        let (got, _) = convert(&firewalld, None).unwrap();
        assert_eq!(got["plugins"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_chained_bandwidth_becomes_the_entry_s_keys_or_capability() {
        let chain = |bandwidth: Value| {
            json!({"cniVersion": "1.0.0", "name": "bw", "plugins": [
                {"type": "bridge", "bridge": "cni0",
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.89.0.0/24"}]]}},
                {"type": "portmap", "capabilities": {"portMappings": true}},
                bandwidth
            ]})
        };
        let types = |v: &Value| -> Vec<String> {
            v["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["type"].as_str().unwrap().to_string())
                .collect()
        };
        // The capability (containerd's and CRI-O's, for a pod's bandwidth annotations).
        let (got, notes) = convert(
            &chain(json!({"type": "bandwidth", "capabilities": {"bandwidth": true}})),
            None,
        )
        .unwrap();
        assert_eq!(types(&got), ["academy"]);
        assert_eq!(
            got["plugins"][0]["capabilities"],
            json!({"portMappings": true, "bandwidth": true})
        );
        assert!(
            notes.iter().any(|n| n.starts_with("bandwidth: dropped")),
            "{notes:?}"
        );
        accepted(&got).unwrap();
        // The keys.
        let (got, _) = convert(
            &chain(
                json!({"type": "bandwidth", "ingressRate": 8000000, "ingressBurst": 80000,
                          "egressRate": 4000000, "egressBurst": 40000}),
            ),
            None,
        )
        .unwrap();
        assert_eq!(types(&got), ["academy"]);
        assert_eq!(got["plugins"][0]["egressRate"], 4000000);
        assert_eq!(got["plugins"][0]["ingressBurst"], 80000);
        let conf = accepted(&got).unwrap();
        assert_eq!(conf.bandwidth.unwrap().egress.unwrap().burst, 40000);
        // Options academy does not have stay with their plugin.
        let (got, _) = convert(
            &chain(
                json!({"type": "bandwidth", "ingressRate": 8000000, "ingressBurst": 80000,
                          "unshapedSubnets": ["10.0.0.0/8"]}),
            ),
            None,
        )
        .unwrap();
        assert_eq!(types(&got), ["academy", "bandwidth"]);
        assert!(got["plugins"][0].get("ingressRate").is_none());
        // Keys the reference refuses are refused for academy too.
        let (bad, _) = convert(
            &chain(json!({"type": "bandwidth", "ingressRate": 8000000})),
            None,
        )
        .unwrap();
        assert!(accepted(&bad)
            .unwrap_err()
            .contains("if rate is set, burst must also be set"));
    }

    #[test]
    fn the_diff_marks_what_changed() {
        assert_eq!(diff("a\nb\nc", "a\nc\nd"), "  a\n- b\n  c\n+ d\n");
    }
}
