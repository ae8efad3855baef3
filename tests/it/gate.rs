//! Seed 002's gate, encoded: cnitool ADD/CHECK/DEL against a real netns, the two cases
//! that must fail on purpose, DEL after the netns is gone, CNI_IFNAME=net1, and the
//! result in every supported version. Root only.

use crate::common::*;
use serde_json::json;

/// The seed's gate, step by step, through cnitool with the seed's conflist shape
/// (cniVersion 1.0.0, testAddress .20).
#[test]
fn seed_002_gate_through_cnitool() {
    let lab = Lab::new("gate");
    let address = lab.ip(20);
    lab.write_conflist(
        "1.0.0",
        "academy",
        json!({ "testAddress": format!("{address}/24") }),
    );
    let a = lab.cnitool_attach(&lab.netns, "eth0");

    // cnitool add ... | jq .  — and then what cnitool does not check: JSON and kernel.
    let result = lab
        .cnitool("add", &lab.netns, &[])
        .expect_result("cnitool add");
    assert_result_valid(&lab, &result, &a, "1.0.0", Some(&address));
    assert_eq!(lab.cached_results().len(), 1, "cnitool cached no result");

    // ip netns exec a1 ping -c2 <gateway>
    assert!(
        ping_from(&lab.netns, &lab.gateway(), 2),
        "no ping reply from the gateway"
    );

    // cnitool check && echo CHECK-OK
    lab.cnitool("check", &lab.netns, &[])
        .expect_silent_success("cnitool check");

    // cnitool del; cnitool del && echo SECOND-DEL-OK
    lab.cnitool("del", &lab.netns, &[])
        .expect_silent_success("cnitool del");
    assert_eq!(
        netns_link_names(&lab.netns),
        ["lo"],
        "netns not back to only lo"
    );
    assert_unwired(&lab, &a);
    let second = lab.cnitool("del", &lab.netns, &[]);
    second.expect_silent_success("second cnitool del");
    assert!(
        second.stderr.trim().is_empty(),
        "second DEL complained:\n{second}"
    );
    assert!(
        lab.cached_results().is_empty(),
        "cnitool cache left after DEL"
    );
}

/// Fail on purpose 1: a result without "ips". cnitool accepts it (its result check is
/// shallow), so the test's own validator has to be the one that rejects it. A wrapper
/// plugin runs academy and deletes "ips" from the ADD result with jq.
#[test]
fn fail_on_purpose_result_without_ips() {
    let lab = Lab::new("noips");
    lab.install_script(
        "academy-noips",
        &format!(
            "#!/bin/sh\n\
             # academy, with ips removed from the ADD result\n\
             out=$('{}')\n\
             rc=$?\n\
             if [ $rc -eq 0 ] && [ \"$CNI_COMMAND\" = ADD ]; then\n\
             \x20 printf '%s\\n' \"$out\" | jq -c 'del(.ips)'\n\
             else\n\
             \x20 [ -z \"$out\" ] || printf '%s\\n' \"$out\"\n\
             \x20 exit $rc\n\
             fi\n",
            plugin()
        ),
    );
    lab.write_conflist("1.0.0", "academy-noips", json!({}));
    let a = lab.cnitool_attach(&lab.netns, "eth0");

    let add = lab.cnitool("add", &lab.netns, &[]);
    // cnitool: accepted.
    let result = add.expect_result("cnitool add through academy-noips");
    assert!(
        result.get("ips").is_none(),
        "the wrapper did not strip ips: {result}"
    );
    // Ours: rejected, and for the right reason.
    let problems = check_result(&lab, &result, &a, "1.0.0", None)
        .expect_err("the validator accepted a result without ips");
    assert!(
        problems.iter().any(|p| p.contains("ips is missing")),
        "rejected, but not for the missing ips: {problems:?}"
    );
    // Connectivity without a pod IP: the network itself works.
    assert!(
        ping_from(&lab.netns, &lab.gateway(), 1),
        "no ping reply from the gateway"
    );

    lab.cnitool("del", &lab.netns, &[])
        .expect_silent_success("cnitool del");
    assert_unwired(&lab, &a);
}

/// Fail on purpose 2: eth0 set down behind the plugin's back. Nothing in the result is
/// wrong, ping fails, and CHECK is what catches it.
#[test]
fn fail_on_purpose_eth0_down_is_caught_by_check() {
    let lab = Lab::new("down");
    let a = lab.cnitool_attach(&lab.netns, "eth0");
    let result = lab
        .cnitool("add", &lab.netns, &[])
        .expect_result("cnitool add");
    assert_result_valid(&lab, &result, &a, "1.0.0", None);
    assert!(
        ping_from(&lab.netns, &lab.gateway(), 1),
        "no ping reply before the sabotage"
    );
    lab.cnitool("check", &lab.netns, &[])
        .expect_silent_success("cnitool check before the sabotage");

    ip(&["-n", &lab.netns, "link", "set", "eth0", "down"]);
    assert!(
        !ping_from(&lab.netns, &lab.gateway(), 1),
        "ping works with eth0 down?"
    );

    let check = lab.cnitool("check", &lab.netns, &[]);
    assert_eq!(
        check.code, 1,
        "cnitool check passed with eth0 down:\n{check}"
    );
    assert!(
        check.all().contains("eth0 is down"),
        "CHECK did not say eth0 is down:\n{check}"
    );

    // The same CHECK invoked directly, to see the code: 120, CHECK mismatch.
    let mut conf = lab.config("1.0.0");
    conf["prevResult"] = result;
    let direct = lab.call_for("CHECK", &a).config(&conf).run();
    assert_cni_error(&direct, 120, &["eth0 is down"]);

    lab.cnitool("del", &lab.netns, &[])
        .expect_silent_success("cnitool del");
    assert_unwired(&lab, &a);
}

