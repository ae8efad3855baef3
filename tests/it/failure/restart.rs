//! Seed 004: a runtime that restarted never sends the DELs that were due; its GC frees
//! exactly the dead.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

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
        // Quiet success: GC says nothing of what it freed (the store says it, above).
        if out.stderr.contains(&addr) {
            p.push(format!("GC logged {addr} of {n}: {}", out.stderr));
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
