//! Black-box fault injection for tests/failure.rs and tests/ipam_lab.rs: the plugin binary
//! runs unchanged, and its system calls are tampered with from outside.
//!
//! - strace (`-e inject=SYSCALL:error=E|signal=SIGKILL|delay_enter=US:when=N`) for the
//!   store's file system calls, the kill points and the delays of the race tests.
//! - For netlink requests strace alone cannot reach every request: its `when=N` counter
//!   is kept per *thread* (each new thread starts from a fresh copy of the spec). ADD makes
//!   its first requests on the main thread and then, from a short-lived thread inside the
//!   netns, its own first, second, ... requests; `when=J` always hits the main thread's
//!   J-th first, so the netns thread's requests can never be the one that fails, and
//!   `when=N` for N above the main thread's count injects nothing at all. Those requests
//!   are reached with [`SHIM_SOURCE`], an LD_PRELOAD shim (compiled at test time with `cc`,
//!   which cargo needs as its linker anyway) that counts netlink sends across all threads
//!   and fails or kills the N-th. Neither needs any test-only code in the plugin.
//!
//! Trace parsing expects `strace -f -yy -o FILE`: every line starts with the tid, fds are
//! decoded with their paths (`4</data/net>`, `4<NETLINK:[ROUTE:123]>`).

#![allow(dead_code)] // each test file uses a different subset

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{plugin, Call, Lab, Out, Snapshot};

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// ---------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------

/// A started process whose stdin (the call's config) was written and closed.
pub struct Running {
    child: Child,
    what: String,
}

impl Running {
    /// Whether the process has not exited yet.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn finish(self) -> Out {
        let what = self.what;
        let o = self
            .child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        Out::from(o)
    }
}

/// Starts `program args` with the call's CNI_* variables (plus `env`) and its stdin.
pub fn start(call: &Call, program: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .envs(&call.vars)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    // A config is far below a pipe's capacity, so this cannot block on a child that has
    // not read yet; a child that exits without reading gives EPIPE, which is fine.
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(&call.stdin);
    drop(stdin);
    Running {
        child,
        what: format!("{program} {}", args.join(" ")),
    }
}

pub fn run_with(call: &Call, program: &str, args: &[&str], env: &[(&str, &str)]) -> Out {
    start(call, program, args, env).finish()
}

/// Absolute path of a program on PATH (the wrappers cnitool runs get its environment, but
/// an absolute path removes the doubt).
pub fn which(program: &str) -> String {
    PATH.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{program} is not installed (the tests need it)"))
        .to_string_lossy()
        .into_owned()
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------------------
// strace
// ---------------------------------------------------------------------------------------

/// What to do to the chosen call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Fail it with this errno (the call is not made).
    Fail(&'static str),
    /// SIGKILL the process on entering it (the call is not made).
    Kill,
    /// Hold the thread this many microseconds before the call, then make it.
    Delay(u64),
}

impl Action {
    fn strace(self) -> String {
        match self {
            Action::Fail(e) => format!("error={e}"),
            Action::Kill => "signal=SIGKILL".into(),
            Action::Delay(us) => format!("delay_enter={us}"),
        }
    }
}

/// The `when`-th call of `syscall` of each thread gets `action`.
#[derive(Debug, Clone)]
pub struct Inject {
    pub syscall: String,
    pub when: usize,
    pub action: Action,
}

/// strace's arguments to run the plugin tracing `trace_set` into `file`, with an
/// optional injection.
pub fn strace_args(file: &Path, trace_set: &str, inject: Option<&Inject>) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "-f".into(),
        "-yy".into(),
        "-o".into(),
        file.to_string_lossy().into_owned(),
        "-e".into(),
        format!("trace={trace_set}"),
    ];
    if let Some(i) = inject {
        a.push("-e".into());
        a.push(format!(
            "inject={}:{}:when={}",
            i.syscall,
            i.action.strace(),
            i.when
        ));
    }
    a.push("--".into());
    a.push(plugin().into());
    a
}

