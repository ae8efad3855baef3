//! Leaks that heal themselves, and the operator's `academy list` / `academy reclaim`
//! (issue 13). Root only: real namespaces, bridges and veths.
//!
//! Leaks are made the real way: an ADD killed (SIGKILL, through strace's fault injection,
//! tests/it/common/strace.rs) at its first netlink request, after it reserved its address
//! and before it made anything in the kernel; what is left is exactly what a runtime that never sends
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
//! | 175 | an_add_reusing_its_old_reservation_is_never_reclaimed_under_it |
//! | 176 | a_dual_stack_leak_is_listed_and_reclaimed_whole               |

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

#[test]
fn a_full_pool_heals_itself_from_old_leaks_only() {
    let lab = Lab::new("lkheal");
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

    let status = || {
        Call::bare()
            .env("CNI_COMMAND", "STATUS")
            .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
            .config(&conf)
            .run()
    };
    assert_cni_error(&status(), 50, &["no free address"]);

    // One leak is now older than the grace period: STATUS says ADD can be served, and
    // the next ADD takes its address, saying so on stderr. The young one stays.
    make_old(&lab, &leaked1, Duration::from_secs(120));
    let out = status();
    out.expect_silent_success("STATUS of a full pool with an old leak");
    assert!(
        out.stderr.contains("will be reclaimed by the next ADD"),
        "{out}"
    );
    assert_eq!(
        holder_of(&lab, &leaked1),
        Some(format!("{}\r\neth0", k1.cid)),
        "STATUS freed it"
    );
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
    assert_eq!(
        holder_of(&lab, &leaked2),
        Some(format!("{}\r\neth0", k2.cid))
    );
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
    assert_eq!(
        holder_of(&lab, &leaked2),
        Some(format!("{}\r\neth0", k2.cid))
    );
    // Without the key, the default (60 s) heals it.
    let out = lab
        .call_for("ADD", &n2)
        .config(&config(&lab, json!({})))
        .run();
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
    assert_eq!(
        holder_of(&lab, &leaked1),
        Some(format!("{}\r\neth0", n1.cid))
    );
}

/// The text table's row for `addr`, split on whitespace.
fn row<'a>(text: &'a str, addr: &str) -> Vec<&'a str> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(addr))
        .unwrap_or_else(|| panic!("no row for {addr} in:\n{text}"))
        .split_whitespace()
        .collect()
}

