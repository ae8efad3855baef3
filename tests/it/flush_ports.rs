//! Nothing lost to a flush (issue 29 item 4): a published port answers again after `nft
//! flush ruleset`, `nft delete table inet academy` and `nft -f` of a Debian-style
//! /etc/nftables.conf (it starts with `flush ruleset`), put back from the runtime record
//! ADD wrote (src/ipam/store/runtime.rs) by `academy watch` (its delay measured and
//! printed) or by `academy restore`; IPv4, IPv6, and a hostIP mapping of each. The
//! restore names an attachment an older academy added, whose ports it cannot know, and
//! DEL and GC take the record with the attachment.
//!
//! Each test runs academy in a private node netns (common/node.rs) joined by a veth to
//! a "far" netns of its own, the outside the ports are reached from: every packet goes
//! to addresses of the test's own namespaces.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;
use crate::portmap::{exchange, mapping};
use crate::watch::Watcher;

/// The watch's correctness bound (its target is 1 s: see tests/it/watch.rs).
const BOUND: Duration = Duration::from_millis(2500);

/// A netns joined to the node by a veth: .1 / ::1 the node's end, .2 / ::2 the far one.
struct Far {
    netns: String,
    node_v4: String,
    node_v6: String,
}

impl Far {
    fn new(lab: &Lab, node: &Node) -> Far {
        let out = Outside::joined_to(lab, Some(&node.ns));
        Far {
            netns: out.netns,
            node_v4: out.host_v4,
            node_v6: out.host_v6,
        }
    }
}

/// The lab's network, both families, publishing ports: its conflist in the lab's conf
/// dir (for the watch and the restore), and the config a runtime gives ADD with
/// `mappings`.
fn network(lab: &Lab, mappings: &[Value]) -> Value {
    // The ports tests' entry, without their hairpin mode (nothing here goes back in
    // through the bridge it came from).
    let mut entry = crate::portmap::academy_entry(lab);
    entry.as_object_mut().unwrap().remove("hairpinMode");
    let mut config = lab.install_entry(entry);
    config["runtimeConfig"] = json!({ "portMappings": mappings });
    config
}

/// Ports of the node's own (its netns is the test's): any block will do.
const PORT: u16 = 18400;

/// A port on every address, one on the node's IPv4 address only, one on its IPv6 one.
fn mappings(far: &Far) -> Vec<Value> {
    vec![
        mapping(PORT, None),
        mapping(PORT + 1, Some(&far.node_v4)),
        mapping(PORT + 2, Some(&far.node_v6)),
    ]
}

/// Each published port, as the far netns reaches it: (what, any address to listen
/// on in the container, the node's address, the port).
fn reachable(container: &str, far: &Far) -> Vec<String> {
    let mut failed = Vec::new();
    for (what, any, addr, port) in [
        ("v4", "0.0.0.0", far.node_v4.as_str(), PORT),
        ("v6", "::", far.node_v6.as_str(), PORT),
        ("v4 hostIP", "0.0.0.0", far.node_v4.as_str(), PORT + 1),
        ("v6 hostIP", "::", far.node_v6.as_str(), PORT + 2),
    ] {
        let (got, _) = exchange(container, any, Some(&far.netns), addr, port);
        if got != "hello" {
            failed.push(format!("{what} ({addr} port {port}): {got:?}"));
        }
    }
    failed
}

/// A flush: what it is, and doing it.
type Flush<'a> = (&'static str, Box<dyn Fn() + 'a>);

/// The three flushes, each taking the published ports with academy's maps.
fn flushes<'a>(node: &'a Node<'a>) -> Vec<Flush<'a>> {
    let conf = node.lab.root.join("nftables.conf");
    // Debian's /etc/nftables.conf, as nftables.service loads it on every (re)start.
    std::fs::write(
        &conf,
        "#!/usr/sbin/nft -f\n\nflush ruleset\n\ntable inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter;\n\t}\n\tchain forward {\n\t\ttype filter hook forward priority filter;\n\t}\n\tchain output {\n\t\ttype filter hook output priority filter;\n\t}\n}\n",
    )
    .unwrap();
    let conf = conf.to_str().unwrap().to_string();
    vec![
        (
            "nft flush ruleset",
            Box::new(|| drop(node.nft(&["flush", "ruleset"]))),
        ),
        (
            "nft delete table inet academy",
            Box::new(|| drop(node.nft(&["delete", "table", "inet", "academy"]))),
        ),
        (
            "nft -f of a Debian-style nftables.conf",
            Box::new(move || drop(node.nft(&["-f", &conf]))),
        ),
    ]
}

