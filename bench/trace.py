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


def summary(inv: Invocation) -> Traced:
    """strace -c -f: calls (and failed calls) per syscall, all threads and children."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        r = _run(["strace", "-f", "-c", "-o", out.name], inv)
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