/// The runtime deleted the netns before DEL (the common crash path): DEL still exits 0,
/// the host veth is gone and the address is released.
#[test]
fn del_after_the_netns_was_deleted() {
    let lab = Lab::new("nsgone");
    let a = lab.cnitool_attach(&lab.netns, "eth0");
    let result = lab
        .cnitool("add", &lab.netns, &[])
        .expect_result("cnitool add");
    assert_result_valid(&lab, &result, &a, "1.0.0", None);
    assert_eq!(
        lab.reservations().len(),
        2,
        "one address file + one holder index expected"
    );

    ip(&["netns", "del", &lab.netns]);
    assert!(!netns_exists(&lab.netns));

    lab.cnitool("del", &lab.netns, &[])
        .expect_silent_success("cnitool del without the netns");
    assert_unwired(&lab, &a);
    lab.cnitool("del", &lab.netns, &[])
        .expect_silent_success("second cnitool del without the netns");
}

/// CNI_IFNAME is honoured: the container iface is net1, not eth0, and DEL removes net1.
#[test]
fn ifname_net1() {
    let lab = Lab::new("net1");
    let a = lab.cnitool_attach(&lab.netns, "net1");
    let env = [("CNI_IFNAME", "net1")];
    let result = lab
        .cnitool("add", &lab.netns, &env)
        .expect_result("cnitool add net1");
    assert_result_valid(&lab, &result, &a, "1.0.0", None);
    assert_eq!(
        netns_link_names(&lab.netns),
        ["lo", "net1"],
        "eth0 made instead of net1?"
    );
    assert!(lab.cached_results().iter().any(|c| c.ends_with("-net1")));
    assert!(
        ping_from(&lab.netns, &lab.gateway(), 1),
        "no ping reply over net1"
    );
    lab.cnitool("check", &lab.netns, &env)
        .expect_silent_success("cnitool check net1");

    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("cnitool del net1");
    assert_eq!(netns_link_names(&lab.netns), ["lo"]);
    assert_unwired(&lab, &a);
}

/// The result in every supported version, invoked directly (exact shape per version,
/// CHECK with it as prevResult where CHECK exists) and through cnitool (which parses it
/// with the version's own types).
#[test]
fn result_in_every_supported_version() {
    let lab = Lab::new("vers");
    let a = lab.attach();
    for v in SUPPORTED {
        let conf = lab.config(v);
        let result = lab
            .call("ADD")
            .config(&conf)
            .run()
            .expect_result(&format!("ADD {v}"));
        assert_result_valid(&lab, &result, &a, v, None);
        if *v != "0.3.0" && *v != "0.3.1" {
            let mut check = conf.clone();
            check["prevResult"] = result.clone();
            lab.call("CHECK")
                .config(&check)
                .run()
                .expect_silent_success(&format!("CHECK {v}"));
        }
        lab.call("DEL")
            .config(&conf)
            .run()
            .expect_silent_success(&format!("DEL {v}"));
        assert_unwired(&lab, &a);
    }

    let a = lab.cnitool_attach(&lab.netns, "eth0");
    for v in SUPPORTED {
        lab.write_conflist(v, "academy", json!({}));
        let add = lab.cnitool("add", &lab.netns, &[]);
        // cnitool 1.1.2 (libcni 1.1) predates spec 1.1.0 and cannot parse any 1.1.0
        // result. That refusal is its own, and the ADD itself happened: check the
        // kernel side and DEL. Any other failure, or a newer cnitool, gets the full check.
        if *v == "1.1.0"
            && add
                .stderr
                .contains("unsupported CNI result version \"1.1.0\"")
        {
            assert_eq!(netns_link_names(&lab.netns), ["eth0", "lo"], "{add}");
            lab.cnitool("del", &lab.netns, &[])
                .expect_silent_success("cnitool del 1.1.0");
            assert_unwired(&lab, &a);
            continue;
        }
        let result = add.expect_result(&format!("cnitool add {v}"));
        assert_result_valid(&lab, &result, &a, v, None);
        lab.cnitool("del", &lab.netns, &[])
            .expect_silent_success(&format!("cnitool del {v}"));
        assert_unwired(&lab, &a);
    }
}

/// The guard every other test relies on: a test that panics mid-way leaves nothing
/// behind (netns, veth, bridge, store, NETCONFPATH, cnitool cache). The panic message
/// "on purpose" in the output is expected.
#[test]
fn lab_guard_cleans_up_after_a_panic() {
    let seen = std::sync::Mutex::new(None);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let lab = Lab::new("guard");
        let result = lab
            .cnitool("add", &lab.netns, &[])
            .expect_result("cnitool add");
        let veth = result["interfaces"][1]["name"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!lab.cached_results().is_empty() && !lab.reservations().is_empty());
        *seen.lock().unwrap() = Some((
            lab.netns.clone(),
            lab.bridge.clone(),
            veth,
            lab.root.clone(),
            lab.cached_results(),
        ));
        panic!("on purpose, with the attachment still wired");
    }));
    assert!(outcome.is_err());
    let (netns, bridge, veth, root, cached) = seen.into_inner().unwrap().expect("lab was built");
    assert!(!netns_exists(&netns), "netns {netns} left behind");
    for link in [&bridge, &veth] {
        let out = run("ip", &["link", "show", "dev", link], &[]);
        assert_ne!(out.code, 0, "link {link} left behind");
    }
    assert!(!root.exists(), "{} left behind", root.display());
    for c in cached {
        assert!(
            !std::path::Path::new("/var/lib/cni/results")
                .join(&c)
                .exists(),
            "{c} left"
        );
    }
}