struct Published<'a> {
    node: &'a Node<'a>,
    a: Attach,
    config: Value,
    far: Far,
    /// What the maps held after ADD.
    want: BTreeSet<String>,
}

/// A node, its far side, and one container publishing `mappings` (asserted published and
/// recorded).
fn published<'a>(node: &'a Node<'a>) -> Published<'a> {
    let lab = node.lab;
    let far = Far::new(lab, node);
    let config = network(lab, &mappings(&far));
    let a = lab.attachment("c0");
    node.call("ADD", &a, &config)
        .expect_result("ADD publishing three ports");
    let want = nft::published_in(Some(&node.ns), &lab.network);
    assert_eq!(
        want.len(),
        4,
        "v4 and v6 of the wildcard port, one hostIP each: {want:?}"
    );
    // The record: the runtime's mappings, as it gave them.
    let record = std::fs::read_to_string(
        store_dir(lab)
            .join("runtime")
            .join(format!("{}:eth0", a.cid)),
    )
    .expect("no runtime record after ADD");
    let record: Value = serde_json::from_str(&record).expect("the record is JSON");
    assert_eq!(record["version"], 1, "{record}");
    let recorded: BTreeSet<String> = record["portMappings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m.to_string())
        .collect();
    let asked: BTreeSet<String> = mappings(&far).iter().map(|m| m.to_string()).collect();
    assert_eq!(recorded, asked, "the record of the runtime's mappings");
    let index =
        std::fs::read_to_string(store_dir(lab).join(format!("holders/{}:eth0", a.cid))).unwrap();
    assert!(index.contains("runtime recorded\n"), "{index}");
    let failed = reachable(&a.netns, &far);
    assert!(failed.is_empty(), "after ADD: {failed:?}");
    Published {
        node,
        a,
        config,
        far,
        want,
    }
}

impl Published<'_> {
    fn now(&self) -> BTreeSet<String> {
        nft::published_in(Some(&self.node.ns), &self.node.lab.network)
    }

    fn assert_back(&self, after: &str) {
        assert_eq!(self.now(), self.want, "the maps after {after}");
        let failed = reachable(&self.a.netns, &self.far);
        assert!(failed.is_empty(), "unreachable after {after}: {failed:?}");
    }

    fn del(self) {
        let lab = self.node.lab;
        self.node
            .call("DEL", &self.a, &self.config)
            .expect_silent_success("DEL");
        assert_eq!(
            lab.reservations(),
            Vec::<String>::new(),
            "the store after DEL"
        );
        assert_eq!(self.now(), BTreeSet::new(), "the maps after DEL");
    }
}

#[test]
fn flush_published_ports_are_put_back_by_the_watch_within_a_second() {
    let lab = Lab::new("flwatch");
    let node = Node::new(&lab);
    let p = published(&node);
    let watch = Watcher::start(&node, lab.conf_dir.to_str().unwrap());
    assert_eq!(
        watch.count("put back after"),
        0,
        "nothing was missing at start"
    );
    let mut delays = Vec::new();
    for (i, (what, flush)) in flushes(&node).iter().enumerate() {
        let start = Instant::now();
        flush();
        let back = wait_until(Duration::from_secs(5), || p.now() == p.want);
        let delay = start.elapsed();
        assert!(
            back,
            "{what}: the ports not back:\n{:?}\nwatch log:\n{}",
            p.now(),
            watch.text()
        );
        println!(
            "flush_ports watch: {what}: published ports back in {} ms",
            delay.as_millis()
        );
        assert!(
            delay < BOUND,
            "{what}: back in {delay:?}, not within {BOUND:?}"
        );
        delays.push(delay);
        p.assert_back(what);
        assert!(
            wait_until(Duration::from_secs(2), || watch.count("put back after")
                == i + 1),
            "one line per repair:\n{}",
            watch.text()
        );
        let text = watch.text();
        let line = text
            .lines()
            .filter(|l| l.contains("put back after"))
            .nth(i)
            .unwrap();
        assert!(
            line.contains(&format!(
                "published ports: the host ports of {}/eth0: ",
                p.a.cid
            )),
            "{what}: {line}"
        );
    }
    assert!(
        !watch.text().contains("could not put back"),
        "{}",
        watch.text()
    );
    println!(
        "flush_ports watch delays: {delays:?}\nwatch log:\n{}",
        watch.text()
    );
    drop(watch);
    p.del();
}

