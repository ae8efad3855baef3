//! An upgrade under running containers: an older release is built from this
//! repository's history, installed as a private node's plugin, and given live attachments
//! (ipMasq, a published port, the MAC filter); then its binary is replaced by this build's,
//! nothing restarted, as a package upgrade or `academy install` does. Two releases:
//!
//! - the previous one (tests/upgrade/previous-release, moved at each release), whose
//!   state version may be this build's: then nothing is brought up to date;
//! - the last one without a state version (tests/upgrade/last-unversioned-release,
//!   v0.4.0, never moved): the first invocation of the new binary brings the network to
//!   its state version (src/firewall/upgrade.rs), so CHECK and STATUS pass at once.
//!
//! In both, DEL and GC handle what the old binary made. rollback.rs replaces this build
//! by the same two releases.
//!
//! An old build is cached under target/upgrade-from-<commit> (its own source and target
//! folders), so only the first run pays its minute or two, and tests sharing a release
//! share its build (one at a time, under a lock). Packets go only to the test's own
//! namespaces.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};

use crate::common::*;
use crate::portmap::{academy_entry, delete_guard_element, exchange, host_ports, mapping};

/// `<tag> <full commit>` of the release before this one.
const PREVIOUS_RELEASE: (&str, &str) = (
    "tests/upgrade/previous-release",
    include_str!("../upgrade/previous-release"),
);

/// `<tag> <full commit>` of the last release that wrote no state version and no network
/// key in its owner comments (v0.4.0).
const LAST_UNVERSIONED_RELEASE: (&str, &str) = (
    "tests/upgrade/last-unversioned-release",
    include_str!("../upgrade/last-unversioned-release"),
);

/// The state version this build records (src/firewall/upgrade.rs's STATE_VERSION, read
/// from the source: the test binary does not link the plugin's crate).
pub fn state_version() -> u32 {
    let source = include_str!("../../src/firewall/upgrade.rs");
    source
        .lines()
        .find_map(|l| l.strip_prefix("pub const STATE_VERSION: u32 = "))
        .and_then(|rest| rest.trim_end_matches(';').trim().parse().ok())
        .expect("src/firewall/upgrade.rs declares `pub const STATE_VERSION: u32 = N;`")
}

/// The repository the test was built from: a full clone, so the previous release's
/// commit is in its history.
const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn git(args: &[&str]) -> Out {
    let mut all = vec!["-C", REPO];
    all.extend_from_slice(args);
    run("git", &all, &[])
}

/// An older release: its tag, as its file names it, and the commit to build.
pub struct Release {
    pub tag: String,
    pub commit: String,
}

impl Release {
    /// The release before this one.
    pub fn previous() -> Release {
        Release::named_by(PREVIOUS_RELEASE)
    }

    /// The last release without a state version or keyed owner comments.
    pub fn last_unversioned() -> Release {
        Release::named_by(LAST_UNVERSIONED_RELEASE)
    }

    /// The release a file names: the tag's commit when the repository has the tag (it
    /// must be the file's), else the file's.
    fn named_by((file, text): (&str, &str)) -> Release {
        let mut words = text.split_whitespace();
        let (Some(tag), Some(commit), None) = (words.next(), words.next(), words.next()) else {
            panic!("{file} should read `<tag> <commit>`, not {text:?}");
        };
        let present = |rev: &str| git(&["rev-parse", "--verify", "--quiet", rev]);
        let tagged = present(&format!("refs/tags/{tag}^{{commit}}"));
        if tagged.code == 0 {
            let at = tagged.stdout.trim();
            assert_eq!(
                at, commit,
                "tag {tag} names {at}, but {file} says {commit}: one of them is wrong"
            );
        }
        let found = present(&format!("{commit}^{{commit}}"));
        assert_eq!(
            found.code, 0,
            "the release {tag} ({commit}, {file}) is not in this repository's history: \
             the upgrade and rollback tests build it from there. Use a full clone (`git fetch --unshallow --tags`), or fix the file.\n{found}"
        );
        Release {
            tag: tag.to_string(),
            commit: found.stdout.trim().to_string(),
        }
    }

