//! nf_tables as the tests see it: academy's `inet academy` table read and cleaned with
//! the `nft` tool (academy itself never execs it).

use std::collections::BTreeSet;

use serde_json::Value;

use super::process::{run, Out};

/// `nft ARGS`, in the host's netns or (Some) in a named one.
pub fn nft_in(netns: Option<&str>, args: &[&str]) -> Out {
    match netns {
        None => run("nft", args, &[]),
        Some(ns) => {
            let mut all = vec!["netns", "exec", ns, "nft"];
            all.extend_from_slice(args);
            run("ip", &all, &[])
        }
    }
}

/// The elements of a network's masquerade sets, as "address comment".
pub fn elements(network: &str) -> BTreeSet<String> {
    elements_in(None, network)
}

/// [`elements`] in a named netns (None: the host's).
pub fn elements_in(netns: Option<&str>, network: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for family in ["v4", "v6"] {
        let set = format!("{network}-{family}");
        let out = nft_in(netns, &["-j", "list", "set", "inet", "academy", &set]);
        if out.code != 0 {
            continue; // no such set (or table): no elements
        }
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
        for item in v["nftables"].as_array().into_iter().flatten() {
            for e in item["set"]["elem"].as_array().into_iter().flatten() {
                let (addr, comment) = match e {
                    Value::String(a) => (a.clone(), String::new()),
                    other => (
                        other["elem"]["val"].as_str().unwrap_or("?").to_string(),
                        other["elem"]["comment"].as_str().unwrap_or("").to_string(),
                    ),
                };
                found.insert(format!("{addr} {comment}").trim().to_string());
            }
        }
    }
    found
}

/// The addresses in a network's masquerade sets (the elements without their comments).
pub fn addresses(network: &str) -> BTreeSet<String> {
    elements(network)
        .iter()
        .filter_map(|e| e.split(' ').next().map(str::to_string))
        .collect()
}

/// Whether the network's masquerade rule of `family` ("v4"/"v6") is in the chain.
pub fn has_rule(network: &str, family: &str) -> bool {
    rule_handles_in(None, network)
        .iter()
        .any(|(set, _)| *set == format!("{network}-{family}"))
}

/// academy's rules of the network (comment "academy ipMasq ...", looking up one of the
/// network's sets), as (set, handle). By the set the rule looks up, not by its
/// comment, which is capped for long network names.
pub fn rule_handles_in(netns: Option<&str>, network: &str) -> Vec<(String, u64)> {
    let out = nft_in(
        netns,
        &[
            "-j",
            "-a",
            "list",
            "chain",
            "inet",
            "academy",
            "postrouting",
        ],
    );
    if out.code != 0 {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    let mut found = Vec::new();
    for item in v["nftables"].as_array().into_iter().flatten() {
        let rule = &item["rule"];
        let (Some(comment), Some(handle)) = (rule["comment"].as_str(), rule["handle"].as_u64())
        else {
            continue;
        };
        if !comment.starts_with("academy ipMasq ") {
            continue;
        }
        let exprs = rule["expr"].to_string();
        for family in ["v4", "v6"] {
            let set = format!("{network}-{family}");
            if exprs.contains(&format!("\"@{set}\"")) {
                found.push((set, handle));
            }
        }
    }
    found
}

/// The comments of the network's rules of `family` in a named netns (None: the host's).
pub fn rule_comments_in(netns: Option<&str>, network: &str, family: &str) -> Vec<String> {
    let handles: Vec<u64> = rule_handles_in(netns, network)
        .into_iter()
        .filter(|(set, _)| *set == format!("{network}-{family}"))
        .map(|(_, h)| h)
        .collect();
    let out = nft_in(
        netns,
        &[
            "-j",
            "-a",
            "list",
            "chain",
            "inet",
            "academy",
            "postrouting",
        ],
    );
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    v["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| {
            i["rule"]["handle"]
                .as_u64()
                .is_some_and(|h| handles.contains(&h))
        })
        .filter_map(|i| i["rule"]["comment"].as_str().map(str::to_string))
        .collect()
}

