//! `macspoofchk` end to end: containers on one bridge, one of which changes its MAC
//! inside its netns; what reaches the gateway, what academy keeps in `bridge academy`,
//! what CHECK, DEL and GC do with it; and the reference bridge plugin 1.1.1 (which
//! implements the key with its own `bridge nat` chains) on the same steps, each in a
//! private netns of its own so that neither touches the host's nf_tables. Packets go
//! only to the gateways of the test's own bridges.

use std::collections::BTreeSet;

use crate::common::*;
use serde_json::{json, Value};

const SPOOFED: &str = "02:5a:00:00:00:01";

fn container_mac(result: &Value) -> String {
    result["interfaces"][2]["mac"]
        .as_str()
        .unwrap_or_else(|| panic!("no container MAC in {result}"))
        .to_string()
}

fn set_mac(netns: &str, mac: &str) {
    ip(&["-n", netns, "link", "set", "eth0", "address", mac]);
}

/// The elements academy keeps for one guarded attachment.
fn filter_of(network: &str, result: &Value, a: &Attach) -> [String; 3] {
    let (veth, mac) = (result_host_veth(result), container_mac(result));
    let owner = owner_comment(network, &a.cid, &a.ifname);
    [
        format!("ports {veth} {mac} {owner}"),
        format!("guarded {veth} {owner}"),
        format!("allowed {veth} {mac} {owner}"),
    ]
}

fn check(lab: &Lab, a: &Attach, config: &Value, result: &Value) -> Out {
    let mut c = config.clone();
    c["prevResult"] = result.clone();
    lab.call_for("CHECK", a).config(&c).run()
}

#[test]
fn a_container_that_changes_its_mac_cannot_reach_the_gateway() {
    let lab = Lab::new("mspoof");
    let guarded = lab.config_with("1.1.0", "macspoofchk", json!(true));
    let plain = lab.config("1.1.0");
    let (a, b, c) = (
        lab.attachment("a"),
        lab.attachment("b"),
        lab.attachment("c"),
    );
    let add = |x: &Attach, config: &Value| {
        lab.call_for("ADD", x)
            .config(config)
            .run()
            .expect_result("ADD")
    };
    let (ra, rb, rc) = (add(&a, &guarded), add(&b, &guarded), add(&c, &plain));

    let want: BTreeSet<String> = filter_of(&lab.network, &ra, &a)
        .into_iter()
        .chain(filter_of(&lab.network, &rb, &b))
        .collect();
    assert_eq!(mac_filter(&lab.network), want, "elements after the ADDs");
    assert_eq!(
        mac_filter_rules(None, &lab.network),
        1,
        "one rule per network"
    );
    check(&lab, &a, &guarded, &ra).expect_silent_success("CHECK of a");
    check(&lab, &c, &plain, &rc).expect_silent_success("CHECK of c, not guarded");
    let gw = lab.gateway();
    for x in [&a, &b, &c] {
        assert!(
            ping_eventually(&x.netns, &gw),
            "{} reaches the gateway",
            x.cid
        );
    }

    // a (guarded) and c (not) take another MAC: only a is cut off.
    set_mac(&a.netns, SPOOFED);
    set_mac(&c.netns, "02:5a:00:00:00:03");
    assert!(
        !ping_from(&a.netns, &gw, 3),
        "a spoofs its MAC and still reaches the gateway"
    );
    assert!(
        !ping_from(&a.netns, &result_address(&rb), 2),
        "a spoofs and reaches b"
    );
    assert!(
        ping_eventually(&b.netns, &gw),
        "b, guarded and honest, is cut off"
    );
    assert!(ping_eventually(&c.netns, &gw), "c, not guarded, is cut off");
    // Its own MAC again: through again, so the filter (not a broken link) stopped it.
    set_mac(&a.netns, &container_mac(&ra));
    assert!(ping_eventually(&a.netns, &gw), "a back on its own MAC");

    // CHECK names a missing element; without it every frame of a is dropped.
    let [_, _, allowed] = filter_of(&lab.network, &ra, &a);
    let element = {
        let parts: Vec<&str> = allowed.split(' ').collect();
        format!("{{ {} . {} }}", parts[1], parts[2])
    };
    let set = format!("{}-allowed", lab.network);
    let out = run(
        "nft",
        &["delete", "element", "bridge", "academy", &set, &element],
        &[],
    );
    assert_eq!(out.code, 0, "{out}");
    assert_cni_error(&check(&lab, &a, &guarded, &ra), 120, &[&set, "dropped"]);
    assert!(
        !ping_from(&a.netns, &gw, 2),
        "a without its element still passes"
    );

    for (x, config) in [(&a, &guarded), (&b, &guarded), (&c, &plain)] {
        lab.call_for("DEL", x)
            .config(config)
            .run()
            .expect_silent_success("DEL");
    }
    assert_eq!(
        mac_filter(&lab.network),
        BTreeSet::new(),
        "elements after DEL"
    );
    // The last DEL (c's, through a config without macspoofchk) releases the network's
    // map, sets and rule all the same: the key at hand does not decide (issue 31).
    assert_eq!(
        mac_filter_objects(None, &lab.network),
        BTreeSet::new(),
        "objects after the last DEL"
    );
    lab.call_for("DEL", &a)
        .config(&guarded)
        .run()
        .expect_silent_success("DEL again");
}

