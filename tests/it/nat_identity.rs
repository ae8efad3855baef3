//! Undo only what is yours (issue 19, item 2), nf_tables side: every removal of a
//! masquerade element compares the identity stored in its comment, never the address
//! alone; identities and names the kernel caps stay unique and comparable; a foreign
//! object under academy's names refuses ADD cleanly and never wedges DEL or GC; a GC
//! removing thousands of elements fits netlink's limits. In a private node netns
//! (common/node.rs), since some tests plant objects in academy's table.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::common::nft::nft_in;
use crate::common::*;

fn masq_config(lab: &Lab) -> Value {
    lab.config_with("1.1.0", "ipMasq", json!(true))
}

#[test]
fn del_leaves_an_element_that_is_now_another_attachment_s() {
    let lab = Lab::new("niother");
    let node = Node::new(&lab);
    let config = masq_config(&lab);
    let a = lab.attach();
    let result = node.call("ADD", &a, &config).expect_result("ADD");
    let address = result_address(&result);
    // The address went to another attachment meanwhile (healing, reclaim), which added
    // its own element: what DEL of the first finds under that address is not its own.
    let set = format!("{}-v4", lab.network);
    node.nft(&[
        "delete",
        "element",
        "inet",
        "academy",
        &set,
        &format!("{{ {address} }}"),
    ]);
    let other = format!("{{ {address} comment \"someone-else:eth0\" }}");
    node.nft(&["add", "element", "inet", "academy", &set, &other]);

    let del = node.call("DEL", &a, &config);
    del.expect_silent_success("DEL");
    assert!(del.stderr.contains("someone-else:eth0"), "{del}");
    assert_eq!(
        node.elements(),
        BTreeSet::from([format!("{address} someone-else:eth0")])
    );
    assert_eq!(lab.reservations(), Vec::<String>::new());

    // The address is free in the store, so an ADD may get it: the stale element (its
    // holder gone) becomes the new attachment's, in one batch.
    let b = lab.attachment("b");
    let ask = lab
        .call_for("ADD", &b)
        .config(&config)
        .env("CNI_ARGS", &format!("IP={address}"));
    let again = node.run(&ask).expect_result("ADD of the freed address");
    assert_eq!(result_address(&again), address);
    assert_eq!(
        node.elements(),
        BTreeSet::from([format!(
            "{address} {}",
            owner_comment(&lab.network, &b.cid, "eth0")
        )])
    );
    node.call("DEL", &b, &config).expect_silent_success("DEL");
    assert!(node.elements().is_empty());
}

/// A delegated IPAM: a script in the lab's CNI_PATH that hands out the address its
/// config names. Returns the network config for an address.
fn fixed_ipam(lab: &Lab) -> impl Fn(String) -> Value + '_ {
    lab.install_script(
        "fixedipam",
        "#!/bin/sh\ncase \"$CNI_COMMAND\" in\nADD) a=$(jq -r .ipam.address); printf '{\"cniVersion\":\"1.1.0\",\"ips\":[{\"address\":\"%s\"}]}' \"$a\" ;;\nesac\n",
    );
    move |address: String| {
        json!({"cniVersion": "1.1.0", "name": lab.network, "type": "academy",
               "bridge": lab.bridge, "ipMasq": true,
               "ipam": {"type": "fixedipam", "address": address}})
    }
}

/// With a delegated IPAM the network's subnets are known only from each ADD's address:
/// an ADD from another subnet does not rewrite the rule the first one made.
#[test]
fn a_delegated_ipam_s_rule_is_kept_across_subnets() {
    let lab = Lab::new("nideleg");
    let node = Node::new(&lab);
    let config = fixed_ipam(&lab);
    let a = lab.attachment("a");
    node.call("ADD", &a, &config(format!("{}/24", lab.ip(5))))
        .expect_result("ADD in the lab's subnet");
    let first = node.rules("v4");
    let b = lab.attachment("b");
    // Only inside the node's netns: no route to it exists on the host.
    node.call("ADD", &b, &config("172.31.251.5/24".into()))
        .expect_result("ADD in another subnet");
    assert_eq!(node.rules("v4"), first);
    assert_eq!(first.len(), 1);
}

