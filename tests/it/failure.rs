//! Failure atomicity (issue 4), black-box: the plugin binary runs unchanged while its
//! system calls are failed, killed or held from outside (strace's fault injection, and an
//! LD_PRELOAD shim for the netlink requests strace's per-thread counter cannot reach; see
//! common/strace.rs and common/shim.rs). Root only.
//!
//! # What academy guarantees when ADD, DEL and GC race
//!
//! A runtime never runs two operations for one attachment at once and runs its GC alone;
//! two runtimes on one node can still interleave anything. What the code makes true
//! (src/ipam/store.rs, src/gc.rs, src/add.rs, src/wire.rs) and the tests check:
//!
//! 1. **ADD never hands one address to two attachments.** A reservation appears only by an
//!    exclusive `linkat(2)` of a file that already names its holder; a lost race is EEXIST
//!    and ADD tries the next candidate. (`add_del_bursts_racing_gc_keep_valid_attachments_intact` here;
//!    `ipam_lab::parallel_adds_never_share_an_address` and
//!    `ipam_lab::oversubscribed_parallel_adds_fill_the_range_exactly`, where 28 ADDs race
//!    for 24 addresses: 24 distinct successes, 4 code 110.)
//! 2. **GC keeps what its valid list names**: reservations whose file names a listed
//!    (containerID, ifname), their holder indexes, host veths whose alias names a listed
//!    attachment, and unlabelled veths under a listed attachment's derived name (an ADD
//!    between creating and labelling its pair). ADDs and DELs of listed attachments may
//!    run during a GC. (`add_del_bursts_racing_gc_keep_valid_attachments_intact`: ADD/DEL bursts of listed attachments against back-to-back
//!    GCs; every ADD and DEL succeeds, no address is live twice, stale attachments are
//!    freed, survivors keep their files and veths and ping their gateway.) Exception:
//!    the first limitation below.
//! 3. **DEL, and the undo of a failed ADD, delete only their own**: a reservation only if
//!    its file names their attachment, a link only if its alias does (or it is an
//!    unlabelled veth of their derived name); another owner's link is never deleted.
//! 4. **An ADD that a concurrent GC does not list loses everything to that GC**, as it
//!    would a moment after succeeding, but never reports success for what GC removed
//!    before ADD's last step: that step checks both the host veth (still there, still
//!    this attachment's) and the reservation, so any removal before it makes ADD fail
//!    with code 11 and undo itself (`unlisted_add_losing_its_reservation_to_gc_fails_with_11`,
//!    `unlisted_add_losing_its_veth_to_gc_does_not_succeed`); GC deleting the pair while ADD is
//!    still wiring makes a netlink request fail (code 100) and ADD undo itself; GC
//!    entirely after ADD's last step is indistinguishable from GC after ADD.
//! 5. **Removal never takes a re-reserved address**: GC and DEL lock the reservation
//!    file they read (flock on that inode) and unlink only while the name still points
//!    at it, so a reservation freed by one remover and re-reserved by another attachment
//!    is never removed by a second remover that read the old one
//!    (`gc_never_frees_a_listed_attachment_re_reserving_an_address`,
//!    `del_never_frees_another_attachment_s_reservation`).
//!
//! Not guaranteed:
//!
//! - An unlabelled pair is recognised by name and bridge only, so the GC of *another*
//!   network on the same bridge can delete an ADD's pair in the instant between creating
//!   and labelling it (that ADD then fails with code 100 and undoes itself).
//!
//! Two runtimes that share a network name must each list the other's attachments in GC
//! (they cannot), so give each runtime its own network name (hence its own store); and
//! networks should not share a bridge. Within one runtime, guarantees 1 to 5 hold.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

/// Every broken expectation of a fault loop, so one failing point does not hide others.
struct Findings {
    problems: Vec<String>,
    cases: usize,
}

impl Findings {
    fn new() -> Self {
        Findings {
            problems: Vec::new(),
            cases: 0,
        }
    }