#[test]
fn gc_removes_the_filter_of_attachments_it_does_not_list() {
    let lab = Lab::new("msgc");
    lab.always_config("macspoofchk", json!(true));
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let ra = lab.call_for("ADD", &a).run().expect_result("ADD a");
    let rb = lab.call_for("ADD", &b).run().expect_result("ADD b");
    // What names no whole attachment: elements whose veth is gone (a kill, a crash),
    // found by their comment alone.
    let map = format!("{}-ports", lab.network);
    let guarded = format!("{}-guarded", lab.network);
    let set = format!("{}-allowed", lab.network);
    let orphan = ("vethorphan0", "02:5a:00:00:00:09", "gone:eth0");
    for (name, element) in [
        (
            &map,
            format!("{{ {} comment \"{}\" : {} }}", orphan.0, orphan.2, orphan.1),
        ),
        (
            &guarded,
            format!("{{ {} comment \"{}\" }}", orphan.0, orphan.2),
        ),
        (
            &set,
            format!("{{ {} . {} comment \"{}\" }}", orphan.0, orphan.1, orphan.2),
        ),
    ] {
        let out = run(
            "nft",
            &["add", "element", "bridge", "academy", name, &element],
            &[],
        );
        assert_eq!(out.code, 0, "{out}");
    }
    assert_eq!(mac_filter(&lab.network).len(), 9);
    assert!(ping_eventually(&b.netns, &lab.gateway()), "b before GC");

    let b_key = (b.cid.as_str(), b.ifname.as_str());
    gc(&lab, &[b_key]).expect_silent_success("GC listing b");
    let want: BTreeSet<String> = filter_of(&lab.network, &rb, &b).into_iter().collect();
    assert_eq!(mac_filter(&lab.network), want, "after GC listing only b");
    assert!(ping_eventually(&b.netns, &lab.gateway()), "b after GC");
    assert!(!lab.lab_veths().contains(&result_host_veth(&ra)));

    gc(&lab, &[]).expect_silent_success("GC listing none");
    assert_eq!(mac_filter(&lab.network), BTreeSet::new(), "after GC of all");
    assert!(lab.lab_veths().is_empty());
}

/// The first ADD of a network creates its filter (map, sets, rule) and its port's
/// elements in one batch (the engine's completion, after the elements alone were refused
/// for want of the map): refused there, or killed before it, the ADD leaves none of it.
/// Found by tracing a first ADD, then faulted with strace.
#[test]
fn the_first_add_of_a_network_creates_its_filter_all_or_nothing() {
    let lab = Lab::new("msfirst");
    lab.always_config("macspoofchk", json!(true));
    // The bridge made first, so that every ADD below takes the same steps.
    lab.call("ADD").run().expect_result("warm-up ADD");
    lab.call("DEL").run().expect_silent_success("warm-up DEL");
    remove_mac_filter_objects(&lab.network);
    let file = lab.root.join("first.trace");
    let (out, text) = run_strace(&lab.call("ADD"), &file, "sendto", None);
    out.expect_result("first ADD under strace");
    lab.call("DEL").run().expect_silent_success("DEL");
    let calls = parse_trace(&text);
    let i = calls
        .iter()
        .position(|c| c.line.contains("NFT_MSG_NEWTABLE"))
        .unwrap_or_else(|| panic!("no creation batch in the first ADD:\n{text}"));
    assert!(strace_reaches(&calls, i), "{text}");
    assert!(
        calls[i].line.contains("NFT_MSG_NEWSETELEM") && calls[i].line.contains("NFT_MSG_NEWRULE"),
        "the filter and the port's elements are not one batch:\n{text}"
    );
    let creation = rank_in_thread(&calls, i);
    let whole: BTreeSet<String> = [
        format!("map {}-ports", lab.network),
        format!("set {}-guarded", lab.network),
        format!("set {}-allowed", lab.network),
        format!("rule academy macspoofchk {}", lab.network),
    ]
    .into_iter()
    .collect();
    for (when, action, hit, left) in [
        (creation, Action::Fail("EPERM"), "NEWTABLE", BTreeSet::new()),
        (creation, Action::Kill, "NEWTABLE", BTreeSet::new()),
    ] {
        // A network never ADDed: none of its objects.
        remove_mac_filter_objects(&lab.network);
        assert_eq!(
            mac_filter_objects(None, &lab.network),
            BTreeSet::new(),
            "{}",
            run("nft", &["-a", "list", "table", "bridge", "academy"], &[]).stdout
        );
        let what = format!("{action:?} at sendto {when}");
        let inject = Inject {
            syscall: "sendto".into(),
            when,
            action,
        };
        let (out, text) = run_strace(&lab.call("ADD"), &file, "sendto", Some(&inject));
        assert_ne!(out.code, 0, "{what}: ADD went through:\n{out}\n{text}");
        // A refused call is marked; a killed one is the last.
        let calls = parse_trace(&text);
        let faulted = calls.iter().find(|c| c.injected()).or(calls.last());
        assert!(
            faulted.is_some_and(|c| c.line.contains(&format!("NFT_MSG_{hit}"))),
            "{what} did not fault the batch with {hit}:\n{text}"
        );
        assert_eq!(mac_filter_objects(None, &lab.network), left, "{what}");
        assert_eq!(mac_filter(&lab.network), BTreeSet::new(), "{what}");
        lab.call("DEL").run().expect_silent_success(&what);
        assert!(lab.lab_veths().is_empty(), "{what}");
        assert_eq!(lab.reservations(), Vec::<String>::new(), "{what}");
    }
    lab.call("ADD").run().expect_result("ADD after the faults");
    assert_eq!(mac_filter_objects(None, &lab.network), whole);
    assert_eq!(mac_filter(&lab.network).len(), 3);
    lab.call("DEL").run().expect_silent_success("last DEL");
}

