//! Shared by the root-only integration tests (each test file does `mod common;`).
//!
//! Every test builds a [`Lab`]: its own netns, bridge, network name, subnet, data dir,
//! NETCONFPATH and CNI_PATH. The lab is a guard: its Drop removes all of that even when
//! the test panics, so a failed test never leaves a netns, a veth, a bridge, a store or a
//! cnitool cache file behind, and tests of all files can run in parallel.
//!
//! Subnets are 10.A.N.0/24. N is fixed per test and must be distinct across ALL test
//! files (two labs with the same N in one process would put the same gateway on two
//! bridges). A is picked per process (from the pid, skipping any 10.A.N.0/24 the host
//! already uses), so two concurrent `cargo test` runs on the machine do not collide.
//!
//! | N  | file           | test                                          |
//! |----|----------------|-----------------------------------------------|
//! | 11 | gate.rs        | seed_002_gate_through_cnitool                 |
//! | 12 | gate.rs        | fail_on_purpose_result_without_ips            |
//! | 13 | gate.rs        | fail_on_purpose_eth0_down_is_caught_by_check  |
//! | 14 | gate.rs        | del_after_the_netns_was_deleted               |
//! | 15 | gate.rs        | ifname_net1                                   |
//! | 16 | gate.rs        | result_in_every_supported_version             |
//! | 17 | gate.rs        | lab_guard_cleans_up_after_a_panic             |
//! | 41 | protocol.rs    | env_errors_name_the_variable                  |
//! | 42 | protocol.rs    | stdin_and_config_errors_name_the_field        |
//! | 43 | protocol.rs    | version_and_prev_result_errors                |
//! | 44 | protocol.rs    | unusable_netns_paths                          |
//! | 45 | protocol.rs    | netns_of_another_kind_is_refused_as_unusable  |
//! | 46 | protocol.rs    | ifname_already_in_the_netns                   |
//! | 47 | protocol.rs    | bridge_name_taken_by_a_dummy_link             |
//! | 48 | protocol.rs    | address_exhausted_and_address_taken           |
//! | 49 | protocol.rs    | del_is_silent_when_there_is_nothing_to_delete |
//! | 50 | protocol.rs    | del_and_check_with_prev_result_on_stdin       |
//! | 51 | protocol.rs    | foreign_link_on_the_host_veth_name_is_kept    |
//! | 61 | netns_entry.rs | add_enters_the_netns_at_most_twice_off_main   |
//! | 62 | netns_entry.rs | del_never_enters_the_netns                    |
//! | 170 | leaks.rs      | a_full_pool_heals_itself_from_old_leaks_only  |
//! | 171 | leaks.rs      | list_shows_every_reservation_with_its_state_in_text_and_json |
//! | 172 | leaks.rs      | reclaim_by_age_frees_old_leaks_only_and_dry_run_changes_nothing |
//! | 173 | leaks.rs      | reclaim_by_keep_list_frees_unlisted_attachments_and_their_veths |
//! | 174 | leaks.rs      | bad_operator_input_is_refused_and_changes_nothing |
//! | 175 | leaks.rs      | an_add_reusing_its_old_reservation_is_never_reclaimed_under_it |
//! | 176 | leaks.rs      | a_dual_stack_leak_is_listed_and_reclaimed_whole |
//!
//! Network safety: tests only ping addresses of their own lab's subnet, from their own
//! netns, through their own bridge.

#![allow(dead_code)] // each test file uses a different subset of the helpers

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};

pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
const RESULTS_DIR: &str = "/var/lib/cni/results";
const DEFAULT_STORE: &str = "/var/lib/cni/academy";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The plugin binary cargo built for these tests.
pub fn plugin() -> &'static str {
    env!("CARGO_BIN_EXE_academy")
}

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

/// What a process did: exit code (negative: killed by that signal), stdout, stderr.
#[derive(Debug, Clone)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn from(o: std::process::Output) -> Out {
        use std::os::unix::process::ExitStatusExt;
        Out {
            code: o
                .status
                .code()
                .unwrap_or_else(|| -o.status.signal().unwrap_or(0)),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// stdout as JSON; panics with the whole output when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self}"))
    }

    /// Exit 0, nothing on stdout (DEL, CHECK), no panic.
    pub fn expect_silent_success(&self, what: &str) {
        assert_eq!(self.code, 0, "{what} failed:\n{self}");
        assert!(
            self.stdout.trim().is_empty(),
            "{what} printed on stdout:\n{self}"
        );
        assert_no_panic(self, what);
    }

    /// Exit 0 and a JSON object on stdout (ADD).
    pub fn expect_result(&self, what: &str) -> Value {
        assert_eq!(self.code, 0, "{what} failed:\n{self}");
        assert_no_panic(self, what);
        let v = self.json();
        assert!(v.is_object(), "{what}: result is not an object:\n{self}");
        v
    }

    /// stdout and stderr together, for matching cnitool's messages.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  exit: {}\n  stdout: {}\n  stderr: {}",
            self.code,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