    /// Its binary, built (or found fresh) under target/upgrade-from-<commit>.
    pub fn binary(&self) -> PathBuf {
        let started = Instant::now();
        let binary = previous_binary(&self.commit);
        eprintln!(
            "release {} ({}) built (or found fresh) in {:.1?}",
            self.tag,
            self.commit,
            started.elapsed()
        );
        binary
    }
}

/// The previous release's binary, built in release mode from `git archive` of its
/// commit in target/upgrade-builds (one target folder for every old release), copied to
/// target/upgrade-from-<commit>/academy, where a second run finds it.
fn previous_binary(commit: &str) -> PathBuf {
    let target = Path::new(plugin())
        .parent()
        .and_then(Path::parent)
        .expect("the plugin is under target/<profile>/");
    let dir = target.join(format!("upgrade-from-{commit}"));
    std::fs::create_dir_all(&dir).unwrap();
    // One build at a time, all in one target folder: the old releases pin the same
    // dependencies, which are then compiled once per machine, not once per release.
    let builds = target.join("upgrade-builds");
    std::fs::create_dir_all(&builds).unwrap();
    let _one_build = lock_file(builds.join(".lock").to_str().unwrap());
    let binary = dir.join("academy");
    if binary.is_file() {
        return binary;
    }
    let src = dir.join("src");
    if !src.join("Cargo.toml").exists() {
        // Extracted beside, then renamed: a killed extraction is never taken for a tree.
        let partial = dir.join("src.partial");
        let _ = std::fs::remove_dir_all(&partial);
        std::fs::create_dir_all(&partial).unwrap();
        let script = format!(
            "git -C '{REPO}' archive --format=tar {commit} | tar -x -C '{}'",
            partial.display()
        );
        let out = run("sh", &["-c", &script], &[]);
        assert_eq!(out.code, 0, "extracting {commit}:\n{out}");
        let _ = std::fs::remove_dir_all(&src);
        std::fs::rename(&partial, &src).unwrap();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--release", "--locked", "--target-dir"])
        .arg(builds.join("target"))
        .current_dir(&src);
    // The test's own cargo environment (its package, manifest, profile) is not the
    // old build's.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_") && key != "CARGO_HOME" {
            build.env_remove(&key);
        }
    }
    let out = Out::from(build.output().expect("cargo"));
    assert_eq!(
        out.code, 0,
        "building the previous release {commit}:\n{out}"
    );
    // Copied out (by rename, so a half copy is never taken for it): the next
    // release's build overwrites the shared target's binary.
    let built = builds.join("target/release/academy");
    assert!(built.is_file(), "no {}", built.display());
    let partial = dir.join("academy.partial");
    std::fs::copy(&built, &partial).unwrap();
    std::fs::rename(&partial, &binary).unwrap();
    binary
}

/// Puts `from` at `to` as an installer does: a copy beside it, renamed over it (a
/// runtime executing the old one keeps its inode).
pub fn put_binary(from: &Path, to: &Path) {
    let tmp = to.with_file_name(".academy.new");
    copy_executable(from, &tmp);
    std::fs::rename(&tmp, to).unwrap();
}

/// A netns joined to the node by a veth: .1 the node's end, .2 the far end. Dies with
/// the lab's netns.
pub struct Far {
    pub netns: String,
    pub node_v4: String,
    pub far_v4: String,
}

impl Far {
    pub fn new(lab: &Lab, node: &Node) -> Far {
        let out = Outside::joined_to(lab, Some(&node.ns));
        Far {
            netns: out.netns,
            node_v4: out.host_v4,
            far_v4: out.far_v4,
        }
    }
}

