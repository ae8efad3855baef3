//! `academy reclaim`: by age and by keep list, dry run first; the ADD that reuses its old
//! reservation while a reclaimer decides; a dual-stack leak reclaimed whole.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::json;

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
