//! A rollback under running containers (issue 36): this build makes live attachments
//! (ipMasq, a published port each, the MAC filter) in a private node, then an older
//! release's binary replaces it, nothing restarted, as a package downgrade does; then
//! this build comes back (the upgrade after the rollback).
//!
//! - The previous release (tests/upgrade/previous-release) reads everything this build
//!   makes: its CHECK passes, its GC with a valid list keeps the listed attachments and
//!   removes the others whole, its DEL removes all of an attachment; the upgrade after it
//!   leaves nothing stale.
//! - v0.4.0 (tests/upgrade/last-unversioned-release) reads no network key in owner
//!   comments: its DEL frees the address and the veth but leaves the published port,
//!   the masquerade element, the MAC filter and the runtime record. `academy install`
//!   of this build sweeps them (src/cli/install/orphans.rs) and says so.
//!
//! The old releases are built once and shared with upgrade.rs (target/upgrade-from-*).

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;
use crate::portmap::{host_ports, mapping, write_list};
use crate::upgrade::{exec, put_binary, release_node, ruleset, store_files_of, Release};

/// One live attachment and what it was given.
struct Live {
    who: Attach,
    conf: Value,
    result: Value,
    veth: String,
}

/// The lab's node with this build as its academy, the network's config (ipMasq, the MAC
/// filter, portMappings) written to the conf dir as `academy install` finds it, and the
/// attachments `names` added by this build, each publishing a port of its own.
struct Scene<'a> {
    lab: &'a Lab,
    node: Node<'a>,
    academy: std::path::PathBuf,
    config: Value,
}

impl<'a> Scene<'a> {
    fn new(lab: &'a Lab) -> Scene<'a> {
        let node = Node::new(lab);
        let (academy, mut config) = release_node(lab, Path::new(plugin()));
        config["macspoofchk"] = json!(true);
        write_list(lab, vec![config.clone()]);
        Scene {
            lab,
            node,
            academy,
            config,
        }
    }

    /// ADD of attachment `name` by the binary in place, publishing host port base + `n`.
    fn add(&self, name: &str, n: u16) -> Live {
        let who = self.lab.attachment(name);
        let mut conf = self.config.clone();
        conf["runtimeConfig"] = json!({"portMappings": [mapping(host_ports(self.lab) + n, None)]});
        let result = self.call("ADD", &who, &conf).expect_result("ADD");
        let veth = result_host_veth(&result);
        Live {
            who,
            conf,
            result,
            veth,
        }
    }

    /// A CNI call to the binary in place, in the node.
    fn call(&self, verb: &str, who: &Attach, conf: &Value) -> Out {
        exec(
            &self.node,
            &self.academy,
            &self.lab.call_for(verb, who).config(conf),
        )
    }

    fn check(&self, live: &Live) -> Out {
        let mut conf = live.conf.clone();
        conf["prevResult"] = live.result.clone();
        self.call("CHECK", &live.who, &conf)
    }

    fn gc(&self, valid: &[&Live]) -> Out {
        let valid: Vec<(&str, &str)> = valid
            .iter()
            .map(|l| (l.who.cid.as_str(), l.who.ifname.as_str()))
            .collect();
        exec(
            &self.node,
            &self.academy,
            &gc_call(self.lab, self.config.clone(), &valid),
        )
    }

    /// `academy install` of this build over the node's bin and conf folders.
    fn install(&self) -> Out {
        let out = self.node.academy(&[
            "install",
            "--bin-dir",
            self.academy.parent().unwrap().to_str().unwrap(),
            "--conf-dir",
            self.lab.conf_dir.to_str().unwrap(),
        ]);
        assert_eq!(out.code, 0, "academy install:\n{out}");
        out
    }

    /// What is left of `live` anywhere on the node: its owner in nf_tables (every form
    /// of owner comment ends in "<container id>:<ifname>"), its veth (a link, or named
    /// in nf_tables: the MAC filter's elements), its addresses in nf_tables (masquerade,
    /// published ports), its files in the store. Empty when it is wholly gone.
    fn traces(&self, live: &Live) -> Vec<String> {
        let rules = ruleset(&self.node);
        let words: Vec<&str> = rules
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == ':' || c == '.'))
            .collect();
        let mut left = Vec::new();
        let owner = format!("{}:{}", live.who.cid, live.who.ifname);
        for line in rules.lines().filter(|l| l.contains(&owner)) {
            left.push(format!("its owner in nf_tables: {}", line.trim()));
        }
        if rules.contains(&live.veth) {
            left.push(format!("its veth {} named in nf_tables", live.veth));
        }
        for address in addresses(&live.result) {
            if words.contains(&address.as_str()) {
                left.push(format!("its address {address} in nf_tables"));
            }
        }
        if self.node.links().contains(&live.veth) {
            left.push(format!("its veth {}", live.veth));
        }
        for file in store_files_of(self.lab, &live.who.cid) {
            left.push(format!("store file {file}"));
        }
        left
    }

    /// `live` is whole: its veth, store files and nf_tables elements are there, and
    /// this build's CHECK passes.
    fn assert_kept(&self, live: &Live, what: &str) {
        let traces = self.traces(live);
        for want in ["its owner in nf_tables", "its veth ", "store file "] {
            assert!(
                traces.iter().any(|t| t.starts_with(want)),
                "{what}: {} lost {want}...; what is left of it: {traces:#?}",
                live.who.cid
            );
        }
    }

    fn assert_gone(&self, live: &Live, what: &str) {
        let traces = self.traces(live);
        assert!(
            traces.is_empty(),
            "{what} left this of {}:\n{traces:#?}\nruleset:\n{}",
            live.who.cid,
            ruleset(&self.node)
        );
    }

    /// Nothing of the network is left in the node: no element or object naming it, no
    /// veth of the lab, no reservation.
    fn assert_nothing_left(&self, what: &str) {
        let key = network_key(&self.lab.network);
        let rules = ruleset(&self.node);
        let left: Vec<&str> = rules
            .lines()
            .filter(|l| l.contains(&key) || l.contains(&format!("{}-v", self.lab.network)))
            .collect();
        assert_eq!(left, Vec::<&str>::new(), "{what}: nf_tables:\n{rules}");
        let veths: Vec<String> = self
            .node
            .links()
            .into_iter()
            .filter(|l| l.starts_with("veth"))
            .collect();
        assert_eq!(veths, Vec::<String>::new(), "{what}: veths in the node");
        assert_eq!(self.lab.reservations(), Vec::<String>::new(), "{what}");
    }
}

