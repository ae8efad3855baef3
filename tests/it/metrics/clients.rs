//! Clients that hold the metrics listener's connections (issue 36 item 3): idle ones,
//! reopened the moment they are closed, and ones trickling a request byte by byte; from
//! another address than the scraper's, and from the same one (a scraper behind the same
//! NAT as the hog). Every scrape beside them is answered 200 within a second, a real
//! Prometheus keeps `up` at 1, and a flood of connections grows neither the watch's
//! threads, descriptors nor memory while it keeps repairing.
//!
//! The node's loopback holds 127.0.0.0/8, so 127.0.0.2 is "another address" without a
//! link of its own; every connection stays inside the node netns.

use std::time::Duration;

use serde_json::Value;

use super::*;

/// A hog and, beside it, a scraper. argv: target, hog source addresses (comma-separated,
/// taken in turn), hog connections, seconds, mode (`idle`: connect and send nothing;
/// `trickle`: send a request head one byte every 100 ms, never finishing it), scraper
/// source address, scrapes (0: none, the hog alone until its time is up). Each hog
/// connection closed or answered by the server is reopened at once. Prints one
/// `scrape STATUS SECONDS` line per scrape and a `hog opened N closed M` line. The hog
/// runs in a process of its own, as a hog and Prometheus would: in one interpreter, the
/// scraper's request would wait for the hog's thread to give up the interpreter lock.
const HOG: &str = r#"
import os, selectors, signal, socket, sys, time
target, hog_src, hogs, seconds, mode, scrape_src, scrapes = sys.argv[1:8]
host, port = target.rsplit(":", 1)
port, hogs, scrapes = int(port), int(hogs), int(scrapes)
stop = [time.monotonic() + float(seconds)]
hog_srcs = hog_src.split(",")
HEAD = b"GET /metrics HTTP/1.1\r\nX-Slow: "

def connect(src):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(2)
    s.connect((host, port))
    return s

for _ in range(100):
    try:
        connect(scrape_src).close(); break
    except OSError: time.sleep(0.1)

sel = selectors.DefaultSelector()
count = {"opened": 0, "closed": 0}
sent = {}

def open_one():
    while time.monotonic() < stop[0]:
        try:
            s = connect(hog_srcs[count["opened"] % len(hog_srcs)])
        except OSError:
            time.sleep(0.01); continue
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        sent[s] = 0
        count["opened"] += 1
        return

def hog(ready):
    for _ in range(hogs): open_one()
    os.write(ready, b"r")
    tick = time.monotonic()
    while time.monotonic() < stop[0]:
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            sel.unregister(s); del sent[s]; s.close()
            count["closed"] += 1
            open_one()
        if mode == "trickle" and time.monotonic() - tick >= 0.1:
            tick = time.monotonic()
            for s in list(sent):
                byte = HEAD[sent[s]:sent[s] + 1] or b"a"
                try:
                    s.send(byte); sent[s] += 1
                except OSError: pass

ready_r, ready_w = os.pipe()
hog_pid = os.fork()
if hog_pid == 0:
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, 0))
    hog(ready_w)
    print("hog opened", count["opened"], "closed", count["closed"], flush=True)
    os._exit(0)
# Stopped (a Daemon's SIGTERM), the scraper stops its hog too.
signal.signal(signal.SIGTERM, lambda *_: os.kill(hog_pid, signal.SIGTERM))
os.read(ready_r, 1)
time.sleep(0.5)
for _ in range(scrapes):
    start = time.monotonic()
    try:
        s = connect(scrape_src)
        s.settimeout(5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
        status = out.split(b"\r\n")[0].decode() or "closed"
    except OSError as e:
        status = "error " + type(e).__name__
    print("scrape", status.replace(" ", "_"), round(time.monotonic() - start, 3), flush=True)
    time.sleep(0.2)
if scrapes > 0:
    os.kill(hog_pid, signal.SIGTERM)
os.waitpid(hog_pid, 0)
"#;

/// The watch of a one-network node, answering on METRICS.
fn watch(node: &Node, lab: &Lab) -> Daemon {
    network(lab);
    let conf_dir = lab.conf_dir.to_str().unwrap();
    Daemon::start(
        node,
        "academy watch",
        plugin(),
        &["watch", "--conf-dir", conf_dir, "--metrics", METRICS],
    )
}

/// Runs HOG with `scrapes` scrapes; each scrape's (status, seconds) and the hog's line.
fn scrapes_beside(
    node: &Node,
    hog_src: &str,
    hogs: usize,
    mode: &str,
    scrape_src: &str,
    scrapes: usize,
) -> (Vec<(String, f64)>, String) {
    let seconds = (scrapes as f64 * 0.5 + 30.0).to_string();
    let out = python_in(
        node,
        HOG,
        &[
            METRICS,
            hog_src,
            &hogs.to_string(),
            &seconds,
            mode,
            scrape_src,
            &scrapes.to_string(),
        ],
    );
    assert_eq!(out.code, 0, "{out}");
    let results = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("scrape "))
        .map(|l| {
            let (status, seconds) = l.rsplit_once(' ').unwrap();
            (status.replace('_', " "), seconds.parse().unwrap())
        })
        .collect::<Vec<_>>();
    let hog = out
        .stdout
        .lines()
        .find(|l| l.starts_with("hog "))
        .unwrap_or_else(|| panic!("no hog line in {out}"))
        .to_string();
    assert_eq!(results.len(), scrapes, "{out}");
    (results, hog)
}