/// What one plugin does on the steps of the first test, inside private netns: a host
/// (the bridge, the plugin's nf_tables) and two containers. The observations, in order:
/// both reach the gateway, the spoofer does not, the other still does, the spoofer with
/// its own MAC again does, and DEL of both succeeds.
fn observe(lab: &Lab, program: &str, plugin_type: &str, tag: &str) -> Vec<(String, bool)> {
    let host = lab.add_netns(&format!("{tag}h"));
    let config = json!({
        "cniVersion": "1.0.0",
        "name": lab.network,
        "type": plugin_type,
        "bridge": format!("{tag}br"),
        "isGateway": true,
        "macspoofchk": true,
        // academy's own key (the reference ignores it): its rule goes with the last DEL,
        // as the reference's chains do.
        "releaseUnusedAfter": 0,
        "ipam": { "type": "host-local", "subnet": lab.subnet(),
                  "dataDir": lab.root.join(format!("{tag}-data")) }
    });
    let containers: Vec<Attach> = (1..=2)
        .map(|i| Attach {
            cid: format!("{}-{tag}{i}", lab.cid),
            ifname: "eth0".into(),
            netns: lab.add_netns(&format!("{tag}{i}")),
        })
        .collect();
    let invoke = |command: &str, x: &Attach| {
        lab.call_for(command, x)
            .env("CNI_PATH", "/opt/cni/lab-bin")
            .config(&config)
            .spawn("ip", &["netns", "exec", &host, program])
    };
    let results: Vec<Value> = containers
        .iter()
        .map(|x| invoke("ADD", x).expect_result(&format!("{plugin_type} ADD")))
        .collect();
    let gw = lab.gateway();
    let (spoofer, honest) = (&containers[0].netns, &containers[1].netns);
    let mut seen = vec![
        (
            "first reaches the gateway".into(),
            ping_eventually(spoofer, &gw),
        ),
        (
            "second reaches the gateway".into(),
            ping_eventually(honest, &gw),
        ),
    ];
    set_mac(spoofer, SPOOFED);
    seen.push((
        "spoofer reaches the gateway".into(),
        ping_from(spoofer, &gw, 3),
    ));
    seen.push((
        "other reaches the gateway".into(),
        ping_eventually(honest, &gw),
    ));
    set_mac(spoofer, &container_mac(&results[0]));
    seen.push((
        "spoofer on its own MAC again".into(),
        ping_eventually(spoofer, &gw),
    ));
    for x in &containers {
        let out = invoke("DEL", x);
        seen.push((format!("DEL of {}", x.cid), out.code == 0));
    }
    seen
}

#[test]
fn the_reference_drops_the_same_frames() {
    let lab = Lab::new("msref");
    let reference = observe(&lab, "/opt/cni/lab-bin/bridge", "bridge", "r");
    let academy = observe(&lab, plugin(), "academy", "a");
    let strip = |s: &[(String, bool)]| -> Vec<bool> { s.iter().map(|(_, b)| *b).collect() };
    assert_eq!(
        strip(&reference),
        vec![true, true, false, true, true, true, true],
        "the reference's own behaviour changed: {reference:?}"
    );
    assert_eq!(
        strip(&academy),
        strip(&reference),
        "academy {academy:?}\nreference {reference:?}"
    );
    // After DEL both leave their base chain and nothing of the containers: the
    // reference's per-container chains are gone, academy's elements are.
    let rhost = format!("{}-rh", lab.netns);
    let ahost = format!("{}-ah", lab.netns);
    let out = run(
        "ip",
        &[
            "netns", "exec", &rhost, "nft", "-j", "list", "table", "bridge", "nat",
        ],
        &[],
    );
    assert_eq!(out.code, 0, "{out}");
    assert!(
        !out.stdout.contains("cni-br-iface"),
        "reference left: {}",
        out.stdout
    );
    assert_eq!(mac_filter_in(Some(&ahost), &lab.network), BTreeSet::new());
    // The network's rule went with its last attachment, as the reference's chains do.
    assert_eq!(mac_filter_rules(Some(&ahost), &lab.network), 0);
}