/// Runs the call under strace; returns the output and the trace's text.
pub fn run_strace(
    call: &Call,
    file: &Path,
    trace_set: &str,
    inject: Option<&Inject>,
) -> (Out, String) {
    let _ = std::fs::remove_file(file);
    let args = strace_args(file, trace_set, inject);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_with(call, "strace", &args, &[]);
    let text = std::fs::read_to_string(file).unwrap_or_default();
    (out, text)
}

pub fn start_strace(call: &Call, file: &Path, trace_set: &str, inject: Option<&Inject>) -> Running {
    let _ = std::fs::remove_file(file);
    let args = strace_args(file, trace_set, inject);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start(call, "strace", &args, &[])
}

/// One system call entry of a trace.
#[derive(Debug, Clone)]
pub struct Syscall {
    pub tid: u32,
    pub name: String,
    pub line: String,
}

impl Syscall {
    /// The call up to its first string argument (the path, or the data written), digits
    /// masked: what stays the same between runs (fds, pids, temp names and the
    /// round-robin address do not; what follows can be an output the kernel filled in).
    pub fn shape(&self) -> String {
        let start = self.line.find(&format!("{}(", self.name)).unwrap_or(0);
        let call = &self.line[start..];
        let end = call
            .find('"')
            .and_then(|q| call[q + 1..].find('"').map(|e| q + e + 2))
            .or_else(|| call.find(", "))
            .unwrap_or(call.len());
        let mut out = String::new();
        let mut in_digits = false;
        for c in call[..end].chars() {
            if c.is_ascii_digit() {
                if !in_digits {
                    out.push('#');
                }
                in_digits = true;
            } else {
                out.push(c);
                in_digits = false;
            }
        }
        out
    }

    pub fn injected(&self) -> bool {
        self.line.contains("(INJECTED)")
    }

    /// The netlink message type of a sendto, e.g. "RTM_NEWLINK". strace decodes it only
    /// for a socket it knows is NETLINK_ROUTE; elsewhere (the netns thread's socket) it
    /// prints the number, named here.
    pub fn nlmsg_type(&self) -> String {
        nlmsg_type_in(&self.line)
    }
}

/// The first `nlmsg_type=` of a text (strace's line, or the shim's report), named.
pub fn nlmsg_type_in(text: &str) -> String {
    let raw = text
        .split("nlmsg_type=")
        .nth(1)
        .and_then(|s| s.split([',', ' ', ')']).next())
        .unwrap_or("?");
    let name = match raw {
        "0x10" => "RTM_NEWLINK",
        "0x11" => "RTM_DELLINK",
        "0x12" => "RTM_GETLINK",
        "0x13" => "RTM_SETLINK",
        "0x14" => "RTM_NEWADDR",
        "0x15" => "RTM_DELADDR",
        "0x16" => "RTM_GETADDR",
        "0x18" => "RTM_NEWROUTE",
        "0x19" => "RTM_DELROUTE",
        "0x1a" => "RTM_GETROUTE",
        other => other,
    };
    name.to_string()
}

/// The syscall entries of an `strace -f -o` trace, in order. A call interrupted by
/// another thread's shows as "name(... <unfinished ...>" then "<... name resumed>": only
/// the first is an entry.
pub fn parse_trace(text: &str) -> Vec<Syscall> {
    let mut calls = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(2, char::is_whitespace);
        let Some(tid) = parts.next().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        let rest = parts.next().unwrap_or("").trim_start();
        let Some(paren) = rest.find('(') else {
            continue;
        };
        let name = &rest[..paren];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        calls.push(Syscall {
            tid,
            name: name.to_string(),
            line: line.to_string(),
        });
    }
    calls
}

/// 1-based rank of `calls[i]` among the calls of the same name in its thread: the
/// `when` that strace's per-thread counter needs to reach it.
pub fn rank_in_thread(calls: &[Syscall], i: usize) -> usize {
    let c = &calls[i];
    1 + calls[..i]
        .iter()
        .filter(|x| x.tid == c.tid && x.name == c.name)
        .count()
}

