//! macspoofchk's MAC filter as the tests see it: a network's objects in academy's table
//! `bridge academy`, read (`nft -j`) and cleaned with the `nft` tool, in the host's
//! netns or, given one, inside a netns.

use std::collections::BTreeSet;

use serde_json::Value;

use super::process::{run, Out};

fn nft(netns: Option<&str>, args: &[&str]) -> Out {
    match netns {
        None => run("nft", args, &[]),
        Some(ns) => {
            let mut all = vec!["netns", "exec", ns, "nft"];
            all.extend_from_slice(args);
            run("ip", &all, &[])
        }
    }
}

fn listed(netns: Option<&str>, args: &[&str]) -> Vec<Value> {
    let out = nft(netns, args);
    if out.code != 0 {
        return Vec::new(); // no such table, set or chain: nothing of it
    }
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    v["nftables"].as_array().cloned().unwrap_or_default()
}

/// The network's MAC filter elements in the host's netns: "ports <veth> <mac> <comment>"
/// for the map, "guarded <veth> <comment>" and "allowed <veth> <mac> <comment>" for the
/// sets.
pub fn mac_filter(network: &str) -> BTreeSet<String> {
    mac_filter_in(None, network)
}

pub fn mac_filter_in(netns: Option<&str>, network: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let map = format!("{network}-ports");
    for item in listed(netns, &["-j", "list", "map", "bridge", "academy", &map]) {
        for e in item["map"]["elem"].as_array().into_iter().flatten() {
            found.insert(format!(
                "ports {} {} {}",
                e[0]["elem"]["val"].as_str().unwrap_or("?"),
                e[1].as_str().unwrap_or("?"),
                e[0]["elem"]["comment"].as_str().unwrap_or("")
            ));
        }
    }
    let set = format!("{network}-guarded");
    for item in listed(netns, &["-j", "list", "set", "bridge", "academy", &set]) {
        for e in item["set"]["elem"].as_array().into_iter().flatten() {
            found.insert(format!(
                "guarded {} {}",
                e["elem"]["val"].as_str().unwrap_or("?"),
                e["elem"]["comment"].as_str().unwrap_or("")
            ));
        }
    }
    let set = format!("{network}-allowed");
    for item in listed(netns, &["-j", "list", "set", "bridge", "academy", &set]) {
        for e in item["set"]["elem"].as_array().into_iter().flatten() {
            let pair = &e["elem"]["val"]["concat"];
            found.insert(format!(
                "allowed {} {} {}",
                pair[0].as_str().unwrap_or("?"),
                pair[1].as_str().unwrap_or("?"),
                e["elem"]["comment"].as_str().unwrap_or("")
            ));
        }
    }
    found
}

/// The handles of the network's drop rules in chain prerouting.
fn rule_handles(netns: Option<&str>, network: &str) -> Vec<u64> {
    let args = [
        "-j",
        "-a",
        "list",
        "chain",
        "bridge",
        "academy",
        "prerouting",
    ];
    let comment = format!("academy macspoofchk {network}");
    listed(netns, &args)
        .iter()
        .filter(|i| i["rule"]["comment"].as_str() == Some(comment.as_str()))
        .filter_map(|i| i["rule"]["handle"].as_u64())
        .collect()
}

/// How many drop rules of the network chain prerouting holds (one after an ADD).
pub fn mac_filter_rules(netns: Option<&str>, network: &str) -> usize {
    rule_handles(netns, network).len()
}

/// The objects of table `bridge academy` that name the network (its map, sets and rule),
/// as "kind name" lines: what is left of it.
pub fn mac_filter_objects(netns: Option<&str>, network: &str) -> BTreeSet<String> {
    let names = [
        format!("{network}-ports"),
        format!("{network}-guarded"),
        format!("{network}-allowed"),
    ];
    let comment = format!("academy macspoofchk {network}");
    let mut found = BTreeSet::new();
    for item in listed(netns, &["-j", "list", "table", "bridge", "academy"]) {
        for kind in ["map", "set"] {
            if let Some(name) = item[kind]["name"].as_str() {
                if names.iter().any(|n| n == name) {
                    found.insert(format!("{kind} {name}"));
                }
            }
        }
        if item["rule"]["comment"].as_str() == Some(comment.as_str()) {
            found.insert(format!("rule {comment}"));
        }
    }
    found
}

/// Deletes the host's `bridge academy` table once nothing is left in it. Only for the
/// last lab of the run to go, as nft::remove_table_if_unused. Never panics.
pub fn remove_table_if_unused() {
    let left = listed(None, &["-j", "list", "table", "bridge", "academy"]);
    let busy = left
        .iter()
        .any(|i| i.get("set").is_some() || i.get("map").is_some() || i.get("rule").is_some());
    if !left.is_empty() && !busy {
        let _ = nft(None, &["delete", "table", "bridge", "academy"]);
    }
}

/// Removes the network's rule, map and sets from the host's table (the table and chain,
/// which other networks share, stay).
pub fn remove_mac_filter_objects(network: &str) {
    for handle in rule_handles(None, network) {
        let h = handle.to_string();
        let args = [
            "delete",
            "rule",
            "bridge",
            "academy",
            "prerouting",
            "handle",
            &h,
        ];
        let _ = nft(None, &args);
    }
    for (kind, name) in [
        ("map", format!("{network}-ports")),
        ("set", format!("{network}-guarded")),
        ("set", format!("{network}-allowed")),
    ] {
        let _ = nft(None, &["delete", kind, "bridge", "academy", &name]);
    }
}
