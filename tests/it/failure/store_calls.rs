//! The store's file system calls: each one of a clean ADD failed (undone) or killed
//! (recovered), one at a time. The ADD publishes a port, so its runtime record's writes
//! (src/ipam/store/runtime.rs) are among the calls.

use super::*;
use crate::common::*;
use serde_json::Value;

const FILE_CALLS: &str = "%file,write";

/// A clean ADD traced over every file system call and write; returns the trace and the
/// indexes of the calls on the store (their path or fd is under the lab's data dir), all
/// made by the main thread.
fn store_points(lab: &Lab) -> (Vec<Syscall>, Vec<usize>) {
    let file = lab.root.join("clean-store.trace");
    let (out, text) = run_strace(&lab.call("ADD"), &file, FILE_CALLS, None);
    out.expect_result("clean ADD under strace (files)");
    lab.call("DEL").run().expect_silent_success("DEL");
    let calls = parse_trace(&text);
    let data = lab.data_dir.to_string_lossy().into_owned();
    let points: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i].line.contains(&data))
        .collect();
    assert!(
        points
            .iter()
            .any(|&i| calls[i].name.starts_with("renameat") && calls[i].line.contains("runtime")),
        "no write of the runtime record in a clean ADD publishing a port:\n{text}"
    );
    for want in ["renameat", "linkat", "write", "openat"] {
        assert!(
            points.iter().any(|&i| calls[i].name.starts_with(want)),
            "no {want} on the store in a clean ADD; the store changed, update this test:\n{text}"
        );
    }
    for &i in &points {
        assert!(
            strace_reaches(&calls, i),
            "strace cannot single out {}",
            calls[i].line
        );
    }
    (calls, points)
}

/// Every ADD of the lab publishes a port of its own: the store then writes a runtime
/// record beside the reservation.
fn publishing(lab: &Lab) {
    lab.always_config("capabilities", serde_json::json!({"portMappings": true}));
    let port = crate::portmap::host_ports(lab);
    lab.always_config(
        "runtimeConfig",
        serde_json::json!({"portMappings": [crate::portmap::mapping(port, None)]}),
    );
}

fn store_inject(calls: &[Syscall], i: usize, action: Action) -> Inject {
    Inject {
        syscall: calls[i].name.clone(),
        when: rank_in_thread(calls, i),
        action,
    }
}

/// Checks that the fault of `inject` hit the call `want` (a main-thread call of the clean
/// trace) and nothing else.
fn check_store_hit(text: &str, want: &Syscall, inject: &Inject, p: &mut Vec<String>) {
    let calls = parse_trace(text);
    // The main thread is strace's child: the first tid of the trace.
    let main = calls.first().map(|c| c.tid).unwrap_or(0);
    let same: Vec<&Syscall> = calls
        .iter()
        .filter(|c| c.tid == main && c.name == want.name)
        .collect();
    let ok = match (inject.action, same.get(inject.when - 1)) {
        (Action::Kill, Some(c)) => {
            killed_by_strace(text) && same.len() == inject.when && c.shape() == want.shape()
        }
        (_, Some(c)) => {
            c.injected()
                && c.shape() == want.shape()
                && calls.iter().filter(|c| c.injected()).count() == 1
        }
        _ => false,
    };
    if !ok {
        p.push(format!(
            "the fault did not hit `{}` alone:\n{text}",
            want.shape()
        ));
    }
}

#[test]
fn failed_store_call_at_every_point_of_add_is_undone() {
    let lab = Lab::new("fserr");
    publishing(&lab);
    warm_up(&lab);
    let (calls, points) = store_points(&lab);
    let base = settled_snapshot(&lab);
    let data = lab.data_dir.to_string_lossy().into_owned();
    let mut f = Findings::new();
    let mut tolerated = Vec::new();
    for &i in &points {
        let mut p = Vec::new();
        let inject = store_inject(&calls, i, Action::Fail("EIO"));
        let file = lab.root.join("fault-store.trace");
        let (out, text) = run_strace(&lab.call("ADD"), &file, FILE_CALLS, Some(&inject));
        check_store_hit(&text, &calls[i], &inject, &mut p);
        // The round-robin hint is best effort by design: an unreadable or unwritable hint
        // only moves where the search starts. Every other store call must fail the ADD.
        let hint = calls[i].line.contains("last_reserved_ip");
        if hint && out.code == 0 {
            tolerated.push(calls[i].shape());
            match serde_json::from_str::<Value>(out.stdout.trim()) {
                Ok(v) => {
                    if let Err(e) = check_result(&lab, &v, &lab.attach(), "1.1.0", None) {
                        p.push(format!(
                            "ADD tolerated the hint's EIO but: {}",
                            e.join("; ")
                        ));
                    }
                }
                Err(e) => p.push(format!("{e}:\n{out}")),
            }
            del_ok(&lab, "DEL", &mut p);
        } else if let Err(e) = check_cni_error(&out, 5, &[&data]) {
            p.push(format!("{e}:\n{out}"));
        }
        expect_clean(&lab, &base, "after the ADD", false, &mut p);
        f.record(&lab, &format!("EIO at `{}`", calls[i].shape()), p);
    }
    println!(
        "{} store calls in a clean ADD; EIO tolerated (hint) at: {tolerated:?}",
        points.len()
    );
    f.finish();
}

#[test]
fn kill_at_every_store_call_is_recovered() {
    let lab = Lab::new("fskill");
    publishing(&lab);
    warm_up(&lab);
    let (calls, points) = store_points(&lab);
    let base = settled_snapshot(&lab);
    let mut f = Findings::new();
    let mut log = Vec::new();
    for &i in &points {
        let inject = store_inject(&calls, i, Action::Kill);
        let kill = |p: &mut Vec<String>| {
            let file = lab.root.join("fault-store.trace");
            let (out, text) = run_strace(&lab.call("ADD"), &file, FILE_CALLS, Some(&inject));
            check_store_hit(&text, &calls[i], &inject, p);
            if !out.stdout.trim().is_empty() {
                p.push(format!("a killed ADD printed a result:\n{out}"));
            }
        };
        let mut kill_log = Vec::new();
        let p = recover_from_kills(&lab, &base, &kill, &mut kill_log);
        log.push(format!(
            "kill at `{}`: {}",
            calls[i].shape(),
            kill_log.join(" | ")
        ));
        f.record(&lab, &format!("SIGKILL at `{}`", calls[i].shape()), p);
    }
    println!("{}", log.join("\n"));
    f.finish();
}
