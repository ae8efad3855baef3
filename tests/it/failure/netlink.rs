//! A refused netlink request (strace's error injection, and the LD_PRELOAD shim where
//! strace's per-thread counter cannot reach), and SIGKILL, at every netlink request of
//! ADD: a refused one is undone, a killed one is recovered by the next operations.

use super::*;
use crate::common::*;
use serde_json::json;

/// The netlink requests of a clean ADD, counted under strace (every sendto on a netlink
/// socket, every thread), cross-checked against the shim's own count.
fn clean_netlink_requests(lab: &Lab, shim: &std::path::Path) -> Vec<Syscall> {
    let file = lab.root.join("clean-netlink.trace");
    let (out, text) = run_strace(&lab.call("ADD"), &file, "sendto,sendmsg", None);
    out.expect_result("clean ADD under strace");
    lab.call("DEL")
        .run()
        .expect_silent_success("DEL of the clean ADD");
    let calls: Vec<Syscall> = parse_trace(&text)
        .into_iter()
        .filter(|c| c.line.contains("NETLINK"))
        .collect();
    assert!(
        calls.iter().all(|c| c.name == "sendto"),
        "netlink requests are no longer all sendto; the injections below target sendto:\n{text}"
    );
    assert!(
        calls.len() >= 5,
        "a clean ADD made only {} netlink requests (bridge lookup, veth pair, label, container side at least):\n{text}",
        calls.len()
    );

    let out = run_shim(&lab.call("ADD"), shim, 0, false, true);
    out.expect_result("clean ADD under the shim");
    lab.call("DEL")
        .run()
        .expect_silent_success("DEL of the shim's ADD");
    let want = format!("fault-shim: {} netlink sends", calls.len());
    assert!(
        out.stderr.contains(&want),
        "strace counted {} netlink requests but the shim saw otherwise:\n{out}",
        calls.len()
    );
    calls
}

/// Fails (EPERM) or kills ADD at its `k`-th netlink request: through strace when its
/// per-thread counter reaches that request first, else through the shim. Checks that the
/// fault hit that request; returns the output and how it was done.
pub(super) fn netlink_fault(
    lab: &Lab,
    shim: &std::path::Path,
    requests: &[Syscall],
    k: usize,
    kill: bool,
    p: &mut Vec<String>,
) -> (Out, &'static str) {
    let i = k - 1;
    // A refused request of the netns thread makes the main thread undo the ADD with
    // requests the clean trace does not have, and strace's per-thread counter would
    // fault the main thread's call of the same rank too: the shim faults those.
    let main_thread = requests[i].tid == requests[0].tid;
    if strace_reaches(requests, i) && (kill || main_thread) {
        let inject = Inject {
            syscall: "sendto".into(),
            when: rank_in_thread(requests, i),
            action: if kill {
                Action::Kill
            } else {
                Action::Fail("EPERM")
            },
        };
        let file = lab.root.join("fault-netlink.trace");
        let (out, text) = run_strace(&lab.call("ADD"), &file, "sendto", Some(&inject));
        let calls: Vec<Syscall> = parse_trace(&text)
            .into_iter()
            .filter(|c| c.line.contains("NETLINK"))
            .collect();
        let hit = if kill {
            if !killed_by_strace(&text) {
                p.push(format!("strace did not kill ADD:\n{text}"));
            }
            (calls.len() == k).then(|| &calls[i])
        } else {
            let injected: Vec<usize> = (0..calls.len()).filter(|&c| calls[c].injected()).collect();
            (injected == [i]).then(|| &calls[i])
        };
        match hit {
            Some(c) if c.nlmsg_type() == requests[i].nlmsg_type() => {}
            _ => p.push(format!(
                "the fault did not hit request {k} ({}) alone:\n{text}",
                requests[i].nlmsg_type()
            )),
        }
        (out, "strace")
    } else {
        let out = run_shim(&lab.call("ADD"), shim, k, kill, false);
        let said = format!(
            "fault-shim: {} at netlink send #{k} ",
            if kill { "SIGKILL" } else { "EPERM" }
        );
        match out.stderr.lines().find(|l| l.starts_with(&said)) {
            Some(l) if nlmsg_type_in(l) == requests[i].nlmsg_type() => {}
            _ => p.push(format!(
                "the shim did not fault request {k} ({}):\n{out}",
                requests[i].nlmsg_type()
            )),
        }
        if kill && out.code != -9 {
            p.push(format!("the shim did not kill ADD:\n{out}"));
        }
        (out, "shim")
    }
}

#[test]
fn refused_netlink_request_at_every_point_of_add_is_undone() {
    refused_at_every_point(Lab::new("nlrefuse"));
}