#[test]
fn list_shows_every_reservation_with_its_state_in_text_and_json() {
    let lab = Lab::new("lklist");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let store_path = store_dir(&lab).to_string_lossy().into_owned();

    // Nothing reserved yet: an empty list, and the store is not created by looking.
    let out = academy(&["list", &list]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains(&format!(
            "network {} (bridge {}, store {store_path}): 0 reserved",
            lab.network, lab.bridge
        )),
        "{out}"
    );
    assert!(!store_dir(&lab).exists(), "list created the store");

    let w = attach(&lab, "w");
    let mut k = attach(&lab, "k");
    k.ifname = "net1".into();
    let wired = wire(&lab, &w, &conf);
    let leaked = {
        let before = address_files(&lab);
        let inject = Inject {
            syscall: "sendto".into(),
            when: 1,
            action: Action::Kill,
        };
        let call = lab.call_for("ADD", &k).config(&conf);
        let (out, text) = run_strace(&call, &lab.root.join("k.trace"), "sendto", Some(&inject));
        assert!(killed_by_strace(&text), "{out}");
        let new: Vec<String> = address_files(&lab)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        assert_eq!(new.len(), 1);
        new[0].clone()
    };
    make_old(&lab, &leaked, Duration::from_secs(2 * 3600 + 13 * 60));

    let out = academy(&["list", &list]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.is_empty(), "{out}");
    assert!(
        out.stdout.contains(": 2 reserved, 1 wired, 1 leaked"),
        "{out}"
    );
    let header: Vec<&str> = out
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "ADDRESS",
            "STATE",
            "AGE",
            "IFNAME",
            "HOST",
            "VETH",
            "CONTAINER"
        ]
    );
    let r = row(&out.stdout, &wired);
    assert_eq!(
        (r[1], r[3], r[4], r[5]),
        ("wired", "eth0", hostveth(&w).as_str(), w.cid.as_str()),
        "{out}"
    );
    assert!(r[2].ends_with('s'), "a fresh reservation's age: {}", r[2]);
    let r = row(&out.stdout, &leaked);
    assert_eq!(
        (r[1], r[2], r[3], r[4], r[5]),
        (
            "leaked",
            "2h13m",
            "net1",
            hostveth(&k).as_str(),
            k.cid.as_str()
        ),
        "{out}"
    );

    let out = academy(&["list", &list, "--json"]);
    assert_eq!(out.code, 0, "{out}");
    let v = out.json();
    assert_eq!(v["network"], json!(lab.network));
    assert_eq!(v["bridge"], json!(lab.bridge));
    assert_eq!(v["store"], json!(store_path));
    let rs = v["reservations"].as_array().unwrap();
    assert_eq!(rs.len(), 2, "{v:#}");
    let by_addr = |a: &str| {
        rs.iter()
            .find(|r| r["address"] == json!(a))
            .unwrap()
            .clone()
    };
    let mut w_row = by_addr(&wired);
    assert!(w_row["ageSeconds"].as_u64().unwrap() < 600, "{w_row}");
    w_row.as_object_mut().unwrap().remove("ageSeconds");
    assert_eq!(
        w_row,
        json!({"address": wired, "containerID": w.cid, "ifname": "eth0",
               "state": "wired", "hostVeth": hostveth(&w)})
    );
    let mut k_row = by_addr(&leaked);
    let age = k_row["ageSeconds"].as_u64().unwrap();
    assert!((7980..7980 + 600).contains(&age), "{k_row}");
    k_row.as_object_mut().unwrap().remove("ageSeconds");
    assert_eq!(
        k_row,
        json!({"address": leaked, "containerID": k.cid, "ifname": "net1",
               "state": "leaked", "hostVeth": hostveth(&k)})
    );

    // Once the container's netns is gone (the kernel takes the pair with it) and no DEL
    // came, the wired attachment shows as leaked too.
    ip(&["netns", "del", &w.netns]);
    assert!(wait_until(Duration::from_secs(5), || !link_exists(
        &hostveth(&w)
    )));
    let v = academy(&["list", &list, "--json"]).json();
    let states: Vec<&str> = v["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["leaked", "leaked"], "{v:#}");
    // Looking changed nothing.
    assert_eq!(holder_of(&lab, &wired), Some(format!("{}\r\neth0", w.cid)));
    assert_eq!(holder_of(&lab, &leaked), Some(format!("{}\r\nnet1", k.cid)));
}

#[test]
fn reclaim_by_age_frees_old_leaks_only_and_dry_run_changes_nothing() {
    let lab = Lab::new("lkage");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let w = attach(&lab, "w");
    let (old, young) = (attach(&lab, "old"), attach(&lab, "young"));
    let wired = wire(&lab, &w, &conf);
    let old_addr = leak(&lab, &old, &conf);
    let young_addr = leak(&lab, &young, &conf);
    make_old(&lab, &old_addr, Duration::from_secs(3 * 3600));
    make_old(&lab, &young_addr, Duration::from_secs(5 * 60));
    // The wired one is old too: age alone never frees a wired attachment.
    make_old(&lab, &wired, Duration::from_secs(3 * 3600));

    let before = settled_snapshot(&lab);
    let out = academy(&["reclaim", &list, "--older-than", "1h", "--dry-run"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains(&format!(
            "would free address {old_addr} (container {}, interface eth0, leaked",
            old.cid
        )),
        "{out}"
    );
    assert!(
        out.stdout
            .contains("dry run, nothing changed: 1 address and 0 host veths"),
        "{out}"
    );
    assert!(
        !out.stdout.contains(&young_addr) && !out.stdout.contains(&wired),
        "{out}"
    );
    assert_eq!(
        settled_snapshot(&lab).diff(&before),
        "",
        "the dry run changed something"
    );

    let out = academy(&["reclaim", &list, "--older-than", "1h"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout
            .contains(&format!("freed address {old_addr} (container {}", old.cid)),
        "{out}"
    );
    assert!(
        out.stdout.contains("reclaimed 1 address and 0 host veths"),
        "{out}"
    );
    assert_eq!(holder_of(&lab, &old_addr), None);
    assert!(!store(&lab).contains(&format!("holders/{}:eth0", old.cid)));
    assert_eq!(
        holder_of(&lab, &young_addr),
        Some(format!("{}\r\neth0", young.cid))
    );

    // Without --older-than: the network's reclaimLeakedAfter (60 s by default).
    let out = academy(&["reclaim", &list]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains(&format!("freed address {young_addr}")),
        "{out}"
    );
    assert!(out.stdout.contains("leaked for at least 1m0s"), "{out}");
    assert_eq!(
        store(&lab),
        vec![wired.clone(), format!("holders/{}:eth0", w.cid)],
        "only the wired attachment is left"
    );
    // Even with --older-than 0 the wired attachment stays, and still works.
    let out = academy(&["reclaim", &list, "--older-than", "0"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout
            .contains("reclaimed 0 addresses and 0 host veths"),
        "{out}"
    );
    assert!(link_exists(&hostveth(&w)));
    assert_reaches_gateway(&lab, &w);
    // The freed addresses are handed out again: the pool of four serves three more.
    let mut got: Vec<String> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| wire(&lab, &attach(&lab, n), &conf))
        .collect();
    got.sort();
    let mut want = vec![old_addr, young_addr, lab.ip(5)];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn reclaim_by_keep_list_frees_unlisted_attachments_and_their_veths() {
    let lab = Lab::new("lkkeep");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let (keep, gone) = (attach(&lab, "keep"), attach(&lab, "gone"));
    let dead = attach(&lab, "dead");
    let kept_addr = wire(&lab, &keep, &conf);
    let gone_addr = wire(&lab, &gone, &conf);
    let dead_addr = leak(&lab, &dead, &conf);
    // Started after the list was taken: unlisted, but younger than --older-than.
    let fresh = attach(&lab, "fresh");
    let fresh_addr = wire(&lab, &fresh, &conf);
    for addr in [&kept_addr, &gone_addr, &dead_addr] {
        make_old(&lab, addr, Duration::from_secs(2 * 3600));
    }
    // What `crictl pods -q` would print: only `keep` is still running.
    let ids = lab.root.join("running");
    std::fs::write(&ids, format!("# crictl pods -q\n\n{}\n", keep.cid)).unwrap();
    let ids = ids.to_string_lossy().into_owned();

    let before = settled_snapshot(&lab);
    let out = academy(&[
        "reclaim",
        &list,
        "--keep-ids",
        &ids,
        "--older-than",
        "1h",
        "--dry-run",
    ]);
    assert_eq!(out.code, 0, "{out}");
    for needle in [
        format!(
            "would delete host veth {} (container {}",
            hostveth(&gone),
            gone.cid
        ),
        format!("would free address {gone_addr} (container {}", gone.cid),
        format!("would free address {dead_addr} (container {}", dead.cid),
        "dry run, nothing changed: 2 addresses and 1 host veth".to_string(),
    ] {
        assert!(out.stdout.contains(&needle), "no {needle:?}:\n{out}");
    }
    assert!(!out.stdout.contains(&keep.cid), "{out}");
    assert!(
        !out.stdout.contains(&fresh.cid),
        "the young attachment is listed:\n{out}"
    );
    assert_eq!(
        settled_snapshot(&lab).diff(&before),
        "",
        "the dry run changed something"
    );

    let out = academy(&["reclaim", &list, "--keep-ids", &ids, "--older-than", "1h"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout
            .contains(&format!("deleted host veth {}", hostveth(&gone))),
        "{out}"
    );
    assert!(
        out.stdout.contains("reclaimed 2 addresses and 1 host veth"),
        "{out}"
    );
    assert!(!link_exists(&hostveth(&gone)), "the unlisted veth is left");
    assert!(
        !netns_link_names(&gone.netns).contains(&"eth0".to_string()),
        "the unlisted container keeps its interface"
    );
    let mut left = vec![
        kept_addr.clone(),
        fresh_addr.clone(),
        format!("holders/{}:eth0", keep.cid),
        format!("holders/{}:eth0", fresh.cid),
    ];
    left.sort();
    assert_eq!(store(&lab), left);
    let mut veths = lab.lab_veths();
    veths.sort();
    let mut want = vec![hostveth(&keep), hostveth(&fresh)];
    want.sort();
    assert_eq!(veths, want);
    assert_reaches_gateway(&lab, &keep);
    assert_reaches_gateway(&lab, &fresh);
    // The runtime's late DEL of a reclaimed attachment finds nothing and succeeds.
    lab.call_for("DEL", &gone)
        .config(&conf)
        .run()
        .expect_silent_success("late DEL after reclaim");
}

#[test]
fn bad_operator_input_is_refused_and_changes_nothing() {
    let lab = Lab::new("lkbad");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let w = attach(&lab, "w");
    let k = attach(&lab, "k");
    wire(&lab, &w, &conf);
    let leaked = leak(&lab, &k, &conf);
    make_old(&lab, &leaked, Duration::from_secs(3600));

    let file = |name: &str, content: &str| {
        let p = lab.root.join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    };
    let missing = lab
        .root
        .join("missing.conflist")
        .to_string_lossy()
        .into_owned();
    let malformed = file(
        "malformed.conflist",
        r#"{"cniVersion": "1.0.0", "plugins": ["#,
    );
    let bridge_only = file(
        "bridge.conflist",
        &json!({"cniVersion": "1.0.0", "name": lab.network,
                "plugins": [{"type": "bridge", "bridge": lab.bridge}, {"type": "portmap"}]})
        .to_string(),
    );
    let bad_subnet = file(
        "badsubnet.conflist",
        &json!({"cniVersion": "1.0.0", "name": lab.network,
                "plugins": [{"type": "academy", "bridge": lab.bridge, "subnet": "10.1.2.3/33",
                             "dataDir": lab.data_dir}]})
        .to_string(),
    );
    let delegated = file(
        "delegated.conflist",
        &json!({"cniVersion": "1.0.0", "name": lab.network,
                "plugins": [{"type": "academy", "bridge": lab.bridge,
                             "ipam": {"type": "dhcp"}}]})
        .to_string(),
    );
    let empty_ids = file("empty-ids", "\n# nothing running\n");
    let no_ids = lab.root.join("no-ids").to_string_lossy().into_owned();

    let before = settled_snapshot(&lab);
    // (arguments, exit status, what stderr must say)
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["frobnicate", &list],
            2,
            "unknown subcommand \"frobnicate\"",
        ),
        (vec!["--reclaim", &list], 2, "unknown subcommand"),
        (vec!["list"], 2, "CONFLIST is missing"),
        (vec!["reclaim"], 2, "CONFLIST is missing"),
        (vec!["list", &list, &list], 2, "unexpected argument"),
        (vec!["list", &missing], 1, "cannot read conflist"),
        (
            vec!["reclaim", &missing, "--dry-run"],
            1,
            "cannot read conflist",
        ),
        (vec!["list", &malformed], 1, "is not valid JSON"),
        (vec!["reclaim", &malformed], 1, "is not valid JSON"),
        (
            vec!["list", &bridge_only],
            1,
            "has no plugin of type academy (its plugins: bridge, portmap)",
        ),
        (
            vec!["reclaim", &bridge_only],
            1,
            "has no plugin of type academy",
        ),
        (vec!["reclaim", &bad_subnet], 1, "subnet"),
        (vec!["list", &delegated], 1, "delegates its addresses"),
        (
            vec!["list", &list, "--verbose"],
            2,
            "unknown flag \"--verbose\"",
        ),
        (
            vec!["reclaim", &list, "--force"],
            2,
            "unknown flag \"--force\"",
        ),
        (
            vec!["reclaim", &list, "--older-than"],
            2,
            "--older-than needs a value",
        ),
        (
            vec!["reclaim", &list, "--older-than", "soon"],
            2,
            "is not a duration",
        ),
        (
            vec!["reclaim", &list, "--older-than", "-5m"],
            2,
            "is not a duration",
        ),
        (
            vec!["reclaim", &list, "--dry-run=yes"],
            2,
            "--dry-run takes no value",
        ),
        (
            vec!["reclaim", &list, "--keep-ids", &no_ids],
            1,
            "cannot read --keep-ids file",
        ),
        (
            vec!["reclaim", &list, "--keep-ids", &empty_ids],
            1,
            "lists no container id",
        ),
    ];
    for (args, status, needle) in &cases {
        let out = academy(args);
        let what = format!("academy {}", args.join(" "));
        assert_eq!(out.code, *status, "{what}:\n{out}");
        assert!(
            out.stderr.contains(needle),
            "{what}: stderr lacks {needle:?}:\n{out}"
        );
        assert!(out.stdout.is_empty(), "{what} printed on stdout:\n{out}");
        if *status == 2 {
            assert!(
                out.stderr.contains("usage: academy"),
                "{what}: no usage line:\n{out}"
            );
        }
        assert_eq!(
            settled_snapshot(&lab).diff(&before),
            "",
            "{what} changed something"
        );
    }

    // No arguments and no CNI_COMMAND: the about text, as before.
    let out = academy(&[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("CNI academy plugin v"), "{out}");
    // A runtime's invocation is never taken for a subcommand, whatever argv holds.
    let out = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .stdin(r#"{"cniVersion":"1.0.0"}"#)
        .spawn(plugin(), &["reclaim", &list, "--older-than", "0"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.json()["supportedVersions"].is_array(), "{out}");
    let out = lab
        .call_for("DEL", &k)
        .config(&conf)
        .spawn(plugin(), &["list", &list]);
    out.expect_silent_success("DEL with argv that looks like a subcommand");
    assert_eq!(
        holder_of(&lab, &leaked),
        None,
        "the DEL was not run as a DEL"
    );
    assert_reaches_gateway(&lab, &w);
}

#[test]
fn an_add_reusing_its_old_reservation_is_never_reclaimed_under_it() {
    // The one ADD that can meet a reclaimer: the runtime retries the ADD of a killed
    // attachment, which finds its old reservation (older than any grace period) and wires
    // it while `academy reclaim` decides that attachment has no veth. The reclaimer is
    // held for 3 s between that decision and the unlink; the ADD runs in that window.
    let lab = Lab::new("lkrace");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let k = attach(&lab, "k");
    let addr = leak(&lab, &k, &conf);
    make_old(&lab, &addr, Duration::from_secs(3600));

    let trace = lab.root.join("reclaim.trace");
    let inject = Inject {
        syscall: "unlinkat".into(),
        when: 1,
        action: Action::Delay(3_000_000),
    };
    let mut args = strace_args(&trace, "unlinkat,flock", Some(&inject));
    args.extend(["reclaim", &list, "--older-than", "0"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let reclaimer = start(&Call::bare(), "strace", &args, &[]);
    // Until it holds the reservation's lock and has reached the unlink.
    assert!(
        wait_until(Duration::from_secs(5), || std::fs::read_to_string(&trace)
            .is_ok_and(|t| t.contains("unlinkat("))),
        "the reclaimer never reached its unlink"
    );
    let add = lab.call_for("ADD", &k).config(&conf).run();
    let reclaimed = reclaimer.finish();
    assert_eq!(reclaimed.code, 0, "{reclaimed}");
    assert!(
        reclaimed.stdout.contains(&format!("freed address {addr}")),
        "{reclaimed}"
    );
    // The ADD lost its address before its last check: it must fail with 11 and undo
    // itself, never report an address the store considers free.
    assert_cni_error(&add, 11, &[&addr, "released while ADD ran"]);
    assert_eq!(holder_of(&lab, &addr), None);
    assert_eq!(store(&lab), Vec::<String>::new());
    assert!(!link_exists(&hostveth(&k)), "the failed ADD left its veth");
    // The runtime's next retry gets an address and works.
    let r = lab
        .call_for("ADD", &k)
        .config(&conf)
        .run()
        .expect_result("retried ADD");
    assert_result_valid(&lab, &r, &k, "1.1.0", None);
    assert_reaches_gateway(&lab, &k);
}

#[test]
fn a_dual_stack_leak_is_listed_and_reclaimed_whole() {
    let lab = Lab::new("lkdual");
    let parts: Vec<&str> = lab.prefix.split('.').collect();
    let v6 = format!("fd00:{}:{}::/64", parts[1], parts[2]);
    let plugin = json!({
        "type": "academy", "bridge": lab.bridge, "isGateway": true, "isDefaultGateway": true,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": lab.subnet()}], [{"subnet": v6}]],
                 "dataDir": lab.data_dir}
    });
    let list = lab.conf_dir.join("10-lab.conflist");
    let conflist = json!({"cniVersion": "1.0.0", "name": lab.network, "plugins": [plugin.clone()]});
    std::fs::write(&list, conflist.to_string()).unwrap();
    let list = list.to_string_lossy().into_owned();
    let mut conf = plugin;
    conf["cniVersion"] = json!("1.1.0");
    conf["name"] = json!(lab.network);

    let w = attach(&lab, "w");
    let out = lab.call_for("ADD", &w).config(&conf).run();
    out.expect_result("dual-stack ADD");
    let k = attach(&lab, "k");
    let inject = Inject {
        syscall: "sendto".into(),
        when: 1,
        action: Action::Kill,
    };
    let call = lab.call_for("ADD", &k).config(&conf);
    let (out, text) = run_strace(&call, &lab.root.join("k.trace"), "sendto", Some(&inject));
    assert!(killed_by_strace(&text), "{out}");

    let v = academy(&["list", &list, "--json"]).json();
    let rows = v["reservations"].as_array().unwrap();
    let of = |cid: &str| -> Vec<(String, String)> {
        rows.iter()
            .filter(|r| r["containerID"] == json!(cid))
            .map(|r| {
                (
                    r["address"].as_str().unwrap().to_string(),
                    r["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let leaked = of(&k.cid);
    assert_eq!(leaked.len(), 2, "{v:#}");
    assert!(
        leaked[0].0.contains('.') && leaked[1].0.contains(':'),
        "{leaked:?}"
    );
    assert!(leaked.iter().all(|(_, s)| s == "leaked"), "{leaked:?}");
    assert!(of(&w.cid).iter().all(|(_, s)| s == "wired"), "{v:#}");

    let out = academy(&["reclaim", &list, "--older-than", "0"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("reclaimed 2 addresses"), "{out}");
    for (addr, _) in &leaked {
        assert!(
            !store_dir(&lab).join(addr).exists(),
            "{addr} is still reserved"
        );
    }
    assert!(!store_dir(&lab)
        .join(format!("holders/{}:eth0", k.cid))
        .exists());
    let v = academy(&["list", &list, "--json"]).json();
    assert_eq!(v["reservations"].as_array().unwrap().len(), 2, "{v:#}");
    assert_reaches_gateway(&lab, &w);
}
