//! A network's own nf_tables objects outlive its last attachment by `releaseUnusedAfter`
//! seconds (src/firewall/network/): a network's only container restarted within that
//! time finds them there; once it is over, whichever invocation comes next on the node
//! (on any network) releases them, under the network's lock, so a racing first ADD keeps
//! its rule. And a whole lifecycle that succeeds prints nothing on stderr.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::nft::nft_in;
use crate::common::*;

/// Network `i` of a lab in its private node: its own name and bridge, ipMasq, the MAC
/// filter and published ports, released `grace` seconds after its last attachment.
fn network(lab: &Lab, i: usize, grace: u64) -> Value {
    json!({
        "cniVersion": "1.1.0",
        "name": format!("{}-{i}", lab.network),
        "type": "academy",
        "bridge": format!("ngb{i}"),
        "subnet": format!("172.20.{i}.0/24"),
        "gateway": format!("172.20.{i}.1"),
        "dataDir": lab.data_dir.to_str().unwrap(),
        "ipMasq": true,
        "macspoofchk": true,
        "capabilities": {"portMappings": true},
        "releaseUnusedAfter": grace,
    })
}

fn with_port(config: &Value, host_port: u16) -> Value {
    let mut c = config.clone();
    c["runtimeConfig"] = json!({"portMappings": [
        {"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}
    ]});
    c
}

/// What the node's nf_tables hold of the lab's networks: their sets and maps, and the
/// comments of their rules (FORWARD accepts included, as they name the bridge).
fn leftovers(lab: &Lab, node: &Node) -> BTreeSet<String> {
    let out = nft_in(Some(&node.ns), &["-j", "list", "ruleset"]);
    assert_eq!(out.code, 0, "{out}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let mut found = BTreeSet::new();
    for item in v["nftables"].as_array().into_iter().flatten() {
        for key in ["set", "map"] {
            if let Some(name) = item[key]["name"].as_str() {
                if name.contains(&lab.network) {
                    found.insert(format!("{key} {name}"));
                }
            }
        }
        let rule = &item["rule"];
        let text = rule.to_string();
        if rule.is_object() && (text.contains(&lab.network) || text.contains("\"ngb")) {
            found.insert(format!(
                "rule {} {}",
                rule["chain"],
                rule["comment"].as_str().unwrap_or("")
            ));
        }
        // Hairpin and isolation elements name the bridge.
        if let Some(elems) = item["set"]["elem"].as_array() {
            for e in elems {
                if e.to_string().contains("\"ngb") {
                    found.insert(format!("element {e} of {}", item["set"]["name"]));
                }
            }
        }
    }
    found
}

/// The masquerade rules of network `i` in the node.
fn masquerade_rules(lab: &Lab, node: &Node, i: usize) -> Vec<String> {
    crate::common::nft::rule_comments_in(Some(&node.ns), &format!("{}-{i}", lab.network), "v4")
}

/// Whether network `i` has a release record (`<name>@<node>.unused`, of any node: the
/// lab's networks run in its node only).
fn record_exists(lab: &Lab, i: usize) -> bool {
    release_records_of(&format!("{}-{i}", lab.network))
        .iter()
        .any(|f| f.ends_with(".unused"))
}

fn in_node(node: &Node, argv: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns];
    all.extend_from_slice(argv);
    run("ip", &all, &[])
}

fn grace_over(seconds: u64) {
    std::thread::sleep(Duration::from_secs(seconds) + Duration::from_millis(150));
}

#[test]
fn a_network_s_objects_outlive_its_last_del_and_go_with_another_network_s_invocation() {
    let lab = Lab::new("grace");
    let node = Node::new(&lab);
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let (one, other) = (network(&lab, 1, 2), network(&lab, 2, 60));

    node.call("ADD", &a, &with_port(&one, 20080))
        .expect_result("ADD");
    node.call("DEL", &a, &with_port(&one, 20080))
        .expect_silent_success("DEL of the last");
    assert_eq!(
        masquerade_rules(&lab, &node, 1).len(),
        1,
        "kept in the grace"
    );
    assert!(record_exists(&lab, 1));
    // The only container started again within the grace: the objects are its.
    let r = node
        .call("ADD", &a, &with_port(&one, 20080))
        .expect_result("ADD again");
    assert!(!record_exists(&lab, 1), "an ADD takes the record away");
    let mut check = with_port(&one, 20080);
    check["prevResult"] = r;
    node.call("CHECK", &a, &check)
        .expect_silent_success("CHECK");
    node.call("DEL", &a, &with_port(&one, 20080))
        .expect_silent_success("DEL of the last, again");

    // An invocation on another network within the grace leaves them.
    node.call("ADD", &b, &other)
        .expect_result("ADD on another network");
    assert_eq!(masquerade_rules(&lab, &node, 1).len(), 1);
    grace_over(2);
    // Once it is over, the next invocation, on the other network, releases them.
    node.call("DEL", &b, &other)
        .expect_silent_success("DEL on the other network");
    assert_eq!(masquerade_rules(&lab, &node, 1), Vec::<String>::new());
    assert!(!record_exists(&lab, 1));
    let left: BTreeSet<String> = leftovers(&lab, &node)
        .into_iter()
        .filter(|l| l.contains(&format!("{}-1", lab.network)) || l.contains("ngb1"))
        .collect();
    assert_eq!(left, BTreeSet::new(), "network 1's objects");
    // The other network, in its own grace, still has its objects.
    assert_eq!(masquerade_rules(&lab, &node, 2).len(), 1);
}

/// A VERSION in the node under strace: what it read of the records' folder (its
/// getdents64 calls on it).
fn listings_of_the_records(lab: &Lab, node: &Node, trace: &str) -> Vec<String> {
    let file = lab.root.join(trace);
    let mut args = vec![
        "netns".to_string(),
        "exec".into(),
        node.ns.clone(),
        "strace".into(),
    ];
    args.extend(strace_args(&file, "getdents64", None));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .config(&json!({"cniVersion": "1.1.0"}))
        .spawn("ip", &args);
    assert_eq!(out.code, 0, "{out}");
    std::fs::read_to_string(&file)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("/run/academy/networks>"))
        .map(String::from)
        .collect()
}