/// Whether `when = rank_in_thread(i)` injects into `calls[i]` and nothing before it: no
/// other thread reaches its own call of that rank earlier. `calls` must hold every call
/// of that name (trace them all).
pub fn strace_reaches(calls: &[Syscall], i: usize) -> bool {
    let rank = rank_in_thread(calls, i);
    !(0..i).any(|k| calls[k].name == calls[i].name && rank_in_thread(calls, k) == rank)
}

pub fn killed_by_strace(trace: &str) -> bool {
    trace.contains("+++ killed by SIGKILL +++")
}

// ---------------------------------------------------------------------------------------
// The LD_PRELOAD shim for netlink requests strace cannot reach
// ---------------------------------------------------------------------------------------

/// Counts sends on netlink sockets over all threads; the FAULT_SHIM_AT-th fails with EPERM
/// (or, with FAULT_SHIM_ACTION=SIGKILL, kills the process before it is sent) and says so
/// on stderr. FAULT_SHIM_COUNT=1 prints the total at exit.
pub const SHIM_SOURCE: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_long sends;

static void say(const char *text) { ssize_t r = write(2, text, strlen(text)); (void)r; }

static int fault(int fd, const void *buf, size_t len) {
    struct sockaddr_storage ss;
    socklen_t ss_len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &ss_len) != 0 || ss.ss_family != AF_NETLINK)
        return 0;
    long n = atomic_fetch_add(&sends, 1) + 1;
    const char *at = getenv("FAULT_SHIM_AT");
    if (at == NULL || atol(at) != n)
        return 0;
    const char *action = getenv("FAULT_SHIM_ACTION");
    int kill_it = action != NULL && strcmp(action, "SIGKILL") == 0;
    /* struct nlmsghdr: u32 length, then u16 type. */
    const unsigned char *b = buf;
    unsigned type = b != NULL && len >= 6 ? (unsigned)(b[4] | b[5] << 8) : 0;
    char msg[128];
    snprintf(msg, sizeof msg, "fault-shim: %s at netlink send #%ld (nlmsg_type=0x%x)\n",
             kill_it ? "SIGKILL" : "EPERM", n, type);
    say(msg);
    if (kill_it) kill(getpid(), SIGKILL);
    errno = EPERM;
    return 1;
}