/// Every scrape answered 200 within a second.
fn assert_all_answered(what: &str, results: &[(String, f64)], hog: &str) {
    println!("metrics beside {what}: {results:?}; {hog}");
    let late: Vec<_> = results
        .iter()
        .filter(|(status, seconds)| status != "HTTP/1.1 200 OK" || *seconds >= 1.0)
        .collect();
    assert!(
        late.is_empty(),
        "beside {what}, {} of {} scrapes were not answered 200 within 1 s: {late:?} ({hog})",
        late.len(),
        results.len()
    );
}

/// The case of the issue: 4 idle connections, each reopened when closed.
#[test]
fn four_idle_connections_do_not_keep_a_scrape_out() {
    let lab = Lab::new("metidle4");
    let node = Node::new(&lab);
    let _watch = watch(&node, &lab);
    let (results, hog) = scrapes_beside(&node, "127.0.0.2", 4, "idle", "127.0.0.1", 10);
    assert_all_answered("4 idle connections from another address", &results, &hog);
    let (results, hog) = scrapes_beside(&node, "127.0.0.1", 4, "idle", "127.0.0.1", 10);
    assert_all_answered("4 idle connections from the same address", &results, &hog);
}

/// 400 idle or trickling connections, from another address or the scraper's own.
#[test]
fn four_hundred_idle_or_trickling_connections_do_not_keep_a_scrape_out() {
    let lab = Lab::new("metidle400");
    let node = Node::new(&lab);
    let _watch = watch(&node, &lab);
    for (src, mode, what) in [
        (
            "127.0.0.2",
            "idle",
            "400 idle connections from another address",
        ),
        (
            "127.0.0.1",
            "idle",
            "400 idle connections from the same address",
        ),
        (
            "127.0.0.2",
            "trickle",
            "400 trickling connections from another address",
        ),
        (
            "127.0.0.1",
            "trickle",
            "400 trickling connections from the same address",
        ),
        // Two addresses fill the table: a newcomer takes the slot of the one holding most.
        (
            "127.0.0.2,127.0.0.3",
            "idle",
            "400 idle connections shared by two addresses",
        ),
    ] {
        let (results, hog) = scrapes_beside(&node, src, 400, mode, "127.0.0.1", 8);
        assert_all_answered(what, &results, &hog);
    }
}

/// Prometheus (from the hog's own address) sees the watch up at every scrape while 400
/// idle connections are held and reopened beside it.
#[test]
fn prometheus_keeps_up_beside_an_idle_client() {
    let lab = Lab::new("metidleprom");
    let node = Node::new(&lab);
    let _watch = watch(&node, &lab);
    let _prometheus = prometheus(&node, &lab);
    let up = "up{job=\"academy\"}";
    assert_eq!(wait_for_value(&node, up, |v| v == 1.0), Some(1.0));
    let _hog = Daemon::start(
        &node,
        "idle client",
        "python3",
        &[
            "-c",
            HOG,
            METRICS,
            "127.0.0.1",
            "400",
            "60",
            "idle",
            "127.0.0.1",
            "0",
        ],
    );
    // 20 scrapes (one a second) all made while the hog held its connections.
    std::thread::sleep(Duration::from_secs(22));
    let count = query(&node, &format!("count_over_time({up}[20s])"));
    let lowest = query(&node, &format!("min_over_time({up}[20s])"));
    println!(
        "metrics: Prometheus beside 400 idle connections: {count:?} scrapes, lowest up {lowest:?}"
    );
    assert!(
        count.is_some_and(|c| c >= 15.0),
        "scrapes in 20 s: {count:?}"
    );
    assert_eq!(lowest, Some(1.0), "up fell to 0 while the idle client ran");
}