/// The plugin at `binary` run inside the node, as the runtime calls it.
pub fn exec(node: &Node, binary: &Path, call: &Call) -> Out {
    call.spawn("ip", &["netns", "exec", &node.ns, binary.to_str().unwrap()])
}

/// The network's state version records (any node's): `(file name, first line)`.
pub fn records(lab: &Lab) -> Vec<(String, String)> {
    let prefix = format!("{}.", lab.network);
    let mut found: Vec<(String, String)> = std::fs::read_dir("/run/academy/networks")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix) && n.ends_with(".state"))
        .map(|n| {
            let text = std::fs::read_to_string(format!("/run/academy/networks/{n}"));
            let first = text.unwrap_or_default().lines().next().unwrap_or("").into();
            (n, first)
        })
        .collect();
    found.sort();
    found
}

/// Whether the node's loopback guard holds the lab's bridge.
pub fn guarded(node: &Node) -> bool {
    let out = nft::nft_in(
        Some(&node.ns),
        &["-j", "list", "set", "inet", "academy", "_localnet"],
    );
    out.code == 0 && out.stdout.contains(&format!("\"{}\"", node.lab.bridge))
}

/// The node's whole ruleset (every family: the MAC filter is in `bridge academy`).
pub fn ruleset(node: &Node) -> String {
    node.nft(&["list", "ruleset"]).stdout
}

/// The store's files (names and contents) that name a container.
pub fn store_files_of(lab: &Lab, cid: &str) -> Vec<String> {
    let dir = store_dir(lab);
    let mut found = Vec::new();
    for sub in ["", "holders", "runtime"] {
        for e in std::fs::read_dir(dir.join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            if name.contains(cid) || text.contains(cid) {
                found.push(format!("{sub}/{name}"));
            }
        }
    }
    found
}

