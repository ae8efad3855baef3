"""Where the time goes: syscall counts of single invocations (strace), and software
counters (perf stat) when perf works on this machine. Nothing here is timed: tracing
slows a process down many times over, so these are counts, not durations.

Every function takes an Invocation (argv, env, stdin) and returns its figures plus the
process's rc and output, so that the caller can check the invocation did succeed."""

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

# With -f and -o, strace prefixes every line with the pid; with -yy it decorates fds, so
# "1234 sendto(5<NETLINK:[ROUTE:1234]>, ..." tells a netlink socket from a pipe or file.
_NL_SEND = re.compile(r"^\d+\s+(sendto|sendmsg)\(\d+<NETLINK:")
_SETNS = re.compile(r"^\d+\s+setns\(")
# A new file for sure: created exclusively (O_EXCL) or anonymously (O_TMPFILE), and it worked.
_NEW_FILE = re.compile(r"^\d+\s+openat\(.*(O_EXCL|O_TMPFILE).*\)\s+=\s+\d+")
_SUMMARY_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$")
PERF_EVENTS = "task-clock,context-switches,cpu-migrations,page-faults"


@dataclass
class Invocation:
    argv: list
    env: dict
    stdin: bytes = b""


@dataclass
class Traced:
    figures: dict
    rc: int
    stdout: bytes
    stderr: bytes


def _run(prefix: list, inv: Invocation) -> subprocess.CompletedProcess:
    return subprocess.run(prefix + inv.argv, env=inv.env, input=inv.stdin, capture_output=True)


