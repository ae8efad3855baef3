"""A scrape of `academy watch --metrics`: 100 networks of 250 reserved addresses each.

    python3 bench/scrape.py --academy target/release/academy

The watch computes its metrics when scraped, from the store and the kernel
(src/cli/metrics/), so a scrape's cost grows with the node's networks and addresses.
This phase builds a private node (lab.add_node) holding NETWORKS bridges, one academy
conflist each in a conf dir of its own, and each network's store filled with ADDRESSES
reservations written straight in academy's format (bench.py's populate: a reservation
file and a holder index each) whose containers are long gone, so every address is
used and leaked and the scrape does the whole survey (each reservation read, each
holder index read, the links dumped, every kind's nf_tables look). It starts `academy
watch --metrics 127.0.0.1:PORT` in the node, and a Python client in the node times
SCRAPES GETs of /metrics one after the other (wall: request to last byte), checking each
page: the 100 networks, 25,000 used. Target: the median under TARGET_MS. Then the watch
is stopped by its PID and the node deleted with everything in it.
Also a phase of bench.py; summary() and markdown() are its report (bench/test_scrape.py).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import PREFIX, Lab, sh  # noqa: E402

TARGET_MS = 50.0
FULL = dict(networks=100, addresses=250, scrapes=20)
QUICK = dict(networks=20, addresses=50, scrapes=5)
NODE = f"{PREFIX}-scrape"
PORT = 9604
# /24s of 10.246.0.0/16, in the node only (a private netns: nothing leaves it).
NET = "10.246"
# The watch's records of its repairs (src/cli/repairs.rs), of the bench's networks.
REPAIRS = "/run/academy/watch"

# Run in the node: SCRAPES GETs, each page checked, the walls as JSON on stdout.
CLIENT = r"""
import json, socket, sys, time
port, scrapes, networks, used = (int(a) for a in sys.argv[1:5])
def get():
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
    out = b""
    while True:
        b = s.recv(1 << 16)
        if not b:
            return out.decode()
        out += b
walls, errors, server = [], [], []
for i in range(scrapes):
    start = time.perf_counter()
    page = get()
    walls.append((time.perf_counter() - start) * 1000)
    lines = page.split("\r\n\r\n", 1)[-1].splitlines()
    seen = sum(float(l.rsplit(" ", 1)[1]) for l in lines
               if l.startswith("academy_pool_addresses{") and 'state="used"' in l)
    if not page.startswith("HTTP/1.1 200 ") or f"academy_networks {networks}" not in lines:
        errors.append(f"scrape {i}: not the page of {networks} networks: {page[:200]!r}")
    elif seen != used:
        errors.append(f"scrape {i}: {seen:.0f} used, not {used}")
    server += [float(l.split()[1]) * 1000 for l in lines
               if l.startswith("academy_scrape_duration_seconds ")]
