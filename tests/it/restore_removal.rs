//! A restore does not put back the state of an attachment removed while it runs (found
//! by the soak, seed 321409782 step 9: a killed ADD's attachment DELed beside a restore
//! got its masquerade element back, owned by no reservation). The restore is held by the
//! debug build's hook right after it read the network's attachments
//! (ACADEMY_TEST_HOLD_RESTORE_LOCKED, src/firewall/mod.rs), the DEL runs then, and the
//! restore is let go: it reads the attachments again under the network's removal lock
//! (src/firewall/network/, `removal`) and must not put back the DEL's elements. The
//! masquerade and a published port, in a private node.
//!
//! An ADD that re-makes a flushed masquerade set with the other containers' elements
//! does not put back those of an attachment whose removal is in flight either (the soak,
//! seed 2029 step 32): the removal, held by ACADEMY_TEST_HOLD_REMOVAL between its
//! nf_tables step (which found no set) and its veths, holds the removal lock, so the ADD
//! leaves the others' elements to the restore.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;
use crate::portmap::mapping;

/// The lines of the node's ruleset that name `owner` (its elements carry it).
fn naming(node: &Node, owner: &str) -> Vec<String> {
    node.nft(&["list", "ruleset"])
        .stdout
        .lines()
        .filter(|l| l.contains(owner))
        .map(|l| l.trim().to_string())
        .collect()
}

/// Runs `academy restore` in the node, held after its read of the attachments while
/// `during` runs, then let go; its exit status must be success. Returns its stderr.
fn restore_around(node: &Node, during: impl FnOnce()) -> String {
    let (status, err) = node.restore_held("ACADEMY_TEST_HOLD_RESTORE_LOCKED", during);
    assert!(status.success(), "restore: {err}");
    err
}

/// The lab's conflist, ipMasq and ports, released `release_after` s after its last
/// attachment; the config a runtime gives ADD without ports.
fn network(lab: &Lab, release_after: u64) -> serde_json::Value {
    let mut entry = crate::portmap::academy_entry(lab);
    entry["ipMasq"] = json!(true);
    entry["releaseUnusedAfter"] = json!(release_after);
    lab.install_entry(entry)
}

#[test]
fn a_restore_beside_a_del_leaves_nothing_of_the_deleted_attachment() {
    let lab = Lab::new("rdel");
    let node = Node::new(&lab);
    let config = network(&lab, 60);
    let mut published = config.clone();
    published["runtimeConfig"] = json!({"portMappings": [mapping(18080, None)]});

    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    node.call("ADD", &a, &published).expect_result("ADD a");
    node.call("ADD", &b, &config).expect_result("ADD b");
    let owner = owner_comment(&lab.network, &a.cid, &a.ifname);
    let before = naming(&node, &owner);
    assert!(
        before.len() >= 3,
        "a's masquerade elements (v4, v6) and port: {before:?}"
    );

    // The DEL, between the restore's look and its batches: it does not wait on it.
    let err = restore_around(&node, || {
        let started = Instant::now();
        node.call("DEL", &a, &published)
            .expect_silent_success("DEL a during the restore");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "DEL stood behind the held restore"
        );
        assert_eq!(
            naming(&node, &owner),
            Vec::<String>::new(),
            "right after DEL"
        );
    });
    assert_eq!(
        naming(&node, &owner),
        Vec::<String>::new(),
        "the restore put back the DELed attachment's state:\n{err}"
    );
    // b's state is whole.
    let b_owner = owner_comment(&lab.network, &b.cid, &b.ifname);
    assert!(!naming(&node, &b_owner).is_empty(), "b's elements");
    node.call("DEL", &b, &config).expect_silent_success("DEL b");
}

/// The network's last DEL beside the restore skips its release (the restore holds the
/// network's lock shared, as an ADD in flight does): the restore releases it.
#[test]
fn a_last_del_beside_a_restore_still_releases_the_network() {
    let lab = Lab::new("rdlast");
    let node = Node::new(&lab);
    let config = network(&lab, 0);
    let a = lab.attachment("a");
    node.call("ADD", &a, &config).expect_result("ADD a");
    assert!(!naming(&node, &lab.network).is_empty(), "ADD made nothing");
    let err = restore_around(&node, || {
        node.call("DEL", &a, &config)
            .expect_silent_success("DEL a during the restore");
    });
    let left = naming(&node, &lab.network);
    assert!(left.is_empty(), "left of the network: {left:?}\n{err}");
}

#[test]
fn an_add_remaking_a_flushed_set_beside_a_del_puts_back_nothing_of_the_deleted_attachment() {
    let lab = Lab::new("rdeladd");
    let node = Node::new(&lab);
    let config = network(&lab, 60);
    let (a, b, c) = (
        lab.attachment("a"),
        lab.attachment("b"),
        lab.attachment("c"),
    );
    node.call("ADD", &a, &config).expect_result("ADD a");
    let b_result = node.call("ADD", &b, &config).expect_result("ADD b");
    let owner = owner_comment(&lab.network, &a.cid, &a.ifname);
    node.nft(&["delete", "table", "inet", "academy"]);

    // DEL a, held after its nf_tables step found no set; ADD c re-makes the set then.
    let hold = TestHold::new(&lab.data_dir, "hold-removal");
    let del = lab
        .call_for("DEL", &a)
        .config(&config)
        .env("ACADEMY_TEST_HOLD_REMOVAL", hold.path());
    let (del_out, add_out) = std::thread::scope(|s| {
        let del = s.spawn(|| node.run(&del));
        assert!(
            hold.reached(Duration::from_secs(20)),
            "the DEL never reached its hold"
        );
        let add = node.call("ADD", &c, &config);
        drop(hold);
        (del.join().unwrap(), add)
    });
    del_out.expect_silent_success("DEL a");
    add_out.expect_result("ADD c beside the held DEL");
    assert_eq!(
        naming(&node, &owner),
        Vec::<String>::new(),
        "ADD c put back the DELed attachment's element: {add_out}"
    );
    assert!(
        add_out.stderr.contains("a removal was in flight"),
        "ADD c says it left the others' elements: {add_out}"
    );
    // b's element was left to the restore: CHECK says so, the restore puts it back.
    let mut checked = config.clone();
    checked["prevResult"] = b_result;
    let check = node.call("CHECK", &b, &checked);
    assert_ne!(check.code, 0, "CHECK of b without its element: {check}");
    let restore = node.academy(&["restore", "--conf-dir", lab.conf_dir.to_str().unwrap()]);
    assert_eq!(restore.code, 0, "{restore}");
    node.call("CHECK", &b, &checked)
        .expect_silent_success("CHECK of b after the restore");
    assert_eq!(
        naming(&node, &owner),
        Vec::<String>::new(),
        "after the restore"
    );
    node.call("DEL", &b, &config).expect_silent_success("DEL b");
    node.call("DEL", &c, &config).expect_silent_success("DEL c");
}
