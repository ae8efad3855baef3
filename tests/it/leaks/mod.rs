//! Leaks that heal themselves, and the operator's `academy list` / `academy reclaim`
//! (issues 13 and 19). Root only: real namespaces, bridges and veths.
//!
//! Leaks are made the real way: an ADD killed (SIGKILL, through strace's fault injection,
//! tests/it/common/strace.rs) at its first netlink request, after it reserved its address
//! and before it made anything in the kernel; what is left is exactly what a runtime that
//! never sends DEL leaves. A leak's age is its reservation file's modification time, which
//! the tests move back to stand for the minutes or hours a real leak waits.
//!
//! | n   | file                | test                                                            |
//! |-----|---------------------|-----------------------------------------------------------------|
//! | 170 | `healing.rs`        | a_full_pool_heals_itself_from_old_leaks_only                    |
//! | 171 | `list.rs`           | list_shows_every_reservation_with_its_state_in_text_and_json    |
//! | 172 | `reclaim.rs`        | reclaim_by_age_frees_old_leaks_only_and_dry_run_changes_nothing |
//! | 173 | `reclaim.rs`        | reclaim_by_keep_list_frees_unlisted_attachments_and_their_veths |
//! | 174 | `operator_input.rs` | bad_operator_input_is_refused_and_changes_nothing               |
//! | 175 | `reclaim.rs`        | an_add_reusing_its_old_reservation_is_never_reclaimed_under_it  |
//! | 176 | `reclaim.rs`        | a_dual_stack_leak_is_listed_and_reclaimed_whole                 |
//! | 177 | `attribution.rs`    | host_local_reservations_are_never_judged_leaked_and_del_frees_them |
//! | 178 | `attribution.rs`    | list_and_reclaim_refuse_to_judge_from_a_netns_without_the_bridge |
//! | 179 | `attribution.rs`    | a_requested_address_held_since_before_the_boot_goes_to_the_requester |
//! | 180 | `attribution.rs`    | an_attachment_whose_host_veth_moved_away_is_never_judged_leaked |
//!
//! What the files share is below: the lab's config, a leak made the real way, and the
//! store seen from outside.

mod attribution;
mod healing;
mod list;
mod operator_input;
mod reclaim;

use std::time::{Duration, SystemTime};

use crate::common::*;
use serde_json::{json, Value};

/// The lab's config for direct calls, with a pool of four addresses (.2 to .5).
fn config(lab: &Lab, extra: Value) -> Value {
    let mut c = lab.config("1.1.0");
    c["rangeStart"] = json!(lab.ip(2));
    c["rangeEnd"] = json!(lab.ip(5));
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// The same network as [`config`], as the conflist an operator names; returns its path.
fn conflist(lab: &Lab, extra: Value) -> String {
    let mut plugin_extra = json!({"rangeStart": lab.ip(2), "rangeEnd": lab.ip(5)});
    for (k, v) in extra.as_object().unwrap() {
        plugin_extra[k] = v.clone();
    }
    lab.write_conflist("1.0.0", "academy", plugin_extra);
    lab.conf_dir
        .join("10-lab.conflist")
        .to_string_lossy()
        .into_owned()
}

/// `academy ARGS` as an operator runs it: no CNI_* variable at all.
fn academy(args: &[&str]) -> Out {
    let out = run(plugin(), args, &[]);
    assert_no_panic(&out, &format!("academy {}", args.join(" ")));
    out
}

fn attach(lab: &Lab, name: &str) -> Attach {
    Attach {
        cid: format!("{}-{name}", lab.cid),
        ifname: "eth0".into(),
        netns: lab.add_netns(name),
    }
}

/// A wired attachment: ADD succeeds; returns its address.
fn wire(lab: &Lab, a: &Attach, config: &Value) -> String {
    let out = lab.call_for("ADD", a).config(config).run();
    let r = out.expect_result(&format!("ADD of {}", a.cid));
    assert_result_valid(lab, &r, a, "1.1.0", None);
    result_address(&r)
}

/// A leak: an ADD killed at its first netlink request, after it reserved. Returns the
/// address it left reserved (with its holder index, and nothing in the kernel).
fn leak(lab: &Lab, a: &Attach, config: &Value) -> String {
    // The killed ADD never reached the bridge; an operator's list and reclaim judge only
    // from a netns that holds it, as the node's does once any ADD has run.
    if !link_exists(&lab.bridge) {
        ip(&["link", "add", &lab.bridge, "type", "bridge"]);
    }
    let before = address_files(lab);
    let inject = Inject {
        syscall: "sendto".into(),
        when: 1,
        action: Action::Kill,
    };
    let trace = lab.root.join(format!("kill-{}.trace", a.cid));
    let call = lab.call_for("ADD", a).config(config);
    let (out, text) = run_strace(&call, &trace, "sendto", Some(&inject));
    assert!(
        killed_by_strace(&text),
        "ADD of {} was not killed at its first netlink request:\n{out}",
        a.cid
    );
    let new: Vec<String> = address_files(lab)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    assert_eq!(new.len(), 1, "the killed ADD left {new:?}");
    assert_eq!(holder_of(lab, &new[0]), Some(format!("{}\r\neth0", a.cid)));
    assert!(
        lab.reservations()
            .contains(&format!("holders/{}:eth0", a.cid)),
        "the killed ADD left no holder index"
    );
    assert!(
        !link_exists(&hostveth(a)),
        "the killed ADD made a veth: it was not killed before any netlink send"
    );
    new[0].clone()
}

/// The host veth name academy derives for an attachment (read from a live one's alias
/// would need it wired; the name is what `academy list` prints).
fn hostveth(a: &Attach) -> String {
    derived_host_veth_name(&a.cid, &a.ifname)
}

/// Moves a reservation's time back by `ago`, standing for a leak that waited that long.
fn make_old(lab: &Lab, addr: &str, ago: Duration) {
    let f = std::fs::File::open(store_dir(lab).join(addr)).unwrap();
    f.set_modified(SystemTime::now() - ago).unwrap();
}

fn assert_reaches_gateway(lab: &Lab, a: &Attach) {
    assert!(
        ping_from(&a.netns, &lab.gateway(), 2),
        "{} no longer reaches its gateway {}",
        a.cid,
        lab.gateway()
    );
}

/// Sorted address files and holder indexes of the store.
fn store(lab: &Lab) -> Vec<String> {
    live_reservations(lab)
}