    /// Records a case; after a failed one the lab is reset (GC with an empty list, DEL),
    /// so that the next case starts from the same state and fails only on its own account.
    fn record(&mut self, lab: &Lab, case: &str, problems: Vec<String>) {
        self.cases += 1;
        if !problems.is_empty() {
            self.problems
                .push(format!("[{case}]\n  - {}", problems.join("\n  - ")));
            let _ = gc(lab, &[]);
            let _ = lab.call("DEL").run();
        }
    }

    fn finish(self) {
        assert!(self.cases > 0, "no case ran");
        assert!(
            self.problems.is_empty(),
            "{} of {} cases failed:\n\n{}",
            self.problems.len(),
            self.cases,
            self.problems.join("\n\n")
        );
    }
}

/// An ADD and a DEL, so that the bridge and the store's folders exist and every later
/// ADD takes the same path (the one a node serves all day).
fn warm_up(lab: &Lab) {
    lab.call("ADD").run().expect_result("warm-up ADD");
    lab.call("DEL").run().expect_silent_success("warm-up DEL");
    assert_eq!(lab.reservations(), Vec::<String>::new());
}

/// The lab is as `base` (the hint may have moved; `.tmp.*` leftovers of a killed write
/// are tolerated when `allow_tmp`): no reservation, no holder index, no veth of the lab,
/// no port on the bridge, the netns as it was.
fn expect_clean(lab: &Lab, base: &Snapshot, what: &str, allow_tmp: bool, p: &mut Vec<String>) {
    let take = || {
        let after = if allow_tmp {
            snapshot_without_tmp(lab)
        } else {
            settled_snapshot(lab)
        };
        after.diff_allowing_store_housekeeping(base)
    };
    let mut d = take();
    // A snapshot is a handful of `ip` dumps while other tests change the host: look
    // twice more before calling a difference real.
    for _ in 0..2 {
        if d.is_empty() {
            break;
        }
        eprintln!("{what}: snapshot differs, looking again:\n{d}");
        std::thread::sleep(Duration::from_millis(50));
        d = take();
    }
    if !d.is_empty() {
        p.push(format!("{what}: the lab is not as before:\n{d}"));
    }
    let veths = lab.lab_veths();
    if !veths.is_empty() {
        p.push(format!("{what}: veths left: {veths:?}"));
    }
    let left = if allow_tmp {
        live_reservations(lab)
    } else {
        lab.reservations()
    };
    if !left.is_empty() {
        p.push(format!("{what}: store not empty: {left:?}"));
    }
}

fn add_ok(lab: &Lab, what: &str, p: &mut Vec<String>) -> Option<Value> {
    let out = lab.call("ADD").run();
    if out.code != 0 {
        p.push(format!("{what}: ADD failed:\n{out}"));
        return None;
    }
    let v = match serde_json::from_str::<Value>(out.stdout.trim()) {
        Ok(v) => v,
        Err(e) => {
            p.push(format!("{what}: ADD result is not JSON ({e}):\n{out}"));
            return None;
        }
    };
    if let Err(problems) = check_result(lab, &v, &lab.attach(), "1.1.0", None) {
        p.push(format!(
            "{what}: ADD result invalid: {}",
            problems.join("; ")
        ));
    }
    Some(v)
}

fn del_ok(lab: &Lab, what: &str, p: &mut Vec<String>) {
    let out = lab.call("DEL").run();
    if out.code != 0 || !out.stdout.trim().is_empty() {
        p.push(format!("{what}: DEL did not succeed silently:\n{out}"));
    }
}

fn gc_ok(lab: &Lab, valid: &[(&str, &str)], what: &str, p: &mut Vec<String>) {
    let out = gc(lab, valid);
    if out.code != 0 || !out.stdout.trim().is_empty() {
        p.push(format!("{what}: GC did not succeed silently:\n{out}"));
    }
}

