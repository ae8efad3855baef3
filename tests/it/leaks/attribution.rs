//! Attribution before judgement (issue 19): what academy cannot attribute to an
//! attachment it can see is never judged leaked, DEL frees what host-local reserved on a
//! shared store, and a requested address held by a provably dead attachment (one from
//! before the current boot, with no host veth) goes to the new requester.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::common::*;
use serde_json::json;

/// host-local itself, as the reference bridge runs it for `a` on the lab's network and
/// store (the same name, subnet, range and dataDir as [`config`]). Returns the address.
fn host_local_add(lab: &Lab, a: &Attach) -> String {
    let conf = json!({
        "cniVersion": "1.0.0", "name": lab.network, "type": "bridge",
        "ipam": {"type": "host-local", "subnet": lab.subnet(), "gateway": lab.gateway(),
                 "rangeStart": lab.ip(2), "rangeEnd": lab.ip(5),
                 "dataDir": lab.data_dir.to_str().unwrap()}
    });
    let out = lab
        .call_for("ADD", a)
        .config(&conf)
        .spawn("/opt/cni/lab-bin/host-local", &[]);
    let r = out.expect_result("host-local ADD");
    let ip = r["ips"][0]["address"].as_str().unwrap();
    ip.split('/').next().unwrap().to_string()
}

