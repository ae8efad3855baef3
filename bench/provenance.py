"""Where a bench run's figures come from: the machine (kernel, CPUs, memory, load) and
the binaries measured (hashes, git commit, the reference's package version), recorded
in results/latest.json beside the samples."""

import hashlib
import os
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def machine() -> dict:
    """The machine a run was measured on, as the results record it."""
    def first(path, key):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "unknown"

    try:
        debian = open("/etc/debian_version").read().strip()
    except OSError:
        debian = "unknown"
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "kernel": os.uname().release,
        "nproc": os.cpu_count(),
        "cpu": first("/proc/cpuinfo", "model name"),
        "memory": first("/proc/meminfo", "MemTotal"),
        "debian": debian,
        "loadavg_start": os.getloadavg(),
    }


def of(b) -> dict:
    """Which binaries were measured, from which commit: a `bench.Bench` after its run."""
    repo = os.path.dirname(HERE)
    git = lambda *a: subprocess.run(["git", "-C", repo, *a], capture_output=True, text=True).stdout.strip()
    pkg = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "containernetworking-plugins"],
                         capture_output=True, text=True)
    out = {
        "academy_binary": os.path.abspath(b.args.academy),
        "academy_sha256": b.academy_sha,
        "academy_size": os.path.getsize(b.plugins["academy"].binary),
        "git_commit": git("rev-parse", "--short", "HEAD"),
        # The last commit that changed what the binary is built from: a bench-only
        # branch's HEAD measures the src of this one.
        "src_commit": git("log", "-1", "--format=%h", "--", "src", "Cargo.toml", "Cargo.lock"),
        "git_dirty_src": bool(git("status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock")),
        "reference_dir": os.path.abspath(b.args.reference_dir),
        "reference_version": f"containernetworking-plugins {pkg.stdout}" if pkg.returncode == 0 else "unknown",
        "reference_sha256": sha256(b.plugins["reference"].binary),
        "clean_rss": b.sp.clean_rss,
        "nlfloor": bool(b.nlfloor),
    }
    if b.args.baseline:
        import baseline  # noqa: PLC0415
        commit = baseline.commit_of(b.args.baseline)
        out.update(baseline_binary=os.path.abspath(b.args.baseline),
                   baseline_sha256=b.baseline_sha, baseline_commit=commit,
                   baseline_label=b.args.baseline_label or commit)
    return out