/// What a kill left behind, for the test's log.
fn leftovers(lab: &Lab) -> String {
    format!(
        "store {:?}, tmp {:?}, veths {:?}, netns {:?}",
        live_reservations(lab),
        tmp_files(lab),
        lab.lab_veths(),
        netns_link_names(&lab.netns)
    )
}

/// After each kill made by `kill` (which records its own problems): (a) DEL of the same
/// attachment leaves the lab clean and a new ADD then succeeds; (b) a retried ADD without
/// DEL succeeds holding exactly one address; (c) GC with an empty list leaves it clean.
fn recover_from_kills(
    lab: &Lab,
    base: &Snapshot,
    kill: &dyn Fn(&mut Vec<String>),
    log: &mut Vec<String>,
) -> Vec<String> {
    let mut p = Vec::new();
    let holder = format!("{}\r\neth0", lab.cid);

    kill(&mut p);
    log.push(leftovers(lab));
    del_ok(lab, "(a) DEL after the kill", &mut p);
    expect_clean(lab, base, "(a) after DEL", true, &mut p);
    if add_ok(lab, "(a) ADD after DEL", &mut p).is_some() {
        del_ok(lab, "(a) DEL of that ADD", &mut p);
    }
    expect_clean(lab, base, "(a) at the end", true, &mut p);

    kill(&mut p);
    if let Some(v) = add_ok(lab, "(b) ADD retried after the kill", &mut p) {
        let files = address_files(lab);
        let addr = result_address(&v);
        if files != vec![addr.clone()] || holder_of(lab, &addr).as_deref() != Some(&holder) {
            p.push(format!(
                "(b) the retried ADD reports {addr} but the store holds {files:?}"
            ));
        }
        del_ok(lab, "(b) DEL of the retried ADD", &mut p);
    }
    expect_clean(lab, base, "(b) at the end", true, &mut p);

    kill(&mut p);
    gc_ok(lab, &[], "(c) GC [] after the kill", &mut p);
    expect_clean(lab, base, "(c) after GC", true, &mut p);
    del_ok(lab, "(c) the runtime's late DEL", &mut p);
    expect_clean(lab, base, "(c) at the end", true, &mut p);
    p
}