/// An ADD whose address already has another attachment's element, where nothing proves
/// the address is this ADD's own (a stalled ADD whose address was reclaimed and given
/// again; here a delegated IPAM, whose givings academy cannot see): it fails with 11,
/// and its undo leaves the other attachment's element in place.
#[test]
fn an_add_never_takes_over_an_element_it_cannot_prove_is_its_own() {
    let lab = Lab::new("nisteal");
    let node = Node::new(&lab);
    let config = fixed_ipam(&lab);
    let first = lab.attachment("first");
    node.call("ADD", &first, &config(format!("{}/24", lab.ip(9))))
        .expect_result("ADD that makes the set");
    let address = lab.ip(7);
    let set = format!("{}-v4", lab.network);
    let other = format!("{{ {address} comment \"new-holder:eth0\" }}");
    node.nft(&["add", "element", "inet", "academy", &set, &other]);
    let links = node.links();

    let a = lab.attachment("stalled");
    let out = node.call("ADD", &a, &config(format!("{address}/24")));
    assert_cni_error(&out, 11, &[&address, "new-holder:eth0"]);
    assert!(node
        .elements()
        .contains(&format!("{address} new-holder:eth0")));
    assert_eq!(node.links(), links, "the failed ADD's veth is gone");
    assert_eq!(netns_link_names(&a.netns), vec!["lo".to_string()]);
}

/// A delegated IPAM (a script that hands out the address its config names) and DEL
/// without prevResult: academy finds the attachment's elements by comment alone.
#[test]
fn container_ids_sharing_a_long_prefix_keep_their_own_elements() {
    let lab = Lab::new("niprefix");
    let node = Node::new(&lab);
    let config = fixed_ipam(&lab);
    let prefix = format!("{}-{}", lab.cid, "p".repeat(140));
    let ids = [format!("{prefix}-one"), format!("{prefix}-two")];
    let mut elements = BTreeSet::new();
    let mut attachments = Vec::new();
    for (i, cid) in ids.iter().enumerate() {
        let mut a = lab.attachment(&format!("x{i}"));
        a.cid = cid.clone();
        let address = lab.ip(10 + i as u8);
        node.call("ADD", &a, &config(format!("{address}/24")))
            .expect_result("ADD with a long container id");
        attachments.push((a, address));
    }
    for comment in node.elements() {
        assert!(comment.len() < 200, "{comment}");
        elements.insert(comment);
    }
    assert_eq!(elements.len(), 2, "two distinct comments: {elements:?}");
    let (first, _) = &attachments[0];
    node.call("DEL", first, &config(String::new()))
        .expect_silent_success("DEL without prevResult");
    let left: Vec<String> = node.elements().into_iter().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(&attachments[1].1), "{left:?}");
    node.call("DEL", &attachments[1].0, &config(String::new()))
        .expect_silent_success("DEL of the second");
    assert!(node.elements().is_empty());
}

/// Network names of 110 to 128 characters: the rule's comment is capped, the sets are
/// named in full (the kernel allows 255), and ADD, CHECK, GC and DEL all work.
#[test]
fn long_network_names_work_end_to_end() {
    let lab = Lab::new("nilong");
    let node = Node::new(&lab);
    for len in [110, 128] {
        let name = format!(
            "{}-{}",
            lab.network,
            "n".repeat(len - lab.network.len() - 1)
        );
        assert_eq!(name.len(), len);
        let mut config = masq_config(&lab);
        config["name"] = json!(name);
        let a = lab.attachment(&format!("l{len}"));
        let result = node
            .call("ADD", &a, &config)
            .expect_result("ADD, long network name");
        let mut check = config.clone();
        check["prevResult"] = result.clone();
        node.call("CHECK", &a, &check)
            .expect_silent_success("CHECK, long network name");
        let set = format!("{name}-v4");
        let listed = node.nft(&["list", "set", "inet", "academy", &set]);
        assert!(listed.stdout.contains(&result_address(&result)), "{listed}");
        node.call("DEL", &a, &config).expect_silent_success("DEL");
        // The network's last attachment took its set with it.
        let listed = nft_in(Some(&node.ns), &["list", "set", "inet", "academy", &set]);
        assert_ne!(listed.code, 0, "the set outlived its network: {listed}");
    }
}

fn foreign_set(node: &Node, definition: &str) {
    let set = format!("{}-v4", node.lab.network);
    node.nft(&["add", "table", "inet", "academy"]);
    node.nft(&["add", "set", "inet", "academy", &set, definition]);
}

#[test]
fn a_foreign_set_under_academy_s_name_refuses_add_and_leaves_nothing() {
    for (tag, definition) in [
        ("nitype", "{ type ipv6_addr; }"),
        ("nitime", "{ type ipv4_addr; flags timeout; timeout 1h; }"),
    ] {
        let lab = Lab::new(tag);
        let node = Node::new(&lab);
        foreign_set(&node, definition);
        let links = node.links();
        let a = lab.attach();
        let out = node.call("ADD", &a, &masq_config(&lab));
        let set = format!("{}-v4", lab.network);
        let error = assert_cni_error(&out, 103, &[&set, "not academy's"]);
        assert!(
            error["details"]
                .as_str()
                .unwrap_or("")
                .contains("nft delete set"),
            "{error}"
        );
        // Nothing of the attachment is left: only the bridge may stay (shared).
        let mut after = node.links();
        after.retain(|l| *l != lab.bridge);
        assert_eq!(after, links, "links after the refused ADD ({tag})");
        assert_eq!(lab.reservations(), Vec::<String>::new());
        assert_eq!(netns_link_names(&lab.netns), vec!["lo".to_string()]);
        assert!(node.rules("v4").is_empty(), "no rule over a foreign set");
        node.call("DEL", &a, &masq_config(&lab))
            .expect_silent_success("DEL after the refused ADD");
    }
}