/// The node's CNI bin folder holding `binary` as its academy, and the ipMasq network's
/// config with the portMappings capability: (the plugin's path, the config).
pub fn release_node(lab: &Lab, binary: &Path) -> (PathBuf, Value) {
    let bin_dir = lab.root.join("node-bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let academy = bin_dir.join("academy");
    put_binary(binary, &academy);
    let mut config = academy_entry(lab);
    config["cniVersion"] = json!("1.1.0");
    config["name"] = json!(lab.network);
    config["ipMasq"] = json!(true);
    (academy, config)
}

/// The state version records of the lab's network, their first lines.
pub fn recorded(lab: &Lab) -> Vec<String> {
    records(lab).into_iter().map(|(_, v)| v).collect()
}

#[test]
fn upgrade_from_the_previous_release_under_live_containers() {
    upgrade_under_live_containers(&Release::previous(), "upg");
}

#[test]
fn upgrade_from_the_last_release_without_a_state_version_under_live_containers() {
    upgrade_under_live_containers(&Release::last_unversioned(), "upg0");
}

/// `release` makes live attachments (a: a published port; both: ipMasq, the MAC
/// filter), then this build replaces it: the first CHECK brings the network up to this
/// state version when the release recorded another (or none), and passes; STATUS, the
/// published port, the masquerade, GC and DEL then work on what the old binary made.
fn upgrade_under_live_containers(release: &Release, tag: &str) {
    let old = release.binary();
    let version = |binary: &Path| run(binary.to_str().unwrap(), &["--version"], &[]).stdout;
    assert_ne!(
        version(&old),
        version(Path::new(plugin())),
        "the previous release and this build answer --version alike"
    );

    let lab = Lab::new(tag);
    let node = Node::new(&lab);
    let far = Far::new(&lab, &node);
    let (academy, mut config) = release_node(&lab, &old);
    config["macspoofchk"] = json!(true);
    let port = host_ports(&lab);
    let mut publishing = config.clone();
    publishing["runtimeConfig"] = json!({"portMappings": [mapping(port, None)]});
    let (a, b) = (lab.attachment("a"), lab.attachment("b"));
    let call = |verb: &str, who: &Attach, conf: &Value| {
        exec(&node, &academy, &lab.call_for(verb, who).config(conf))
    };
    let ra = call("ADD", &a, &publishing).expect_result("the old release's ADD of a");
    let rb = call("ADD", &b, &config).expect_result("the old release's ADD of b");
    let (veth_a, veth_b) = (result_host_veth(&ra), result_host_veth(&rb));
    assert!(guarded(&node), "the old release made no loopback guard");
    let current = state_version().to_string();
    let old_record = recorded(&lab);
    let from = match old_record.as_slice() {
        [] => "0".to_string(),
        [v] => v.clone(),
        more => panic!("more than one state version record: {more:?}"),
    };
    if old_record.is_empty() {
        // As a node the release before 0.4.0 left (issue 29): no loopback guard on the
        // bridge, which a ports-kind restore puts back.
        delete_guard_element(&node);
        assert!(!guarded(&node));
    }

    // The upgrade: the binary replaced, nothing restarted.
    put_binary(Path::new(plugin()), &academy);
    let check = |who: &Attach, result: &Value, conf: &Value| {
        let mut c = conf.clone();
        c["prevResult"] = result.clone();
        call("CHECK", who, &c)
    };
    let first = check(&a, &ra, &publishing);
    assert_eq!(first.code, 0, "CHECK at once after the upgrade:\n{first}");
    assert!(first.stdout.trim().is_empty(), "{first}");
    let lines: Vec<&str> = first.stderr.lines().collect();
    let want = format!(
        "academy: brought network {} up to date from state version {from} to {current}: put back ",
        lab.network
    );
    if old_record.is_empty() {
        let want = format!("{want}published ports: ");
        assert!(
            lines.len() == 1 && lines[0].starts_with(&want),
            "the first invocation's one line, {want:?}...:\n{first}"
        );
        eprintln!("upgrade: the first invocation said: {}", lines[0]);
    } else if from == current {
        assert_eq!(first.stderr, "", "nothing to bring up to date from {from}");
    } else {
        // Another state version: the restore runs, and says what it put back if anything.
        assert!(
            lines.is_empty() || (lines.len() == 1 && lines[0].starts_with(&want)),
            "the first invocation says nothing or {want:?}...:\n{first}"
        );
    }
    assert!(
        guarded(&node),
        "the loopback guard after the first invocation"
    );
    assert_eq!(recorded(&lab), [current], "the state version recorded");
    let status = exec(&node, &academy, &lab.call("STATUS").config(&config));
    status.expect_silent_success("STATUS after the upgrade");
    assert_eq!(status.stderr, "", "STATUS after the upgrade");
    for (who, result, conf) in [(&a, &ra, &publishing), (&b, &rb, &config)] {
        let again = check(who, result, conf);
        again.expect_silent_success("CHECK once up to date");
        assert_eq!(again.stderr, "", "CHECK once up to date");
    }

    // What the old release made still works: the published port from outside the node,
    // the masquerade out of it.
    let (got, peer) = exchange(&a.netns, "0.0.0.0", Some(&far.netns), &far.node_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", far.far_v4.as_str()),
        "the published port from outside the node"
    );
    let (got, peer) = peer_seen(&far.netns, &far.far_v4, 18443, &b.netns);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", far.node_v4.as_str()),
        "b's masqueraded connection out of the node"
    );

    // GC listing both keeps both.
    let state = || (ruleset(&node), node.links(), lab.reservations());
    let before = state();
    let gc = |valid: &[(&str, &str)]| {
        let out = exec(&node, &academy, &gc_call(&lab, config.clone(), valid));
        out.expect_silent_success("GC");
        assert_eq!(out.stderr, "", "GC");
    };
    gc(&[(&a.cid, &a.ifname), (&b.cid, &b.ifname)]);
    assert_eq!(
        state(),
        before,
        "GC listing both live attachments changed something"
    );

    // DEL of an attachment the old release made removes all of it.
    let del = call("DEL", &a, &publishing);
    del.expect_silent_success("DEL of an old attachment");
    assert_eq!(del.stderr, "", "DEL of an old attachment");
    let rules = ruleset(&node);
    // Owner comments end in "<container id>:<ifname>" in every form academy has written.
    let (owner_a, owner_b) = (
        format!("{}:{}", a.cid, a.ifname),
        format!("{}:{}", b.cid, b.ifname),
    );
    for left in [&owner_a, &veth_a] {
        assert!(
            !rules.contains(left.as_str()),
            "{left} left in nf_tables:\n{rules}"
        );
    }
    assert!(!node.links().contains(&veth_a), "{veth_a} left");
    assert_eq!(
        store_files_of(&lab, &a.cid),
        Vec::<String>::new(),
        "a's store files"
    );

    // GC listing b keeps it, and what it has.
    gc(&[(&b.cid, &b.ifname)]);
    assert!(node.links().contains(&veth_b), "GC took the live {veth_b}");
    assert!(
        !store_files_of(&lab, &b.cid).is_empty(),
        "GC freed b's address"
    );
    assert!(
        ruleset(&node).contains(&owner_b),
        "GC took b's nf_tables elements"
    );
    check(&b, &rb, &config).expect_silent_success("CHECK of b after GC");
    call("DEL", &b, &config).expect_silent_success("DEL of b");
    assert_eq!(store_files_of(&lab, &b.cid), Vec::<String>::new());
}

