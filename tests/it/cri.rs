//! academy under containerd's CRI plugin, the way kubelet drives it on a Kubernetes node.
//!
//! Seed 001 names this seam as the one the cnitool loop cannot test: a runtime that
//! starts pods concurrently, caches results, sends DEL twice (StopPodSandbox with the
//! cached prevResult, RemovePodSandbox with an empty CNI_NETNS and nothing else), keeps
//! pods across its own restart, writes the CNI config itself from the node's pod CIDR,
//! and reads results back with its own libcni. Debian 12's containerd 1.6 has the CRI
//! plugin built in; each test runs a private one (cri/containerd.rs) and calls it
//! through a CRI v1 client (tests/it/cri/cri_client.py on tests/it/cri/api.proto).
//!
//! Needs root and `make setup` (containerd, runc, gcc, Debian's python3-grpcio,
//! python3-protobuf and protobuf-compiler, the reference loopback plugin). Each test's
//! containerd carries a [`Lab`] (network name, bridge, subnet, store from the one
//! allocator), and takes a lock file of its test's own, so two runs of one test on one
//! machine take turns. Pings go only between the test's own pods, the gateway on the
//! test's own bridge, and the test's own outside netns.

pub mod containerd;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr};

use containerd::Containerd;
use serde_json::{json, Value};

use crate::common::*;

/// Whether `addr` is in the /24 whose first three octets are `prefix` ("10.A.n").
fn in_block(addr: &str, prefix: &str) -> bool {
    addr.starts_with(&format!("{prefix}."))
}

/// A conflist as a Kubernetes node would carry it: academy with host-local-style IPAM
/// on `subnet`, the gateway on the bridge and as the pods' default route.
fn conflist(c: &Containerd, version: &str, subnet: &str) -> Value {
    json!({
        "cniVersion": version,
        "name": c.lab.network,
        "plugins": [{
            "type": "academy",
            "bridge": c.lab.bridge,
            "isGateway": true,
            "isDefaultGateway": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": subnet }]],
                "dataDir": c.store(),
            }
        }]
    })
}

/// After every pod of the test is gone: no reservation, no holder index, no academy
/// veth, no bridge port, no libcni cache entry, no sandbox.
fn assert_nothing_left(c: &Containerd, when: &str) {
    assert_eq!(
        c.reservations(),
        BTreeMap::new(),
        "{when}: reservations left"
    );
    assert_eq!(
        c.holder_files(),
        Vec::<String>::new(),
        "{when}: holder index left"
    );
    assert_eq!(
        c.academy_veths(),
        Vec::<String>::new(),
        "{when}: host veths left"
    );
    assert_eq!(
        c.bridge_ports(),
        Vec::<String>::new(),
        "{when}: bridge ports left"
    );
    assert_eq!(
        c.cached_results(),
        BTreeSet::new(),
        "{when}: libcni cache left"
    );
    assert_eq!(
        c.sandboxes(),
        Vec::<String>::new(),
        "{when}: sandboxes left"
    );
}

fn netns_of(status: &Value) -> String {
    status["netns"]
        .as_str()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| panic!("no netns path in the sandbox status: {status}"))
        .to_string()
}

