//! An "outside" for the ipMasq scenario of tests/cri.rs, and academy's masquerade as nft
//! shows it. The outside is a netns joined to the host by a veth, with addresses of its
//! own subnet and no route back to any pod subnet: a pod's packet can get an answer from
//! it only when it left with the host's address. Packets go only to this netns.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

pub struct Outside {
    pub netns: String,
    host_end: String,
    /// The outside netns's own address (what pods ping).
    pub far: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Outside {
    /// netns `name` with `<prefix>.2/24` on out0; the host has `<prefix>.1/24` on
    /// `host_end`.
    pub fn new(name: &str, host_end: &str, prefix: &str) -> Outside {
        let o = Outside {
            netns: name.to_string(),
            host_end: host_end.to_string(),
            far: format!("{prefix}.2"),
        };
        // A leftover of a killed run goes first (the names are this test's own).
        o.remove();
        ip(&["netns", "add", name]);
        ip(&[
            "link", "add", host_end, "type", "veth", "peer", "name", "out0", "netns", name,
        ]);
        ip(&["addr", "add", &format!("{prefix}.1/24"), "dev", host_end]);
        ip(&["link", "set", host_end, "up"]);
        ip(&[
            "-n",
            name,
            "addr",
            "add",
            &format!("{prefix}.2/24"),
            "dev",
            "out0",
        ]);
        ip(&["-n", name, "link", "set", "out0", "up"]);
        ip(&["-n", name, "link", "set", "lo", "up"]);
        o
    }

    fn remove(&self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_end])
            .output();
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The elements of the network's masquerade sets in `inet academy` (sets
/// `<network>-v4`, `<network>-v6`), as addresses.
pub fn masquerade_elements(network: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for family in ["v4", "v6"] {
        let set = format!("{network}-{family}");
        let out = Command::new("nft")
            .args(["-j", "list", "set", "inet", "academy", &set])
            .output()
            .expect("run nft (make setup installs nftables)");
        if !out.status.success() {
            continue; // no such set or table: no elements
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        for item in v["nftables"].as_array().into_iter().flatten() {
            for e in item["set"]["elem"].as_array().into_iter().flatten() {
                let addr = match e {
                    Value::String(a) => a.clone(),
                    other => other["elem"]["val"].as_str().unwrap_or("?").to_string(),
                };
                found.insert(addr);
            }
        }
    }
    found
}

/// Removes the network's masquerade rules and sets from `inet academy` (the table and
/// its chain are shared by every network, so they stay).
pub fn remove_masquerade(network: &str) {
    let out = Command::new("nft")
        .args([
            "-j",
            "-a",
            "list",
            "chain",
            "inet",
            "academy",
            "postrouting",
        ])
        .output();
    if let Ok(out) = out {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let ours = [
            format!("academy ipMasq {network}-v4"),
            format!("academy ipMasq {network}-v6"),
        ];
        for item in v["nftables"].as_array().into_iter().flatten() {
            let rule = &item["rule"];
            if let (Some(comment), Some(handle)) =
                (rule["comment"].as_str(), rule["handle"].as_u64())
            {
                if ours.iter().any(|c| c == comment) {
                    let handle = handle.to_string();
                    let _ = Command::new("nft")
                        .args(["delete", "rule", "inet", "academy", "postrouting", "handle"])
                        .arg(&handle)
                        .output();
                }
            }
        }
    }
    for family in ["v4", "v6"] {
        let _ = Command::new("nft")
            .args([
                "delete",
                "set",
                "inet",
                "academy",
                &format!("{network}-{family}"),
            ])
            .output();
    }
}