/// The published ports the network's attachments hold, from the four shared maps, as
/// "<map> <key> -> <data> <holder>", e.g. "_ports-v4 tcp . 8080 -> 10.0.0.2 . 80 net:c:eth0".
pub fn published(network: &str) -> BTreeSet<String> {
    published_in(None, network)
}

/// `published` in a named netns (None: the host's).
pub fn published_in(netns: Option<&str>, network: &str) -> BTreeSet<String> {
    published_entries(netns, network)
        .into_iter()
        .map(|(map, key, data, holder)| format!("{map} {key} -> {data} {holder}"))
        .collect()
}

/// (map, key, data, holder) of each element held by one of the network's attachments.
fn published_entries(netns: Option<&str>, network: &str) -> Vec<(String, String, String, String)> {
    let mut found = Vec::new();
    let prefix = format!("{}:", crate::common::network_key(network));
    let text = |v: &Value| match v {
        Value::Object(o) if o.contains_key("concat") => v["concat"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.to_string().trim_matches('"').to_string())
            .collect::<Vec<_>>()
            .join(" . "),
        other => other.to_string().trim_matches('"').to_string(),
    };
    for map in PORT_MAPS {
        let out = nft_in(netns, &["-j", "list", "map", "inet", "academy", map]);
        if out.code != 0 {
            continue;
        }
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
        for item in v["nftables"].as_array().into_iter().flatten() {
            for pair in item["map"]["elem"].as_array().into_iter().flatten() {
                let holder = pair[0]["elem"]["comment"].as_str().unwrap_or("");
                if holder.starts_with(&prefix) {
                    let key = text(&pair[0]["elem"]["val"]);
                    found.push((map.to_string(), key, text(&pair[1]), holder.to_string()));
                }
            }
        }
    }
    found
}

pub const PORT_MAPS: [&str; 4] = [
    "_ports-v4",
    "_ports-v6",
    "_ports-hostip-v4",
    "_ports-hostip-v6",
];

/// Removes a network's rules, sets and published ports, and its bridge's elements in
/// the shared sets (hairpin mark, loopback guard, isolation): a lab that deletes its
/// bridge and store without the network's last DEL (a failed test) never has academy
/// release them. Never panics: it runs from Drop guards.
pub fn remove_network(network: &str, bridge: &str) {
    let pair = format!("{{ \"{bridge}\" . \"{bridge}\" }}");
    let single = format!("{{ \"{bridge}\" }}");
    for (set, element) in [
        ("_hairpin", &pair),
        ("_isolated", &pair),
        ("_localnet", &single),
    ] {
        let _ = run(
            "nft",
            &["delete", "element", "inet", "academy", set, element],
            &[],
        );
    }
    for (map, key, _, _) in published_entries(None, network) {
        let element = format!("{{ {key} }}");
        let _ = run(
            "nft",
            &["delete", "element", "inet", "academy", &map, &element],
            &[],
        );
    }
    for (_, handle) in rule_handles_in(None, network) {
        let h = handle.to_string();
        let _ = run(
            "nft",
            &[
                "delete",
                "rule",
                "inet",
                "academy",
                "postrouting",
                "handle",
                &h,
            ],
            &[],
        );
    }
    for family in ["v4", "v6"] {
        let set = format!("{network}-{family}");
        let _ = run("nft", &["delete", "set", "inet", "academy", &set], &[]);
    }
}

/// Deletes academy's table once no set or map of it is in use. Only for the last lab of
/// the run to go (lab.rs): deleting it while another test's ADD is between its look and
/// its batch would take that ADD's new rule and set with it.
pub fn remove_table_if_unused() {
    let out = run("nft", &["-j", "list", "table", "inet", "academy"], &[]);
    if out.code == 0 {
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
        // Port mapping's maps and hairpin set are shared by every network: they count
        // only while they hold an element.
        let sets = v["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("set").or_else(|| i.get("map")))
            .filter(|s| {
                let shared = s["name"].as_str().is_some_and(|n| n.starts_with('_'));
                !shared || s["elem"].as_array().is_some_and(|e| !e.is_empty())
            })
            .count();
        if sets == 0 {
            let _ = run("nft", &["delete", "table", "inet", "academy"], &[]);
        }
    }
}