#[test]
fn flush_published_ports_are_put_back_by_academy_restore() {
    let lab = Lab::new("flrest");
    let node = Node::new(&lab);
    let p = published(&node);
    let conf_dir = lab.conf_dir.to_str().unwrap();
    for (what, flush) in flushes(&node) {
        flush();
        assert_eq!(p.now(), BTreeSet::new(), "{what} took the ports");
        // STATUS names them, and the remedy.
        let status = node.run(&lab.call("STATUS").config(&p.config));
        let error = assert_cni_error(&status, 50, &["the host ports of"]);
        assert!(
            error["details"]
                .as_str()
                .is_some_and(|d| d.contains("academy restore")),
            "{error}"
        );
        let out = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(out.code, 0, "restore after {what}:\n{out}");
        println!("flush_ports restore after {what}:\n{}", out.stderr);
        let line = format!(
            "network {}: put back: published ports: the host ports of {}/eth0: ",
            lab.network, p.a.cid
        );
        assert!(out.stderr.contains(&line), "after {what}:\n{out}");
        assert!(!out.stderr.contains("could not"), "after {what}:\n{out}");
        assert!(out.stdout.is_empty(), "restore wrote to stdout: {out}");
        p.assert_back(what);
        let again = node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(again.code, 0, "{again}");
        assert!(
            again
                .stderr
                .contains(&format!("network {}: complete, nothing to do", lab.network)),
            "a second restore after {what}:\n{again}"
        );
        node.run(&lab.call("STATUS").config(&p.config))
            .expect_silent_success("STATUS after restore");
    }
    p.del();
}

