//! Concurrency, one removal against another operation at a chosen instant: removals never
//! take a re-reserved address (guarantee 5), and an unlisted ADD never succeeds with what
//! GC removed (guarantee 4).

use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::{json, Value};

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
         then unlinked the name after v re-reserved it: the store's gc in src/ipam/); \
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
         unlinked the name after v re-reserved it: the store's release in src/ipam/); the \
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
    // GC held in its one removal with the veths gone and the reservations still held
    // (a debug build's hook: the store's opens leave no syscall of their own to wait on).
    let gc_file = lab.root.join("gc.trace");
    let hold = TestHold::new(&lab.root, "gc.hold");
    let mut gc_run = start_strace(
        &gc_call(&lab, lab.config("1.1.0"), &[]).env("ACADEMY_TEST_HOLD_FREEING", hold.path()),
        &gc_file,
        "sendto",
        None,
    );
    assert!(
        hold.reached(Duration::from_secs(5)),
        "GC never reached its removal's reservations"
    );
    assert!(!link_exists(&veth[0]), "GC's link sweep left {}", veth[0]);
    assert!(
        add.running(),
        "ADD finished before GC swept its veth: the delay was too short"
    );
    let out = add.finish();
    assert!(gc_run.running(), "GC finished before ADD: it was not held");
    drop(hold);
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
