//! strace, the one way the tests watch and tamper with the plugin's system calls from
//! outside: the one trace parser ([`parse_trace`]), and fault injection
//! (`-e inject=SYSCALL:error=E|signal=SIGKILL|delay_enter=US:when=N`) for the store's
//! file calls, the kill points and the delays of the race tests.
//!
//! strace's `when=N` counter is kept per *thread* (each new thread starts from a fresh
//! copy of the spec): ADD makes its first netlink requests on the main thread and then,
//! from a short-lived thread inside the netns, its own; `when=J` always hits the main
//! thread's J-th first. [`strace_reaches`] tells which calls strace can reach; the others
//! are reached with the LD_PRELOAD shim (see `shim.rs`). Neither needs test-only code in
//! the plugin.
//!
//! Traces are written with `strace -f -yy -o FILE`: every line starts with the tid, fds are
//! decoded with their paths (`4</data/net>`, `4<NETLINK:[ROUTE:123]>`).

use std::path::Path;

use super::process::{plugin, run_with, start, Call, Out, Running};

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

/// Runs the plugin under strace with its stdout a file, `stdout_file`, and SIGKILLs it
/// on entering its first write to that file (`-P` keeps strace's `when` counter to the
/// writes touching that path): the moment everything is made and the result is about to
/// be printed. A rank among all the `write` calls would move with whatever else the
/// run writes first. The returned Out's stdout is what reached the file.
pub fn run_killed_at_first_stdout_write(
    call: &Call,
    trace_file: &Path,
    stdout_file: &Path,
) -> (Out, String) {
    let _ = std::fs::remove_file(trace_file);
    let _ = std::fs::remove_file(stdout_file);
    let inject = Inject {
        syscall: "write".into(),
        when: 1,
        action: Action::Kill,
    };
    let mut args = strace_args(trace_file, "write", Some(&inject));
    let stdout_path = stdout_file.to_string_lossy().into_owned();
    args.splice(0..0, ["-P".to_string(), stdout_path.clone()]);
    // sh opens the file as the plugin's stdout before strace starts, so the path strace
    // resolves for fd 1 is that file's.
    let script = r#"exec strace "$@" >"$0""#;
    let mut sh_args = vec!["-c", script, stdout_path.as_str()];
    sh_args.extend(args.iter().map(String::as_str));
    let mut out = run_with(call, "sh", &sh_args, &[]);
    out.stdout = std::fs::read_to_string(stdout_file).unwrap_or_default();
    let text = std::fs::read_to_string(trace_file).unwrap_or_default();
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
        // A written buffer is compared up to its first line: strace cuts the string at
        // 32 bytes, so where the cut falls in later lines depends on the first line's
        // length (an address one digit longer), not on which call it is.
        let head = match call[..end].find("\\n") {
            Some(nl) => &call[..nl],
            None => &call[..end],
        };
        let mut out = String::new();
        let mut in_digits = false;
        for c in head.chars() {
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
        // nf_tables requests outside a batch (the shim prints them as numbers too).
        "0xa04" => "NFNL_SUBSYS_NFTABLES<<8|NFT_MSG_GETCHAIN",
        "0xa07" => "NFNL_SUBSYS_NFTABLES<<8|NFT_MSG_GETRULE",
        "0xa0a" => "NFNL_SUBSYS_NFTABLES<<8|NFT_MSG_GETSET",
        "0xa0d" => "NFNL_SUBSYS_NFTABLES<<8|NFT_MSG_GETSETELEM",
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
