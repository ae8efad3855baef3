//! The bandwidth capability and the reference bandwidth plugin's keys, one file per job:
//!
//! - [`rate`]: a TCP flow to and from a shaped container measured against the
//!   configured rate, and an unshaped one beside it;
//! - [`kind`]: the kind's every operation (CHECK, STATUS, restore, GC, DEL);
//! - [`keys`]: the reference's refusals, and the capability with ADD's netns budget;
//! - [`removal`]: DEL's one deletion of the host veth and the ifb, killed, raced by the
//!   container's netns teardown, or refused by the kernel.
//!
//! Each test runs academy in a private node (common/node.rs) whose tc state and ifbs are
//! its own, and sends packets only between namespaces it made, through the node's bridge.

mod keys;
mod kind;
mod rate;
mod removal;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::*;

/// 8 Mbit/s with a 10 kB bucket, both ways.
const RATE: u64 = 8_000_000;
const BURST: u64 = 80_000;

fn shaped_config(lab: &Lab) -> Value {
    let mut c = lab.config("1.1.0");
    for (k, v) in [
        ("ingressRate", RATE),
        ("ingressBurst", BURST),
        ("egressRate", RATE),
        ("egressBurst", BURST),
    ] {
        c[k] = json!(v);
    }
    c
}

/// What of academy's shaping the node holds: its ifbs and its qdiscs other than the
/// kernel's defaults, as `ip` and `tc` list them.
fn shaping(node: &Node) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = node
        .links()
        .into_iter()
        .filter(|l| l.starts_with("bwp"))
        .map(|l| format!("link {l}"))
        .collect();
    let out = run("tc", &["-n", &node.ns, "qdisc", "show"], &[]);
    for line in out.stdout.lines() {
        if line.contains(" tbf ") || line.contains(" ingress ") {
            found.insert(
                line.split(" refcnt")
                    .next()
                    .unwrap_or(line)
                    .trim()
                    .to_string(),
            );
        }
    }
    found
}

fn in_node(node: &Node, argv: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns];
    all.extend_from_slice(argv);
    run("ip", &all, &[])
}
