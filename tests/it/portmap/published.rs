//! A lab network publishing ports through academy alone, by cnitool and direct exec.

use serde_json::{json, Value};
use std::collections::BTreeSet;

use super::{academy_entry, exchange, host_ports, mapping, udp_exchange, unanswered, write_list};
use crate::common::*;

fn ips_of(result: &Value) -> Vec<String> {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| {
            ip["address"]
                .as_str()?
                .split('/')
                .next()
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn portmap_published_port_answers_outside_host_localhost_hairpin_and_only_on_its_host_ip() {
    let lab = Lab::new("pmpub");
    let out = Outside::new(&lab);
    write_list(&lab, vec![academy_entry(&lab)]);
    let port = host_ports(&lab);
    let caps =
        json!({"portMappings": [mapping(port, None), mapping(port + 1, Some(&out.host_v4))]});
    let caps = caps.to_string();
    let env = [("CAP_ARGS", caps.as_str())];
    let result = lab
        .cnitool("add", &lab.netns, &env)
        .expect_result("cnitool add publishing two ports");
    let cid = cnitool_container_id(&lab.netns_path());
    let (v4, v6) = match ips_of(&result).as_slice() {
        [v4, v6] => (v4.clone(), v6.clone()),
        other => panic!("a v4 and a v6 address expected: {other:?}"),
    };
    let holder = owner_comment(&lab.network, &cid, "eth0");
    let want: BTreeSet<String> = [
        format!("_ports-v4 tcp . {port} -> {v4} . 8080 {holder}"),
        format!("_ports-v6 tcp . {port} -> {v6} . 8080 {holder}"),
        format!(
            "_ports-hostip-v4 {} . tcp . {} -> {v4} . 8080 {holder}",
            out.host_v4,
            port + 1
        ),
    ]
    .into();
    assert_eq!(nft::published(&lab.network), want, "published after ADD");

    // From outside, both families; the container sees the outside's own address.
    let (got, peer) = exchange(&lab.netns, "0.0.0.0", Some(&out.netns), &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", out.far_v4.as_str()),
        "outside, v4"
    );
    let (got, _) = exchange(&lab.netns, "::", Some(&out.netns), &out.host_v6, port);
    assert_eq!(got, "hello", "outside, v6");
    // From the host, on its own address and on 127.0.0.1 (which leaves masqueraded).
    let (got, _) = exchange(&lab.netns, "0.0.0.0", None, &out.host_v4, port);
    assert_eq!(got, "hello", "host, on its own address");
    let (got, _) = exchange(&lab.netns, "::", None, &out.host_v6, port);
    assert_eq!(got, "hello", "host, on its own v6 address");
    let (got, peer) = exchange(&lab.netns, "0.0.0.0", None, "127.0.0.1", port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", lab.gateway().as_str()),
        "host, 127.0.0.1"
    );
    // Hairpin: another container of the bridge, through the host's address.
    let second = lab.add_netns("b");
    lab.cnitool("add", &second, &[])
        .expect_result("a second container");
    let (got, peer) = exchange(&lab.netns, "0.0.0.0", Some(&second), &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", lab.gateway().as_str()),
        "hairpin"
    );
    // The hostIP mapping: on its address only.
    let (got, _) = exchange(
        &lab.netns,
        "0.0.0.0",
        Some(&out.netns),
        &out.host_v4,
        port + 1,
    );
    assert_eq!(got, "hello", "hostIP mapping on its address");
    assert!(
        unanswered(&lab.netns, &v4, None, &lab.gateway(), port + 1),
        "the hostIP mapping answered on another host address"
    );

    lab.cnitool("check", &lab.netns, &env)
        .expect_silent_success("CHECK with every port published");
    let element = format!("{{ tcp . {port} }}");
    run(
        "nft",
        &[
            "delete",
            "element",
            "inet",
            "academy",
            "_ports-v6",
            &element,
        ],
        &[],
    );
    let check = lab.cnitool("check", &lab.netns, &env);
    assert_ne!(check.code, 0, "CHECK missed the unpublished port:\n{check}");
    let want = format!("host port tcp/{port} (v6) is not published");
    assert!(check.all().contains(&want), "{check}");

    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("DEL");
    lab.cnitool("del", &second, &[])
        .expect_silent_success("DEL of the second");
    assert_eq!(
        nft::published(&lab.network),
        BTreeSet::new(),
        "published after DEL"
    );
    let table = run("nft", &["-j", "list", "table", "inet", "academy"], &[]);
    assert!(
        !table.stdout.contains(&lab.network),
        "left in nf_tables: {}",
        table.stdout
    );
}

/// The lab's academy entry as a single-plugin config for direct exec, publishing `ports`.
pub(super) fn direct_config(lab: &Lab, version: &str, ports: &[Value]) -> Value {
    let mut c = academy_entry(lab);
    c["cniVersion"] = json!(version);
    c["name"] = json!(lab.network);
    c["runtimeConfig"] = json!({"portMappings": ports});
    c
}

#[test]
fn portmap_conflict_names_the_holder_leaves_nothing_and_frees_with_its_holder() {
    let lab = Lab::new("pmconf");
    let port = host_ports(&lab);
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let config = direct_config(&lab, "1.1.0", &[mapping(port, None)]);
    let call = |command: &str, who: &Attach| lab.call_for(command, who).config(&config).run();

    let first = call("ADD", &a).expect_result("the first holder's ADD");
    let a_v4 = result_address(&first);
    let held = nft::published(&lab.network);
    assert_eq!(held.len(), 2, "v4 and v6 of the first holder: {held:?}");
    let reserved = lab.reservations();
    // Its own element from an earlier life, pointing elsewhere, is replaced by an ADD
    // repeated, not reported as a conflict.
    let (key, stale) = (format!("tcp . {port}"), format!("{}.99 . 8080", lab.prefix));
    let holder = owner_comment(&lab.network, &a.cid, "eth0");
    let nft_element = |verb: &str, element: &str| {
        let out = run(
            "nft",
            &[verb, "element", "inet", "academy", "_ports-v4", element],
            &[],
        );
        assert_eq!(out.code, 0, "nft {verb} element {element}:\n{out}");
    };
    nft_element("delete", &format!("{{ {key} }}"));
    nft_element(
        "add",
        &format!("{{ {key} comment \"{holder}\" : {stale} }}"),
    );
    call("ADD", &a).expect_result("the holder's ADD repeated over its stale element");
    assert_eq!(
        nft::published(&lab.network),
        held,
        "the stale element was not replaced"
    );

    let refused = call("ADD", &b);
    assert_cni_error(&refused, 105, &[&format!("tcp/{port}"), &a.cid, "eth0"]);
    assert_eq!(
        nft::published(&lab.network),
        held,
        "the refused ADD changed the maps"
    );
    assert_eq!(
        lab.reservations(),
        reserved,
        "the refused ADD kept an address"
    );
    assert_eq!(lab.lab_veths().len(), 1, "the refused ADD left a veth");
    // The runtime's DEL after a failed ADD removes nothing of the holder's either.
    call("DEL", &b).expect_silent_success("DEL of the refused attachment");
    assert_eq!(
        nft::published(&lab.network),
        held,
        "the refused one's DEL unpublished the holder"
    );

    // GC keeps a valid holder's ports, and frees them with it.
    gc_call(&lab, config.clone(), &[(&a.cid, "eth0")])
        .run()
        .expect_silent_success("GC keeping the holder");
    assert_eq!(nft::published(&lab.network), held);
    gc_call(&lab, config.clone(), &[])
        .run()
        .expect_silent_success("GC of everything");
    assert_eq!(
        nft::published(&lab.network),
        BTreeSet::new(),
        "published after GC"
    );
    let second = call("ADD", &b).expect_result("the port is free once its holder is gone");
    let b_v4 = result_address(&second);
    assert_ne!(a_v4, b_v4);
    assert!(nft::published(&lab.network)
        .iter()
        .all(|e| e.contains(&b.cid)));
    // A late DEL of the first holder must not take the port from the second.
    call("DEL", &a).expect_silent_success("the first holder's late DEL");
    assert_eq!(
        nft::published(&lab.network).len(),
        2,
        "the late DEL took the new holder's port"
    );
    // A DEL that does not say which ports (no runtimeConfig): found by their holder.
    let mut bare = config.clone();
    bare.as_object_mut().unwrap().remove("runtimeConfig");
    lab.call_for("DEL", &b)
        .config(&bare)
        .run()
        .expect_silent_success("DEL without the mappings");
    assert_eq!(nft::published(&lab.network), BTreeSet::new());
}

#[test]
fn portmap_reference_chain_without_the_capability_still_works() {
    let lab = Lab::new("pmref");
    let out = Outside::new(&lab);
    let _ = std::os::unix::fs::symlink("/opt/cni/lab-bin/portmap", lab.bin_dir.join("portmap"));
    let mut entry = academy_entry(&lab);
    entry.as_object_mut().unwrap().remove("capabilities");
    write_list(
        &lab,
        vec![
            entry,
            json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        ],
    );
    let port = host_ports(&lab);
    let caps = json!({"portMappings": [mapping(port, None)]}).to_string();
    let env = [("CAP_ARGS", caps.as_str())];
    lab.cnitool("add", &lab.netns, &env)
        .expect_result("academy then the reference portmap");
    assert_eq!(
        nft::published(&lab.network),
        BTreeSet::new(),
        "academy published without the capability"
    );
    let (got, _) = exchange(&lab.netns, "0.0.0.0", Some(&out.netns), &out.host_v4, port);
    assert_eq!(
        got, "hello",
        "the reference portmap's port from the outside"
    );
    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("DEL of the chain");
}

#[test]
fn portmap_reclaim_of_an_attachment_not_kept_unpublishes_only_its_ports() {
    let lab = Lab::new("pmrecl");
    write_list(&lab, vec![academy_entry(&lab)]);
    let port = host_ports(&lab);
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    for (who, p) in [(&a, port), (&b, port + 1)] {
        let config = direct_config(&lab, "1.1.0", &[mapping(p, None)]);
        lab.call_for("ADD", who)
            .config(&config)
            .run()
            .expect_result("ADD publishing a port");
    }
    assert_eq!(
        nft::published(&lab.network).len(),
        4,
        "two ports, two families"
    );
    let keep = lab.root.join("running");
    std::fs::write(&keep, format!("{}\n", b.cid)).unwrap();
    let list = lab.conf_dir.join("10-lab.conflist");
    let args = [
        "reclaim",
        list.to_str().unwrap(),
        "--keep-ids",
        keep.to_str().unwrap(),
    ];
    let out = run(plugin(), &args, &[]);
    assert_eq!(out.code, 0, "academy reclaim:\n{out}");
    let left = nft::published(&lab.network);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left.iter().all(|e| e.contains(&b.cid)),
        "reclaim took the kept one's: {left:?}"
    );
    let config = direct_config(&lab, "1.1.0", &[mapping(port + 1, None)]);
    lab.call_for("DEL", &b)
        .config(&config)
        .run()
        .expect_silent_success("DEL");
    assert_eq!(nft::published(&lab.network), BTreeSet::new());
}

#[test]
fn portmap_udp_port_answers_the_outside() {
    let lab = Lab::new("pmudp");
    let out = Outside::new(&lab);
    write_list(&lab, vec![academy_entry(&lab)]);
    let port = host_ports(&lab);
    let mut udp = mapping(port, None);
    udp["protocol"] = serde_json::json!("udp");
    let caps = json!({ "portMappings": [udp] }).to_string();
    let env = [("CAP_ARGS", caps.as_str())];
    lab.cnitool("add", &lab.netns, &env)
        .expect_result("cnitool add publishing a udp port");
    let published = nft::published(&lab.network);
    assert!(
        published
            .iter()
            .all(|e| e.contains(&format!(" udp . {port} -> "))),
        "{published:?}"
    );
    let (got, peer) = udp_exchange(&lab.netns, &out.netns, &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", out.far_v4.as_str()),
        "udp from the outside"
    );
    lab.cnitool("del", &lab.netns, &env)
        .expect_silent_success("DEL");
    assert_eq!(nft::published(&lab.network), BTreeSet::new());
}