/// An invocation's cost does not grow with the networks waiting for their release, on
/// its node or another (issue 37): while none of its node is due it reads its node's
/// hint, not the records' folder (4 entries per waiting network); the first one after a
/// due time lists the folder and releases.
#[test]
fn an_invocation_lists_the_records_only_once_one_of_its_node_is_due() {
    let lab = Lab::new("gracelist");
    let node = Node::new(&lab);
    let a = lab.attachment("a");
    let config = network(&lab, 1, 2);
    node.call("ADD", &a, &config).expect_result("ADD");
    node.call("DEL", &a, &config)
        .expect_silent_success("DEL of the last");
    assert!(record_exists(&lab, 1));
    let listed = listings_of_the_records(&lab, &node, "waiting.trace");
    assert_eq!(listed, Vec::<String>::new(), "nothing due, yet listed");
    grace_over(2);
    let listed = listings_of_the_records(&lab, &node, "due.trace");
    assert!(
        !listed.is_empty(),
        "a record due, and the folder not listed"
    );
    assert!(!record_exists(&lab, 1), "a record due, and not released");
    assert_eq!(masquerade_rules(&lab, &node, 1), Vec::<String>::new());
    let listed = listings_of_the_records(&lab, &node, "none.trace");
    assert_eq!(listed, Vec::<String>::new(), "nothing waits, yet listed");
}

/// A last DEL while another invocation lists the records (held by the debug build's
/// hook once it has read the folder): the DEL's marker is not in that listing, and the
/// hint the listing then writes must still announce it, or its release waits for a GC.
#[test]
fn a_marker_made_during_a_listing_is_released_when_due() {
    let lab = Lab::new("gracehint");
    let node = Node::new(&lab);
    let (x, y) = (network(&lab, 1, 1), network(&lab, 2, 1));
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    node.call("ADD", &a, &x).expect_result("ADD on x");
    node.call("DEL", &a, &x)
        .expect_silent_success("DEL of x's last");
    grace_over(1);
    // x due: a VERSION lists the folder, and waits there.
    let held = HeldListing::start(&lab, &node);
    node.call("ADD", &b, &y).expect_result("ADD on y");
    node.call("DEL", &b, &y)
        .expect_silent_success("DEL of y's last");
    assert!(record_exists(&lab, 2));
    held.finish();
    grace_over(1);
    assert_eq!(version_in(&node).code, 0);
    assert!(!record_exists(&lab, 2), "y's record outlived its grace");
    assert_eq!(leftovers(&lab, &node), BTreeSet::new());
}

