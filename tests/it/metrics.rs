//! `academy watch --metrics` under a real Prometheus (Debian's), and `academy status`
//! (issue 32 items 2, 3 and 5). Everything runs in a private node netns (common/node.rs):
//! the watch listens on its 127.0.0.1, Prometheus scrapes it every second from the same
//! netns, and the test asks Prometheus' HTTP API (through python3 in the netns, so
//! nothing listens or connects outside it). Both daemons are the test's own processes,
//! stopped by their PID by a guard, Prometheus' data in a temp dir of the lab.
//!
//! The network's pool is 4 addresses, so 3 containers leave exactly one free.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::common::*;

mod clients;

const METRICS: &str = "127.0.0.1:9604";
const PROMETHEUS: &str = "127.0.0.1:9090";

/// A daemon of the test's own in the node, stopped (SIGTERM, then SIGKILL) by its PID.
pub(crate) struct Daemon {
    child: Child,
    what: &'static str,
}

impl Daemon {
    pub(crate) fn start(node: &Node, what: &'static str, program: &str, args: &[&str]) -> Daemon {
        // `ip netns exec` execs the program: the child's PID is the daemon's.
        let child = Command::new("ip")
            .args(["netns", "exec", &node.ns, program])
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {what} ({program}; make setup installs it): {e}")
            });
        Daemon { child, what }
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running() {
            let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.running() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.running() {
                eprintln!("{} did not stop on SIGTERM: killed", self.what);
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

/// python3 run in the node with `script` and its arguments; its stdout.
pub(crate) fn python_in(node: &Node, script: &str, args: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns, "python3", "-c", script];
    all.extend_from_slice(args);
    run("ip", &all, &[])
}

pub(crate) const GET: &str = r#"
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except urllib.error.HTTPError as e:
    print(e.code); sys.exit(3)
"#;

/// Prometheus' answer to an instant query: the value of its one series, if it has one.
fn query(node: &Node, promql: &str) -> Option<f64> {
    let url = format!(
        "http://{PROMETHEUS}/api/v1/query?query={}",
        promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    );
    let out = python_in(node, GET, &[&url]);
    if out.code != 0 {
        return None;
    }
    let v: Value = serde_json::from_str(out.stdout.trim()).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Waits until Prometheus reads `promql` as `want` (a minute at most: it scrapes each
/// second); the last value read.
fn wait_for_value(node: &Node, promql: &str, want: impl Fn(f64) -> bool) -> Option<f64> {
    let mut last = None;
    wait_until(Duration::from_secs(60), || {
        last = query(node, promql);
        last.is_some_and(&want)
    });
    last
}

/// Debian's Prometheus in the node, scraping the watch's metrics every second; stopped
/// (by PID) when dropped.
pub(crate) fn prometheus(node: &Node, lab: &Lab) -> Daemon {
    let prom = prometheus_config(lab);
    Daemon::start(
        node,
        "prometheus",
        "prometheus",
        &[
            &format!("--config.file={}", prom.join("prometheus.yml").display()),
            &format!("--storage.tsdb.path={}", prom.join("data").display()),
            &format!("--web.listen-address={PROMETHEUS}"),
        ],
    )
}

fn prometheus_config(lab: &Lab) -> std::path::PathBuf {
    let dir = lab.root.join("prometheus");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: academy\n    static_configs:\n      - targets: ['{METRICS}']\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    dir
}

fn network(lab: &Lab) -> Value {
    let keys = json!({"ipMasq": true, "rangeStart": lab.ip(2), "rangeEnd": lab.ip(5)});
    lab.write_conflist("1.1.0", "academy", keys.clone());
    let mut c = lab.config("1.1.0");
    for (k, v) in keys.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

#[test]
fn prometheus_scrapes_the_watch_used_free_and_repairs() {
    let lab = Lab::new("metrics");
    let node = Node::new(&lab);
    let config = network(&lab);
    for name in ["c0", "c1", "c2"] {
        node.call("ADD", &lab.attachment(name), &config)
            .expect_result("ADD");
    }
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let _watch = Daemon::start(
        &node,
        "academy watch",
        plugin(),
        &["watch", "--conf-dir", conf_dir, "--metrics", METRICS],
    );
    let exposition = |node: &Node| python_in(node, GET, &[&format!("http://{METRICS}/metrics")]);
    assert!(
        wait_until(Duration::from_secs(10), || exposition(&node).code == 0),
        "the watch does not answer on {METRICS}"
    );
    let _prometheus = prometheus(&node, &lab);
    let net = &lab.network;
    let used = format!("academy_pool_addresses{{network=\"{net}\",state=\"used\"}}");
    let free = format!("academy_pool_addresses{{network=\"{net}\",state=\"free\"}}");
    assert_eq!(
        wait_for_value(&node, &used, |v| v == 3.0),
        Some(3.0),
        "used, as Prometheus reads it"
    );
    assert_eq!(
        query(&node, &free),
        Some(1.0),
        "a pool of 4 with 3 used has 1 free"
    );
    let attachments = format!("academy_attachments{{network=\"{net}\"}}");
    assert_eq!(query(&node, &attachments), Some(3.0));
    assert_eq!(query(&node, "up{job=\"academy\"}"), Some(1.0));

    // Only the node's ruleset: nf_tables is per netns.
    let repairs = format!("sum(academy_repairs_total{{network=\"{net}\"}})");
    let before = wait_for_value(&node, &repairs, |_| true).expect("the repair counter is exposed");
    node.nft(&["flush", "ruleset"]);
    let after = wait_for_value(&node, &repairs, |v| v > before);
    assert!(
        after.is_some_and(|v| v > before),
        "repairs {before} -> {after:?} after nft flush ruleset"
    );
    let nat = format!("academy_repairs_total{{network=\"{net}\",kind=\"outbound_nat\"}}");
    assert!(
        query(&node, &nat).is_some_and(|v| v >= 1.0),
        "the flush took the outbound NAT"
    );
    let others = "academy_nftables_events_total{origin=\"other\"}";
    assert!(
        query(&node, others).is_some_and(|v| v >= 1.0),
        "the flush was an event by another program"
    );

    // The watch recorded it as the network's last repair, which status says.
    let status = node.academy(&["status", "--conf-dir", conf_dir, "--json"]);
    let status: Value = serde_json::from_str(&status.stdout).expect("status --json");
    let last = &status["networks"][0]["lastRepair"];
    assert!(
        last["kinds"]
            .as_array()
            .is_some_and(|k| k.contains(&json!("outbound_nat"))),
        "{status}"
    );

    // The same page parses with the reference client's parser.
    let parsed = python_in(
        &node,
        r#"
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
for f in text_string_to_metric_families(text):
    for s in f.samples:
        print(f.name, f.type, s.name, s.labels.get("network", ""), s.labels.get("state", ""), s.value)
"#,
        &[&format!("http://{METRICS}/metrics")],
    );
    assert_eq!(
        parsed.code, 0,
        "prometheus_client cannot parse the exposition:\n{parsed}"
    );
    for want in [
        format!("academy_pool_addresses gauge academy_pool_addresses {net} used 3.0"),
        format!("academy_pool_addresses gauge academy_pool_addresses {net} free 1.0"),
        "academy_build_info gauge academy_build_info   1.0".to_string(),
    ] {
        assert!(
            parsed.stdout.lines().any(|l| l == want),
            "no {want:?} in\n{}",
            parsed.stdout
        );
    }
    assert!(
        parsed
            .stdout
            .lines()
            .any(|l| l.starts_with("academy_repairs counter academy_repairs_total ")),
        "{}",
        parsed.stdout
    );
}

/// A client that connects and sends nothing does not keep a second scrape from its
/// answer; a request head over 8 KiB is refused; only GET /metrics is served.
#[test]
fn a_silent_client_does_not_hold_a_scrape_and_a_huge_request_is_refused() {
    let lab = Lab::new("metslow");
    let node = Node::new(&lab);
    network(&lab);
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let _watch = Daemon::start(
        &node,
        "academy watch",
        plugin(),
        &["watch", "--conf-dir", conf_dir, "--metrics", METRICS],
    );
    let script = r#"
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
def ask(data):
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b: return out.decode()
        out += b
for _ in range(100):
    try:
        socket.create_connection((host, int(port)), timeout=1).close(); break
    except OSError: time.sleep(0.1)
silent = socket.create_connection((host, int(port)), timeout=5)
start = time.monotonic()
ok = ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
print("scrape", ok.split("\r\n")[0], round(time.monotonic() - start, 3))
print("huge", ask(b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n").split("\r\n")[0])
print("path", ask(b"GET / HTTP/1.1\r\n\r\n").split("\r\n")[0])
print("method", ask(b"POST /metrics HTTP/1.1\r\n\r\n").split("\r\n")[0])
print("silent", silent.recv(100).decode().split("\r\n")[0])
"#;
    let out = python_in(&node, script, &[METRICS]);
    assert_eq!(out.code, 0, "{out}");
    let line = |key: &str| {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in {out}"))
            .to_string()
    };
    let scrape = line("scrape");
    let (status, seconds) = scrape.rsplit_once(' ').unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    let seconds: f64 = seconds.parse().unwrap();
    println!("metrics: a scrape beside a silent client took {seconds} s");
    assert!(
        seconds < 1.0,
        "the silent client held the scrape {seconds} s"
    );
    assert_eq!(line("huge"), "HTTP/1.1 431 Request Header Fields Too Large");
    assert_eq!(line("path"), "HTTP/1.1 404 Not Found");
    assert_eq!(line("method"), "HTTP/1.1 405 Method Not Allowed");
    assert_eq!(line("silent"), "HTTP/1.1 408 Request Timeout");
}

/// `academy status --json` says what `academy list` and the store say, on one node.
#[test]
fn status_agrees_with_list_and_the_store() {
    let lab = Lab::new("status");
    let node = Node::new(&lab);
    let config = network(&lab);
    for name in ["c0", "c1"] {
        node.call("ADD", &lab.attachment(name), &config)
            .expect_result("ADD");
    }
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let out = node.academy(&["status", "--conf-dir", conf_dir, "--json"]);
    assert_eq!(out.code, 0, "{out}");
    let status: Value = serde_json::from_str(&out.stdout).expect("status --json is JSON");
    let networks = status["networks"].as_array().unwrap();
    assert_eq!(networks.len(), 1, "{status}");
    let n = &networks[0];
    assert_eq!(n["name"], lab.network.as_str());
    assert_eq!(n["bridge"], lab.bridge.as_str());
    assert_eq!(
        n["ranges"],
        json!([{"subnet": lab.subnet(), "first": lab.ip(2), "last": lab.ip(5)}])
    );

    let conflist = lab.conf_dir.join("10-lab.conflist");
    let list = node.academy(&["list", conflist.to_str().unwrap(), "--json"]);
    assert_eq!(list.code, 0, "{list}");
    let list: Value = serde_json::from_str(&list.stdout).expect("list --json is JSON");
    let reservations = list["reservations"].as_array().unwrap();
    let state = |s: &str| reservations.iter().filter(|r| r["state"] == s).count();
    let store: Vec<String> = std::fs::read_dir(lab.data_dir.join(&lab.network))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name.parse::<std::net::IpAddr>().is_ok())
        .collect();
    assert_eq!(store.len(), 2, "{store:?}");
    assert_eq!(
        n["addresses"],
        json!({"size": 4, "used": store.len(), "free": 4 - store.len(), "leaked": state("leaked")}),
        "{status}"
    );
    assert_eq!(n["attachments"], state("wired"));
    assert_eq!(n["missing"], json!([]), "{status}");
    assert_eq!(n["unused"], false);

    // What a flush takes shows as missing at once; the text form has one row for it.
    node.nft(&["flush", "ruleset"]);
    let out = node.academy(&["status", "--conf-dir", conf_dir, "--json"]);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    let missing = status["networks"][0]["missing"].as_array().unwrap().clone();
    assert!(missing.contains(&json!("outbound_nat")), "{status}");
    let text = node.academy(&["status", "--conf-dir", conf_dir]);
    assert_eq!(text.code, 0, "{text}");
    let row = text
        .stdout
        .lines()
        .find(|l| l.starts_with(&lab.network))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("outbound_nat") && row.contains(&lab.bridge),
        "{row}"
    );
}

/// A network waiting for its release shows since when, in `academy status` and in the
/// metrics' gauge; once released, it is unused with no time.
#[test]
fn status_says_since_when_a_network_waits_for_its_release() {
    let lab = Lab::new("unusedsince");
    let node = Node::new(&lab);
    let keys = json!({"ipMasq": true, "releaseUnusedAfter": 600});
    lab.write_conflist("1.1.0", "academy", keys.clone());
    let mut config = lab.config("1.1.0");
    for (k, v) in keys.as_object().unwrap() {
        config[k] = v.clone();
    }
    let a = lab.attachment("c0");
    node.call("ADD", &a, &config).expect_result("ADD");
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    node.call("DEL", &a, &config).expect_silent_success("DEL");
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let status = |node: &Node| -> Value {
        let out = node.academy(&["status", "--conf-dir", conf_dir, "--json"]);
        assert_eq!(out.code, 0, "{out}");
        serde_json::from_str::<Value>(&out.stdout).unwrap()["networks"][0].clone()
    };
    let n = status(&node);
    assert_eq!(n["unused"], true, "{n}");
    let since = n["unusedSince"].as_u64().unwrap_or_else(|| panic!("{n}"));
    assert!(
        since + 1 >= before && since <= before + 60,
        "{since} against {before}"
    );
    let text = node.academy(&["status", "--conf-dir", conf_dir]);
    let row = text
        .stdout
        .lines()
        .find(|l| l.starts_with(&lab.network))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(" ago"), "{row}");

    // Released (GC with the record's time passed is what any invocation would do): no
    // record, no time.
    let mut quick = config.clone();
    quick["releaseUnusedAfter"] = json!(0);
    node.call("ADD", &a, &quick).expect_result("ADD again");
    node.call("DEL", &a, &quick)
        .expect_silent_success("DEL, releasing at once");
    let n = status(&node);
    assert_eq!(
        (n["unused"].clone(), n["unusedSince"].clone()),
        (json!(true), Value::Null),
        "{n}"
    );
}