#[test]
fn flush_an_attachment_of_an_older_academy_is_named_by_the_restore() {
    let lab = Lab::new("flold");
    let node = Node::new(&lab);
    let far = Far::new(&lab, &node);
    let config = network(&lab, &[mapping(PORT, None)]);
    let old = lab.attachment("old");
    node.call("ADD", &old, &config)
        .expect_result("ADD publishing a port");
    // One without ports: recorded as having none, so never named.
    let bare = lab.attachment("bare");
    node.call("ADD", &bare, &network(&lab, &[]))
        .expect_result("ADD publishing nothing");
    let store = store_dir(&lab);
    assert!(
        !store.join(format!("runtime/{}:eth0", bare.cid)).exists(),
        "a record for an attachment with nothing to record"
    );
    // As an academy older than records left it: its index without the line, no record.
    let index = store.join(format!("holders/{}:eth0", old.cid));
    let text = std::fs::read_to_string(&index).unwrap();
    let older: String = text
        .lines()
        .filter(|l| !l.starts_with("runtime "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&index, older).unwrap();
    std::fs::remove_file(store.join(format!("runtime/{}:eth0", old.cid))).unwrap();
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let ours = format!("the published ports of {}/eth0", old.cid);

    // Its port in place: said so, with what a flush would do.
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    let line = format!(
        "network {}: not recorded: {ours} are in place, but it was added by an academy older than this one",
        lab.network
    );
    assert!(out.stderr.contains(&line), "{out}");
    assert!(!out.stderr.contains(&bare.cid), "{out}");

    // Flushed: named as what could not be put back, and why.
    node.nft(&["flush", "ruleset"]);
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    println!(
        "flush_ports restore of an older attachment:\n{}",
        out.stderr
    );
    assert_eq!(out.code, 0, "not an error to retry: {out}");
    let line = format!(
        "network {}: could not put back: {ours} (if it had any), because it was added by an academy older than this one, which did not record them; its next ADD records them",
        lab.network
    );
    assert!(out.stderr.contains(&line), "{out}");
    assert!(!out.stderr.contains(&bare.cid), "{out}");
    assert_eq!(
        nft::published_in(Some(&node.ns), &lab.network),
        BTreeSet::new()
    );

    // Its next ADD records them; the next flush loses nothing.
    node.call("ADD", &old, &config)
        .expect_result("the older attachment's next ADD");
    let text = std::fs::read_to_string(&index).unwrap();
    assert!(text.contains("runtime recorded\n"), "{text}");
    let want = nft::published_in(Some(&node.ns), &lab.network);
    assert_eq!(want.len(), 2, "{want:?}");
    node.nft(&["delete", "table", "inet", "academy"]);
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(!out.stderr.contains("could not"), "{out}");
    assert!(!out.stderr.contains("not recorded"), "{out}");
    assert_eq!(nft::published_in(Some(&node.ns), &lab.network), want);
    let (got, _) = exchange(&old.netns, "0.0.0.0", Some(&far.netns), &far.node_v4, PORT);
    assert_eq!(got, "hello", "the port after the restore");

    for a in [&old, &bare] {
        node.call("DEL", a, &config).expect_silent_success("DEL");
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
}

#[test]
fn flush_records_go_with_del_and_gc() {
    let lab = Lab::new("flgone");
    let node = Node::new(&lab);
    let config = network(&lab, &[mapping(PORT, None)]);
    let record_of = |a: &Attach| store_dir(&lab).join(format!("runtime/{}:eth0", a.cid));
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    node.call("ADD", &a, &config).expect_result("ADD of a");
    assert!(record_of(&a).exists());
    node.call("DEL", &a, &config)
        .expect_silent_success("DEL of a");
    assert!(!record_of(&a).exists(), "DEL left the record");
    assert_eq!(lab.reservations(), Vec::<String>::new());

    // GC, for an attachment the runtime no longer lists (the record's DEL never came).
    let mut other = config.clone();
    other["runtimeConfig"] = json!({"portMappings": [mapping(PORT + 1, None)]});
    node.call("ADD", &b, &other).expect_result("ADD of b");
    node.call("ADD", &a, &config)
        .expect_result("ADD of a again");
    let kept = [(b.cid.as_str(), "eth0")];
    node.run(&gc_call(&lab, config.clone(), &kept))
        .expect_silent_success("GC keeping b");
    assert!(!record_of(&a).exists(), "GC left the record of a");
    assert!(
        record_of(&b).exists(),
        "GC took the record of a listed attachment"
    );
    node.run(&gc_call(&lab, config.clone(), &[]))
        .expect_silent_success("GC of everything");
    assert_eq!(
        lab.reservations(),
        Vec::<String>::new(),
        "the store after GC"
    );
    assert_eq!(
        nft::published_in(Some(&node.ns), &lab.network),
        BTreeSet::new()
    );
}

/// Port of the conflict tests (issue 35 finding 5): c1 publishes it on every address,
/// c2 asks for it on the node's address the far side reaches.
const HELD: u16 = 18450;

/// A listener in `netns` on 8080 answering `word` to one connection, reached from the
/// far side at the node's address and HELD: what came back ("" for nothing).
fn who_answers(far: &Far, listeners: &[(&str, &str)]) -> String {
    let mut servers: Vec<std::process::Child> = listeners
        .iter()
        .map(|(netns, word)| {
            let script = format!(
                "import socket\n\
                 s = socket.socket(socket.AF_INET)\n\
                 s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                 s.bind(('0.0.0.0', 8080)); s.listen(4); s.settimeout(15)\n\
                 c, peer = s.accept(); c.sendall(b'{word}'); c.close()\n"
            );
            std::process::Command::new("ip")
                .args(["netns", "exec", netns, "python3", "-c", &script])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("python3")
        })
        .collect();
    let got = crate::portmap::reach(Some(&far.netns), &far.node_v4, HELD, Duration::from_secs(5));
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    got
}

/// The 105 refusal of c2's ADD: its message.
fn refused(out: &Out, what: &str) -> String {
    assert_ne!(out.code, 0, "{what} succeeded: {out}");
    let err = out.json();
    assert_eq!(err["code"], 105, "{what}: {out}");
    err["msg"].as_str().unwrap().to_string()
}

#[test]
fn flush_a_running_containers_port_is_never_handed_to_another() {
    let lab = Lab::new("flwant");
    let node = Node::new(&lab);
    let far = Far::new(&lab, &node);
    let c1_config = network(&lab, &[mapping(HELD, None)]);
    let c2_config = network(&lab, &[mapping(HELD, Some(&far.node_v4))]);
    let c3_config = network(&lab, &[mapping(HELD + 1, None)]);
    let (c1, c2, c3) = (
        lab.attachment("c1"),
        lab.attachment("c2"),
        lab.attachment("c3"),
    );
    node.call("ADD", &c1, &c1_config)
        .expect_result("c1's ADD publishing the port on every address");
    let want = nft::published_in(Some(&node.ns), &lab.network);
    let before = refused(
        &node.call("ADD", &c2, &c2_config),
        "c2's ADD before a flush",
    );
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let listeners = [(c1.netns.as_str(), "c1"), (c2.netns.as_str(), "c2")];

    // The first ADD after the flush is c2's: judged against c1's record.
    node.nft(&["delete", "table", "inet", "academy"]);
    let after = refused(
        &node.call("ADD", &c2, &c2_config),
        "c2's ADD after nft delete table inet academy",
    );
    assert_eq!(after, before, "the refusal after the flush");
    assert_eq!(
        nft::published_in(Some(&node.ns), &lab.network),
        want,
        "the maps after c2's refused ADD (c1's port put back by it)"
    );
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    println!("flush_ports restore after c2's refusal:\n{}", out.stderr);
    assert_eq!(out.code, 0, "{out}");
    assert!(!out.stderr.contains("could not"), "{out}");
    assert_eq!(nft::published_in(Some(&node.ns), &lab.network), want);
    assert_eq!(who_answers(&far, &listeners), "c1", "after the restore");

    // Another container's ADD re-makes the maps first: c2's still meets c1's port.
    node.nft(&["delete", "table", "inet", "academy"]);
    node.call("ADD", &c3, &c3_config)
        .expect_result("c3's ADD of another port after the flush");
    let after = refused(
        &node.call("ADD", &c2, &c2_config),
        "c2's ADD after another ADD re-made the maps",
    );
    assert_eq!(after, before, "the refusal after another ADD");
    assert_eq!(who_answers(&far, &listeners), "c1", "after c2's refusal");
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    assert_eq!(out.code, 0, "{out}");
    assert!(!out.stderr.contains("could not"), "{out}");
    assert_eq!(
        who_answers(&far, &listeners),
        "c1",
        "after the second restore"
    );

    for (a, config) in [(&c1, &c1_config), (&c2, &c2_config), (&c3, &c3_config)] {
        node.call("DEL", a, config).expect_silent_success("DEL");
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
}

/// A flush of the map's elements alone leaves port mapping's rules, so the ADD after it
/// cannot know (it reads records only when it re-makes the maps) and c2 gets the port;
/// the restore then leaves c1's wildcard out rather than put it back beside c2's, and
/// says why, as it says of any port taken since (exit 0).
#[test]
fn flush_the_restore_says_which_container_holds_a_lost_port() {
    let lab = Lab::new("flhold");
    let node = Node::new(&lab);
    let far = Far::new(&lab, &node);
    let c1_config = network(&lab, &[mapping(HELD, None)]);
    let c2_config = network(&lab, &[mapping(HELD, Some(&far.node_v4))]);
    let (c1, c2) = (lab.attachment("c1"), lab.attachment("c2"));
    node.call("ADD", &c1, &c1_config)
        .expect_result("c1's ADD publishing the port on every address");
    node.nft(&["flush", "map", "inet", "academy", "_ports-v4"]);
    node.call("ADD", &c2, &c2_config)
        .expect_result("c2's ADD after a flush of the map's elements");
    let held = nft::published_in(Some(&node.ns), &lab.network);

    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["restore", "--conf-dir", conf_dir]);
    println!("flush_ports restore of a port c2 holds:\n{}", out.stderr);
    assert_eq!(out.code, 0, "a port taken since is not an error: {out}");
    let line = format!(
        "network {net}: could not put back: host port tcp/{HELD} (v4) of {c1}/eth0, because container {c2} (interface eth0, network {net}) holds it as tcp/{addr}:{HELD}",
        net = lab.network,
        c1 = c1.cid,
        c2 = c2.cid,
        addr = far.node_v4,
    );
    assert!(out.stderr.contains(&line), "{out}");
    assert!(!out.stderr.contains("put back: published ports"), "{out}");
    assert_eq!(
        nft::published_in(Some(&node.ns), &lab.network),
        held,
        "the maps after the restore: c1's wildcard not beside c2's"
    );

    for (a, config) in [(&c1, &c1_config), (&c2, &c2_config)] {
        node.call("DEL", a, config).expect_silent_success("DEL");
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
}