/// `academy install` of this build over the last unversioned release's brings the conf dir's
/// network up to date before any CNI call (a quiet node may see none for hours): its
/// report names the network and what it put back, the state version is recorded, and
/// the first CHECK then has nothing to repair.
#[test]
fn academy_install_brings_an_older_release_s_network_up_to_date() {
    let old = Release::last_unversioned().binary();
    let lab = Lab::new("upgi");
    let node = Node::new(&lab);
    let (academy, config) = release_node(&lab, &old);
    let bin_dir = academy.parent().unwrap();
    crate::portmap::write_list(&lab, vec![config.clone()]);
    let port = host_ports(&lab);
    let mut publishing = config.clone();
    publishing["runtimeConfig"] = json!({"portMappings": [mapping(port, None)]});
    let a = lab.attachment("a");
    let call =
        |verb: &str, conf: &Value| exec(&node, &academy, &lab.call_for(verb, &a).config(conf));
    let ra = call("ADD", &publishing).expect_result("the old release's ADD");
    delete_guard_element(&node);
    assert!(!guarded(&node));

    let out = node.academy(&[
        "install",
        "--bin-dir",
        bin_dir.to_str().unwrap(),
        "--conf-dir",
        lab.conf_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 0, "{out}");
    let want = format!(
        "brought network {} up to date from state version 0 to {}: put back published ports: ",
        lab.network,
        state_version()
    );
    assert!(
        out.stdout.lines().any(|l| l.starts_with(&want)),
        "install's report names the network, {want:?}...:\n{out}"
    );
    assert!(guarded(&node), "the loopback guard after the install");
    assert_eq!(
        recorded(&lab),
        [state_version().to_string()],
        "the state version recorded by the install"
    );
    assert_eq!(
        run(academy.to_str().unwrap(), &["--version"], &[]).stdout,
        run(plugin(), &["--version"], &[]).stdout,
        "the installed binary is this build"
    );

    let mut check = publishing.clone();
    check["prevResult"] = ra;
    let first = call("CHECK", &check);
    first.expect_silent_success("the first CHECK after the install");
    assert_eq!(first.stderr, "", "nothing left to bring up to date");
    call("DEL", &publishing).expect_silent_success("DEL");
    assert!(
        !ruleset(&node).contains(&format!("{}:{}", a.cid, a.ifname)),
        "DEL left a's elements"
    );
}