def requests(inv: Invocation) -> Traced:
    """setns calls, netlink requests (sendto/sendmsg on a netlink socket: each is
    answered, so this is the number of round trips) and tasks (processes + threads)."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        r = _run(["strace", "-f", "-yy", "-qq", "-e",
                  "trace=setns,sendto,sendmsg,recvfrom,recvmsg,clone,clone3,fork,vfork,execve,openat",
                  "-o", out.name], inv)
        lines = out.read().splitlines()
    figures = {
        "setns": sum(1 for l in lines if _SETNS.match(l)),
        "netlink_requests": sum(1 for l in lines if _NL_SEND.match(l)),
        "tasks": len({l.split()[0] for l in lines if l.strip()}),
        "new_files": sum(1 for l in lines if _NEW_FILE.match(l)),
    }
    return Traced(figures, r.returncode, r.stdout, r.stderr)


def summary(inv: Invocation, netns: str | None = None) -> Traced:
    """strace -c -f: calls (and failed calls) per syscall, all threads and children.
    With `netns` (a path), strace and the process run in that network namespace
    (nsenter execs strace there: its own calls are not counted)."""
    enter = ["nsenter", f"--net={netns}"] if netns else []
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        r = _run(enter + ["strace", "-f", "-c", "-o", out.name], inv)
        text = out.read()
    calls = {}
    for line in text.splitlines():
        m = _SUMMARY_ROW.match(line)
        if m and m.group(3) != "total":
            calls[m.group(3)] = {"calls": int(m.group(1)), "errors": int(m.group(2) or 0)}
    figures = {
        "total_calls": sum(c["calls"] for c in calls.values()),
        "calls": dict(sorted(calls.items(), key=lambda kv: -kv[1]["calls"])),
        "text": text,
    }
    return Traced(figures, r.returncode, r.stdout, r.stderr)


def perf_works() -> bool:
    if not shutil.which("perf"):
        return False
    r = subprocess.run(["perf", "stat", "-x,", "-e", PERF_EVENTS, "true"],
                       capture_output=True, text=True)
    return r.returncode == 0 and "task-clock" in r.stderr


def perf_stat(inv: Invocation) -> Traced:
    """Software counters only: this VM exposes no hardware counters."""
    with tempfile.NamedTemporaryFile("r", suffix=".perf") as out:
        r = _run(["perf", "stat", "-x,", "-o", out.name, "-e", PERF_EVENTS], inv)
        text = out.read()
    counters = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) > 3 and parts[2]:
            try:
                counters[parts[2]] = float(parts[0])
            except ValueError:
                pass  # "<not supported>"
    return Traced(counters, r.returncode, r.stdout, r.stderr)


# ---- where an ADD's syscalls go, item by item ----------------------------------------

# The items an invocation's syscalls are sorted into, in the order the report lists
# them. Each is a part of the work (or of the process) that costs syscalls of its own;
# the C floor's trace is sorted the same way, so "above the floor" is the difference.
ITEMS = (
    "exec and libc start-up",
    "Rust runtime start-up (and its teardown)",
    "stdin (the config)",
    "netns file checks and setns",
    "netns thread (start, stack, exit)",
    "netlink sockets (open, options, close)",
    "rtnetlink round trips",
    "nf_tables socket and lookups",
    "/proc/sys reads and writes",
    "state-version record",
    "release records and network lock (/run/academy/networks)",
    "address store",
    "MAC addresses (getrandom)",
    "result on stdout",
    "exit",
    "other",
)
_LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. )?(\w+)(?:\(| resumed>)(.*?)(?:<([\d.]+)>)?$")
_FD = re.compile(r"^(\d+)<")
_RESUMED = re.compile(r"^\d+\s+<\.\.\. ")
_RUNTIME_CALLS = {"poll", "rt_sigaction", "sigaltstack"}
# What exec and a static glibc's start-up call before main.
_LIBC_CALLS = {"execve", "brk", "arch_prctl", "set_tid_address", "set_robust_list", "rseq",
               "prlimit64", "readlink", "getrandom", "mprotect", "mmap", "access", "uname"}
_THREAD_CALLS = {"clone", "clone3", "futex", "rt_sigprocmask", "madvise", "exit",
                 "set_robust_list", "rseq"}


def classify(lines: list) -> dict:
    """Sorts the lines of `strace -f -yy -T` (one process and its threads) into ITEMS:
    {item: {"calls": n, "us": time inside the calls as traced}}. Traced times are
    inflated by strace itself; they rank the items, the wall-time table measures."""
    out = {k: {"calls": 0, "us": 0.0} for k in ITEMS}
    state = {"main": None, "phase": "libc", "last": None}
    for line in lines:
        m = _LINE.match(line)
        if not m or _RESUMED.match(line):
            continue  # the end of a call counted when it began
        pid, name, rest, secs = m.group(1), m.group(2), m.group(3), m.group(4)
        state["main"] = state["main"] or pid
        item = _item(name, rest, pid != state["main"], state)
        state["last"] = item
        out[item]["calls"] += 1
        out[item]["us"] += float(secs or 0) * 1e6
    return {k: {"calls": v["calls"], "us": round(v["us"], 1)} for k, v in out.items()}


def _item(name: str, rest: str, in_thread: bool, state: dict) -> str:
    """The item of one call; `state` follows the process: "libc" start-up until the
    first call std's runtime makes (poll of fds 0-2), "runtime" until stdin is read."""
    if name == "exit_group":
        return "exit"
    if name == "read" and rest.startswith("0<"):
        state["phase"] = "work"
        return "stdin (the config)"
    if state["phase"] == "libc" and name in _RUNTIME_CALLS:
        state["phase"] = "runtime"
    elif state["phase"] == "libc" and name not in _LIBC_CALLS:
        state["phase"] = "work"  # a program without std's runtime (the C floor)
    if state["phase"] != "work":
        return "exec and libc start-up" if state["phase"] == "libc" else "Rust runtime start-up (and its teardown)"
    if name == "write" and rest.startswith("1<"):
        return "result on stdout"
    # An unbound socket's fd shows no protocol: the nf_tables one is known by its fd.
    fd = _FD.match(rest)
    if "NETLINK_NETFILTER" in rest:
        made = re.search(r"= (\d+)<", rest)
        if made:
            state.setdefault("nf_fds", set()).add(made.group(1))
        return "nf_tables socket and lookups"
    if "NETLINK:[NETFILTER" in rest or (fd and fd.group(1) in state.get("nf_fds", ())):
        if name == "close" and fd:
            state["nf_fds"].discard(fd.group(1))
        return "nf_tables socket and lookups"
    if "<NETLINK:" in rest or "AF_NETLINK" in rest:
        if name in ("sendto", "sendmsg", "recvfrom", "recvmsg"):
            return "rtnetlink round trips"
        return "netlink sockets (open, options, close)"
    if "/proc/sys/" in rest:
        return "/proc/sys reads and writes"
    if ".state" in rest or "/proc/self/ns/net" in rest:
        return "state-version record"
    if "/run/academy" in rest:
        return "release records and network lock (/run/academy/networks)"
    if name in ("setns", "fstatfs", "ioctl") or "/run/netns/" in rest or "/ns/net" in rest:
        return "netns file checks and setns"
    if in_thread or name in _THREAD_CALLS or "SIGRT_1" in rest or "MAP_STACK" in rest:
        return "netns thread (start, stack, exit)"
    if name == "mprotect" and state["last"] == "netns thread (start, stack, exit)":
        return "netns thread (start, stack, exit)"  # the new stack made writable
    if name in ("sigaltstack", "munmap"):
        return "Rust runtime start-up (and its teardown)"  # its signal stack taken down at exit
    if name == "getrandom":
        return "MAC addresses (getrandom)"
    if name in ("openat", "newfstatat", "statx", "read", "write", "close", "flock",
                "renameat", "renameat2", "linkat", "unlinkat", "unlink", "ftruncate",
                "mkdirat", "mkdir", "geteuid", "getdents64", "fstat", "lseek"):
        return "address store"
    return "other"


def items(inv: Invocation) -> Traced:
    """One invocation under `strace -f -yy -T`, its syscalls sorted into ITEMS."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        r = _run(["strace", "-f", "-yy", "-T", "-qq", "-s", "64", "-o", out.name], inv)
        lines = out.read().splitlines()
    sorted_ = classify(lines)
    figures = {"items": sorted_, "total_calls": sum(v["calls"] for v in sorted_.values())}
    return Traced(figures, r.returncode, r.stdout, r.stderr)