/// A VERSION in the node held by ACADEMY_TEST_HOLD_LISTING (src/firewall/mod.rs) after
/// its listing's readdir, until `finish` (or the drop) lets it go.
struct HeldListing {
    hold: TestHold,
    child: std::process::Child,
}

impl HeldListing {
    fn start(lab: &Lab, node: &Node) -> HeldListing {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let hold = TestHold::new(&lab.data_dir, "hold-listing");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &node.ns, plugin()])
            .env("CNI_COMMAND", "VERSION")
            .env("ACADEMY_TEST_HOLD_LISTING", hold.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(br#"{"cniVersion": "1.1.0"}"#).unwrap();
        drop(stdin);
        let listing = HeldListing { hold, child };
        let reached = listing.hold.reached(Duration::from_secs(20));
        assert!(reached, "the VERSION never listed the records");
        listing
    }

    fn finish(mut self) {
        self.hold.release();
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for HeldListing {
    fn drop(&mut self) {
        self.hold.release();
        let _ = self.child.wait();
    }
}

fn version_in(node: &Node) -> Out {
    node.run(
        &Call::bare()
            .env("CNI_COMMAND", "VERSION")
            .config(&json!({"cniVersion": "1.1.0"})),
    )
}

#[test]
fn release_unused_after_0_releases_with_the_last_del() {
    let lab = Lab::new("gracezero");
    let node = Node::new(&lab);
    let a = lab.attachment("a");
    let config = network(&lab, 1, 0);
    node.call("ADD", &a, &config).expect_result("ADD");
    assert_eq!(masquerade_rules(&lab, &node, 1).len(), 1);
    node.call("DEL", &a, &config)
        .expect_silent_success("DEL of the last");
    assert_eq!(leftovers(&lab, &node), BTreeSet::new());
    assert!(!record_exists(&lab, 1));
}

/// The release, by an invocation on another network, racing the first ADD of the
/// network's next container: whichever wins, the new container ends with its element
/// and the network's one rule, and its CHECK passes.
#[test]
fn the_grace_release_racing_a_first_add_never_loses_the_rule() {
    let lab = Lab::new("gracerace");
    let node = Node::new(&lab);
    let config = network(&lab, 1, 1);
    let other = network(&lab, 2, 60);
    let bystander = lab.attachment("z");
    node.call("ADD", &bystander, &other)
        .expect_result("ADD on the other network");
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let (mut holder, mut next) = (&a, &b);
    node.call("ADD", holder, &config).expect_result("ADD a");
    for round in 0..6 {
        node.call("DEL", holder, &config)
            .expect_silent_success("DEL of the last");
        grace_over(1);
        let (add, others) = std::thread::scope(|s| {
            let releasers: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let mut check = other.clone();
                        check["cni.dev/valid-attachments"] =
                            json!([{"containerID": bystander.cid, "ifname": "eth0"}]);
                        node.run(
                            &Call::bare()
                                .env("CNI_COMMAND", "GC")
                                .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
                                .config(&check),
                        )
                    })
                })
                .collect();
            let add = s.spawn(|| node.call("ADD", next, &config));
            (
                add.join().unwrap(),
                releasers
                    .into_iter()
                    .map(|r| r.join().unwrap())
                    .collect::<Vec<_>>(),
            )
        });
        for o in others {
            o.expect_silent_success("GC of the other network");
            assert_eq!(o.stderr.trim(), "", "round {round}: {o}");
        }
        let result = add.expect_result("the first ADD of the next");
        assert_eq!(masquerade_rules(&lab, &node, 1).len(), 1, "round {round}");
        let elements =
            crate::common::nft::elements_in(Some(&node.ns), &format!("{}-1", lab.network));
        let element = format!(
            "{} {}:{}:eth0",
            result_address(&result),
            crate::common::lab::network_key(&format!("{}-1", lab.network)),
            next.cid
        );
        assert_eq!(elements, BTreeSet::from([element]), "round {round}");
        let mut check = config.clone();
        check["prevResult"] = result.clone();
        node.call("CHECK", next, &check)
            .expect_silent_success("CHECK of the new container");
        std::mem::swap(&mut holder, &mut next);
    }
    node.call("DEL", holder, &config)
        .expect_silent_success("DEL of the last");
    node.call("DEL", &bystander, &other)
        .expect_silent_success("DEL of the bystander");
}

