//! Failure atomicity (issue 4), black-box: the plugin binary runs unchanged while its
//! system calls are failed, killed or held from outside (strace's fault injection, and an
//! LD_PRELOAD shim for the netlink requests strace's per-thread counter cannot reach; see
//! common/strace.rs and common/shim.rs). Root only.
//!
//! # What academy guarantees when ADD, DEL and GC race
//!
//! A runtime never runs two operations for one attachment at once and runs its GC alone;
//! two runtimes on one node can still interleave anything. What the code makes true
//! (the store in src/ipam/, src/verbs/gc.rs, src/verbs/add.rs, src/wire/mod.rs) and the tests check:
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
//!    freed, survivors keep their files and veths and ping their gateway.) An unlabelled
//!    veth names no network, so GC judges and deletes those on its bridge only under the
//!    bridge's lock held whole, which every ADD on the bridge shares from before its pair
//!    until its last check: the GC of another network on the bridge never takes an ADD's
//!    pair in the making, and leaves a killed ADD's to a later GC while an ADD runs there
//!    (`shared_bridge::a_bridge_mate_s_gc_leaves_an_add_between_its_pair_and_its_label_alone`).
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
//! Not guaranteed: two runtimes that share a network name must each list the other's
//! attachments in GC (they cannot), so give each runtime its own network name (hence its
//! own store). Within one runtime, guarantees 1 to 5 hold.
//! | file             | subject                                                         |
//! |------------------|-----------------------------------------------------------------|
//! | `netlink.rs`     | a refused or killed netlink request at every point of ADD       |
//! | `store_calls.rs` | a failed or killed store call at every point of ADD             |
//! | `restart.rs`     | seed 004: GC after a runtime restart frees exactly the dead     |
//! | `bursts.rs`      | ADD/DEL bursts of listed attachments racing back-to-back GCs    |
//! | `races.rs`       | removals racing ADDs: re-reserved addresses, unlisted ADDs      |
//!
//! What several of them share is below: the collected findings of a fault loop, and the
//! clean-state and recovery checks.

mod bursts;
mod keys;
mod netlink;
mod races;
mod restart;
mod store_calls;

use std::time::Duration;

use crate::common::*;
use serde_json::Value;

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
