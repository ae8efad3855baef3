#!/usr/bin/env python3
"""Build-profile choices, measured: academy built several ways, run side by side.

    python3 bench/profiles.py [--cycles 30] [--variants base,lto,lto-strip,...]

Each variant is built from a snapshot of the committed HEAD (`git archive`, so edits in
progress in the working tree do not leak in) into its own target directory under
/var/tmp, with the profile overridden through CARGO_PROFILE_RELEASE_* and RUSTFLAGS:
Cargo.toml is never touched. The variants then run ADD and DEL interleaved, as in
bench.py, and the table shows what each choice buys: binary size, ADD wall and CPU
time, peak RSS, page faults, and whether an error still reaches the user as CNI JSON.

panic=abort is measured but flagged: academy turns a panic into CNI JSON with
catch_unwind, which panic=abort disables (a panic hook that prints the JSON before the
abort would be needed first).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cni  # noqa: E402
from bench import SETTLE_S, rotate  # noqa: E402
from lab import Lab, sh  # noqa: E402
from proc import Spawner  # noqa: E402
from report import cell, median, stats  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD_ROOT = "/var/tmp/academy-profiles"
NET = "10.245"

# Overrides on top of the committed [profile.release] ("head"). Cargo reads
# CARGO_PROFILE_RELEASE_* over Cargo.toml, so nothing in the tree changes.
PLAIN = {"CARGO_PROFILE_RELEASE_LTO": "false", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16",
         "CARGO_PROFILE_RELEASE_STRIP": "none"}
STATIC = {"RUSTFLAGS": "-C target-feature=+crt-static"}
VARIANTS = {
    "head": {},
    "plain": PLAIN,
    "static": STATIC,
    "opt-s": {"CARGO_PROFILE_RELEASE_OPT_LEVEL": "s"},
    "static+opt-s": {**STATIC, "CARGO_PROFILE_RELEASE_OPT_LEVEL": "s"},
    "abort": {"CARGO_PROFILE_RELEASE_PANIC": "abort"},
}
MEANING = {
    "head": "the committed [profile.release]",
    "plain": "Cargo's default release: no LTO, 16 codegen units, not stripped",
    "static": "head + `RUSTFLAGS=-C target-feature=+crt-static` (static glibc, no ld.so, no libgcc_s)",
    "opt-s": "head + `opt-level = \"s\"`",
    "static+opt-s": "both of the above",
    "abort": "head + `panic = \"abort\"`",
}


def snapshot_source() -> str:
    src = os.path.join(BUILD_ROOT, "src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", REPO, "archive", "HEAD"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    return src


def build(src: str, name: str, overrides: dict) -> str:
    target = os.path.join(BUILD_ROOT, f"target-{name}")
    env = dict(os.environ, CARGO_TARGET_DIR=target, **overrides)
    argv = ["cargo", "build", "--release", "--bin", "academy"]
    built = os.path.join(target, "release", "academy")
    if "RUSTFLAGS" in overrides:
        # With an explicit --target, RUSTFLAGS reach the target only, not the proc-macros
        # built for the host (crt-static cannot make a proc-macro).
        triple = _host_triple()
        argv += ["--target", triple]
        built = os.path.join(target, triple, "release", "academy")
    t0 = time.monotonic()
    r = subprocess.run(argv, cwd=src, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"profiles: build {name} failed:\n{r.stderr[-2000:]}")
    out = os.path.join(BUILD_ROOT, "bin", name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    shutil.copyfile(built, out)
    os.chmod(out, 0o755)
    print(f"profiles: built {name} in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return out


def _host_triple() -> str:
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return next(l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("host: "))


def error_is_json(binary: str) -> bool:
    """An invalid config must come back as a CNI error object on stdout, exit 1."""
    r = subprocess.run([binary], env=dict(cni.BASE_ENV, CNI_COMMAND="ADD",
                       CNI_CONTAINERID="x", CNI_NETNS="/nonexistent", CNI_IFNAME="eth0",
                       CNI_PATH="/nonexistent"), input=b"{not json", capture_output=True)
    try:
        return r.returncode == 1 and "code" in json.loads(r.stdout)
    except ValueError:
        return False


def measure(lab: Lab, sp: Spawner, binaries: dict, n: int) -> dict:
    store = lab.scratch("profiles-store")
    lab.track_bridge("bnchbr-p")
    ns = {name: lab.add_netns(f"bnch-p{k}") for k, name in enumerate(binaries)}
    conf = {"cniVersion": "1.0.0", "name": "bnch-profiles", "type": "academy",
            "bridge": "bnchbr-p", "subnet": f"{NET}.0.0/16", "gateway": f"{NET}.0.1",
            "dataDir": store}
    plugins = {name: cni.Plugin("academy", path, conf, os.path.dirname(path), "bnchbr-p", "")
               for name, path in binaries.items()}
    samples = {name: {"ADD": [], "DEL": []} for name in binaries}
    warmup = 2
    for i in range(n + warmup):
        for name in rotate(list(plugins), i):
            att = cni.Attachment(cid=f"bnch-prof-{i}", netns=ns[name])
            for command in ("ADD", "DEL"):
                time.sleep(SETTLE_S)
                run = cni.invoke(sp, plugins[name], command, att)
                if i >= warmup:
                    samples[name][command].append(run.sample())
    return samples


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=30)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--keep-builds", action="store_true", help=f"keep {BUILD_ROOT}")
    args = p.parse_args()
    names = args.variants.split(",")
    lab = Lab()
    lab.lock()
    try:
        lab.preclean()
        sp = Spawner(lab.build_native("spawnstat"))
        src = snapshot_source()
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        binaries = {name: build(src, name, VARIANTS[name]) for name in names}
        samples = measure(lab, sp, binaries, args.cycles)
        rows, raw = [], {"commit": commit, "cycles": args.cycles, "variants": {}}
        base_add = None
        for name in names:
            add, dele = stats(samples[name]["ADD"]), stats(samples[name]["DEL"])
            cpu = median([s["user_ms"] + s["sys_ms"] for s in samples[name]["ADD"]])
            rss = max(s["maxrss_kib"] for s in samples[name]["ADD"])
            faults = median([s["faults"] for s in samples[name]["ADD"]])
            size = os.path.getsize(binaries[name])
            json_ok = error_is_json(binaries[name])
            base_add = base_add or add["median"]
            note = "" if json_ok else "error not CNI JSON"
            if "CARGO_PROFILE_RELEASE_PANIC" in VARIANTS[name]:
                note = "a panic would abort without CNI JSON (catch_unwind is off)"
            rows.append(f"| {name} | {size / 1e6:.2f} MB | {cell(add)} | "
                        f"{add['median'] / base_add:.2f} | {cpu:.2f} | {rss / 1024:.1f} MiB | "
                        f"{faults:.0f} | {cell(dele)} | {note} |")
            raw["variants"][name] = {"overrides": VARIANTS[name], "size": size,
                                     "error_json": json_ok, "samples": samples[name]}
        md = "\n".join([
            f"### Build profiles of academy {commit}, measured "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.cycles} "
            f"interleaved ADD+DEL cycles each, {os.cpu_count()} cores, kernel {os.uname().release})",
            "",
            f"| variant | size | ADD ms, median (min–max) | ADD vs {names[0]} | ADD CPU ms | "
            "peak RSS | page faults | DEL ms | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            *(f"- {name}: {MEANING[name]}" for name in names),
        ]) + "\n"
        print(md)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "profiles.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, "profiles.json"), "w") as f:
            json.dump(raw, f, indent=1)
    finally:
        lab.cleanup()
        if not args.keep_builds:
            shutil.rmtree(BUILD_ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()