print(json.dumps({"walls_ms": walls, "server_ms": server, "errors": errors}))
"""


def _network(i: int) -> str:
    return f"{PREFIX}-scr{i:03d}"


def _populate(store: str, prefix: str, n: int):
    """n reservations of .2 up, each with its holder index, as academy writes them."""
    os.makedirs(os.path.join(store, "holders"), mode=0o700, exist_ok=True)
    for k in range(n):
        addr, cid = f"{prefix}.{2 + k}", f"gone{k:04d}"
        with open(os.path.join(store, addr), "x") as f:
            f.write(f"{cid}\r\neth0")
        with open(os.path.join(store, "holders", f"{cid}:eth0"), "x") as f:
            f.write(f"{addr}\n")


def run(academy: str, lab: Lab, networks: int, addresses: int, scrapes: int) -> dict:
    assert networks <= 250 and addresses <= 252
    lab.add_node(NODE)
    conf_dir, data = lab.scratch("scrape", "net.d"), lab.scratch("scrape", "data")
    batch = ""
    for i in range(networks):
        name, bridge, prefix = _network(i), f"{PREFIX}s{i:03d}", f"{NET}.{i}"
        batch += f"link add {bridge} type bridge\nlink set {bridge} up\n"
        conf = {"cniVersion": "1.0.0", "name": name, "plugins": [{
            "type": "academy", "bridge": bridge, "subnet": f"{prefix}.0/24",
            "dataDir": data}]}
        with open(os.path.join(conf_dir, f"{i:03d}.conflist"), "w") as f:
            json.dump(conf, f)
        _populate(os.path.join(data, name), prefix, addresses)
    sh("ip", "-n", NODE, "-batch", "-", input=batch)
    watch = subprocess.Popen(
        ["ip", "netns", "exec", NODE, academy, "watch", "--conf-dir", conf_dir,
         "--metrics", f"127.0.0.1:{PORT}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    result = {"networks": networks, "addresses": addresses, "scrapes": scrapes}
    try:
        # The first scrape waits for the listener; it is not timed.
        warm = _client(networks, addresses, 1, deadline=time.monotonic() + 30)
        if warm.get("errors"):
            result["errors"] = warm["errors"]
            return result
        result.update(_client(networks, addresses, scrapes, deadline=None))
    finally:
        watch.send_signal(signal.SIGTERM)  # `ip netns exec` execs: this PID is the watch's
        try:
            watch.wait(timeout=10)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
        for i in range(networks):
            try:
                os.remove(os.path.join(REPAIRS, f"{_network(i)}.last-repair"))
            except OSError:
                pass
        lab.del_netns_many([NODE])
    return result


def _client(networks: int, addresses: int, scrapes: int, deadline) -> dict:
    argv = ["ip", "netns", "exec", NODE, sys.executable, "-c", CLIENT, str(PORT),
            str(scrapes), str(networks), str(networks * addresses)]
    while True:
        out = subprocess.run(argv, capture_output=True, text=True)
        if out.returncode == 0:
            return json.loads(out.stdout)
        if deadline is None or time.monotonic() > deadline:
            return {"errors": [f"the scrape client failed: {out.stderr.strip()[-300:]}"]}
        time.sleep(0.2)


def _median(xs: list) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def summary(r: dict | None) -> dict | None:
    """The scrape's figures and its target: the median wall under TARGET_MS; a run
    with errors, or fewer scrapes than asked, is a MISS however fast."""
    if not r:
        return None
    walls = r.get("walls_ms") or []
    errors = list(r.get("errors") or [])
    if len(walls) < r.get("scrapes", 0) and not errors:
        errors.append(f"{len(walls)} of {r['scrapes']} scrapes answered")
    median = _median(walls)
    if not walls:
        verdict = "MISS" if errors else "n/a"
    else:
        verdict = "PASS" if median < TARGET_MS and not errors else "MISS"
    return {
        "median_ms": median,
        "max_ms": max(walls) if walls else float("nan"),
        "server_median_ms": _median(r.get("server_ms") or []),
        "target_ms": TARGET_MS,
        "verdict": verdict,
        "errors": errors,
    }


def markdown(r: dict | None, s: dict | None) -> str:
    if not r or not s:
        return ""
    size = f"{r['networks']} networks x {r['addresses']} addresses"
    lines = [
        f"### A scrape of `academy watch --metrics` ({size})", "",
        "| scrapes | median | max | computing (the watch's own figure) | target | |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {len(r.get('walls_ms') or [])} | {s['median_ms']:.1f} ms | {s['max_ms']:.1f} ms "
        f"| {s['server_median_ms']:.1f} ms | < {s['target_ms']:.0f} ms | {s['verdict']} |", "",
    ]
    lines += [f"- {e}" for e in s["errors"][:5]]
    return "\n".join(lines) + ("\n\n" if s["errors"] else "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--academy", required=True)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("scrape: needs root (namespaces, bridges)")
    preset = QUICK if args.quick else FULL
    lab = Lab(args.academy)
    lab.lock()
    try:
        lab.preclean()
        r = run(args.academy, lab, **preset)
    finally:
        lab.cleanup()
    print(markdown(r, summary(r)))


if __name__ == "__main__":
    main()
