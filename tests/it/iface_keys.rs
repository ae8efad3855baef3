//! The container interface's keys of the reference bridge and host-local: `enabledad`,
//! `disableContainerInterface`, `ipam.resolvConf`. Where Debian's reference 1.1.1 has
//! the key (enabledad, resolvConf) academy and the reference run the same conflist
//! through cnitool and must leave the same state (sysctls, addresses with their DAD
//! flags, routes, result); disableContainerInterface is newer than 1.1.1, so its test
//! follows the documented meaning ("Set the container interface state down").
//!
//! Network safety: the duplicate-address host of the DAD test is a veth of the lab's
//! own netns on the lab's own bridge.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

fn v6(lab: &Lab, host: &str) -> String {
    format!("{}::{host}", lab.slot.v6_prefix())
}

/// A dual-stack network routed by default through its gateways, of type `kind` on
/// `bridge`, plus `extra` keys (and `ipam_extra` in its ipam block).
fn plugin(lab: &Lab, kind: &str, bridge: &str, data: &Path, extra: Value) -> Value {
    let mut p = json!({
        "type": kind,
        "bridge": bridge,
        "isGateway": true,
        "isDefaultGateway": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": lab.subnet()}], [{"subnet": format!("{}/64", v6(lab, ""))}]],
            "dataDir": data,
        }
    });
    for (k, v) in extra.as_object().unwrap() {
        if k == "ipam" {
            for (ik, iv) in v.as_object().unwrap() {
                p["ipam"][ik] = iv.clone();
            }
        } else {
            p[k] = v.clone();
        }
    }
    p
}

