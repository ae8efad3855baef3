//! A restore does not put back the state of an attachment removed while it runs (found
//! by the soak, seed 321409782 step 9: a killed ADD's attachment DELed beside a restore
//! got its masquerade element back, owned by no reservation). The restore is held by the
//! debug build's hook right after it read the network's attachments
//! (ACADEMY_TEST_HOLD_RESTORE_LOCKED, src/firewall/mod.rs), the DEL runs then, and the
//! restore is let go: it reads the attachments again under the network's removal lock
//! (src/firewall/network.rs, `removal`) and must not put back the DEL's elements. The
//! masquerade and a published port, in a private node.

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