#[test]
fn del_and_gc_pass_over_a_foreign_set_that_replaced_academy_s() {
    let lab = Lab::new("nireplace");
    let node = Node::new(&lab);
    let config = masq_config(&lab);
    let a = lab.attach();
    node.call("ADD", &a, &config).expect_result("ADD");
    let set = format!("{}-v4", lab.network);
    node.nft(&["flush", "chain", "inet", "academy", "postrouting"]);
    node.nft(&["delete", "set", "inet", "academy", &set]);
    foreign_set(&node, "{ type ipv6_addr; }");

    let del = node.call("DEL", &a, &config);
    del.expect_silent_success("DEL over a foreign set");
    assert!(del.stderr.contains("not academy's"), "{del}");
    assert_eq!(lab.reservations(), Vec::<String>::new());
    let mut gc_config = config.clone();
    gc_config["cni.dev/valid-attachments"] = json!([]);
    let gc = node.run(&gc_call(&lab, gc_config, &[]));
    gc.expect_silent_success("GC over a foreign set");
    assert!(gc.stderr.contains("not academy's"), "{gc}");
    node.nft(&["list", "set", "inet", "academy", &set]);
}

/// GC removing 5,000 stale elements in one run: the removal is split to fit netlink's
/// 16-bit attribute lengths and a sendmsg, and every element goes.
#[test]
fn gc_removes_five_thousand_stale_elements_in_one_run() {
    let lab = Lab::new("nigc");
    let node = Node::new(&lab);
    let config = masq_config(&lab);
    let a = lab.attach();
    let kept = node.call("ADD", &a, &config).expect_result("ADD");
    let set = format!("{}-v4", lab.network);
    let mut script = String::new();
    for i in 0..5000u32 {
        script.push_str(&format!(
            "add element inet academy {set} {{ 172.30.{}.{} comment \"stale-{i}-{}:eth0\" }}\n",
            i / 250,
            i % 250 + 1,
            "z".repeat(60)
        ));
    }
    let file = lab.root.join("stale.nft");
    std::fs::write(&file, script).unwrap();
    node.nft(&["-f", file.to_str().unwrap()]);
    assert_eq!(node.elements().len(), 5001);

    // Under strace, to count the requests: the removal is batched, not one request per
    // element (which is what a refused oversized batch used to fall back to).
    let trace = lab.root.join("gc.trace");
    let trace_path = trace.to_str().unwrap();
    let gc = gc_call(&lab, config.clone(), &[(&a.cid, "eth0")]).spawn(
        "ip",
        &[
            "netns",
            "exec",
            &node.ns,
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=sendto,sendmsg",
            "-o",
            trace_path,
            plugin(),
        ],
    );
    gc.expect_silent_success("GC of 5,000 stale elements");
    let sends = std::fs::read_to_string(&trace).unwrap().lines().count();
    assert!(
        sends < 50,
        "GC of 5,000 elements took {sends} netlink sends"
    );
    assert_eq!(
        node.elements(),
        BTreeSet::from([format!(
            "{} {}",
            result_address(&kept),
            owner_comment(&lab.network, &a.cid, "eth0")
        )])
    );
    node.call("DEL", &a, &config).expect_silent_success("DEL");
}

/// A chain `postrouting` in academy's table that is not academy's nat chain (a plain
/// chain, or a filter chain on the hook) refuses ADD, naming it, and leaves nothing.
#[test]
fn a_foreign_chain_under_academy_s_name_refuses_add_and_leaves_nothing() {
    for (tag, definition) in [
        ("nichain", None),
        (
            "nifilter",
            Some("{ type filter hook postrouting priority 0; }"),
        ),
    ] {
        let lab = Lab::new(tag);
        let node = Node::new(&lab);
        node.nft(&["add", "table", "inet", "academy"]);
        let mut args = vec!["add", "chain", "inet", "academy", "postrouting"];
        args.extend(definition);
        node.nft(&args);
        let a = lab.attach();
        let out = node.call("ADD", &a, &masq_config(&lab));
        assert_cni_error(&out, 103, &["chain", "postrouting", "not academy's"]);
        assert_eq!(lab.reservations(), Vec::<String>::new());
        assert_eq!(netns_link_names(&lab.netns), vec!["lo".to_string()]);
        node.call("DEL", &a, &masq_config(&lab))
            .expect_silent_success("DEL after the refused ADD");
    }
}