/// The listener's connection table (MAX_CONNECTIONS in src/cli/metrics/listener.rs): what
/// a flood may hold open.
const TABLE: usize = 64;

/// One /proc/PID/status field's first number.
fn status_field(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Connects, and closes or holds, as fast as it can for argv[2] seconds, from argv[3].
const FLOOD: &str = r#"
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
stop = time.monotonic() + float(sys.argv[2])
held, n = [], 0
while time.monotonic() < stop:
    try:
        s = socket.socket(); s.bind((sys.argv[3], 0)); s.settimeout(1)
        s.connect((host, int(port)))
    except OSError:
        continue
    n += 1
    if n % 3 == 0:
        s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n"); s.close()
    elif n % 3 == 1:
        s.close()
    else:
        held.append(s)
        if len(held) > 500: held.pop(0).close()
print(n)
"#;

/// A flood of connections (closed at once, asking and leaving, held) grows neither the
/// watch's threads, descriptors nor memory beyond the listener's bounds, and the watch
/// still repairs a flush meanwhile.
#[test]
fn a_flood_of_connections_leaves_threads_descriptors_and_memory_bounded() {
    let lab = Lab::new("metflood");
    let node = Node::new(&lab);
    let config = network(&lab);
    node.call("ADD", &lab.attachment("c0"), &config)
        .expect_result("ADD");
    let conf_dir = lab.conf_dir.to_str().unwrap();
    let watch = Daemon::start(
        &node,
        "academy watch",
        plugin(),
        &["watch", "--conf-dir", conf_dir, "--metrics", METRICS],
    );
    let pid = watch.child.id();
    let url = format!("http://{METRICS}/metrics");
    assert!(
        wait_until(Duration::from_secs(10), || python_in(&node, GET, &[&url])
            .code
            == 0),
        "the watch does not answer on {METRICS}"
    );
    let (threads, fds, rss) = (
        status_field(pid, "Threads:"),
        descriptors(pid),
        status_field(pid, "VmRSS:"),
    );
    let missing = |node: &Node| -> Value {
        let out = node.academy(&["status", "--conf-dir", conf_dir, "--json"]);
        serde_json::from_str::<Value>(&out.stdout).unwrap()["networks"][0]["missing"].clone()
    };
    let mut most = (threads, fds, rss);
    let (connections, repaired) = std::thread::scope(|scope| {
        let floods: Vec<_> = ["127.0.0.2", "127.0.0.3"]
            .into_iter()
            .map(|src| scope.spawn(|| python_in(&node, FLOOD, &[METRICS, "8", src])))
            .collect();
        let start = std::time::Instant::now();
        let mut repaired = None;
        while start.elapsed() < Duration::from_secs(7) {
            most.0 = most.0.max(status_field(pid, "Threads:"));
            most.1 = most.1.max(descriptors(pid));
            most.2 = most.2.max(status_field(pid, "VmRSS:"));
            if repaired.is_none() && start.elapsed() > Duration::from_secs(2) {
                node.nft(&["flush", "ruleset"]);
                repaired = Some(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if repaired.is_some() {
            repaired = Some(missing(&node) == serde_json::json!([]));
        }
        let connections: u64 = floods
            .into_iter()
            .map(|f| {
                let out = f.join().unwrap();
                assert_eq!(out.code, 0, "{out}");
                out.stdout.trim().parse::<u64>().unwrap()
            })
            .sum();
        (connections, repaired)
    });
    println!(
        "metrics flood of {connections} connections in 8 s: threads {threads} -> at most {}, descriptors {fds} -> at most {}, RSS {rss} -> at most {} KiB",
        most.0, most.1, most.2
    );
    assert_eq!(
        repaired,
        Some(true),
        "the flush was not repaired during the flood"
    );
    assert_eq!(most.0, threads, "the flood started threads");
    // The table, a newcomer making room, and what the repair of the flush opens meanwhile
    // (its netlink sockets, the store's files).
    assert!(
        most.1 <= fds + TABLE + 1 + 8,
        "descriptors {fds} -> {}",
        most.1
    );
    assert!(most.2 <= rss + 16 * 1024, "RSS {rss} -> {} KiB", most.2);
}
