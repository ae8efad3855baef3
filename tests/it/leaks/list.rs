//! `academy list`: every reservation with its state, as a text table and as JSON;
//! looking changes nothing.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::json;

/// The text table's row for `addr`, split on whitespace.
fn row<'a>(text: &'a str, addr: &str) -> Vec<&'a str> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(addr))
        .unwrap_or_else(|| panic!("no row for {addr} in:\n{text}"))
        .split_whitespace()
        .collect()
}

#[test]
fn list_shows_every_reservation_with_its_state_in_text_and_json() {
    let lab = Lab::new("lklist");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let store_path = store_dir(&lab).to_string_lossy().into_owned();

    // Nothing reserved yet: an empty list, and the store is not created by looking.
    let out = academy(&["list", &list]);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains(&format!(
            "network {} (bridge {}, store {store_path}): 0 reserved",
            lab.network, lab.bridge
        )),
        "{out}"
    );
    assert!(!store_dir(&lab).exists(), "list created the store");

    let w = attach(&lab, "w");
    let mut k = attach(&lab, "k");
    k.ifname = "net1".into();
    let wired = wire(&lab, &w, &conf);
    let leaked = {
        let before = address_files(&lab);
        let inject = Inject {
            syscall: "sendto".into(),
            when: 1,
            action: Action::Kill,
        };
        let call = lab.call_for("ADD", &k).config(&conf);
        let (out, text) = run_strace(&call, &lab.root.join("k.trace"), "sendto", Some(&inject));
        assert!(killed_by_strace(&text), "{out}");
        let new: Vec<String> = address_files(&lab)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        assert_eq!(new.len(), 1);
        new[0].clone()
    };
    make_old(&lab, &leaked, Duration::from_secs(2 * 3600 + 13 * 60));

    let out = academy(&["list", &list]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.is_empty(), "{out}");
    assert!(
        out.stdout.contains(": 2 reserved, 1 wired, 1 leaked"),
        "{out}"
    );
    let header: Vec<&str> = out
        .stdout
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "ADDRESS",
            "STATE",
            "AGE",
            "IFNAME",
            "HOST",
            "VETH",
            "CONTAINER"
        ]
    );
    let r = row(&out.stdout, &wired);
    assert_eq!(
        (r[1], r[3], r[4], r[5]),
        ("wired", "eth0", hostveth(&w).as_str(), w.cid.as_str()),
        "{out}"
    );
    assert!(r[2].ends_with('s'), "a fresh reservation's age: {}", r[2]);
    let r = row(&out.stdout, &leaked);
    assert_eq!(
        (r[1], r[2], r[3], r[4], r[5]),
        (
            "leaked",
            "2h13m",
            "net1",
            hostveth(&k).as_str(),
            k.cid.as_str()
        ),
        "{out}"
    );

    let out = academy(&["list", &list, "--json"]);
    assert_eq!(out.code, 0, "{out}");
    let v = out.json();
    assert_eq!(v["network"], json!(lab.network));
    assert_eq!(v["bridge"], json!(lab.bridge));
    assert_eq!(v["store"], json!(store_path));
    let rs = v["reservations"].as_array().unwrap();
    assert_eq!(rs.len(), 2, "{v:#}");
    let by_addr = |a: &str| {
        rs.iter()
            .find(|r| r["address"] == json!(a))
            .unwrap()
            .clone()
    };
    let mut w_row = by_addr(&wired);
    assert!(w_row["ageSeconds"].as_u64().unwrap() < 600, "{w_row}");
    w_row.as_object_mut().unwrap().remove("ageSeconds");
    assert_eq!(
        w_row,
        json!({"address": wired, "containerID": w.cid, "ifname": "eth0",
               "state": "wired", "hostVeth": hostveth(&w), "why": null})
    );
    let mut k_row = by_addr(&leaked);
    let age = k_row["ageSeconds"].as_u64().unwrap();
    assert!((7980..7980 + 600).contains(&age), "{k_row}");
    k_row.as_object_mut().unwrap().remove("ageSeconds");
    assert_eq!(
        k_row,
        json!({"address": leaked, "containerID": k.cid, "ifname": "net1",
               "state": "leaked", "hostVeth": hostveth(&k), "why": null})
    );

    // Once the container's netns is gone (the kernel takes the pair with it) and no DEL
    // came, the wired attachment shows as leaked too.
    ip(&["netns", "del", &w.netns]);
    assert!(wait_until(Duration::from_secs(5), || !link_exists(
        &hostveth(&w)
    )));
    let v = academy(&["list", &list, "--json"]).json();
    let states: Vec<&str> = v["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["leaked", "leaked"], "{v:#}");
    // Looking changed nothing.
    assert_eq!(holder_of(&lab, &wired), Some(format!("{}\r\neth0", w.cid)));
    assert_eq!(holder_of(&lab, &leaked), Some(format!("{}\r\nnet1", k.cid)));
}
