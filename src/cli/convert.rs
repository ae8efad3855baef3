//! `academy convert`: a reference chain (bridge, then portmap, firewall, tuning, as
//! podman and containerd write them) collapsed into one academy entry where academy
//! does the job itself: `type` bridge becomes academy, a plain `portmap` becomes the
//! entry's `portMappings` capability, a bare `tuning` (nothing but the `mac`
//! capability) is dropped, and so is an iptables `firewall` (academy accepts its
//! bridge's forwarded traffic itself where iptables' FORWARD policy drops it, as on a
//! host with Docker: src/forward.rs). Whatever academy does not replace stays in the
//! chain, said so on stderr: a `portmap`, `tuning` or `firewall` with options of their
//! own (a firewalld backend, an admin chain of another name).
//!
//! Prints the new conflist; `--dry-run` prints what would change instead, as a diff;
//! `--in-place` rewrites the file (atomically: a temporary file renamed over it).

use serde_json::{json, Map, Value};

use super::{CliError, Parsed};
use crate::config::Config;

pub fn run(args: &[String]) -> Result<(), CliError> {
    let p = Parsed::new(args, &[("--in-place", false), ("--dry-run", false)])?;
    let path = p.single("CONFLIST")?;
    if p.has("--in-place") && p.has("--dry-run") {
        return Err(CliError::Usage(
            "--dry-run shows what --in-place would write: give one of them".into(),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Failed(format!("cannot read {path}: {e}")))?;
    let list: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::Failed(format!("{path} is not valid JSON: {e}")))?;
    let (converted, notes) =
        convert(&list).map_err(|why| CliError::Failed(format!("{path}: {why}")))?;
    accepted(&converted).map_err(|why| CliError::Failed(format!("{path}: {why}")))?;
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
    let tmp = format!("{path}.academy-convert.tmp");
    std::fs::write(&tmp, &new_text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            CliError::Failed(format!("cannot rewrite {path}: {e}"))
        })?;
    eprintln!("academy convert: rewrote {path}");
    Ok(())
}

/// The converted list and one note per change or kept plugin.
pub fn convert(list: &Value) -> Result<(Value, Vec<String>), String> {
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
            ("portmap" | "tuning", _) => {
                notes.push(format!("{kind}: kept, its options are not academy's"));
                kept.push(plugin.clone());
            }
            ("firewall", Some(p)) if plain_firewall(p) => {
                notes.push("firewall: dropped, academy accepts the bridge's forwarded traffic itself where iptables' FORWARD policy drops it (e.g. with Docker installed)".into());
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

/// A firewall academy replaces: the iptables backend (the default) and nothing else.
fn plain_firewall(p: &Map<String, Value>) -> bool {
    p.iter().all(|(k, v)| match k.as_str() {
        "type" => true,
        "backend" => v == &json!("") || v == &json!("iptables"),
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
fn accepted(list: &Value) -> Result<(), String> {
    let mut entry = list["plugins"][0].clone();
    for key in ["cniVersion", "name"] {
        entry[key] = list[key].clone();
    }
    let bytes = serde_json::to_vec(&entry).expect("JSON serialises");
    Config::parse(&bytes)
        .map(drop)
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
        let (got, notes) = convert(&podman()).unwrap();
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
        let (got, _) = convert(&list).unwrap();
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
        assert!(convert(&not_bridge).unwrap_err().contains("macvlan"));
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
        let (got, _) = convert(&list).unwrap();
        assert_eq!(got["plugins"].as_array().unwrap().len(), 1);
        assert_eq!(got["plugins"][0]["type"], "academy");
        assert_eq!(
            got["plugins"][0]["capabilities"],
            json!({"portMappings": true})
        );
        accepted(&got).unwrap();
    }

    #[test]
    fn the_diff_marks_what_changed() {
        assert_eq!(diff("a\nb\nc", "a\nc\nd"), "  a\n- b\n  c\n+ d\n");
    }
}