// ---------------------------------------------------------------------------------------
// Netlink requests
// ---------------------------------------------------------------------------------------

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
fn netlink_fault(
    lab: &Lab,
    shim: &std::path::Path,
    requests: &[Syscall],
    k: usize,
    kill: bool,
    p: &mut Vec<String>,
) -> (Out, &'static str) {
    let i = k - 1;
    if strace_reaches(requests, i) {
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

fn refused_at_every_point(lab: Lab) {
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

fn killed_at_every_point(lab: Lab) {
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
    let file = lab.root.join("clean-write.trace");
    let (out, text) = run_strace(&lab.call("ADD"), &file, "write", None);
    out.expect_result("clean ADD under strace (write)");
    lab.call("DEL").run().expect_silent_success("DEL");
    let writes = parse_trace(&text);
    let i = writes
        .iter()
        .rposition(|c| c.line.contains("write(1<"))
        .unwrap_or_else(|| panic!("no write of the result to stdout:\n{text}"));
    assert!(strace_reaches(&writes, i));
    let inject = Inject {
        syscall: "write".into(),
        when: rank_in_thread(&writes, i),
        action: Action::Kill,
    };
    let kill = |p: &mut Vec<String>| {
        let file = lab.root.join("fault-write.trace");
        let (out, text) = run_strace(&lab.call("ADD"), &file, "write", Some(&inject));
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

// ---------------------------------------------------------------------------------------
// The store's file system calls
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Seed 004: a runtime that restarted never sends the DELs that were due
// ---------------------------------------------------------------------------------------

#[test]
fn seed_004_gc_frees_exactly_the_dead_after_a_restart() {
    let lab = Lab::new("seed004");
    // Survivors s1 s2; dead d1 d2 (netns deleted, no DEL); f1 forgotten by the runtime
    // while its netns lingers (a leaked sandbox), so its host veth does not vanish by itself.
    let names = ["s1", "s2", "d1", "d2", "f1"];
    let mut attached: BTreeMap<&str, (Attach, Value)> = BTreeMap::new();
    for n in names {
        let a = Attach {
            cid: format!("{}-{n}", lab.cid),
            ifname: "eth0".into(),
            netns: lab.add_netns(n),
        };
        let r = lab.call_for("ADD", &a).run().expect_result(n);
        assert_result_valid(&lab, &r, &a, "1.1.0", None);
        attached.insert(n, (a, r));
    }
    for n in ["d1", "d2"] {
        ip(&["netns", "del", &attached[n].0.netns]);
    }
    let valid: Vec<(&str, &str)> = ["s1", "s2"]
        .iter()
        .map(|n| (attached[n].0.cid.as_str(), "eth0"))
        .collect();
    let out = gc(&lab, &valid);
    out.expect_silent_success("GC with the survivors");

    let mut p = Vec::new();
    for n in ["d1", "d2", "f1"] {
        let (_, r) = &attached[n];
        let addr = result_address(r);
        if let Some(h) = holder_of(&lab, &addr) {
            p.push(format!("{n}'s {addr} still reserved (by {h:?})"));
        }
        let veth = result_host_veth(r);
        // A deleted netns takes its veths with it, asynchronously.
        if !wait_until(Duration::from_secs(3), || !link_exists(&veth)) {
            p.push(format!("{n}'s host veth {veth} is still there"));
        }
        if !out.stderr.contains(&addr) {
            p.push(format!(
                "GC's log does not name {addr} of {n}: {}",
                out.stderr
            ));
        }
    }
    let f1 = &attached["f1"].0;
    if netns_link_names(&f1.netns).contains(&"eth0".to_string()) {
        p.push("f1's netns still has eth0: its pair was not deleted".into());
    }
    let mut files = Vec::new();
    for n in ["s1", "s2"] {
        let (a, r) = &attached[n];
        let addr = result_address(r);
        files.push(addr.clone());
        if holder_of(&lab, &addr) != Some(format!("{}\r\neth0", a.cid)) {
            p.push(format!("survivor {n} lost its reservation {addr}"));
        }
        if let Err(e) = check_result(&lab, r, a, "1.1.0", Some(&addr)) {
            p.push(format!("survivor {n} was touched: {}", e.join("; ")));
        }
        if !ping_from(&a.netns, &lab.gateway(), 1) {
            p.push(format!("survivor {n} cannot ping its gateway after GC"));
        }
        files.push(format!("holders/{}:eth0", a.cid));
    }
    files.sort();
    if lab.reservations() != files {
        p.push(format!(
            "the store holds {:?}, want exactly the survivors' {files:?}",
            lab.reservations()
        ));
    }
    let mut veths = lab.lab_veths();
    veths.sort();
    let mut want: Vec<String> = ["s1", "s2"]
        .iter()
        .map(|n| result_host_veth(&attached[n].1))
        .collect();
    want.sort();
    if veths != want {
        p.push(format!(
            "host veths {veths:?}, want the survivors' {want:?}"
        ));
    }
    assert!(p.is_empty(), "{}\nGC:\n{out}", p.join("\n"));

    for n in names {
        lab.call_for("DEL", &attached[n].0)
            .run()
            .expect_silent_success(n);
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
    assert_eq!(lab.lab_veths(), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------

#[test]
fn add_del_bursts_racing_gc_keep_valid_attachments_intact() {
    let lab = Lab::new("burst");
    // 16 allocatable addresses for 8 listed attachments and 4 stale ones, so freed
    // addresses are re-reserved within the burst.
    let config = config_with(
        &lab,
        &[
            ("rangeStart", json!(lab.ip(10))),
            ("rangeEnd", json!(lab.ip(25))),
        ],
    );
    let listed: Vec<Attach> = (0..8).map(|i| lab.attachment(&format!("v{i}"))).collect();
    let stale: Vec<Attach> = (0..4).map(|i| lab.attachment(&format!("x{i}"))).collect();
    for a in &stale {
        lab.call_for("ADD", a)
            .config(&config)
            .run()
            .expect_result("stale ADD");
    }
    let valid: Vec<(&str, &str)> = listed.iter().map(|a| (a.cid.as_str(), "eth0")).collect();

    const ROUNDS: usize = 10;
    let live: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    let problems: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let gcs = AtomicUsize::new(0);
    let adds = AtomicUsize::new(0);
    let fail = |m: String| problems.lock().unwrap().push(m);

    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let out = gc_call(&lab, config.clone(), &valid).run();
                if out.code != 0 || !out.stdout.trim().is_empty() {
                    fail(format!("GC failed during the burst:\n{out}"));
                }
                gcs.fetch_add(1, Ordering::SeqCst);
            }
        });
        let workers: Vec<_> = listed
            .chunks(2)
            .map(|pair| {
                let (lab, live, fail, config, adds) = (&lab, &live, &fail, &config, &adds);
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        for a in pair {
                            let out = lab.call_for("ADD", a).config(config).run();
                            if out.code != 0 {
                                fail(format!("{} ADD (round {round}) failed:\n{out}", a.cid));
                                continue;
                            }
                            adds.fetch_add(1, Ordering::SeqCst);
                            let r = out.json();
                            let addr = result_address(&r);
                            if let Some(other) =
                                live.lock().unwrap().insert(addr.clone(), a.cid.clone())
                            {
                                fail(format!("{addr} given to {} while {other} holds it", a.cid));
                            }
                            if holder_of(lab, &addr) != Some(format!("{}\r\neth0", a.cid)) {
                                fail(format!(
                                    "{} lost its reservation {addr} right after ADD",
                                    a.cid
                                ));
                            }
                            if !link_exists(&result_host_veth(&r)) {
                                fail(format!("{} lost its veth right after ADD", a.cid));
                            }
                        }
                        if round + 1 == ROUNDS {
                            break; // the last round's attachments stay, as survivors
                        }
                        for a in pair {
                            let addr = live
                                .lock()
                                .unwrap()
                                .iter()
                                .find(|(_, c)| **c == a.cid)
                                .map(|(ad, _)| ad.clone());
                            if let Some(addr) = &addr {
                                if holder_of(lab, addr) != Some(format!("{}\r\neth0", a.cid)) {
                                    fail(format!(
                                        "{} lost its reservation {addr} before DEL",
                                        a.cid
                                    ));
                                }
                                live.lock().unwrap().remove(addr);
                            }
                            let out = lab.call_for("DEL", a).config(config).run();
                            if out.code != 0 {
                                fail(format!("{} DEL failed:\n{out}", a.cid));
                            }
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    println!(
        "{} ADDs of listed attachments raced {} GCs",
        adds.load(Ordering::SeqCst),
        gcs.load(Ordering::SeqCst)
    );
    let problems = problems.into_inner().unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        gcs.load(Ordering::SeqCst) >= 3,
        "only {} GCs ran during the burst",
        gcs.load(Ordering::SeqCst)
    );
    assert_eq!(adds.load(Ordering::SeqCst), listed.len() * ROUNDS);

    // One more GC with the list: the stale ones are gone, the survivors are intact.
    gc_call(&lab, config.clone(), &valid)
        .run()
        .expect_silent_success("GC after the burst");
    let live = live.into_inner().unwrap();
    assert_eq!(live.len(), listed.len());
    let mut want: Vec<String> = live.keys().cloned().collect();
    want.extend(listed.iter().map(|a| format!("holders/{}:eth0", a.cid)));
    want.sort();
    assert_eq!(
        lab.reservations(),
        want,
        "only the survivors may hold addresses"
    );
    for a in &stale {
        assert!(
            !link_exists(&hostveth_name(&lab, a)),
            "stale {} kept its veth",
            a.cid
        );
    }
    assert_eq!(lab.lab_veths().len(), listed.len());
    for a in listed.iter().take(2) {
        assert!(
            ping_from(&a.netns, &lab.gateway(), 1),
            "{} cannot ping its gateway",
            a.cid
        );
    }

    // A final GC with an empty list, then the runtime's DELs: nothing left.
    gc_call(&lab, config.clone(), &[])
        .run()
        .expect_silent_success("GC []");
    for a in listed.iter().chain(&stale) {
        lab.call_for("DEL", a)
            .config(&config)
            .run()
            .expect_silent_success("DEL after GC");
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
    assert_eq!(lab.lab_veths(), Vec::<String>::new());
}

/// The derived host veth name of an attachment, read from the kernel through its alias.
fn hostveth_name(lab: &Lab, a: &Attach) -> String {
    let alias = format!("academy:{}:{}:{}", lab.network, a.cid, a.ifname);
    host_links()
        .iter()
        .find(|l| l["ifalias"].as_str() == Some(alias.as_str()))
        .and_then(|l| l["ifname"].as_str())
        .unwrap_or("(none)")
        .to_string()
}

/// A config whose range is the single address .2, so the next ADD must reuse it.
fn one_address(lab: &Lab) -> Value {
    config_with(
        lab,
        &[
            ("rangeStart", json!(lab.ip(2))),
            ("rangeEnd", json!(lab.ip(2))),
        ],
    )
}

fn trace_has(file: &PathBuf, needle: &str) -> bool {
    std::fs::read_to_string(file).is_ok_and(|t| t.contains(needle))
}

/// Guarantee 5: GC reads a reservation's holder, then unlinks the name. Held between the
/// two, with the address freed by its holder's DEL and re-reserved by a listed attachment
/// meanwhile, GC must not delete the listed attachment's reservation (it did before the
/// removal locked the inode it read).
#[test]
fn gc_never_frees_a_listed_attachment_re_reserving_an_address() {
    let lab = Lab::new("gcrace");
    let config = one_address(&lab);
    let (o, v, w) = (
        lab.attachment("o"),
        lab.attachment("v"),
        lab.attachment("w"),
    );
    let addr = lab.ip(2);
    lab.call_for("ADD", &o)
        .config(&config)
        .run()
        .expect_result("ADD o");

    // GC lists v only; it is held just before its first unlinkat, o's reservation.
    let file = lab.root.join("gc.trace");
    let inject = Inject {
        syscall: "unlinkat".into(),
        when: 1,
        action: Action::Delay(1_500_000),
    };
    let gc_run = start_strace(
        &gc_call(&lab, config.clone(), &[(&v.cid, "eth0")]),
        &file,
        "unlinkat",
        Some(&inject),
    );
    assert!(
        wait_until(Duration::from_secs(5), || trace_has(&file, "unlinkat(")),
        "GC never reached its unlinkat"
    );
    let held = std::fs::read_to_string(&file).unwrap();
    assert!(
        held.contains(&format!("\"{addr}\"")),
        "GC is held elsewhere:\n{held}"
    );
    // Meanwhile: o's DEL frees the address, v's ADD takes it.
    lab.call_for("DEL", &o)
        .config(&config)
        .run()
        .expect_silent_success("DEL o");
    let r = lab
        .call_for("ADD", &v)
        .config(&config)
        .run()
        .expect_result("ADD v");
    assert_eq!(result_address(&r), addr);
    let out = gc_run.finish();
    assert_eq!(out.code, 0, "GC failed:\n{out}");

    let v_holds = holder_of(&lab, &addr) == Some(format!("{}\r\neth0", v.cid));
    let w_out = lab.call_for("ADD", &w).config(&config).run();
    for a in [&v, &w] {
        lab.call_for("DEL", a).config(&config).run();
    }
    assert!(
        v_holds,
        "GC, listing {}, deleted its reservation {addr} (GC read the file while o held it, \
         then unlinked the name after v re-reserved it: src/ipam/store.rs Store::gc); \
         the next ADD got {addr} again: {}",
        v.cid,
        w_out.stdout.trim()
    );
    assert_cni_error(&w_out, 110, &["no free address"]);
}

/// Guarantee 5: DEL reads a reservation's holder, then unlinks the name. Held between the
/// two while GC frees the address and another attachment re-reserves it, DEL must not
/// delete that attachment's reservation (it did, and the address was handed out twice).
#[test]
fn del_never_frees_another_attachment_s_reservation() {
    let lab = Lab::new("delrace");
    let config = one_address(&lab);
    let (o, v, w) = (
        lab.attachment("o"),
        lab.attachment("v"),
        lab.attachment("w"),
    );
    let addr = lab.ip(2);
    lab.call_for("ADD", &o)
        .config(&config)
        .run()
        .expect_result("ADD o");

    let file = lab.root.join("del.trace");
    let inject = Inject {
        syscall: "unlinkat".into(),
        when: 1,
        action: Action::Delay(1_500_000),
    };
    let del_run = start_strace(
        &lab.call_for("DEL", &o).config(&config),
        &file,
        "unlinkat",
        Some(&inject),
    );
    assert!(
        wait_until(Duration::from_secs(5), || trace_has(&file, "unlinkat(")),
        "DEL never reached its unlinkat"
    );
    let held = std::fs::read_to_string(&file).unwrap();
    assert!(
        held.contains(&format!("\"{addr}\"")),
        "DEL is held elsewhere:\n{held}"
    );
    // Meanwhile: a GC (of a runtime that does not know o) frees the address, v takes it.
    gc_call(&lab, config.clone(), &[(&v.cid, "eth0")])
        .run()
        .expect_silent_success("GC");
    let r = lab
        .call_for("ADD", &v)
        .config(&config)
        .run()
        .expect_result("ADD v");
    assert_eq!(result_address(&r), addr);
    del_run.finish().expect_silent_success("DEL o");

    let v_holds = holder_of(&lab, &addr) == Some(format!("{}\r\neth0", v.cid));
    let w_out = lab.call_for("ADD", &w).config(&config).run();
    for a in [&v, &w] {
        lab.call_for("DEL", a).config(&config).run();
    }
    assert!(
        v_holds,
        "o's DEL deleted {}'s reservation {addr} (it read the file while o held it, then \
         unlinked the name after v re-reserved it: src/ipam/store.rs Store::release); the \
         next ADD got {addr} again: {}",
        v.cid,
        w_out.stdout.trim()
    );
    assert_cni_error(&w_out, 110, &["no free address"]);
}

/// ADD's requests on the main thread in a clean run: the last one is the bridge re-read
/// after the container side is configured, just before the reservation check.
fn last_main_thread_request(lab: &Lab) -> Inject {
    let file = lab.root.join("clean.trace");
    let (out, text) = run_strace(&lab.call("ADD"), &file, "sendto", None);
    out.expect_result("clean ADD under strace");
    lab.call("DEL").run().expect_silent_success("DEL");
    let calls = parse_trace(&text);
    let main = calls.first().map(|c| c.tid).unwrap();
    let i = calls.iter().rposition(|c| c.tid == main).unwrap();
    assert!(i > 0 && calls[..i].iter().any(|c| c.tid != main), "{text}");
    assert!(strace_reaches(&calls, i), "{text}");
    Inject {
        syscall: "sendto".into(),
        when: rank_in_thread(&calls, i),
        action: Action::Delay(1_000_000),
    }
}

fn count_main_sendto(file: &PathBuf) -> usize {
    let calls = parse_trace(&std::fs::read_to_string(file).unwrap_or_default());
    let main = calls.first().map(|c| c.tid).unwrap_or(0);
    calls.iter().filter(|c| c.tid == main).count()
}

/// Guarantee 4: GC (not listing the attachment) frees everything of an ADD held after
/// wiring; ADD finds its reservation gone, fails with 11 and undoes itself.
#[test]
fn unlisted_add_losing_its_reservation_to_gc_fails_with_11() {
    let lab = Lab::new("gcadd");
    warm_up(&lab);
    let base = settled_snapshot(&lab);
    let inject = last_main_thread_request(&lab);
    let file = lab.root.join("add.trace");
    let mut add = start_strace(&lab.call("ADD"), &file, "sendto", Some(&inject));
    assert!(
        wait_until(Duration::from_secs(5), || count_main_sendto(&file)
            >= inject.when),
        "ADD never reached its last request"
    );
    gc(&lab, &[]).expect_silent_success("GC []");
    assert!(
        add.running(),
        "ADD finished before GC did: the delay was too short"
    );
    let out = add.finish();
    // GC removed both halves; ADD names the first it found missing.
    assert_cni_error(&out, 11, &["while ADD ran"]);
    let mut p = Vec::new();
    expect_clean(&lab, &base, "after the failed ADD", false, &mut p);
    assert!(p.is_empty(), "{}", p.join("\n"));
}

/// Guarantee 4: GC deletes the host veth of an unlisted ADD held after wiring, and is
/// itself held before its store sweep; ADD must not report success for an interface that
/// no longer exists (it did when its last step checked only the reservation).
#[test]
fn unlisted_add_losing_its_veth_to_gc_does_not_succeed() {
    let lab = Lab::new("gcveth");
    warm_up(&lab);
    let base = settled_snapshot(&lab);
    let inject = last_main_thread_request(&lab);
    let file = lab.root.join("add.trace");
    let mut add = start_strace(&lab.call("ADD"), &file, "sendto", Some(&inject));
    assert!(
        wait_until(Duration::from_secs(5), || count_main_sendto(&file)
            >= inject.when),
        "ADD never reached its last request"
    );
    let veth = lab.lab_veths();
    assert_eq!(veth.len(), 1, "ADD has not made its pair yet");
    // GC's first mkdirat (of holders/, EEXIST) is in the store's open, after its link sweep.
    let gc_file = lab.root.join("gc.trace");
    let gc_inject = Inject {
        syscall: "mkdirat".into(),
        when: 1,
        action: Action::Delay(2_500_000),
    };
    let mut gc_run = start_strace(
        &gc_call(&lab, lab.config("1.1.0"), &[]),
        &gc_file,
        "mkdirat",
        Some(&gc_inject),
    );
    assert!(
        wait_until(Duration::from_secs(5), || trace_has(&gc_file, "mkdirat(")),
        "GC never reached the store"
    );
    assert!(!link_exists(&veth[0]), "GC's link sweep left {}", veth[0]);
    assert!(
        add.running(),
        "ADD finished before GC swept its veth: the delay was too short"
    );
    let out = add.finish();
    assert!(
        gc_run.running(),
        "GC finished before ADD: the delay was too short"
    );
    gc_run.finish().expect_silent_success("GC []");
    let mut p = Vec::new();
    expect_clean(&lab, &base, "after GC", false, &mut p);
    lab.call("DEL")
        .run()
        .expect_silent_success("the runtime's DEL");
    assert!(p.is_empty(), "{}", p.join("\n"));
    assert_ne!(
        out.code, 0,
        "ADD reported success although the concurrent GC had deleted its host veth {} \
         (src/add.rs: the last step, addressing::verify_still_held, checks only the \
         reservation; src/gc.rs sweeps links before the store):\n{out}",
        veth[0]
    );
    assert_cni_error(&out, 11, &[]);
}
