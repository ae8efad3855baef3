//! The reference's keys and the capability: the refusals the reference makes, and a
//! capability-shaped ADD that still enters the netns at most twice.

use super::*;

#[test]
fn shaping_refused_as_the_reference_refuses_it() {
    let lab = Lab::new("bwbad");
    for (keys, text) in [
        (
            json!({"ingressRate": 8000}),
            "if rate is set, burst must also be set",
        ),
        (
            json!({"egressBurst": 8000}),
            "if burst is set, rate must also be set",
        ),
        (
            json!({"egressRate": 8000, "egressBurst": 34_359_738_360u64}),
            "burst cannot be more than 4GB",
        ),
    ] {
        let mut c = lab.config("1.1.0");
        for (k, v) in keys.as_object().unwrap() {
            c[k] = v.clone();
        }
        assert_cni_error(&lab.call("ADD").config(&c).run(), 7, &[text]);
        // The same through the capability.
        let mut c = lab.config("1.1.0");
        c["capabilities"] = json!({"bandwidth": true});
        c["runtimeConfig"] = json!({ "bandwidth": keys });
        assert_cni_error(
            &lab.call("ADD").config(&c).run(),
            7,
            &["runtimeConfig.bandwidth.", text],
        );
    }
    assert!(lab.lab_veths().is_empty(), "a refused ADD wired something");
}

#[test]
fn the_capability_shapes_and_add_still_enters_the_netns_at_most_twice() {
    let lab = Lab::new("bwcap");
    let mut c = lab.config("1.1.0");
    c["capabilities"] = json!({"bandwidth": true});
    c["runtimeConfig"] = json!({"bandwidth": {
        "ingressRate": RATE, "ingressBurst": BURST, "egressRate": RATE, "egressBurst": BURST}});
    let (out, text) = run_strace(
        &lab.call("ADD").config(&c),
        &lab.root.join("add.strace"),
        "setns",
        None,
    );
    let result = out.expect_result("ADD with the capability, under strace");
    let setns = parse_trace(&text)
        .into_iter()
        .filter(|s| s.name == "setns")
        .count();
    assert!(
        (1..=2).contains(&setns),
        "ADD made {setns} setns calls:\n{text}"
    );
    let ifb = result["interfaces"][3]["name"].as_str().unwrap_or("");
    assert!(link_exists(ifb), "no ifb {ifb}: {result}");
    let out = run(
        "tc",
        &["qdisc", "show", "dev", &result_host_veth(&result)],
        &[],
    );
    assert!(
        out.stdout.contains("tbf 1: root") && out.stdout.contains("rate 8Mbit"),
        "{out}"
    );
    lab.call("DEL")
        .config(&c)
        .run()
        .expect_silent_success("DEL");
    assert!(!link_exists(ifb), "DEL left ifb {ifb}");
    assert_unwired(&lab, &lab.attach());
}
