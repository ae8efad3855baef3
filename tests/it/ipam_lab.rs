//! Seed 000's three recorded results, through cnitool as the seed runs them, plus parallel
//! ADDs: the address store under real namespaces, bridges and veths. Root only.
//!
//! Seed 000 counts six usable addresses in a /29; academy keeps .1 for the gateway and
//! never hands out the network or broadcast address, so a /29 has five (.2 to .6).

use std::collections::BTreeSet;

use crate::common::*;
use serde_json::{json, Value};

/// cnitool's ADD in `netns`, which must succeed; returns its result.
fn cnitool_add(lab: &Lab, netns: &str) -> Value {
    let out = lab.cnitool("add", netns, &[]);
    assert_eq!(out.code, 0, "cnitool add in {netns} failed:\n{out}");
    serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("cnitool add printed no JSON ({e}):\n{out}"))
}

fn cnitool_del(lab: &Lab, netns: &str) {
    let out = lab.cnitool("del", netns, &[]);
    assert_eq!(out.code, 0, "cnitool del in {netns} failed:\n{out}");
}

#[test]
fn forty_cnitool_cycles_leave_an_empty_store() {
    let lab = Lab::new("forty");
    let mut seen = BTreeSet::new();
    for i in 1..=40 {
        let ns = lab.add_netns(&format!("c{i}"));
        let r = cnitool_add(&lab, &ns);
        let a = lab.cnitool_attach(&ns, "eth0");
        assert_result_valid(&lab, &r, &a, "1.0.0", None);
        seen.insert(result_address(&r));
        // The seed's `watch`: one reservation and one veth while attached...
        assert_eq!(
            address_files(&lab).len(),
            1,
            "cycle {i}: store {:?}",
            lab.reservations()
        );
        assert_eq!(lab.lab_veths().len(), 1, "cycle {i}: veths");
        cnitool_del(&lab, &ns);
        // ...and none after, every time: a count that only climbs is the leak.
        assert_eq!(
            lab.reservations(),
            Vec::<String>::new(),
            "cycle {i}: store after DEL"
        );
        assert_eq!(
            lab.lab_veths(),
            Vec::<String>::new(),
            "cycle {i}: veths after DEL"
        );
        ip(&["netns", "del", &ns]);
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
    assert!(lab.cached_results().is_empty(), "cnitool cache left");
    // Round robin: forty cycles walk forty different addresses.
    assert_eq!(seen.len(), 40, "addresses handed out: {seen:?}");
}

#[test]
fn exhausted_29_fails_with_110_and_leaves_nothing() {
    let lab = Lab::new("full29");
    let subnet = format!("{}.0/29", lab.prefix);
    lab.write_conflist("1.0.0", "academy", json!({ "subnet": subnet }));
    let mut got = BTreeSet::new();
    for i in 1..=5 {
        let ns = lab.add_netns(&format!("x{i}"));
        let r = cnitool_add(&lab, &ns);
        let addr = r["ips"][0]["address"].as_str().unwrap_or("").to_string();
        let host: u8 = addr
            .strip_prefix(&format!("{}.", lab.prefix))
            .and_then(|rest| rest.strip_suffix("/29"))
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("ADD {i} got {addr:?}, not a /29 address of {subnet}"));
        assert!((2..=6).contains(&host), "ADD {i} got {addr}");
        let inside = ip(&["-n", &ns, "-4", "-br", "addr", "show", "dev", "eth0"]);
        assert!(
            inside.contains(&addr),
            "{addr} is not on eth0 in {ns}: {inside}"
        );
        got.insert(host);
    }
    assert_eq!(got, (2..=6).collect(), "five distinct addresses, .2 to .6");

    let want = format!(
        "network {}: no free address in {subnet} (5 of 5 held)",
        lab.network
    );
    for i in 6..=7 {
        let ns = lab.add_netns(&format!("x{i}"));
        let before = settled_snapshot(&lab);
        let out = lab.cnitool("add", &ns, &[]);
        assert_eq!(out.code, 1, "ADD {i} into a full /29:\n{out}");
        assert!(
            out.all().contains(&want),
            "cnitool does not show {want:?}:\n{out}"
        );
        let d = settled_snapshot(&lab).diff(&before);
        assert!(d.is_empty(), "the failed ADD {i} changed the host:\n{d}");
        assert_eq!(address_files(&lab).len(), 5);
    }
    // The same refusal invoked directly, for its code.
    let mut config = lab.config("1.1.0");
    config["subnet"] = json!(subnet);
    let before = settled_snapshot(&lab);
    let out = lab.call("ADD").config(&config).run();
    assert_cni_error(&out, 110, &[&want]);
    let d = settled_snapshot(&lab).diff(&before);
    assert!(d.is_empty(), "the failed direct ADD changed the host:\n{d}");

    for i in 1..=7 {
        let ns = format!("{}-x{i}", lab.netns);
        cnitool_del(&lab, &ns);
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
    assert_eq!(lab.lab_veths(), Vec::<String>::new());
}

/// Where the plugin dies, as strace sees it: the first netlink request (after the
/// reservation, nothing wired yet), or the netns thread's entry (after the pair is made
/// and labelled, before the container side is configured).
const KILL_POINTS: [(&str, &str); 2] = [
    (
        "first netlink request",
        "-e trace=sendto -e inject=sendto:signal=SIGKILL:when=1",
    ),
    (
        "netns entry",
        "-e trace=setns -e inject=setns:signal=SIGKILL:when=1",
    ),
];

/// `cnitool add` with the plugin killed mid-ADD (a wrapper in CNI_PATH runs it under
/// strace); checks one reservation is left; restores the real plugin. Returns the address.
fn cnitool_add_killed(lab: &Lab, netns: &str, strace_opts: &str, point: &str) -> String {
    let script = format!(
        "#!/bin/sh\nexec {} -f -o /dev/null {strace_opts} -- {} \"$@\"\n",
        which("strace"),
        plugin()
    );
    lab.install_script("academy", &script);
    let out = lab.cnitool("add", netns, &[]);
    std::fs::remove_file(lab.bin_dir.join("academy")).unwrap();
    std::os::unix::fs::symlink(plugin(), lab.bin_dir.join("academy")).unwrap();
    assert_eq!(
        out.code, 1,
        "cnitool add with the plugin killed at the {point}:\n{out}"
    );
    assert!(
        lab.cached_results().is_empty(),
        "a killed ADD left a cnitool cache"
    );

    let a = lab.cnitool_attach(netns, "eth0");
    let files = address_files(lab);
    assert_eq!(
        files.len(),
        1,
        "killed at the {point}: the store holds {:?}",
        lab.reservations()
    );
    assert_eq!(
        holder_of(lab, &files[0]),
        Some(format!("{}\r\neth0", a.cid)),
        "the leaked reservation does not name the container"
    );
    assert_eq!(
        lab.reservations(),
        vec![files[0].clone(), format!("holders/{}:eth0", a.cid)],
        "killed at the {point}: the holder index must name it, so DEL can find it"
    );
    if point == "netns entry" {
        assert_eq!(
            lab.lab_veths().len(),
            1,
            "killed at the {point}: the pair should exist"
        );
        assert!(netns_link_names(netns).contains(&"eth0".to_string()));
    } else {
        assert_eq!(lab.lab_veths(), Vec::<String>::new());
    }
    files[0].clone()
}

fn assert_all_gone(lab: &Lab, netns: &str, what: &str) {
    assert_eq!(lab.reservations(), Vec::<String>::new(), "{what}: store");
    assert_eq!(lab.lab_veths(), Vec::<String>::new(), "{what}: veths");
    assert_eq!(
        bridge_ports(&lab.bridge),
        Vec::<String>::new(),
        "{what}: bridge ports"
    );
    assert_eq!(
        netns_link_names(netns),
        vec!["lo".to_string()],
        "{what}: netns"
    );
}

#[test]
fn killed_after_reserving_then_del_frees_everything() {
    let lab = Lab::new("leakdel");
    for (i, (point, opts)) in KILL_POINTS.iter().enumerate() {
        let ns = lab.add_netns(&format!("leak{i}"));
        cnitool_add_killed(&lab, &ns, opts, point);
        // Seed 000 expected DEL to free nothing (the id never recorded); academy's holder
        // index is written before the reservation, so DEL frees it.
        cnitool_del(&lab, &ns);
        assert_all_gone(&lab, &ns, &format!("DEL after a kill at the {point}"));
        // And the container can be set up again.
        let r = cnitool_add(&lab, &ns);
        assert_result_valid(&lab, &r, &lab.cnitool_attach(&ns, "eth0"), "1.0.0", None);
        cnitool_del(&lab, &ns);
        assert_all_gone(&lab, &ns, "the final DEL");
    }
}

#[test]
fn killed_after_reserving_then_gc_frees_everything() {
    let lab = Lab::new("leakgc");
    for (i, (point, opts)) in KILL_POINTS.iter().enumerate() {
        let ns = lab.add_netns(&format!("leak{i}"));
        let addr = cnitool_add_killed(&lab, &ns, opts, point);
        let out = gc(&lab, &[]);
        out.expect_silent_success("GC with an empty valid list");
        // Quiet success: what GC freed is checked in the store and the kernel
        // (assert_all_gone), not on stderr.
        assert!(!out.stderr.contains(&addr), "GC logged a removal:\n{out}");
        assert_all_gone(&lab, &ns, &format!("GC after a kill at the {point}"));
        // The runtime's late DEL finds nothing, quietly.
        cnitool_del(&lab, &ns);
    }
}

/// `count` attachments in their own netns, ADDed from parallel threads with `config`.
fn parallel_adds(lab: &Lab, count: usize, config: &Value) -> Vec<(Attach, Out)> {
    let attaches: Vec<Attach> = (0..count)
        .map(|i| lab.attachment(&format!("p{i}")))
        .collect();
    let outs: Vec<Out> = std::thread::scope(|s| {
        let handles: Vec<_> = attaches
            .iter()
            .map(|a| s.spawn(move || lab.call_for("ADD", a).config(config).run()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    attaches.into_iter().zip(outs).collect()
}

fn parallel_dels(lab: &Lab, attached: &[(Attach, Out)], config: &Value) {
    std::thread::scope(|s| {
        for (a, _) in attached {
            s.spawn(move || {
                lab.call_for("DEL", a)
                    .config(config)
                    .run()
                    .expect_silent_success(&a.cid)
            });
        }
    });
    assert_eq!(
        lab.reservations(),
        Vec::<String>::new(),
        "store after the DELs"
    );
    assert_eq!(
        lab.lab_veths(),
        Vec::<String>::new(),
        "veths after the DELs"
    );
}

#[test]
fn parallel_adds_never_share_an_address() {
    let lab = Lab::new("par24");
    let config = lab.config("1.1.0");
    let attached = parallel_adds(&lab, 24, &config);
    let mut addrs = BTreeSet::new();
    for (a, out) in &attached {
        let r = out.expect_result(&a.cid);
        // Checks the result against the kernel: the address is on eth0 in that netns.
        assert_result_valid(&lab, &r, a, "1.1.0", None);
        let addr = result_address(&r);
        assert_eq!(holder_of(&lab, &addr), Some(format!("{}\r\neth0", a.cid)));
        assert!(addrs.insert(addr.clone()), "{addr} handed out twice");
    }
    assert_eq!(addrs.len(), 24);
    assert_eq!(address_files(&lab).len(), 24);
    parallel_dels(&lab, &attached, &config);
}

#[test]
fn oversubscribed_parallel_adds_fill_the_range_exactly() {
    let lab = Lab::new("par28");
    // 24 addresses, 28 contenders starting from the same round-robin hint.
    let config = config_with(
        &lab,
        &[
            ("rangeStart", json!(lab.ip(10))),
            ("rangeEnd", json!(lab.ip(33))),
        ],
    );
    let attached = parallel_adds(&lab, 28, &config);
    let mut addrs = BTreeSet::new();
    let mut refused = 0;
    for (a, out) in &attached {
        if out.code == 0 {
            let r = out.expect_result(&a.cid);
            assert_result_valid(&lab, &r, a, "1.1.0", None);
            let addr = result_address(&r);
            let host: u8 = addr.rsplit('.').next().unwrap().parse().unwrap();
            assert!((10..=33).contains(&host), "{addr} is outside the range");
            assert!(addrs.insert(addr.clone()), "{addr} handed out twice");
        } else {
            refused += 1;
            assert_cni_error(out, 110, &["no free address", "(24 of 24 held)"]);
            assert_eq!(
                netns_link_names(&a.netns),
                vec!["lo".to_string()],
                "{}",
                a.cid
            );
            assert!(
                !lab.reservations()
                    .contains(&format!("holders/{}:eth0", a.cid)),
                "refused {} left a holder index",
                a.cid
            );
        }
    }
    assert_eq!(
        (addrs.len(), refused),
        (24, 4),
        "24 successes and 4 refusals"
    );
    assert_eq!(address_files(&lab).len(), 24);
    assert_eq!(lab.lab_veths().len(), 24);
    parallel_dels(&lab, &attached, &config);
}

/// STATUS (CNI 1.1) says whether ADD can be served, and why not: success with a free
/// address; code 50 naming the cause when the range is full or the bridge name is taken
/// by a link that is not a bridge; success again once the cause is gone.
#[test]
fn status_tells_whether_add_can_be_served() {
    let lab = Lab::new("status");
    let only = lab.ip(2);
    let config = config_with(
        &lab,
        &[("rangeStart", json!(only)), ("rangeEnd", json!(only))],
    );
    let status = || {
        Call::bare()
            .env("CNI_COMMAND", "STATUS")
            .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
            .config(&config)
            .run()
    };
    status().expect_silent_success("STATUS with the one address free");

    let add = lab.call("ADD").config(&config).run();
    assert_eq!(add.code, 0, "ADD of the one address failed:\n{add}");
    assert_cni_error(&status(), 50, &["no free address", "1 of 1 held"]);

    lab.call("DEL")
        .config(&config)
        .run()
        .expect_silent_success("DEL");
    status().expect_silent_success("STATUS after DEL freed the address");

    // The bridge name taken by a link that is not a bridge: ADD could not be served.
    ip(&["link", "del", &lab.bridge]);
    add_plain_link(None, &lab.bridge, "acs86peer");
    assert_cni_error(&status(), 50, &[&lab.bridge, "taken"]);
    let _ = run("ip", &["link", "del", &lab.bridge], &[]);
    status().expect_silent_success("STATUS once the name is free again");
}
