//! Leaks that heal themselves, and the operator's `academy list` / `academy reclaim`
//! (issue 13). Root only: real namespaces, bridges and veths.
//!
//! Leaks are made the real way: an ADD killed (SIGKILL, through strace's fault injection,
//! tests/faults) at its first netlink request, after it reserved its address and before it
//! made anything in the kernel; what is left is exactly what a runtime that never sends
//! DEL leaves. A leak's age is its reservation file's modification time, which the tests
//! move back to stand for the minutes or hours a real leak waits.
//!
//! | n   | test                                                          |
//! |-----|---------------------------------------------------------------|
//! | 170 | a_full_pool_heals_itself_from_old_leaks_only                  |
//! | 171 | list_shows_every_reservation_with_its_state_in_text_and_json  |
//! | 172 | reclaim_by_age_frees_old_leaks_only_and_dry_run_changes_nothing |
//! | 173 | reclaim_by_keep_list_frees_unlisted_attachments_and_their_veths |
//! | 174 | bad_operator_input_is_refused_and_changes_nothing             |

mod common;
mod faults;

use std::time::{Duration, SystemTime};

use common::*;
use faults::*;
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
    academy::hostveth::name(&a.cid, &a.ifname)
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

#[test]
fn a_full_pool_heals_itself_from_old_leaks_only() {
    let lab = Lab::new("lkheal", 170);
    let conf = config(&lab, json!({"reclaimLeakedAfter": 30}));
    let (w1, w2) = (attach(&lab, "w1"), attach(&lab, "w2"));
    let (k1, k2) = (attach(&lab, "k1"), attach(&lab, "k2"));
    let wired = [wire(&lab, &w1, &conf), wire(&lab, &w2, &conf)];
    let leaked1 = leak(&lab, &k1, &conf);
    let leaked2 = leak(&lab, &k2, &conf);

    // Full, and both leaks are younger than reclaimLeakedAfter: as an ADD still in flight
    // would be. Nothing is taken; the ADD fails with 110 as before.
    let n1 = attach(&lab, "n1");
    let before = store(&lab);
    let out = lab.call_for("ADD", &n1).config(&conf).run();
    assert_cni_error(&out, 110, &["no free address"]);
    assert_eq!(store(&lab), before, "a young leak was taken");

    // One leak is now older than the grace period: the next ADD takes its address, and
    // says so on stderr. The young one stays.
    make_old(&lab, &leaked1, Duration::from_secs(120));
    let out = lab.call_for("ADD", &n1).config(&conf).run();
    let r = out.expect_result("ADD into a pool with an old leak");
    assert_result_valid(&lab, &r, &n1, "1.1.0", Some(&leaked1));
    assert!(
        out.stderr.contains(&leaked1)
            && out.stderr.contains(&k1.cid)
            && out.stderr.contains("reclaimLeakedAfter"),
        "ADD does not say what it reclaimed:\n{out}"
    );
    assert!(
        !out.stderr.contains(&leaked2),
        "the young leak is named:\n{out}"
    );
    assert_eq!(holder_of(&lab, &leaked2), Some(format!("{}\r\neth0", k2.cid)));
    assert!(
        !store(&lab).contains(&format!("holders/{}:eth0", k1.cid)),
        "the reclaimed attachment's holder index is left: {:?}",
        store(&lab)
    );

    // reclaimLeakedAfter 0 switches healing off, whatever the leak's age.
    make_old(&lab, &leaked2, Duration::from_secs(3600));
    let n2 = attach(&lab, "n2");
    let off = config(&lab, json!({"reclaimLeakedAfter": 0}));
    let out = lab.call_for("ADD", &n2).config(&off).run();
    assert_cni_error(&out, 110, &["no free address"]);
    assert_eq!(holder_of(&lab, &leaked2), Some(format!("{}\r\neth0", k2.cid)));
    // Without the key, the default (60 s) heals it.
    let out = lab.call_for("ADD", &n2).config(&config(&lab, json!({}))).run();
    let r = out.expect_result("ADD with the default reclaimLeakedAfter");
    assert_eq!(result_address(&r), leaked2, "{out}");

    // The wired attachments were never touched.
    for (a, addr) in [(&w1, &wired[0]), (&w2, &wired[1])] {
        assert_eq!(holder_of(&lab, addr), Some(format!("{}\r\neth0", a.cid)));
        assert!(link_exists(&hostveth(a)));
        assert_reaches_gateway(&lab, a);
    }
    assert_reaches_gateway(&lab, &n1);
    assert_reaches_gateway(&lab, &n2);
    // The killed runtimes' late DELs find nothing of theirs and succeed quietly.
    for k in [&k1, &k2] {
        lab.call_for("DEL", k)
            .config(&conf)
            .run()
            .expect_silent_success("late DEL of a reclaimed attachment");
    }
    assert_eq!(holder_of(&lab, &leaked1), Some(format!("{}\r\neth0", n1.cid)));
}