#[test]
fn thirty_networks_used_once_leave_nothing_after_their_grace() {
    let lab = Lab::new("gracethirty");
    let node = Node::new(&lab);
    // Docker's policy: each network's FORWARD accepts are made, and must go too.
    assert_eq!(
        in_node(&node, &["iptables-nft", "-P", "FORWARD", "DROP"]).code,
        0
    );
    let a = lab.attachment("a");
    for i in 0..30 {
        let config = with_port(&network(&lab, i, 1), 20000 + i as u16);
        node.call("ADD", &a, &config).expect_result("ADD");
        node.call("DEL", &a, &config)
            .expect_silent_success("DEL of the last");
    }
    // The first ones may have gone already (the later invocations release them).
    assert_eq!(
        masquerade_rules(&lab, &node, 29).len(),
        1,
        "kept in the grace"
    );
    grace_over(1);
    let out = node.run(
        &Call::bare()
            .env("CNI_COMMAND", "VERSION")
            .config(&json!({"cniVersion": "1.1.0"})),
    );
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stderr.trim(), "", "{out}");
    assert_eq!(leftovers(&lab, &node), BTreeSet::new());
    let forward = in_node(&node, &["iptables-nft", "-S", "FORWARD"]);
    assert!(!forward.stdout.contains("ngb"), "{forward}");
    assert!((0..30).all(|i| !record_exists(&lab, i)));
}

/// ADD, CHECK, DEL, GC, ADD with ipMasq and a port, the last DEL, the release after the
/// grace: all succeed, and none prints a thing on stderr.
#[test]
fn a_whole_lifecycle_prints_nothing_on_stderr() {
    let lab = Lab::new("quiet");
    let node = Node::new(&lab);
    // A dropping FORWARD: the first ADD appends the bridge's accepts, silently.
    assert_eq!(
        in_node(&node, &["iptables-nft", "-P", "FORWARD", "DROP"]).code,
        0
    );
    let config = network(&lab, 1, 1);
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let quiet = |out: &Out, what: &str| {
        assert_eq!(out.code, 0, "{what}: {out}");
        assert_eq!(out.stderr, "", "{what} printed on stderr:\n{out}");
    };
    let add = node.call("ADD", &a, &config);
    quiet(&add, "the first ADD");
    let mut check = config.clone();
    check["prevResult"] = add.expect_result("ADD");
    quiet(&node.call("CHECK", &a, &check), "CHECK");
    let add_b = node.call("ADD", &b, &with_port(&config, 20081));
    quiet(&add_b, "ADD with a port");
    // GC with only b valid: a's attachment goes, silently.
    let mut gc = config.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": b.cid, "ifname": "eth0"}]);
    let gc_out = node.run(
        &Call::bare()
            .env("CNI_COMMAND", "GC")
            .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
            .config(&gc),
    );
    quiet(&gc_out, "GC");
    quiet(&node.call("DEL", &a, &config), "DEL of what GC took");
    quiet(
        &node.call("DEL", &b, &with_port(&config, 20081)),
        "DEL of the last",
    );
    assert_eq!(
        masquerade_rules(&lab, &node, 1).len(),
        1,
        "kept in the grace"
    );
    grace_over(1);
    let version = node.run(
        &Call::bare()
            .env("CNI_COMMAND", "VERSION")
            .config(&json!({"cniVersion": "1.1.0"})),
    );
    quiet(&version, "the invocation that releases");
    assert_eq!(leftovers(&lab, &node), BTreeSet::new());
}