fn install(lab: &Lab, plugin: Value) {
    let list = json!({"cniVersion": "1.0.0", "name": lab.network, "plugins": [plugin]});
    std::fs::write(lab.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
}

fn tool(lab: &Lab, verb: &str, netns: &str) -> Out {
    let path = format!("{}:{REFERENCE_BIN}", lab.bin_dir.display());
    lab.cnitool(verb, netns, &[("CNI_PATH", &path)])
}

/// What one ADD gave: the result, the container's state, and how long ADD took.
struct Seen {
    result: Value,
    state: Vec<String>,
    took: Duration,
}

/// ADDs in a fresh netns `tag`, reads the container, DELs.
fn add_look_del(lab: &Lab, tag: &str) -> Seen {
    let ns = lab.add_netns(tag);
    let start = Instant::now();
    let result = tool(lab, "add", &ns).expect_result(&format!("ADD ({tag})"));
    let took = start.elapsed();
    let mut state = netns_routes(&ns);
    state.extend(netns_interfaces(&ns));
    for key in ["accept_dad", "enhanced_dad"] {
        state.push(format!("{key}={}", netns_sysctl(&ns, "ipv6", "eth0", key)));
    }
    // academy sets it over rtnetlink (IFLA_AF_SPEC), the reference through /proc/sys.
    let arp_notify = netns_sysctl(&ns, "ipv4", "eth0", "arp_notify");
    state.push(format!("arp_notify={arp_notify}"));
    tool(lab, "del", &ns).expect_silent_success(&format!("DEL ({tag})"));
    Seen {
        result,
        state,
        took,
    }
}

/// The same conflist (`extra` keys) run by the reference, then by academy, each in a
/// fresh netns named after `tag`.
fn both(lab: &Lab, tag: &str, extra: Value) -> (Seen, Seen) {
    let _serial = reference_lock();
    let bridge = ReferenceBridge::new(lab.slot.link_name("acr"));
    let ref_data = lab.root.join("ref-data");
    install(
        lab,
        plugin(lab, "bridge", &bridge.name, &ref_data, extra.clone()),
    );
    let reference = add_look_del(lab, &format!("{tag}ref"));
    bridge.remove();
    install(
        lab,
        plugin(lab, "academy", &lab.bridge, &lab.data_dir, extra),
    );
    let ours = add_look_del(lab, &format!("{tag}ours"));
    assert_eq!(lab.reservations(), Vec::<String>::new());
    (reference, ours)
}

#[test]
fn enabledad_as_the_reference_does() {
    let lab = Lab::new("kdad");
    let (reference, ours) = both(&lab, "on", json!({"enabledad": true}));
    eprintln!(
        "enabledad: ADD took {:?} with academy, {:?} with the reference",
        ours.took, reference.took
    );
    assert_eq!(ours.state, reference.state, "enabledad: academy differs");
    assert!(
        ours.state.contains(&"accept_dad=1".to_string()),
        "{:#?}",
        ours.state
    );
    // Both waited for DAD: the addresses are usable (not tentative) once ADD returns.
    assert!(
        !ours.state.iter().any(|l| l.contains("tentative")),
        "{:#?}",
        ours.state
    );
    assert!(
        ours.took >= Duration::from_millis(500),
        "academy did not wait for duplicate address detection ({:?}; the reference took {:?})",
        ours.took,
        reference.took
    );
    assert_eq!(ours.result["ips"], reference.result["ips"]);

    // Off (the default): no DAD, no wait, as the reference.
    let (reference, ours) = both(&lab, "off", json!({}));
    assert_eq!(ours.state, reference.state, "without enabledad");
    assert!(ours.state.contains(&"accept_dad=0".to_string()));
    // A gratuitous ARP when eth0 comes up, as the reference's.
    assert!(
        ours.state.contains(&"arp_notify=1".to_string()),
        "{:#?}",
        ours.state
    );
}

/// Another host on the bridge already has the address: DAD fails, and academy fails the
/// ADD and undoes it (the reference 1.1.1 returns success with an address the kernel
/// will never use).
#[test]
fn enabledad_refuses_an_address_another_host_has() {
    let lab = Lab::new("kdup");
    let taken = v6(&lab, "7");
    // First ADD makes the bridge; then a second "host" on it holds the address.
    let conf = |ips: Value| {
        let mut c = plugin(
            &lab,
            "academy",
            &lab.bridge,
            &lab.data_dir,
            json!({"enabledad": true}),
        );
        c["name"] = json!(lab.network);
        c["cniVersion"] = json!("1.1.0");
        c["args"] = json!({"cni": {"ips": ips}});
        c
    };
    lab.call("ADD")
        .config(&conf(json!([])))
        .run()
        .expect_result("ADD");
    lab.call("DEL")
        .config(&conf(json!([])))
        .run()
        .expect_silent_success("DEL");
    let other = lab.add_netns("other");
    let host_end = lab.slot.link_name("acd");
    ip(&[
        "link", "add", &host_end, "type", "veth", "peer", "name", "dup0", "netns", &other,
    ]);
    ip(&["link", "set", &host_end, "master", &lab.bridge, "up"]);
    ip(&["-n", &other, "link", "set", "dup0", "up"]);
    ip(&[
        "-n",
        &other,
        "addr",
        "add",
        &format!("{taken}/64"),
        "dev",
        "dup0",
        "nodad",
    ]);
    // The other host's own link-local address finishes its DAD on its own time (its
    // local route then appears): settled first, so the snapshot holds only what the
    // ADD may change (a loaded CI machine saw it land between the two looks).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ip(&[
        "-n",
        &other,
        "-6",
        "addr",
        "show",
        "dev",
        "dup0",
        "tentative",
    ])
    .trim()
    .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "dup0's link-local address stayed tentative"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(50));

    let before = lab.snapshot();
    let out = lab.call("ADD").config(&conf(json!([taken]))).run();
    assert_cni_error(&out, 111, &[&taken, "duplicate address detection"]);
    let diff = lab.snapshot().diff(&before);
    assert!(diff.is_empty(), "the failed ADD left:\n{diff}");
    assert_eq!(netns_link_names(&lab.netns), ["lo"]);
}