pub fn assert_no_panic(out: &Out, what: &str) {
    assert!(
        !out.stderr.contains("panicked") && out.code != 101,
        "{what}: the plugin panicked:\n{out}"
    );
}

/// Runs a command with a clean environment (only PATH) plus `env`.
pub fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> Out {
    let o = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    Out::from(o)
}

/// Like [`run`] but never panics (for Drop and best-effort cleanup).
fn run_quiet(program: &str, args: &[&str]) -> Option<Out> {
    Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .stdin(Stdio::null())
        .output()
        .ok()
        .map(Out::from)
}

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) -> String {
    let out = run("ip", args, &[]);
    assert_eq!(out.code, 0, "ip {} failed:\n{out}", args.join(" "));
    out.stdout
}

/// `ip -j ARGS` as JSON; an empty list when ip prints nothing or the object is missing.
pub fn ip_json(args: &[&str]) -> Value {
    let mut full = vec!["-j"];
    full.extend_from_slice(args);
    let out = run("ip", &full, &[]);
    if out.code != 0 || out.stdout.trim().is_empty() {
        return json!([]);
    }
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|_| json!([]))
}

/// Every host link with its details (`ip -d -j link show`).
pub fn host_links() -> Vec<Value> {
    match ip_json(&["-d", "link", "show"]) {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

/// Names of the links in a netns.
pub fn netns_link_names(netns: &str) -> Vec<String> {
    let v = ip_json(&["-n", netns, "link", "show"]);
    let mut names: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["ifname"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Creates a link `name` that is not a bridge and not academy's, in `netns` or on the
/// host: a dummy, else an ifb, else a veth (peer "<peer>"), whichever this kernel has.
pub fn add_plain_link(netns: Option<&str>, name: &str, peer: &str) {
    let mut base: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        base.extend(["-n", ns]);
    }
    base.extend(["link", "add", name, "type"]);
    let mut last = None;
    for kind in [&["dummy"][..], &["ifb"], &["veth", "peer", "name", peer]] {
        let args: Vec<&str> = base.iter().chain(kind).copied().collect();
        let out = run("ip", &args, &[]);
        if out.code == 0 {
            return;
        }
        last = Some(out);
    }
    panic!("cannot create a plain link {name}:\n{}", last.unwrap());
}

pub fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// `ping -c COUNT -W 1 ADDR` from inside a netns; true when it got replies.
pub fn ping_from(netns: &str, addr: &str, count: u32) -> bool {
    let count = count.to_string();
    let out = run(
        "ip",
        &[
            "netns", "exec", netns, "ping", "-n", "-q", "-c", &count, "-W", "1", addr,
        ],
        &[],
    );
    out.code == 0
}

/// The container id cnitool gives a netns path: "cnitool-" + hex of the first 10 bytes
/// of sha512(path), path as given (no symlink resolution).
pub fn cnitool_container_id(netns_path: &str) -> String {
    let mut child = Command::new("sha512sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha512sum");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(netns_path.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    format!("cnitool-{}", &hex[..20])
}

// ---------------------------------------------------------------------------------------
// Direct plugin invocation, as a runtime does it
// ---------------------------------------------------------------------------------------

/// One plugin invocation: CNI_* variables (nothing else from the test's environment)
/// and the bytes given on stdin.
#[derive(Debug, Clone)]
pub struct Call {
    pub vars: BTreeMap<String, String>,
    pub stdin: Vec<u8>,
}

impl Call {
    /// A call with no variables at all and empty stdin.
    pub fn bare() -> Call {
        Call {
            vars: BTreeMap::new(),
            stdin: Vec::new(),
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Call {
        self.vars.insert(key.into(), value.into());
        self
    }

    pub fn without(mut self, key: &str) -> Call {
        self.vars.remove(key);
        self
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Call {
        self.stdin = bytes.into();
        self
    }

    pub fn config(self, config: &Value) -> Call {
        self.stdin(config.to_string())
    }

    pub fn run(&self) -> Out {
        self.spawn(plugin(), &[])
    }

    /// The same call under `strace -f -e trace=setns,execve -o FILE`.
    pub fn run_traced(&self, trace_file: &Path) -> Out {
        let file = trace_file.to_str().unwrap();
        let args = ["-f", "-e", "trace=setns,execve", "-o", file, "--", plugin()];
        self.spawn("strace", &args)
    }

    /// Runs any program (the plugin, a reference plugin, strace) with this call's
    /// environment and stdin.
    pub fn spawn(&self, program: &str, args: &[&str]) -> Out {
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .envs(&self.vars)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let mut stdin = child.stdin.take().unwrap();
        let bytes = self.stdin.clone();
        // A plugin that exits without reading stdin must not deadlock the test.
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
        let out = child.wait_with_output().unwrap();
        let _ = writer.join();
        Out::from(out)
    }
}

/// The CNI error object contract: exit 1, stdout exactly one JSON object with exactly
/// cniVersion/code/msg/details, the expected code, a non-empty msg containing every
/// needle, and no panic. Err carries every broken rule.
pub fn check_cni_error(out: &Out, code: u64, needles: &[&str]) -> Result<Value, String> {
    let mut problems = Vec::new();
    if out.code != 1 {
        problems.push(format!("exit code {} instead of 1", out.code));
    }
    if out.stderr.contains("panicked") {
        problems.push("panicked".into());
    }
    let values: Vec<Result<Value, _>> = serde_json::Deserializer::from_str(&out.stdout)
        .into_iter::<Value>()
        .collect();
    let obj = match values.as_slice() {
        [Ok(v @ Value::Object(_))] => v.clone(),
        _ => {
            problems.push("stdout is not exactly one JSON object".into());
            return Err(problems.join("; "));
        }
    };
    let keys: BTreeSet<&str> = obj
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = ["cniVersion", "code", "msg", "details"].into();
    if keys != want {
        problems.push(format!("keys {keys:?} instead of {want:?}"));
    }
    match obj["cniVersion"].as_str() {
        Some(v) if SUPPORTED.contains(&v) => {}
        other => problems.push(format!("cniVersion {other:?} is not a supported version")),
    }
    if obj["code"].as_u64() != Some(code) {
        problems.push(format!("code {} instead of {code}", obj["code"]));
    }
    if !obj["details"].is_string() {
        problems.push("details is not a string".into());
    }
    match obj["msg"].as_str() {
        Some(m) if !m.trim().is_empty() => {
            for n in needles {
                if !m.contains(n) {
                    problems.push(format!("msg does not mention {n:?}"));
                }
            }
        }
        _ => problems.push("msg is missing or empty".into()),
    }
    if problems.is_empty() {
        Ok(obj)
    } else {
        Err(problems.join("; "))
    }
}

pub fn assert_cni_error(out: &Out, code: u64, needles: &[&str]) -> Value {
    check_cni_error(out, code, needles).unwrap_or_else(|p| panic!("{p}:\n{out}"))
}

// ---------------------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------------------

/// The second octet of every lab subnet in this process (see the module comment).
fn second_octet() -> u8 {
    static OCTET: OnceLock<u8> = OnceLock::new();
    *OCTET.get_or_init(|| {
        let used = format!(
            "{}\n{}",
            run_quiet("ip", &["-4", "-o", "addr"])
                .map(|o| o.stdout)
                .unwrap_or_default(),
            run_quiet("ip", &["-4", "route", "show", "table", "all"])
                .map(|o| o.stdout)
                .unwrap_or_default()
        );
        let start = 201 + (std::process::id() % 30) as u8;
        (0..30)
            .map(|i| 201 + (start - 201 + i) % 30)
            .find(|a| !used.contains(&format!("10.{a}.")))
            .unwrap_or(start)
    })
}

/// Identifies one attachment: container id, ifname and the netns (by name).
#[derive(Debug, Clone)]
pub struct Attach {
    pub cid: String,
    pub ifname: String,
    pub netns: String,
}

impl Attach {
    pub fn netns_path(&self) -> String {
        netns_path(&self.netns)
    }
}

/// The path runtimes and cnitool use for a named netns.
pub fn netns_path(name: &str) -> String {
    format!("/var/run/netns/{name}")
}

pub struct Lab {
    pub tag: String,
    /// The CNI network name, unique per test and process.
    pub network: String,
    /// The lab's main netns (name); more can be made with [`Lab::add_netns`].
    pub netns: String,
    pub bridge: String,
    /// Container id for direct invocations.
    pub cid: String,
    /// "10.A.N": the lab's /24 without its last octet.
    pub prefix: String,
    pub root: PathBuf,
    pub data_dir: PathBuf,
    /// NETCONFPATH for cnitool.
    pub conf_dir: PathBuf,
    /// CNI_PATH: a symlink "academy" to the built plugin, plus any wrapper a test writes.
    pub bin_dir: PathBuf,
    extra_netns: Mutex<Vec<String>>,
}

impl Lab {
    /// A lab named `tag` (short, unique across all test files) on 10.A.`n`.0/24, with its
    /// netns created and a cnitool conflist for cniVersion 1.0.0 written.
    pub fn new(tag: &str, n: u8) -> Lab {
        let pid = std::process::id();
        let root = std::env::temp_dir().join(format!("academy-it-{tag}-{pid}"));
        let lab = Lab {
            tag: tag.into(),
            network: format!("t-{tag}-{pid}"),
            netns: format!("ac-{tag}-{pid}"),
            bridge: format!("acb{n}-{}", pid % 10000),
            cid: format!("{tag}-{pid}"),
            prefix: format!("10.{}.{n}", second_octet()),
            data_dir: root.join("data"),
            conf_dir: root.join("net.d"),
            bin_dir: root.join("bin"),
            root,
            extra_netns: Mutex::new(Vec::new()),
        };
        assert!(
            lab.bridge.len() <= 15,
            "bridge name {} too long",
            lab.bridge
        );
        // Leftovers of a killed earlier run with the same pid would only confuse us.
        lab.cleanup();
        for d in [&lab.data_dir, &lab.conf_dir, &lab.bin_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(plugin(), lab.bin_dir.join("academy")).unwrap();
        ip(&["netns", "add", &lab.netns]);
        lab.write_conflist("1.0.0", "academy", json!({}));
        lab
    }

    pub fn netns_path(&self) -> String {
        netns_path(&self.netns)
    }

    pub fn subnet(&self) -> String {
        format!("{}.0/24", self.prefix)
    }

    pub fn gateway(&self) -> String {
        self.ip(1)
    }

    pub fn ip(&self, host: u8) -> String {
        format!("{}.{host}", self.prefix)
    }

    /// Another netns owned (and deleted) by this lab: "ac-<tag>-<pid>-<suffix>".
    pub fn add_netns(&self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.netns);
        ip(&["netns", "add", &name]);
        self.extra_netns.lock().unwrap().push(name.clone());
        name
    }

    /// The default attachment of direct invocations: the lab's cid, eth0, its netns.
    pub fn attach(&self) -> Attach {
        Attach {
            cid: self.cid.clone(),
            ifname: "eth0".into(),
            netns: self.netns.clone(),
        }
    }

    /// The attachment cnitool makes in a netns for an ifname.
    pub fn cnitool_attach(&self, netns: &str, ifname: &str) -> Attach {
        Attach {
            cid: cnitool_container_id(&netns_path(netns)),
            ifname: ifname.into(),
            netns: netns.into(),
        }
    }

    /// The flat ("seed") network config, always with the lab's own dataDir.
    pub fn config(&self, version: &str) -> Value {
        json!({
            "cniVersion": version,
            "name": self.network,
            "type": "academy",
            "bridge": self.bridge,
            "subnet": self.subnet(),
            "gateway": self.gateway(),
            "dataDir": self.data_dir.to_str().unwrap(),
        })
    }

    /// The lab's config with `key` set to `value` (JSON text).
    pub fn config_with(&self, version: &str, key: &str, value: Value) -> Value {
        let mut c = self.config(version);
        c[key] = value;
        c
    }

    /// The lab's config without `key`.
    pub fn config_without(&self, version: &str, key: &str) -> Value {
        let mut c = self.config(version);
        c.as_object_mut().unwrap().remove(key);
        c
    }

    /// (Re)writes the lab's only conflist: one plugin of `plugin_type` with the lab's
    /// bridge/subnet/gateway/dataDir, plus the fields of `extra`.
    pub fn write_conflist(&self, version: &str, plugin_type: &str, extra: Value) {
        let mut plugin = json!({
            "type": plugin_type,
            "bridge": self.bridge,
            "subnet": self.subnet(),
            "gateway": self.gateway(),
            "dataDir": self.data_dir.to_str().unwrap(),
        });
        for (k, v) in extra.as_object().unwrap() {
            plugin[k] = v.clone();
        }
        let list = json!({ "cniVersion": version, "name": self.network, "plugins": [plugin] });
        std::fs::write(self.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
    }

    /// Writes an executable shell script `name` into the lab's CNI_PATH.
    pub fn install_script(&self, name: &str, body: &str) {
        let path = self.bin_dir.join(name);
        let tmp = self.bin_dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    /// A direct invocation of `command` for the lab's default attachment with the lab's
    /// config in cniVersion 1.1.0 on stdin.
    pub fn call(&self, command: &str) -> Call {
        self.call_for(command, &self.attach())
    }

    pub fn call_for(&self, command: &str, a: &Attach) -> Call {
        Call::bare()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &a.cid)
            .env("CNI_NETNS", &a.netns_path())
            .env("CNI_IFNAME", &a.ifname)
            .env("CNI_PATH", self.bin_dir.to_str().unwrap())
            .config(&self.config("1.1.0"))
    }

    /// `cnitool VERB <network> /var/run/netns/<netns>` with the lab's CNI_PATH and
    /// NETCONFPATH, plus `env` (e.g. CNI_IFNAME).
    pub fn cnitool(&self, verb: &str, netns: &str, env: &[(&str, &str)]) -> Out {
        let path = netns_path(netns);
        let mut all = vec![
            ("CNI_PATH", self.bin_dir.to_str().unwrap()),
            ("NETCONFPATH", self.conf_dir.to_str().unwrap()),
        ];
        all.extend_from_slice(env);
        run(
            "/usr/local/bin/cnitool",
            &[verb, &self.network, &path],
            &all,
        )
    }

    /// cnitool's cached results for this lab's network.
    pub fn cached_results(&self) -> BTreeSet<String> {
        let prefix = format!("{}-", self.network);
        std::fs::read_dir(RESULTS_DIR)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect()
    }

    /// Host links that belong to this lab: the alias names its network, or the bridge
    /// is their master. Each as "name alias master kind".
    pub fn lab_links(&self) -> BTreeSet<String> {
        let alias_prefix = format!("academy:{}:", self.network);
        host_links()
            .iter()
            .filter(|l| {
                l["ifalias"]
                    .as_str()
                    .is_some_and(|a| a.starts_with(&alias_prefix))
                    || l["master"].as_str() == Some(self.bridge.as_str())
            })
            .map(|l| {
                format!(
                    "{} {} {} {}",
                    l["ifname"].as_str().unwrap_or("?"),
                    l["ifalias"].as_str().unwrap_or("-"),
                    l["master"].as_str().unwrap_or("-"),
                    l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
                )
            })
            .collect()
    }

    /// Host veths labelled as this lab's (alias "academy:<network>:...").
    pub fn lab_veths(&self) -> Vec<String> {
        let alias_prefix = format!("academy:{}:", self.network);
        host_links()
            .iter()
            .filter(|l| {
                l["ifalias"]
                    .as_str()
                    .is_some_and(|a| a.starts_with(&alias_prefix))
            })
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect()
    }

    /// The IPAM store's live entries: address files and holder index files. Empty when
    /// nothing is reserved (the hint file and empty folders are not reservations).
    pub fn reservations(&self) -> Vec<String> {
        let dir = self.data_dir.join(&self.network);
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<Ipv4Addr>().is_ok())
            .collect();
        found.extend(
            std::fs::read_dir(dir.join("holders"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| format!("holders/{}", e.file_name().to_string_lossy())),
        );
        found.sort();
        found
    }

    /// Everything a plugin run could change that belongs to this lab (see [`Snapshot`]).
    pub fn snapshot(&self) -> Snapshot {
        // Kind, up, IPv4 addresses: carrier and IPv6 link-local come and go on their own.
        let bridge = host_links()
            .into_iter()
            .find(|l| l["ifname"].as_str() == Some(self.bridge.as_str()))
            .map(|l| {
                let addrs = ip_json(&["-4", "addr", "show", "dev", &self.bridge]);
                let addrs: Vec<String> = addrs[0]["addr_info"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or("?"), a["prefixlen"]))
                    .collect();
                let up = l["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "UP"));
                format!(
                    "kind={} up={up} addrs={addrs:?}",
                    l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
                )
            });
        // The lab's netns and its extras ("<netns>-<suffix>"), nobody else's.
        let ns_prefix = format!("{}-", self.netns);
        let mut netns = BTreeMap::new();
        for entry in std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == self.netns || name.starts_with(&ns_prefix) {
                let state = format!(
                    "{}{}{}",
                    run("ip", &["-n", &name, "-br", "link"], &[]).stdout,
                    run("ip", &["-n", &name, "-4", "-br", "addr"], &[]).stdout,
                    run("ip", &["-n", &name, "route", "show", "table", "all"], &[]).stdout
                );
                netns.insert(name, state);
            }
        }
        let mut files = BTreeSet::new();
        walk(&self.data_dir, &self.data_dir, &mut files);
        Snapshot {
            bridge,
            links: self.lab_links(),
            netns,
            files,
            cached_results: self.cached_results(),
            default_store_exists: Path::new(DEFAULT_STORE).exists(),
        }
    }

    /// Deletes everything the lab may have made. Never panics.
    fn cleanup(&self) {
        let mut names = vec![self.netns.clone()];
        if let Ok(extra) = self.extra_netns.lock() {
            names.extend(extra.iter().cloned());
        }
        for n in &names {
            if netns_exists(n) {
                let _ = run_quiet("ip", &["netns", "del", n]);
            }
        }
        // Host veths survive a netns deletion when the container end was moved elsewhere,
        // and a deleted netns takes a moment to take its peers with it.
        let alias_prefix = format!("academy:{}:", self.network);
        let out = run_quiet("ip", &["-d", "-j", "link", "show"]).map(|o| o.stdout);
        let links: Vec<Value> = out
            .and_then(|s| serde_json::from_str(s.trim()).ok())
            .and_then(|v: Value| v.as_array().cloned())
            .unwrap_or_default();
        for l in &links {
            let ours = l["ifalias"]
                .as_str()
                .is_some_and(|a| a.starts_with(&alias_prefix))
                || l["master"].as_str() == Some(self.bridge.as_str());
            if let (true, Some(name)) = (ours, l["ifname"].as_str()) {
                let _ = run_quiet("ip", &["link", "del", name]);
            }
        }
        if links
            .iter()
            .any(|l| l["ifname"].as_str() == Some(self.bridge.as_str()))
        {
            let _ = run_quiet("ip", &["link", "del", &self.bridge]);
        }
        let _ = std::fs::remove_dir_all(&self.root);
        let prefix = format!("{}-", self.network);
        for entry in std::fs::read_dir(RESULTS_DIR)
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.cleanup();
    }
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        out.insert(
            p.strip_prefix(base)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned(),
        );
        if p.is_dir() && !p.is_symlink() {
            walk(base, &p, out);
        }
    }
}

/// What a failed invocation must leave exactly as it was. Scoped to the lab (its bridge,
/// the links labelled with its network or attached to its bridge, its netns and what is
/// inside them, its data dir, cnitool's cache for its network), because other tests
/// change the rest of the host concurrently; plus the default store's existence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub bridge: Option<String>,
    pub links: BTreeSet<String>,
    pub netns: BTreeMap<String, String>,
    pub files: BTreeSet<String>,
    pub cached_results: BTreeSet<String>,
    pub default_store_exists: bool,
}

impl Snapshot {
    /// The differences from `before`, one line each; empty when equal.
    pub fn diff(&self, before: &Snapshot) -> String {
        self.diff_with(before, false)
    }

    /// As [`Snapshot::diff`], but the store's housekeeping (the network folder, the
    /// holders/ folder, the last_reserved_ip.* hint) may appear: an ADD that fails after
    /// reserving (name in use, kernel refusal) releases its reservation but not those.
    /// Reservations themselves (address files, holder indexes) are still compared.
    pub fn diff_allowing_store_housekeeping(&self, before: &Snapshot) -> String {
        self.diff_with(before, true)
    }

    fn diff_with(&self, before: &Snapshot, allow_housekeeping: bool) -> String {
        let housekeeping = |f: &&String| {
            let last = f.rsplit('/').next().unwrap_or(f);
            !f.contains('/') || last == "holders" || last.starts_with("last_reserved_ip.")
        };
        let files = |s: &Snapshot| -> BTreeSet<String> {
            s.files
                .iter()
                .filter(|f| !(allow_housekeeping && housekeeping(f)))
                .cloned()
                .collect()
        };
        let (files_before, files_after) = (files(before), files(self));
        let mut d = String::new();
        if self.bridge != before.bridge {
            let _ = writeln!(d, "bridge: {:?} -> {:?}", before.bridge, self.bridge);
        }
        if self.links != before.links {
            let _ = writeln!(d, "links: {:?} -> {:?}", before.links, self.links);
        }
        if self.netns != before.netns {
            let _ = writeln!(d, "netns: {:?} -> {:?}", before.netns, self.netns);
        }
        if files_after != files_before {
            let _ = writeln!(d, "store files: {files_before:?} -> {files_after:?}");
        }
        if self.cached_results != before.cached_results {
            let _ = writeln!(
                d,
                "cnitool cache: {:?} -> {:?}",
                before.cached_results, self.cached_results
            );
        }
        if self.default_store_exists != before.default_store_exists {
            let _ = writeln!(d, "{DEFAULT_STORE} appeared or vanished");
        }
        d
    }
}

// ---------------------------------------------------------------------------------------
// Result validation: the JSON, then the kernel
// ---------------------------------------------------------------------------------------

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Checks an ADD result deeply against the lab and the kernel. `version` is the
/// cniVersion the result must be in; `address` the one it must report, if known.
/// Err lists every problem found (so a test can show a bad result being rejected).
pub fn check_result(
    lab: &Lab,
    result: &Value,
    a: &Attach,
    version: &str,
    address: Option<&str>,
) -> Result<(), Vec<String>> {
    let mut p: Vec<String> = Vec::new();
    let Some(obj) = result.as_object() else {
        return Err(vec![format!("result is not a JSON object: {result}")]);
    };
    for k in obj.keys() {
        if !["cniVersion", "interfaces", "ips", "routes", "dns"].contains(&k.as_str()) {
            p.push(format!("unexpected top-level key {k:?}"));
        }
    }
    if result["cniVersion"] != version {
        p.push(format!(
            "cniVersion is {} instead of {version:?}",
            result["cniVersion"]
        ));
    }
    let with_mtu = version == "1.1.0";
    let pre_1_0 = version.starts_with("0.");

    // interfaces: [bridge, host veth, container iface in the sandbox]
    let ifaces = result["interfaces"].as_array().cloned().unwrap_or_default();
    if ifaces.len() != 3 {
        p.push(format!(
            "interfaces has {} entries instead of 3: {}",
            ifaces.len(),
            result["interfaces"]
        ));
    }
    let iface = |i: usize| ifaces.get(i).cloned().unwrap_or(Value::Null);
    let (bridge, host, cont) = (iface(0), iface(1), iface(2));
    if bridge["name"] != lab.bridge.as_str() {
        p.push(format!(
            "interfaces[0].name is {} not {}",
            bridge["name"], lab.bridge
        ));
    }
    let host_name = host["name"].as_str().unwrap_or("").to_string();
    if !(host_name.len() == 15
        && host_name.starts_with("veth")
        && host_name[4..].chars().all(|c| c.is_ascii_hexdigit()))
    {
        p.push(format!(
            "interfaces[1].name {:?} is not veth + 11 hex digits",
            host_name
        ));
    }
    if cont["name"] != a.ifname.as_str() {
        p.push(format!(
            "interfaces[2].name is {} not {}",
            cont["name"], a.ifname
        ));
    }
    for (i, x) in [&bridge, &host].iter().enumerate() {
        if x.get("sandbox").is_some() {
            p.push(format!(
                "interfaces[{i}] is a host interface but has a sandbox"
            ));
        }
    }
    if cont["sandbox"] != a.netns_path().as_str() {
        p.push(format!(
            "interfaces[2].sandbox is {} not {}",
            cont["sandbox"],
            a.netns_path()
        ));
    }
    for (i, x) in ifaces.iter().enumerate() {
        if !x["mac"].as_str().is_some_and(is_mac) {
            p.push(format!("interfaces[{i}].mac {} is not a MAC", x["mac"]));
        }
        if with_mtu != x.get("mtu").is_some() {
            p.push(format!(
                "interfaces[{i}].mtu is {} in cniVersion {version}",
                if with_mtu { "missing" } else { "present" }
            ));
        }
    }

    // ips: non-empty, in the subnet, gateway, interface 2
    let ips = result["ips"].as_array().cloned().unwrap_or_default();
    if ips.is_empty() {
        p.push("ips is missing or empty: the runtime would get no pod IP".into());
    }
    let mut container_ip = None;
    for (i, e) in ips.iter().enumerate() {
        let addr = e["address"].as_str().unwrap_or("");
        let (ip_text, prefix) = addr.split_once('/').unwrap_or((addr, ""));
        match ip_text.parse::<Ipv4Addr>() {
            Ok(ipv4) => {
                let o = ipv4.octets();
                let in_subnet = ipv4.to_string().starts_with(&format!("{}.", lab.prefix));
                if !in_subnet || o[3] == 0 || o[3] == 1 || o[3] == 255 {
                    p.push(format!(
                        "ips[{i}].address {addr} is not a host address of {} other than the gateway",
                        lab.subnet()
                    ));
                }
                container_ip = Some(ipv4.to_string());
            }
            Err(_) => p.push(format!("ips[{i}].address {addr:?} is not an IPv4 address")),
        }
        if prefix != "24" {
            p.push(format!(
                "ips[{i}].address {addr:?} does not have the subnet's /24"
            ));
        }
        if let Some(want) = address {
            if ip_text != want {
                p.push(format!("ips[{i}].address is {addr}, expected {want}"));
            }
        }
        if e["gateway"] != lab.gateway().as_str() {
            p.push(format!(
                "ips[{i}].gateway is {} not {}",
                e["gateway"],
                lab.gateway()
            ));
        }
        if e["interface"] != 2 {
            p.push(format!("ips[{i}].interface is {} not 2", e["interface"]));
        }
        match (pre_1_0, e.get("version")) {
            (true, Some(v)) if v == "4" => {}
            (false, None) => {}
            (_, v) => p.push(format!(
                "ips[{i}].version is {v:?} in cniVersion {version} (\"4\" before 1.0.0, absent after)"
            )),
        }
    }
    let routes = result["routes"].as_array().cloned().unwrap_or_default();
    if !routes
        .iter()
        .any(|r| r["dst"] == "0.0.0.0/0" && r["gw"] == lab.gateway().as_str())
    {
        p.push(format!(
            "routes {} has no default route via {}",
            result["routes"],
            lab.gateway()
        ));
    }
    if !result["dns"].is_object() {
        p.push(format!("dns is {} instead of an object", result["dns"]));
    }

    // The kernel: the container iface, its address and route, inside the netns.
    let inside = ip_json(&["-n", &a.netns, "addr", "show", "dev", &a.ifname]);
    let link = &inside[0];
    if link.is_null() {
        p.push(format!("{} does not exist in netns {}", a.ifname, a.netns));
    } else {
        let up = link["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP"));
        if !up {
            p.push(format!(
                "{} in {} is not up: {}",
                a.ifname, a.netns, link["flags"]
            ));
        }
        if let (Some(k), Some(r)) = (link["address"].as_str(), cont["mac"].as_str()) {
            if !k.eq_ignore_ascii_case(r) {
                p.push(format!("{} has MAC {k} but the result says {r}", a.ifname));
            }
        }
        // Every address of the result must be on the iface (and one must be).
        for e in &ips {
            let addr = e["address"].as_str().unwrap_or("");
            let on = link["addr_info"].as_array().into_iter().flatten().any(|x| {
                format!("{}/{}", x["local"].as_str().unwrap_or(""), x["prefixlen"]) == addr
            });
            if !on {
                p.push(format!(
                    "address {addr} of the result is not on {} in {}: {}",
                    a.ifname, a.netns, link["addr_info"]
                ));
            }
        }
        if ips.is_empty() && link["addr_info"].as_array().is_none_or(|x| x.is_empty()) {
            p.push(format!("{} has no address at all", a.ifname));
        }
    }
    let routes_in = ip_json(&["-n", &a.netns, "route", "show", "default"]);
    if !routes_in
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["gateway"] == lab.gateway().as_str() && r["dev"] == a.ifname.as_str())
    {
        p.push(format!(
            "netns {} has no default route via {} dev {}: {routes_in}",
            a.netns,
            lab.gateway(),
            a.ifname
        ));
    }

    // The kernel: host veth on the bridge, labelled as this attachment's.
    let host_link = ip_json(&["-d", "link", "show", "dev", &host_name]);
    let h = &host_link[0];
    if host_name.is_empty() || h.is_null() {
        p.push(format!("host veth {host_name:?} does not exist"));
    } else {
        if h["master"] != lab.bridge.as_str() {
            p.push(format!(
                "host veth {host_name} has master {} not {}",
                h["master"], lab.bridge
            ));
        }
        let alias = format!("academy:{}:{}:{}", lab.network, a.cid, a.ifname);
        if h["ifalias"] != alias.as_str() {
            p.push(format!(
                "host veth {host_name} has alias {} not {alias}",
                h["ifalias"]
            ));
        }
        if h["linkinfo"]["info_kind"] != "veth" {
            p.push(format!("host link {host_name} is not a veth"));
        }
        if !h["flags"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "UP"))
        {
            p.push(format!("host veth {host_name} is not up"));
        }
        if let (Some(k), Some(r)) = (h["address"].as_str(), host["mac"].as_str()) {
            if !k.eq_ignore_ascii_case(r) {
                p.push(format!("host veth has MAC {k} but the result says {r}"));
            }
        }
    }
    let ports = ip_json(&["link", "show", "master", &lab.bridge]);
    if !ports
        .as_array()
        .into_iter()
        .flatten()
        .any(|l| l["ifname"] == host_name.as_str())
    {
        p.push(format!(
            "`ip link show master {}` does not list {host_name}",
            lab.bridge
        ));
    }
    let br = ip_json(&["-d", "addr", "show", "dev", &lab.bridge]);
    if br[0]["linkinfo"]["info_kind"] != "bridge" {
        p.push(format!("{} is not a bridge", lab.bridge));
    }
    if !br[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|x| x["local"] == lab.gateway().as_str() && x["prefixlen"] == 24)
    {
        p.push(format!(
            "bridge {} does not hold {}/24",
            lab.bridge,
            lab.gateway()
        ));
    }

    // The store: the address is reserved.
    if let Some(ip) = container_ip {
        if !lab.data_dir.join(&lab.network).join(&ip).exists() {
            p.push(format!("{ip} is not reserved in the store"));
        }
    }

    if p.is_empty() {
        Ok(())
    } else {
        Err(p)
    }
}

pub fn assert_result_valid(
    lab: &Lab,
    result: &Value,
    a: &Attach,
    version: &str,
    address: Option<&str>,
) {
    if let Err(problems) = check_result(lab, result, a, version, address) {
        panic!(
            "the ADD result is not valid:\n  - {}\nresult: {result:#}",
            problems.join("\n  - ")
        );
    }
}

/// After DEL of `a`: its netns holds no iface of that name, no veth of the lab is left,
/// and the store holds nothing.
pub fn assert_unwired(lab: &Lab, a: &Attach) {
    if netns_exists(&a.netns) {
        let names = netns_link_names(&a.netns);
        assert!(
            !names.contains(&a.ifname),
            "{} still exists in {} after DEL: {names:?}",
            a.ifname,
            a.netns
        );
    }
    assert_eq!(
        lab.lab_veths(),
        Vec::<String>::new(),
        "host veths left after DEL"
    );
    assert_eq!(
        lab.reservations(),
        Vec::<String>::new(),
        "store not empty after DEL"
    );
}
