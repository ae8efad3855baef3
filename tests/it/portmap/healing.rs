//! Healing and reclaim remove a leaked attachment's published ports by its identity,
//! whatever mappings the healer's own config carries: a full pool, healed by an ADD
//! that publishes another port, unpublishes the leaked container's port, and a later
//! container can take it.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::{host_ports, mapping};
use crate::common::*;

/// The lab's flat config with a pool of four addresses (.2 to .5), the capability
/// declared, and `ports` as the runtime's mappings.
fn config(lab: &Lab, ports: &[Value]) -> Value {
    let mut c = lab.config("1.1.0");
    c["rangeStart"] = json!(lab.ip(2));
    c["rangeEnd"] = json!(lab.ip(5));
    c["reclaimLeakedAfter"] = json!(30);
    c["capabilities"] = json!({"portMappings": true});
    c["runtimeConfig"] = json!({"portMappings": ports});
    c
}

#[test]
fn portmap_healing_unpublishes_a_leaked_containers_port_whatever_the_healer_publishes() {
    let lab = Lab::new("pmheal");
    let port = host_ports(&lab);
    let (leaked_port, healer_port) = (port, port + 1);
    let quiet = config(&lab, &[]);
    let with_leaked = config(&lab, &[mapping(leaked_port, None)]);
    let with_healer = config(&lab, &[mapping(healer_port, None)]);
    let mut wired = Vec::new();
    for name in ["w1", "w2", "w3"] {
        let a = lab.attachment(name);
        lab.call_for("ADD", &a)
            .config(&quiet)
            .run()
            .expect_result("ADD filling the pool");
        wired.push(a);
    }
    // The leak: a container publishing a port whose runtime died without DEL, its host
    // veth gone (the node's cleanup, a crash), its reservation left.
    let k = lab.attachment("k");
    let r = lab
        .call_for("ADD", &k)
        .config(&with_leaked)
        .run()
        .expect_result("ADD of the container that leaks");
    let leaked_address = result_address(&r);
    ip(&["link", "del", &result_host_veth(&r)]);
    let f = std::fs::File::open(store_dir(&lab).join(&leaked_address)).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(120))
        .unwrap();
    let leaked_holder = owner_comment(&lab.network, &k.cid, "eth0");
    assert!(
        nft::published(&lab.network)
            .iter()
            .any(|e| e.ends_with(&leaked_holder)),
        "the leaked container's port is not published"
    );

    // The pool is full: the healer's ADD frees the leak. Its own config lists its own
    // port, not the leaked one's: the leaked port goes all the same.
    let healer = lab.attachment("n");
    let out = lab.call_for("ADD", &healer).config(&with_healer).run();
    let r = out.expect_result("ADD healing the full pool");
    assert_eq!(result_address(&r), leaked_address, "{out}");
    let left: Vec<String> = nft::published(&lab.network)
        .into_iter()
        .filter(|e| e.ends_with(&leaked_holder))
        .collect();
    assert!(
        left.is_empty(),
        "healing left the leaked container's port: {left:?}"
    );

    // A later container takes the port.
    lab.call_for("DEL", &wired[0])
        .config(&quiet)
        .run()
        .expect_silent_success("DEL making room");
    let later = lab.attachment("m");
    let out = lab.call_for("ADD", &later).config(&with_leaked).run();
    out.expect_result("ADD of the leaked container's port");
    let later_holder = owner_comment(&lab.network, &later.cid, "eth0");
    assert_eq!(
        nft::published(&lab.network)
            .iter()
            .filter(|e| e.ends_with(&later_holder))
            .count(),
        1,
        "the later container's port (the network is IPv4 only)"
    );
    for (who, c) in [(&later, &with_leaked), (&healer, &with_healer)] {
        lab.call_for("DEL", who)
            .config(c)
            .run()
            .expect_silent_success("DEL");
    }
}