/// disableContainerInterface (newer than 1.1.1): the interface is left down with its
/// addresses; CHECK expects it down; routes, which the kernel cannot add through a
/// down interface, are refused before anything is made.
#[test]
fn disable_container_interface_leaves_it_down() {
    let lab = Lab::new("kdown");
    let mut conf = plugin(
        &lab,
        "academy",
        &lab.bridge,
        &lab.data_dir,
        json!({"disableContainerInterface": true, "isDefaultGateway": false}),
    );
    conf["name"] = json!(lab.network);
    conf["cniVersion"] = json!("1.1.0");
    let result = lab.call("ADD").config(&conf).run().expect_result("ADD");
    let line = interface_line(&lab.netns, "eth0");
    assert!(
        line.starts_with("eth0 down")
            && line.contains(&format!("{}/24", lab.ip(2)))
            && line.contains(&format!("{}/64", v6(&lab, "2"))),
        "eth0 should be down with both addresses: {line}"
    );
    assert_eq!(
        netns_routes(&lab.netns),
        Vec::<String>::new(),
        "no route on a down link"
    );
    assert_eq!(
        netns_sysctl(&lab.netns, "ipv4", "eth0", "arp_notify"),
        "1",
        "a gratuitous ARP once someone brings it up"
    );
    let mut check = conf.clone();
    check["prevResult"] = result;
    lab.call("CHECK")
        .config(&check)
        .run()
        .expect_silent_success("CHECK of the down interface");
    ip(&["-n", &lab.netns, "link", "set", "eth0", "up"]);
    assert_cni_error(
        &lab.call("CHECK").config(&check).run(),
        120,
        &["eth0 is up"],
    );
    lab.call("DEL")
        .config(&conf)
        .run()
        .expect_silent_success("DEL");
    assert_eq!(netns_link_names(&lab.netns), ["lo"]);

    let before = lab.snapshot();
    conf["isDefaultGateway"] = json!(true);
    let out = lab.call("ADD").config(&conf).run();
    assert_cni_error(&out, 7, &["disableContainerInterface", "down"]);
    let diff = lab.snapshot().diff(&before);
    assert!(diff.is_empty(), "the refused ADD left:\n{diff}");
}

#[test]
fn resolv_conf_as_host_local_reads_it() {
    let lab = Lab::new("kresolv");
    let file = lab.root.join("resolv.conf");
    std::fs::write(
        &file,
        "# test\nnameserver 10.0.0.53\nnameserver fd00::53\ndomain lab.example\n\
         search a.example b.example\noptions ndots:2 edns0\n",
    )
    .unwrap();
    let extra = json!({"ipam": {"resolvConf": file}});
    // host-local itself, on the same ipam block.
    let ipam_conf = json!({
        "cniVersion": "1.0.0",
        "name": lab.network,
        "ipam": plugin(&lab, "x", "x", &lab.root.join("ref-data"), extra.clone())["ipam"],
    });
    let host_local = |command: &str| {
        lab.call(command)
            .env("CNI_PATH", REFERENCE_BIN)
            .config(&ipam_conf)
            .spawn(&format!("{REFERENCE_BIN}/host-local"), &[])
    };
    let theirs = host_local("ADD").expect_result("host-local ADD");
    host_local("DEL").expect_silent_success("host-local DEL");
    install(
        &lab,
        plugin(&lab, "academy", &lab.bridge, &lab.data_dir, extra.clone()),
    );
    let ours = add_look_del(&lab, "file");
    assert_eq!(
        ours.result["dns"],
        json!({"nameservers": ["10.0.0.53", "fd00::53"], "domain": "lab.example",
               "search": ["a.example", "b.example"], "options": ["ndots:2", "edns0"]})
    );
    assert_eq!(ours.result["dns"], theirs["dns"], "host-local reads it so");

    // The network's own dns replaces the file's, as the reference bridge's does (1.1.1
    // prints the network's dns whatever IPAM said; later ones only when it sets one).
    let dns = json!({"nameservers": ["10.0.0.99"]});
    let (reference, ours) = both(
        &lab,
        "net",
        json!({"dns": dns, "ipam": {"resolvConf": file}}),
    );
    assert_eq!(ours.result["dns"], dns);
    assert_eq!(reference.result["dns"], dns);
    assert_eq!(ours.state, reference.state);

    // A file that cannot be read fails ADD, which leaves nothing.
    let missing = lab.root.join("missing.conf");
    install(
        &lab,
        plugin(
            &lab,
            "academy",
            &lab.bridge,
            &lab.data_dir,
            json!({"ipam": {"resolvConf": missing}}),
        ),
    );
    let before = lab.snapshot();
    let out = tool(&lab, "add", &lab.netns);
    assert_ne!(out.code, 0, "{out}");
    assert!(out.all().contains("resolvConf"), "{out}");
    let diff = lab.snapshot().diff(&before);
    assert!(diff.is_empty(), "the failed ADD left:\n{diff}");
}