#[test]
fn cri_three_pods_at_once_get_academys_addresses_and_reach_each_other() {
    let c = Containerd::start("three", "");
    c.write_conflist(&conflist(&c, "1.0.0", &c.lab.subnet()));

    let runs: Vec<(Value, f64)> = std::thread::scope(|s| {
        let c = &c;
        let started: Vec<_> = (0..3)
            .map(|i| {
                s.spawn(move || {
                    let (name, uid) = (format!("pod{i}"), format!("uid-pod{i}"));
                    c.timed_cri(&["run", &name, &uid, "default"])
                })
            })
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: Vec<String> = runs
        .iter()
        .map(|(v, _)| v["id"].as_str().unwrap().to_string())
        .collect();
    let seconds: Vec<String> = runs.iter().map(|(_, s)| format!("{s:.2}")).collect();
    eprintln!(
        "cri: three RunPodSandbox at once took {} s",
        seconds.join(", ")
    );

    let statuses: Vec<Value> = ids.iter().map(|id| c.status(id)).collect();
    let mut by_ip = BTreeMap::new();
    for (id, st) in ids.iter().zip(&statuses) {
        assert_eq!(st["state"], "SANDBOX_READY", "{st}");
        let ip: IpAddr = st["ip"].as_str().unwrap().parse().expect("pod ip");
        assert!(
            in_block(&ip.to_string(), &c.lab.prefix),
            "{ip} is not in {}",
            c.lab.subnet()
        );
        assert!(
            by_ip.insert(ip.to_string(), id.clone()).is_none(),
            "{ip} given twice"
        );
    }
    // What containerd reports is exactly what academy's store holds, holder by holder.
    assert_eq!(c.reservations(), by_ip, "CRI addresses vs academy's store");
    assert_eq!(c.holder_files().len(), 3, "{:?}", c.holder_files());
    assert_eq!(c.academy_veths().len(), 3, "{:?}", c.academy_veths());
    assert_eq!(c.bridge_ports().len(), 3, "{:?}", c.bridge_ports());

    // Each ADD came from containerd with the pod's Kubernetes identity and its netns.
    let adds: Vec<_> = c
        .plugin_calls()
        .into_iter()
        .filter(|call| call.command == "ADD")
        .collect();
    assert_eq!(adds.len(), 3, "{adds:?}");
    for (i, st) in statuses.iter().enumerate() {
        let netns = netns_of(st);
        let add = adds
            .iter()
            .find(|a| a.netns == netns)
            .unwrap_or_else(|| panic!("no ADD with CNI_NETNS {netns}: {adds:?}"));
        assert!(
            add.args.contains("K8S_POD_NAMESPACE=default")
                && add.args.contains(&format!("K8S_POD_NAME=pod{i}")),
            "pod{i}'s ADD: {add:?}"
        );
    }

    let ips: Vec<String> = statuses
        .iter()
        .map(|s| s["ip"].as_str().unwrap().to_string())
        .collect();
    for st in &statuses {
        let netns = netns_of(st);
        ping_from_path(&netns, &c.lab.gateway()).unwrap();
        for ip in &ips {
            ping_from_path(&netns, ip).unwrap();
        }
    }

    for id in &ids {
        c.stop_and_remove(id);
    }
    assert_nothing_left(&c, "after removing the three pods");
}

#[test]
fn cri_stop_then_remove_sandbox_leaves_no_reservation_or_veth() {
    let c = Containerd::start("stop", "");
    c.write_conflist(&conflist(&c, "1.0.0", &c.lab.subnet()));
    let (run, seconds) = c.timed_cri(&["run", "pod", "uid-pod", "default"]);
    let id = run["id"].as_str().unwrap().to_string();
    eprintln!("cri: RunPodSandbox took {seconds:.2} s");
    let st = c.status(&id);
    let netns = netns_of(&st);
    assert_eq!(c.reservations().len(), 1);
    assert_eq!(c.academy_veths().len(), 1);
    let calls_before = c.plugin_calls().len();

    let (_, seconds) = c.timed_cri(&["stop", &id]);
    eprintln!("cri: StopPodSandbox took {seconds:.2} s");
    let calls = c.plugin_calls();
    let stop_calls = &calls[calls_before..];
    assert_eq!(
        stop_calls.len(),
        1,
        "StopPodSandbox's calls: {stop_calls:?}"
    );
    let del = &stop_calls[0];
    assert_eq!(del.command, "DEL", "{del:?}");
    assert_eq!(
        del.netns, netns,
        "StopPodSandbox's DEL names the pod's netns"
    );
    assert!(
        del.prev_result,
        "StopPodSandbox's DEL carries the cached result"
    );
    assert_eq!(c.reservations(), BTreeMap::new(), "after StopPodSandbox");
    assert_eq!(
        c.academy_veths(),
        Vec::<String>::new(),
        "after StopPodSandbox"
    );
    assert_eq!(c.status(&id)["state"], "SANDBOX_NOTREADY");

    let (_, seconds) = c.timed_cri(&["remove", &id]);
    eprintln!("cri: RemovePodSandbox took {seconds:.2} s");
    let calls = c.plugin_calls();
    let remove_calls = &calls[calls_before + 1..];
    assert_eq!(
        remove_calls.len(),
        1,
        "RemovePodSandbox's calls: {remove_calls:?}"
    );
    let del = &remove_calls[0];
    // The second DEL has nothing to go on: no netns, no prevResult. It must still succeed
    // (RemovePodSandbox would fail otherwise) and change nothing.
    assert_eq!(del.command, "DEL", "{del:?}");
    assert_eq!(
        del.netns, "",
        "RemovePodSandbox's DEL has an empty CNI_NETNS"
    );
    assert!(!del.prev_result, "RemovePodSandbox's DEL has no prevResult");
    assert_nothing_left(&c, "after RemovePodSandbox");
    assert!(
        !std::path::Path::new(&netns).exists(),
        "the pod's netns file {netns} is still there"
    );
}

#[test]
fn cri_pod_survives_a_containerd_restart() {
    let mut c = Containerd::start("restart", "");
    c.write_conflist(&conflist(&c, "1.0.0", &c.lab.subnet()));
    let id = c.run_pod("pod");
    let before = c.status(&id);
    let netns = netns_of(&before);
    ping_from_path(&netns, &c.lab.gateway()).unwrap();
    let reserved = c.reservations();
    let calls_before = c.plugin_calls();

    c.restart();

    let after = c.status(&id);
    assert_eq!(after["state"], "SANDBOX_READY", "{after}");
    assert_eq!(
        after["ip"], before["ip"],
        "the pod's address after the restart"
    );
    assert_eq!(after["pid"], before["pid"], "the same pause process");
    assert_eq!(c.reservations(), reserved, "the store after the restart");
    ping_from_path(&netns, &c.lab.gateway()).unwrap();
    // A restart sends academy nothing (no VERSION, no CHECK, no GC).
    assert_eq!(c.plugin_calls(), calls_before, "calls made by the restart");

    c.stop_and_remove(&id);
    assert_nothing_left(&c, "after removing the pod that outlived the restart");
}

#[test]
fn cri_conflist_saying_1_1_0_fails_run_pod_sandbox_with_the_reason() {
    let c = Containerd::start("v110", "");
    c.write_conflist(&conflist(&c, "1.1.0", &c.lab.subnet()));
    let err = c
        .try_cri(&["run", "pod", "uid-pod", "default"])
        .expect_err("RunPodSandbox with a 1.1.0 conflist under containerd 1.6");
    // containerd 1.6's libcni reads results up to 1.0.0; academy's ADD succeeds and
    // prints a 1.1.0 result, which containerd then cannot parse.
    assert!(
        err.contains(r#"unsupported CNI result version \"1.1.0\""#)
            || err.contains(r#"unsupported CNI result version "1.1.0""#),
        "the error does not say the result version is the problem: {err}"
    );
    // containerd tears the half-made sandbox down: academy's DEL frees what ADD took.
    let commands: Vec<String> = c.plugin_calls().into_iter().map(|c| c.command).collect();
    assert!(commands.contains(&"DEL".to_string()), "{commands:?}");
    assert_nothing_left(&c, "after the failed RunPodSandbox");
}

/// conflists/containerd-template.conflist.tmpl with this test's names substituted (the
/// shipped template uses the node defaults: network "academy", bridge "cni0", the
/// default store).
pub fn template_for(c: &Containerd) -> String {
    let shipped = include_str!("../../conflists/containerd-template.conflist.tmpl");
    let store = format!(
        r#""type": "host-local", "dataDir": "{}","#,
        c.store().display()
    );
    let mut out = shipped.to_string();
    for (from, to) in [
        (
            r#""name": "academy","#.to_string(),
            format!(r#""name": "{}","#, c.lab.network),
        ),
        (
            r#""bridge": "cni0","#.to_string(),
            format!(r#""bridge": "{}","#, c.lab.bridge),
        ),
        (r#""type": "host-local","#.to_string(), store),
    ] {
        assert_eq!(out.matches(&from).count(), 1, "{from} in the template");
        out = out.replace(&from, &to);
    }
    out
}

#[test]
fn cri_conf_template_gives_pods_the_node_cidr_from_update_runtime_config() {
    let template =
        std::env::temp_dir().join(Slot::take().name("academy-it", "cri-template") + ".tmpl");
    // The template must exist before containerd starts; its final text needs the
    // store path, which is under the test folder: write it after, it is read at update.
    std::fs::write(&template, "{}").unwrap();
    let _template_guard = RemoveOnDrop(template.clone());
    let extra = format!("    conf_template = \"{}\"\n", template.display());
    let c = Containerd::start("template", &extra);
    std::fs::write(&template, template_for(&c)).unwrap();

    // Before kubelet sends the node's CIDR there is no network config at all.
    // containerd keeps the failed sandbox (NOT_READY); it cannot be stopped either until
    // there is a network config ("failed to destroy network"), so kubelet retries later.
    let early = c.try_cri(&["run", "early", "uid-early", "default"]);
    assert!(
        early
            .as_ref()
            .is_err_and(|e| e.contains("cni plugin not initialized")),
        "RunPodSandbox before UpdateRuntimeConfig: {early:?}"
    );
    assert_eq!(
        c.plugin_calls(),
        vec![],
        "academy was called without a config"
    );
    let early_ids = c.sandboxes();
    assert_eq!(early_ids.len(), 1, "{early_ids:?}");

    let v6_prefix = c.lab.slot.v6_prefix();
    c.cri(&[
        "update-cidr",
        &format!("{},{v6_prefix}::/64", c.lab.subnet()),
    ]);
    let written = std::fs::read_dir(c.conf_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<BTreeSet<_>>();
    assert!(
        !written.is_empty(),
        "containerd wrote no config from the template"
    );

    // kubelet's retry: the early sandbox's teardown now reaches academy as DELs for an
    // attachment that was never added, which must succeed and leave nothing.
    c.stop_and_remove(&early_ids[0]);
    let calls = c.plugin_calls();
    assert!(calls.iter().all(|call| call.command == "DEL"), "{calls:?}");
    assert_nothing_left(&c, "after removing the sandbox that never got a network");

    let a = c.run_pod("a");
    let b = c.run_pod("b");
    let (sa, sb) = (c.status(&a), c.status(&b));
    for st in [&sa, &sb] {
        let v4 = st["ip"].as_str().unwrap();
        assert!(in_block(v4, &c.lab.prefix), "{st}");
        let extra = st["additional_ips"].as_array().unwrap();
        assert_eq!(
            extra.len(),
            1,
            "one IPv6 address besides the IPv4 one: {st}"
        );
        let v6addr: Ipv6Addr = extra[0].as_str().unwrap().parse().unwrap();
        let want: Ipv6Addr = format!("{v6_prefix}::").parse().unwrap();
        assert_eq!(v6addr.segments()[..4], want.segments()[..4], "{st}");
    }
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for (id, st) in [(&a, &sa), (&b, &sb)] {
        expected.insert(st["ip"].as_str().unwrap().to_string(), id.clone());
        expected.insert(
            st["additional_ips"][0].as_str().unwrap().to_string(),
            id.clone(),
        );
    }
    assert_eq!(
        c.reservations(),
        expected,
        "CRI addresses vs academy's store"
    );
    ping_from_path(&netns_of(&sa), &c.lab.gateway()).unwrap();
    ping_from_path(&netns_of(&sa), sb["ip"].as_str().unwrap()).unwrap();

    // Once a config loads, containerd 1.6 does not render the template again: a later
    // UpdateRuntimeConfig with another CIDR leaves the network as it is.
    let config_file = c.conf_dir().join("10-containerd-net.conflist");
    let rendered = std::fs::read_to_string(&config_file).expect("containerd's rendered config");
    eprintln!("cri: containerd rendered the template as:\n{rendered}");
    let another = format!("{}.0/24", Slot::take().v4_prefix());
    c.cri(&["update-cidr", &another]);
    assert_eq!(std::fs::read_to_string(&config_file).unwrap(), rendered);
    let late = c.run_pod("late");
    let late_ip = c.status(&late)["ip"].as_str().unwrap().to_string();
    assert!(in_block(&late_ip, &c.lab.prefix), "{late_ip}");

    for id in [&a, &b, &late] {
        c.stop_and_remove(id);
    }
    assert_nothing_left(&c, "after removing the template's pods");
}

/// Why `academy install` writes a temp file inside the config folder and renames it
/// there: containerd 1.6 does not see a conflist moved in from another folder (the
/// control below), and does see the installer's.
#[test]
fn cri_academy_install_replaces_the_conflist_under_a_running_containerd() {
    let c = Containerd::start("reinstall", "");
    c.write_conflist(&conflist(&c, "1.0.0", &c.lab.subnet()));
    let first = c.run_pod("first");
    assert!(c.status(&first)["ip"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{}.", c.lab.prefix)));

    // The same network on a subnet and bridge of another slot, prepared outside the
    // config folder.
    let next_slot = Slot::take();
    let next_bridge = next_slot.link_name("acb");
    let mut next = conflist(&c, "1.0.0", &format!("{}.0/24", next_slot.v4_prefix()));
    next["plugins"][0]["bridge"] = json!(next_bridge);
    let outside = c.dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let source = outside.join("10-academy.conflist");
    std::fs::write(&source, next.to_string()).unwrap();
    let _next_bridge = DeleteLinkOnDrop(next_bridge.clone());

    // Control: `mv` from another folder. containerd keeps the old config. (Other bytes
    // than the installer's, which would otherwise find its file current and skip it.)
    let moved = outside.join("moved.conflist");
    std::fs::write(&moved, serde_json::to_string_pretty(&next).unwrap()).unwrap();
    std::fs::rename(&moved, c.conf_dir().join("10-academy.conflist")).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let control = c.run_pod("control");
    let control_ip = c.status(&control)["ip"].as_str().unwrap().to_string();
    assert!(
        in_block(&control_ip, &c.lab.prefix),
        "containerd picked up a conflist moved in from another folder ({control_ip}); \
         the premise of the installer's in-folder rename has changed"
    );

    // academy install: temp file in the folder, then rename. containerd sees it.
    let conf_dir = c.conf_dir();
    let install = run(
        plugin(),
        &[
            "install",
            "--bin-dir",
            outside.to_str().unwrap(),
            "--conf-dir",
            conf_dir.to_str().unwrap(),
            "--conflist",
            source.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(install.code, 0, "{install}");
    let installed_line = format!(
        "installed {}",
        conf_dir.join("10-academy.conflist").display()
    );
    assert!(install.stdout.contains(&installed_line), "{install}");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after = c.run_pod("after");
    let after_ip = c.status(&after)["ip"].as_str().unwrap().to_string();
    assert!(
        in_block(&after_ip, &next_slot.v4_prefix()),
        "the pod after academy install got {after_ip}, not an address of the new conflist"
    );

    // Pods made under the old config are still torn down by academy (DEL with their
    // cached result), and nothing is left of either.
    for id in [&first, &control, &after] {
        c.stop_and_remove(id);
    }
    assert_nothing_left(&c, "after removing pods of both configs");
    assert!(bridge_ports(&next_bridge).is_empty());
}

/// ipMasq (outbound NAT over nf_tables, academy's `inet academy` table) under
/// containerd: pods reach an outside netns that has no route back to them, each pod's
/// address is in the network's masquerade set while it runs, and StopPodSandbox takes
/// it out.
#[test]
fn cri_ipmasq_pods_reach_an_outside_netns_and_leave_no_masquerade() {
    // The lab's guard removes the network's masquerade after containerd's DELs ran,
    // and the outside's netns with it.
    let c = Containerd::start("masq", "");
    let out = Outside::new(&c.lab);
    let mut list = conflist(&c, "1.0.0", &c.lab.subnet());
    list["plugins"][0]["ipMasq"] = json!(true);
    c.write_conflist(&list);

    // The outside cannot answer a pod address unless it was rewritten to the host's.
    let route_back = run("ip", &["-n", &out.netns, "route", "get", &c.lab.ip(2)], &[]);
    assert_ne!(
        route_back.code, 0,
        "the outside has a route to the pods:\n{route_back}"
    );

    let ids = [c.run_pod("a"), c.run_pod("b")];
    let statuses: Vec<Value> = ids.iter().map(|id| c.status(id)).collect();
    let ips: BTreeSet<String> = statuses
        .iter()
        .map(|s| s["ip"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ips.len(), 2);
    assert_eq!(nft::addresses(&c.lab.network), ips, "masquerade set");
    for st in &statuses {
        ping_from_path(&netns_of(st), &out.far_v4).unwrap();
        ping_from_path(&netns_of(st), &c.lab.gateway()).unwrap();
    }

    // StopPodSandbox's DEL takes the pod's address out of the set; the other stays.
    c.cri(&["stop", &ids[0]]);
    let left: BTreeSet<String> = [statuses[1]["ip"].as_str().unwrap().to_string()].into();
    assert_eq!(
        nft::addresses(&c.lab.network),
        left,
        "after one StopPodSandbox"
    );
    ping_from_path(&netns_of(&statuses[1]), &out.far_v4).unwrap();
    c.cri(&["remove", &ids[0]]);
    c.stop_and_remove(&ids[1]);
    assert_eq!(nft::addresses(&c.lab.network), BTreeSet::new());
    assert_nothing_left(&c, "after removing the ipMasq pods");
}

struct DeleteLinkOnDrop(String);

impl Drop for DeleteLinkOnDrop {
    fn drop(&mut self) {
        let _ = run_quiet("ip", &["link", "del", &self.0]);
        remove_bridge_locks(|name| name.starts_with(&format!("{}@", self.0)));
    }
}

pub struct RemoveOnDrop(pub std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