/// When the running kernel booted.
fn boot_time() -> SystemTime {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// Moves a reservation's time to a minute before the current boot.
fn make_before_boot(lab: &Lab, addr: &str) {
    let f = std::fs::File::open(store_dir(lab).join(addr)).unwrap();
    f.set_modified(boot_time() - Duration::from_secs(60))
        .unwrap();
}

#[test]
fn host_local_reservations_are_never_judged_leaked_and_del_frees_them() {
    let lab = Lab::new("lkhl");
    ip(&["link", "add", &lab.bridge, "type", "bridge"]);
    let conf = config(&lab, json!({"reclaimLeakedAfter": 30}));
    let list = conflist(&lab, json!({"reclaimLeakedAfter": 30}));
    // The reference filled the pool: four live containers whose veths academy cannot
    // see (the reference names them at random and labels nothing), an hour old.
    let holders: Vec<Attach> = (0..4).map(|i| attach(&lab, &format!("hl{i}"))).collect();
    let addresses: Vec<String> = holders.iter().map(|a| host_local_add(&lab, a)).collect();
    for addr in &addresses {
        make_old(&lab, addr, Duration::from_secs(3600));
    }
    let before = store(&lab);

    // A healing ADD finds the pool full and takes nothing: no duplicate address.
    let n = attach(&lab, "n");
    let out = lab.call_for("ADD", &n).config(&conf).run();
    assert_cni_error(&out, 110, &["no free address"]);
    assert_eq!(
        store(&lab),
        before,
        "ADD freed a live host-local reservation"
    );

    // The operator's list says unknown, and why; reclaim by age frees nothing.
    let listed = academy(&["list", &list, "--json"]);
    assert_eq!(listed.code, 0, "{listed}");
    let v = listed.json();
    let rows = v["reservations"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{v:#}");
    for row in rows {
        assert_eq!(row["state"], json!("unknown"), "{row}");
        assert!(row["why"].as_str().unwrap().contains("host-local"), "{row}");
    }
    let text = academy(&["list", &list]);
    assert!(text.stdout.contains("0 leaked, 4 unknown"), "{text}");
    let reclaimed = academy(&["reclaim", &list, "--older-than", "0"]);
    assert_eq!(reclaimed.code, 0, "{reclaimed}");
    assert_eq!(
        store(&lab),
        before,
        "reclaim freed host-local's reservations"
    );

    // academy's DEL of a container host-local served frees its reservation (no index).
    lab.call_for("DEL", &holders[0])
        .config(&conf)
        .run()
        .expect_silent_success("DEL of a host-local attachment");
    assert_eq!(holder_of(&lab, &addresses[0]), None, "DEL left it");
    for (a, addr) in holders.iter().zip(&addresses).skip(1) {
        assert_eq!(holder_of(&lab, addr), Some(format!("{}\r\neth0", a.cid)));
    }
}

#[test]
fn list_and_reclaim_refuse_to_judge_from_a_netns_without_the_bridge() {
    let lab = Lab::new("lkns");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let w = attach(&lab, "w");
    wire(&lab, &w, &conf);
    let before = store(&lab);
    // The lab's own netns holds no bridge: every attachment would look leaked from it.
    for args in [
        vec!["list", &list],
        vec!["reclaim", &list, "--older-than", "0"],
    ] {
        let mut argv = vec!["netns", "exec", &lab.netns, plugin()];
        argv.extend(args.iter().copied());
        let out = run("ip", &argv, &[]);
        assert_ne!(out.code, 0, "{out}");
        assert!(
            out.all().contains(&format!(
                "bridge {} of network {} is not in this network namespace",
                lab.bridge, lab.network
            )),
            "{out}"
        );
    }
    assert_eq!(store(&lab), before);
    assert_reaches_gateway(&lab, &w);
}

#[test]
fn a_requested_address_held_since_before_the_boot_goes_to_the_requester() {
    let lab = Lab::new("lkboot");
    let conf = config(&lab, json!({"reclaimLeakedAfter": 3600}));
    let (k, w) = (attach(&lab, "k"), attach(&lab, "w"));
    let dead = leak(&lab, &k, &conf);
    let live = wire(&lab, &w, &conf);
    let with_ip = |a: &Attach, ip: &str| {
        lab.call_for("ADD", a)
            .env("CNI_ARGS", &format!("IP={ip}"))
            .config(&conf)
            .run()
    };

    // A young leak may be an ADD still in flight: the request is refused, naming it.
    let n = attach(&lab, "n");
    assert_cni_error(&with_ip(&n, &dead), 111, &[&dead, &k.cid]);

    // From before this boot, with no host veth: it cannot be alive. The requester gets
    // it, and stderr names the holder that was freed.
    make_before_boot(&lab, &dead);
    let out = with_ip(&n, &dead);
    let r = out.expect_result("ADD of an address a dead holder kept");
    assert_result_valid(&lab, &r, &n, "1.1.0", Some(&dead));
    assert!(
        out.stderr.contains(&dead) && out.stderr.contains(&k.cid),
        "ADD does not say whose address it freed:\n{out}"
    );
    assert!(
        !store(&lab).contains(&format!("holders/{}:eth0", k.cid)),
        "{:?}",
        store(&lab)
    );
    assert_reaches_gateway(&lab, &n);

    // A live holder, however old, keeps its address.
    make_before_boot(&lab, &live);
    let m = attach(&lab, "m");
    assert_cni_error(&with_ip(&m, &live), 111, &[&live, &w.cid]);
    assert_eq!(holder_of(&lab, &live), Some(format!("{}\r\neth0", w.cid)));
    assert_reaches_gateway(&lab, &w);
}

#[test]
fn an_attachment_whose_host_veth_moved_away_is_never_judged_leaked() {
    let lab = Lab::new("lkmove");
    let conf = config(&lab, json!({"reclaimLeakedAfter": 30}));
    let list = conflist(&lab, json!({"reclaimLeakedAfter": 30}));
    let moved = attach(&lab, "mv");
    let addr = wire(&lab, &moved, &conf);
    for i in 0..3 {
        wire(&lab, &attach(&lab, &format!("w{i}")), &conf);
    }
    // Someone moves the live attachment's host end into another netns: from the node's
    // netns nothing of it is visible, but its container still has eth0 with the address.
    let elsewhere = lab.add_netns("elsewhere");
    ip(&["link", "set", &hostveth(&moved), "netns", &elsewhere]);
    assert!(!link_exists(&hostveth(&moved)));
    make_old(&lab, &addr, Duration::from_secs(3600));
    let before = store(&lab);

    let listed = academy(&["list", &list, "--json"]);
    let v = listed.json();
    let row = v["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["address"] == json!(addr))
        .unwrap()
        .clone();
    assert_eq!(row["state"], json!("unknown"), "{row}");
    assert!(
        row["why"]
            .as_str()
            .unwrap()
            .contains("still has the interface"),
        "{row}"
    );
    let reclaimed = academy(&["reclaim", &list, "--older-than", "0"]);
    assert_eq!(reclaimed.code, 0, "{reclaimed}");
    let n = attach(&lab, "n");
    let out = lab.call_for("ADD", &n).config(&conf).run();
    assert_cni_error(&out, 110, &["no free address"]);
    assert_eq!(store(&lab), before, "a live attachment's address was freed");
}
