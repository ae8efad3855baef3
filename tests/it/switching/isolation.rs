//! Two `podman network create --opt isolate=true` networks and one without it, as
//! isolation.rs runs them (the reference: bridge + host-local + firewall 1.1.1 with
//! `ingressPolicy: same-bridge`, under cnitool; academy: the same conflists through
//! `academy convert`, which carries the policy into academy's entry), each side in a
//! private node netns of its own: the cross-network rows of its outcome table.

use super::*;
use crate::isolation::{observe, Plugin, PROBES};

#[test]
fn isolated_networks() {
    let lab = Lab::new("swiso");
    let plan = [("a", true), ("b", true), ("c", false)];
    let reference = observe(&lab, "r", Plugin::Reference, &plan);
    let academy = observe(&lab, "a", Plugin::Academy, &plan);
    let test = "isolation::isolated_networks";
    let rows: Vec<Row> = PROBES
        .iter()
        .zip(reference.iter().zip(&academy))
        .take(4)
        .map(|((probe, expected), (r, a))| {
            let probe = format!("--opt isolate=true: {probe}");
            match expected {
                false => Row::closed(test, &probe, *r, *a),
                true => Row::works(test, &probe, *r, *a),
            }
        })
        .collect();
    report(&rows);
}
