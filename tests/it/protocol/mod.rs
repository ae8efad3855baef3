//! The CNI protocol at its edges: bad input of every kind, each answered with one CNI
//! error object (the expected code, a message naming the culprit), no panic, and nothing
//! changed on the host; VERSION and the about text; DEL and CHECK corner cases. Root only.
//!
//! Refusals are tables, in the style of the reference's `testCase` tables
//! (plugins/main/bridge/bridge_test.go): each test builds a list of [`Refusal`]s (a
//! name, the call, the code and the words its message must hold) for one subject, and
//! [`refuse_all`] runs them against one lab, naming every case that failed.
//!
//! | file            | subject                                                         |
//! |-----------------|-----------------------------------------------------------------|
//! | `env.rs`        | the CNI_* variables: missing, empty, malformed, unknown command |
//! | `config.rs`     | stdin and the network config: not JSON, unimplemented keys,     |
//! |                 | ipam blocks, requested addresses, missing and bad fields        |
//! | `versions.rs`   | cniVersion and prevResult errors; VERSION; the about text       |
//! | `namespaces.rs` | unusable netns paths; the ifname or a default route taken       |
//! | `conflicts.rs`  | what another owner holds: a host veth name, the bridge name,    |
//! |                 | the last address                                                |
//! | `del_check.rs`  | DEL with nothing to delete; DEL and CHECK with prevResult       |

mod config;
mod conflicts;
mod del_check;
mod env;
mod namespaces;
mod versions;

use crate::common::*;

/// One case of a refusal table: `call` must fail with `code` and a msg containing each
/// needle, and leave the lab's part of the host exactly as it was.
struct Refusal {
    name: String,
    call: Call,
    code: u64,
    needles: Vec<String>,
}

fn refusal(name: impl Into<String>, call: Call, code: u64, needles: &[&str]) -> Refusal {
    Refusal {
        name: name.into(),
        call,
        code,
        needles: needles.iter().map(|n| n.to_string()).collect(),
    }
}

/// Runs every case of `table` against `lab` and fails naming each broken case, so one
/// broken case does not hide the others. The failure points at the test's table.
#[track_caller]
fn refuse_all(lab: &Lab, table: Vec<Refusal>) {
    assert!(!table.is_empty(), "an empty refusal table checks nothing");
    let count = table.len();
    let mut failures = Vec::new();
    for case in table {
        let before = lab.snapshot();
        let out = case.call.run();
        let after = lab.snapshot();
        let mut problems = Vec::new();
        let needles: Vec<&str> = case.needles.iter().map(String::as_str).collect();
        if let Err(e) = check_cni_error(&out, case.code, &needles) {
            problems.push(e);
        }
        // Validation errors (codes below 100) must touch nothing at all; runtime
        // failures come after the reservation by design, and may leave the store's
        // housekeeping but no reservation.
        let diff = if case.code < 100 {
            after.diff(&before)
        } else {
            after.diff_allowing_store_housekeeping(&before)
        };
        if !diff.is_empty() {
            problems.push(format!("the host changed:\n{diff}"));
        }
        if !problems.is_empty() {
            failures.push(format!("[{}] {}\n{out}", case.name, problems.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} cases failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