ssize_t send(int fd, const void *buf, size_t len, int flags) {
    static ssize_t (*real)(int, const void *, size_t, int);
    if (real == NULL)
        real = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    if (fault(fd, buf, len)) return -1;
    return real(fd, buf, len, flags);
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags,
               const struct sockaddr *to, socklen_t tolen) {
    static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    if (real == NULL)
        real = (ssize_t (*)(int, const void *, size_t, int, const struct sockaddr *,
                            socklen_t))dlsym(RTLD_NEXT, "sendto");
    if (fault(fd, buf, len)) return -1;
    return real(fd, buf, len, flags, to, tolen);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    static ssize_t (*real)(int, const struct msghdr *, int);
    if (real == NULL)
        real = (ssize_t (*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    const void *head = msg->msg_iovlen > 0 ? msg->msg_iov[0].iov_base : NULL;
    size_t head_len = msg->msg_iovlen > 0 ? msg->msg_iov[0].iov_len : 0;
    if (fault(fd, head, head_len)) return -1;
    return real(fd, msg, flags);
}

__attribute__((destructor)) static void report(void) {
    if (getenv("FAULT_SHIM_COUNT") != NULL) {
        char msg[64];
        snprintf(msg, sizeof msg, "fault-shim: %ld netlink sends\n", atomic_load(&sends));
        say(msg);
    }
}
"#;

/// Compiles the shim into the lab's folder (removed with the lab).
pub fn build_shim(lab: &Lab) -> PathBuf {
    let src = lab.root.join("fault-shim.c");
    let so = lab.root.join("fault-shim.so");
    std::fs::write(&src, SHIM_SOURCE).unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("cannot run cc (cargo's linker): the netlink fault tests need it");
    assert!(
        out.status.success(),
        "cc failed to build the fault shim:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// Runs the plugin with the shim; `at` 0 injects nothing.
pub fn run_shim(call: &Call, shim: &Path, at: usize, kill: bool, count: bool) -> Out {
    let at = at.to_string();
    let shim = shim.to_string_lossy();
    let mut env = vec![
        ("LD_PRELOAD", shim.as_ref()),
        ("FAULT_SHIM_AT", at.as_str()),
    ];
    if kill {
        env.push(("FAULT_SHIM_ACTION", "SIGKILL"));
    }
    if count {
        env.push(("FAULT_SHIM_COUNT", "1"));
    }
    run_with(call, plugin(), &[], &env)
}

// ---------------------------------------------------------------------------------------
// The lab's state
// ---------------------------------------------------------------------------------------

/// `lab.config("1.1.0")` with `key: value` pairs set.
pub fn config_with(lab: &Lab, pairs: &[(&str, Value)]) -> Value {
    let mut c = lab.config("1.1.0");
    for (k, v) in pairs {
        c[*k] = v.clone();
    }
    c
}

/// GC as a CNI 1.1 runtime sends it: no attachment variables, the valid list in the config.
pub fn gc_call(lab: &Lab, config: Value, valid: &[(&str, &str)]) -> Call {
    let list: Vec<Value> = valid
        .iter()
        .map(|(cid, ifname)| json!({"containerID": cid, "ifname": ifname}))
        .collect();
    let mut config = config;
    config["cni.dev/valid-attachments"] = Value::Array(list);
    Call::bare()
        .env("CNI_COMMAND", "GC")
        .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
        .config(&config)
}

pub fn gc(lab: &Lab, valid: &[(&str, &str)]) -> Out {
    gc_call(lab, lab.config("1.1.0"), valid).run()
}

pub fn store_dir(lab: &Lab) -> PathBuf {
    lab.data_dir.join(&lab.network)
}

/// Leftovers of an interrupted write (`.tmp.*`, in the store or holders/): not
/// reservations; GC sweeps them once older than 60 s.
pub fn tmp_files(lab: &Lab) -> Vec<String> {
    let dir = store_dir(lab);
    let mut found = Vec::new();
    for sub in ["", "holders"] {
        for e in std::fs::read_dir(dir.join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp.") {
                found.push(if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                });
            }
        }
    }
    found.sort();
    found
}

/// Reservations and holder indexes, without the `.tmp.*` leftovers.
pub fn live_reservations(lab: &Lab) -> Vec<String> {
    lab.reservations()
        .into_iter()
        .filter(|r| !r.contains("/.tmp.") && !r.starts_with(".tmp."))
        .collect()
}

/// The address files alone.
pub fn address_files(lab: &Lab) -> Vec<String> {
    lab.reservations()
        .into_iter()
        .filter(|r| !r.contains('/'))
        .collect()
}

/// Who holds `addr` in the store ("cid\r\nifname"), if anyone.
pub fn holder_of(lab: &Lab, addr: &str) -> Option<String> {
    std::fs::read_to_string(store_dir(lab).join(addr)).ok()
}

/// The lab's snapshot without what the kernel adds on its own after an interface comes
/// up: IPv6 link-local addresses and their routes appear in a netns some time after an ADD
/// (`fe80::`, `ff00::/8`), so two snapshots of a live container would differ by them.
pub fn settled_snapshot(lab: &Lab) -> Snapshot {
    let mut s = lab.snapshot();
    for state in s.netns.values_mut() {
        *state = state
            .lines()
            .filter(|l| !l.contains("fe80") && !l.contains("ff00::"))
            .map(|l| format!("{l}\n"))
            .collect();
    }
    s
}

/// [`settled_snapshot`] without `.tmp.*` leftovers, for comparing after a kill.
pub fn snapshot_without_tmp(lab: &Lab) -> Snapshot {
    let mut s = settled_snapshot(lab);
    s.files.retain(|f| !f.contains("/.tmp."));
    s
}

/// The container address an ADD result reports (without the prefix).
pub fn result_address(result: &Value) -> String {
    result["ips"][0]["address"]
        .as_str()
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("")
        .to_string()
}

/// The host veth an ADD result reports.
pub fn result_host_veth(result: &Value) -> String {
    result["interfaces"][1]["name"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}