/// With ipMasq the nf_tables batches are netlink requests too: each may be refused.
#[test]
fn refused_netlink_request_at_every_point_of_an_ipmasq_add_is_undone() {
    let lab = Lab::new("nlrefmq");
    lab.always_config("ipMasq", json!(true));
    refused_at_every_point(lab);
}

/// portIsolation adds a request on the port (IFLA_BRPORT_ISOLATED) and its lookup. The
/// VLAN requests (bridge VLAN filtering, the port's VLAN entries, the VLAN's gateway) are
/// faulted the same way in the VM, on a kernel that has them (tests/vm/vlan.sh, part 7).
#[test]
fn refused_netlink_request_at_every_point_of_an_isolated_add_is_undone() {
    let lab = Lab::new("nlrefiso");
    lab.always_config("portIsolation", json!(true));
    refused_at_every_point(lab);
}

/// With macspoofchk the MAC filter's batch (and its lookups) are netlink requests too.
#[test]
fn refused_netlink_request_at_every_point_of_a_macspoofchk_add_is_undone() {
    let lab = Lab::new("nlrefms");
    lab.always_config("macspoofchk", json!(true));
    refused_at_every_point(lab);
}

pub(super) fn refused_at_every_point(lab: Lab) {
    let shim = build_shim(&lab);
    warm_up(&lab);
    let requests = clean_netlink_requests(&lab, &shim);
    let base = settled_snapshot(&lab);
    let mut f = Findings::new();
    let mut how = Vec::new();
    for k in 1..=requests.len() {
        let mut p = Vec::new();
        let (out, via) = netlink_fault(&lab, &shim, &requests, k, false, &mut p);
        how.push(format!("{k}:{}:{via}", requests[k - 1].nlmsg_type()));
        if let Err(e) = check_cni_error(&out, 100, &["kernel refused", "Operation not permitted"]) {
            p.push(format!("{e}:\n{out}"));
        }
        expect_clean(&lab, &base, "after the refused ADD", false, &mut p);
        f.record(
            &lab,
            &format!("EPERM at netlink request {k} of {}", requests.len()),
            p,
        );
    }
    println!(
        "clean ADD: {} netlink requests; injected via {}",
        requests.len(),
        how.join(", ")
    );
    f.finish();
}

#[test]
fn kill_at_every_netlink_request_is_recovered() {
    killed_at_every_point(Lab::new("nlkill"));
}

#[test]
fn kill_at_every_netlink_request_of_an_ipmasq_add_is_recovered() {
    let lab = Lab::new("nlkillmq");
    lab.always_config("ipMasq", json!(true));
    killed_at_every_point(lab);
}

#[test]
fn kill_at_every_netlink_request_of_a_macspoofchk_add_is_recovered() {
    let lab = Lab::new("nlkillms");
    lab.always_config("macspoofchk", json!(true));
    killed_at_every_point(lab);
}

pub(super) fn killed_at_every_point(lab: Lab) {
    let shim = build_shim(&lab);
    warm_up(&lab);
    let requests = clean_netlink_requests(&lab, &shim);
    let base = settled_snapshot(&lab);
    let mut f = Findings::new();
    let mut log = Vec::new();
    for k in 1..=requests.len() {
        let kill = |p: &mut Vec<String>| {
            let (out, _) = netlink_fault(&lab, &shim, &requests, k, true, p);
            if !out.stdout.trim().is_empty() {
                p.push(format!("a killed ADD printed a result:\n{out}"));
            }
        };
        let mut kill_log = Vec::new();
        let p = recover_from_kills(&lab, &base, &kill, &mut kill_log);
        log.push(format!("kill before request {k}: {}", kill_log.join(" | ")));
        f.record(
            &lab,
            &format!("SIGKILL at netlink request {k} of {}", requests.len()),
            p,
        );
    }

    // The last point: everything made, the result about to be printed.
    let kill = |p: &mut Vec<String>| {
        let (trace, stdout) = (lab.root.join("fault-write.trace"), lab.root.join("stdout"));
        let (out, text) = run_killed_at_first_stdout_write(&lab.call("ADD"), &trace, &stdout);
        if !killed_by_strace(&text) || !out.stdout.trim().is_empty() {
            p.push(format!(
                "ADD was not killed before printing its result:\n{out}\n{text}"
            ));
        }
        if lab.lab_veths().len() != 1 {
            p.push("the kill before the result should leave the whole attachment".into());
        }
    };
    let mut kill_log = Vec::new();
    let p = recover_from_kills(&lab, &base, &kill, &mut kill_log);
    log.push(format!(
        "kill before printing the result: {}",
        kill_log.join(" | ")
    ));
    f.record(&lab, "SIGKILL before printing the result", p);
    println!("{}", log.join("\n"));
    f.finish();
}