/// The container's addresses an ADD result reports, without prefixes.
fn addresses(result: &Value) -> Vec<String> {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str())
        .filter_map(|a| a.split('/').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn rollback_to_the_previous_release_under_live_containers() {
    let old = Release::previous().binary();
    let lab = Lab::new("rbk");
    let scene = Scene::new(&lab);
    let (a, b, c) = (scene.add("a", 0), scene.add("b", 1), scene.add("c", 2));

    // The rollback: the previous release's binary replaces this one.
    put_binary(&old, &scene.academy);
    for live in [&a, &b, &c] {
        let out = scene.check(live);
        assert_eq!(
            (out.code, out.stdout.trim()),
            (0, ""),
            "the previous release's CHECK of {} this build made:\n{out}",
            live.who.cid
        );
        if !out.stderr.is_empty() {
            eprintln!(
                "rollback: the previous release's CHECK said: {}",
                out.stderr
            );
        }
    }
    let status = exec(
        &scene.node,
        &scene.academy,
        &lab.call("STATUS").config(&scene.config),
    );
    status.expect_silent_success("the previous release's STATUS");

    // Its GC keeps the listed, removes c whole.
    scene
        .gc(&[&a, &b])
        .expect_silent_success("the previous release's GC");
    scene.assert_gone(&c, "the previous release's GC");
    scene.assert_kept(&a, "the previous release's GC");
    scene.assert_kept(&b, "the previous release's GC");

    // Its DEL removes all of a.
    let del = scene.call("DEL", &a.who, &a.conf);
    del.expect_silent_success("the previous release's DEL");
    assert_eq!(del.stderr, "", "the previous release's DEL");
    scene.assert_gone(&a, "the previous release's DEL");
    scene.assert_kept(&b, "the previous release's DEL of a");

    // The upgrade after the rollback: this build again, as `academy install` puts it.
    let install = scene.install();
    assert!(
        !install.stdout.contains("no reservation"),
        "nothing was stale after the previous release's DEL and GC:\n{install}"
    );
    let again = scene.check(&b);
    again.expect_silent_success("this build's CHECK after the rollback");
    assert_eq!(again.stderr, "", "this build's CHECK after the rollback");
    scene
        .call("DEL", &b.who, &b.conf)
        .expect_silent_success("this build's DEL after the rollback");
    scene.assert_nothing_left("after the upgrade and the last DEL");
}

/// The finding: v0.4.0's DEL of this build's attachment frees its address and veth and
/// leaves its nf_tables elements; the next `academy install` of a newer release removes
/// them, and names them.
#[test]
fn rollback_to_a_release_without_network_keys_leaves_elements_install_sweeps() {
    let old = Release::last_unversioned().binary();
    let lab = Lab::new("rbk0");
    let scene = Scene::new(&lab);
    let (a, b) = (scene.add("a", 0), scene.add("b", 1));

    put_binary(&old, &scene.academy);
    let del = scene.call("DEL", &a.who, &a.conf);
    assert_eq!(
        del.code, 0,
        "v0.4.0's DEL of this build's attachment:\n{del}"
    );
    let traces = scene.traces(&a);
    // v0.4.0 knows no runtime record either (0.5.0's published ports and rates).
    assert!(
        traces
            .iter()
            .all(|t| t.contains("nf_tables") || t.starts_with("store file runtime/")),
        "v0.4.0's DEL left more than nf_tables state and the runtime record: {traces:#?}"
    );
    assert!(
        traces.iter().any(|t| t.starts_with("its owner in nf_tables")),
        "v0.4.0's DEL no longer leaves a's elements (docs/operations.md, \"Rollbacks\", says it does)"
    );

    // The upgrade after the rollback.
    let install = scene.install();
    let key = format!("network {}: removed what no reservation", lab.network);
    let line = install
        .stdout
        .lines()
        .find(|l| l.starts_with(&key))
        .unwrap_or_else(|| panic!("install names what it swept, {key:?}...:\n{install}"));
    eprintln!("rollback: install said: {line}");
    let owner = owner_comment(&lab.network, &a.who.cid, &a.who.ifname);
    let masqueraded = format!("masquerade of {} ({owner})", addresses(&a.result)[0]);
    let filtered = format!("MAC filter of {} ({owner})", a.veth);
    let record = format!("runtime record {}:{}", a.who.cid, a.who.ifname);
    for want in ["published port tcp/", &masqueraded, &filtered, &record] {
        assert!(line.contains(want), "{want:?} in install's line:\n{line}");
    }
    assert!(
        !line.contains(&b.who.cid),
        "install swept the live b:\n{line}"
    );
    scene.assert_gone(&a, "install after v0.4.0's DEL");
    scene.assert_kept(&b, "install after v0.4.0's DEL of a");
    let check = scene.check(&b);
    check.expect_silent_success("CHECK of b after the install");
    assert_eq!(check.stderr, "", "CHECK of b after the install");
    let second = scene.install();
    assert!(
        !second.stdout.contains("no reservation"),
        "a second install found more to sweep:\n{second}"
    );

    scene
        .call("DEL", &b.who, &b.conf)
        .expect_silent_success("DEL of b");
    scene.assert_nothing_left("after the last DEL");
}

/// The sweep judges by the node alone, so it keeps whatever may be live: an attachment
/// with a reservation, or with a host veth labelled for the network (an address freed
/// under a running container is a leak the other way, not an orphan). Its orphan is
/// made here by hand, as v0.4.0's DEL leaves it: the reservation and veth gone, the
/// elements left.
#[test]
fn install_sweeps_only_elements_no_reservation_or_veth_owns() {
    let lab = Lab::new("rbkh");
    let scene = Scene::new(&lab);
    let (gone, wired, reserved) = (scene.add("a", 0), scene.add("b", 1), scene.add("c", 2));
    let unreserve = |live: &Live| {
        for file in store_files_of(&lab, &live.who.cid) {
            std::fs::remove_file(store_dir(&lab).join(file.trim_start_matches('/'))).unwrap();
        }
    };
    unreserve(&gone);
    unreserve(&wired);
    run(
        "ip",
        &["-n", &scene.node.ns, "link", "del", &gone.veth],
        &[],
    );
    let before = ruleset(&scene.node);

    let install = scene.install();
    let key = format!("network {}: removed what no reservation", lab.network);
    let line = install
        .stdout
        .lines()
        .find(|l| l.starts_with(&key))
        .unwrap_or_else(|| panic!("install names what it swept, {key:?}...:\n{install}"));
    assert!(line.contains(&gone.who.cid), "{line}");
    for kept in [&wired, &reserved] {
        assert!(!line.contains(&kept.who.cid), "{line}");
        let owner = format!("{}:{}", kept.who.cid, kept.who.ifname);
        assert!(
            ruleset(&scene.node).contains(&owner),
            "install swept {}, which {}:\nbefore:\n{before}",
            kept.who.cid,
            if kept.who.cid == wired.who.cid {
                "has its veth"
            } else {
                "has its reservation"
            }
        );
    }
    scene.assert_gone(&gone, "install's sweep");

    for live in [&wired, &reserved] {
        scene
            .call("DEL", &live.who, &live.conf)
            .expect_silent_success("DEL");
    }
    scene.assert_nothing_left("after the last DEL");
}
