"""Networks waiting for their release: ADD beside 250 of them against ADD beside none.

    python3 bench/waiting.py --academy target/release/academy
    python3 bench/waiting.py --academy target/release/academy --networks 50 --cycles 10  # a look

A network's objects outlive its last DEL by `releaseUnusedAfter` (src/firewall/
network.rs), recorded in /run/academy/networks as `<name>@<node>.unused` with an empty
marker `<name>@<node>.<due ms>.due`, and the node's hint `@<node>.next` holds the
earliest due time of its markers: every invocation reads its node's hint (one readlink)
and lists the folder only once one of its node is due, so an ADD's cost does not grow
with the networks that wait, on its node or another (issue 37 item 1; before, it listed
the folder, 4 entries per waiting network, and earlier still opened every record on the
host). This phase measures that:
- node A (a private node, lab.add_node) gets NETWORKS plain networks (isGateway, a /24
  and a bridge each, releaseUnusedAfter RELEASE_AFTER_S), each of which had one
  container come and go (ADD then DEL, unrecorded): NETWORKS records of A wait, none due;
- node B, another private node, has none of its own;
- on each node a steady plain network (releaseUnusedAfter 0) with a resident attachment;
  CYCLES ADD+DEL cycles of one more pod on it, the nodes interleaved, the order
  rotating, each operation after SETTLE_S. The ADD medians' ratio, A / B, against
  TARGET (at most 1.05x), the DEL's and the CPU's beside it;
- one ADD on each node under `strace -c -f` (syscalls, and the openat among them).
The folder is the host's, not a node's, and neither node's ADD lists it: A's hint says
its first record is due in RELEASE_AFTER_S, B's that it has none.
At the end the waiting networks are released by academy itself in node A (their records
made due, as lab.release_unused does, and one invocation run there), and what is left
is counted: records of either node, veths, nf_tables elements. A failed operation or a
leftover makes the verdict a MISS, however fast. Also a phase of bench.py; summary() and
markdown() are its report (bench/test_waiting.py).
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cni  # noqa: E402
import floor as floormod  # noqa: E402
import lab as labmod  # noqa: E402
import trace  # noqa: E402
from cni import Attachment, Plugin  # noqa: E402
from floor import Floor  # noqa: E402
from lab import NETWORK_LOCKS, PREFIX, Lab  # noqa: E402
from proc import Spawner  # noqa: E402

TARGET = 1.05
FULL = dict(networks=250, cycles=60)
QUICK = dict(networks=50, cycles=10)
SETTLE_S = 0.02  # as bench.py: each timed cycle operation waits this long first
RELEASE_AFTER_S = 3600  # the waiting networks' releaseUnusedAfter: none is due in the run
NODES = ("waiting", "none")
# /24s of 10.245 inside the private nodes only (a node's routes are its own, so they
# never meet bench.py's 10.245 networks on the host): the waiting networks take
# 10.245.0-249, the steady one 10.245.250 on each node.
NET = "10.245"
STEADY = 250


def _conf(name: str, bridge: str, third: int, data_dir: str, release_after: int) -> dict:
    return {
        "cniVersion": "1.0.0", "name": name, "type": "academy", "bridge": bridge,
        "isGateway": True, "subnet": f"{NET}.{third}.0/24", "gateway": f"{NET}.{third}.1",
        "dataDir": data_dir, "releaseUnusedAfter": release_after,
    }


def _plugin(academy: str, conf: dict, node: str) -> Plugin:
    return Plugin("academy", academy, conf, os.path.dirname(academy), conf["bridge"],
                  os.path.join(conf["dataDir"], conf["name"]), node=node)


def _steady(academy: str, lab: Lab, where: str, node: str) -> Plugin:
    conf = _conf(f"{PREFIX}-wait-steady-{where}", f"{PREFIX}br-ws{where[0]}", STEADY,
                 lab.scratch(f"store-waiting-{where}"), 0)
    return _plugin(academy, conf, node)


def _waiting(academy: str, lab: Lab, node: str, i: int) -> Plugin:
    conf = _conf(f"{PREFIX}-wait-{i:03d}", f"{PREFIX}w{i:03d}", i,
                 lab.scratch("store-waiting-many"), RELEASE_AFTER_S)
    return _plugin(academy, conf, node)


def _records(node: str) -> list:
    """The release records and markers of a node (its netns's inode) in NETWORK_LOCKS."""
    try:
        inode = os.stat(node).st_ino
        names = os.listdir(NETWORK_LOCKS)
    except OSError:
        return []
    return [n for n in names if f"@{inode}." in n and n.endswith((".unused", ".due"))]


def _make_waiting(sp: Spawner, academy: str, lab: Lab, node: str, n: int,
                  progress) -> dict:
    """n networks on the node, each with one container come and gone: n records wait."""
    pod = lab.add_netns(f"{PREFIX}-wmk")
    errors = []
    t0 = time.perf_counter()
    for i in range(n):
        if i % 50 == 0:
            progress(f"waiting: network {i}/{n}")
        plugin = _waiting(academy, lab, node, i)
        att = Attachment(f"{PREFIX}-wmk-{i}", pod)
        for command in ("ADD", "DEL"):
            cni.invoke(sp, plugin, command, att)
        errors += att.errors
    return {"wall_ms": round((time.perf_counter() - t0) * 1e3, 1), "errors": errors[:5],
            "failures": len(errors), "records": len(_records(node))}


def _cycles(sp: Spawner, plugins: dict, pods: dict, n: int, floor=None) -> dict:
    """n ADD+DEL cycles of one more pod on each node, interleaved, the order rotating;
    after each, the floor's ADD and DEL on the same bridge when `floor` can."""
    runs = {where: [] for where in plugins}
    errors = []
    order = list(plugins)
    for i in range(n):
        k = i % len(order)
        for where in order[k:] + order[:k]:
            att = Attachment(f"{PREFIX}-wc-{where}-{i}", pods[where])
            time.sleep(SETTLE_S)
            a = cni.invoke(sp, plugins[where], "ADD", att)
            time.sleep(SETTLE_S)
            d = cni.invoke(sp, plugins[where], "DEL", att)
            cycle = {"add_ms": round(a.wall_ms, 3), "del_ms": round(d.wall_ms, 3),
                     "add_cpu_ms": round(a.user_ms + a.sys_ms, 3), "ok": a.ok and d.ok}
            if floor:
                cycle.update(floor.cycle(where, plugins[where], i))
                errors += floor.errors[-1:] if not cycle["floor_ok"] else []
            runs[where].append(cycle)
            errors += att.errors
    return {"runs": runs, "errors": errors[:5]}


def _traced_add(sp: Spawner, plugin: Plugin, pod: str) -> dict:
    """One ADD under `strace -c -f`, run in the plugin's node; then its DEL, untraced."""
    att = Attachment(f"{PREFIX}-wt-{os.path.basename(plugin.node)}", pod)
    t = trace.summary(trace.Invocation(plugin.argv(),
                                       plugin.env("ADD", att.cid, att.netns, att.ifname),
                                       plugin.stdin()), netns=plugin.node)
    out = {"ok": t.rc == 0, "total_calls": t.figures["total_calls"],
           "openat": t.figures["calls"].get("openat", {}).get("calls", 0)}
    try:
        att.result = json.loads(t.stdout)
    except ValueError:
        out["ok"] = False
    out["del_ok"] = cni.invoke(sp, plugin, "DEL", att).ok
    return out


def _left(plugin: Plugin, node: str) -> dict:
    return {
        "records": len(_records(node)),
        "veths": len(labmod.node_veths(node)),
        "ports": len(labmod.ports(plugin.bridge, node)),
        "nft_elements": labmod.node_nft_elements(node),
    }


def run(sp: Spawner, academy: str, lab: Lab, networks: int, cycles: int,
        progress=lambda _m: None) -> dict:
    assert networks <= STEADY, "the waiting networks take 10.245.0-249 in node A"
    nodes = {where: lab.add_node(f"{PREFIX}-wn{where[0]}") for where in NODES}
    plugins = {where: _steady(academy, lab, where, nodes[where]) for where in NODES}
    pods = {where: lab.add_netns(f"{PREFIX}-wq{where[0]}") for where in NODES}
    residents = {where: Attachment(f"{PREFIX}-wr-{where}", lab.add_netns(f"{PREFIX}-wr{where[0]}"))
                 for where in NODES}
    out = {"networks": networks, "cycles": cycles, "warmup_errors": []}
    try:
        out["made"] = _make_waiting(sp, academy, lab, nodes["waiting"], networks, progress)
        for where, plugin in plugins.items():
            cni.invoke(sp, plugin, "ADD", residents[where])
            out["warmup_errors"] += residents[where].errors
        out["records"] = {where: len(_records(node)) for where, node in nodes.items()}
        progress(f"waiting: {cycles} cycles beside {networks} waiting networks and none")
        nlfloor = lab.build_native("nlfloor")
        # Above the few addresses the steady network's store hands out in the run.
        addresses = {where: (f"{NET}.{STEADY}.250", 24, f"{NET}.{STEADY}.1") for where in NODES}
        floor = Floor(sp, lab, nlfloor, "w", addresses) if nlfloor else None
        out["beside"] = _cycles(sp, plugins, pods, cycles, floor)
        out["syscalls"] = {where: _traced_add(sp, plugin, pods[where])
                           for where, plugin in plugins.items()}
        for where, plugin in plugins.items():
            cni.invoke(sp, plugin, "DEL", residents[where])
            out["warmup_errors"] += residents[where].errors
        # academy's own release of the waiting networks, in their node.
        out["released"] = labmod.release_unused(academy, nodes["waiting"])
        out["left"] = {where: _left(plugins[where], nodes[where]) for where in NODES}
    finally:
        lab.del_netns_many([os.path.basename(p) for p in (*nodes.values(), *pods.values(),
                                                           *(a.netns for a in residents.values()))]
                           + [f"{PREFIX}-wmk"])
    return out


def _median(xs: list) -> float:
    return statistics.median(xs) if xs else float("nan")


def summary(r: dict | None) -> dict | None:
    """Medians and the verdict: the ADD medians' ratio (waiting / none) against TARGET;
    fewer records waiting than networks made, a failure anywhere, a short series or a
    leftover is a MISS."""
    if not r or "beside" not in r:
        return None
    runs = r["beside"]["runs"]
    med = {where: {op: _median([c[f"{op}_ms"] for c in runs.get(where, []) if c["ok"]])
                   for op in ("add", "del", "add_cpu")} for where in NODES}
    problems = list(r.get("warmup_errors") or []) + list(r["beside"].get("errors") or [])
    made = r.get("made") or {}
    if made.get("failures"):
        problems.append(f"{made['failures']} invocations failed making the waiting networks")
    waiting = (r.get("records") or {}).get("waiting", 0)
    # A record and its marker per waiting network.
    if waiting != 2 * r["networks"]:
        problems.append(f"{waiting // 2} records waited, not {r['networks']}")
    if (r.get("records") or {}).get("none"):
        problems.append("the node without waiting networks had records")
    for where in NODES:
        done = sum(1 for c in runs.get(where, []) if c["ok"])
        if done < r["cycles"]:
            problems.append(f"{where}: {done} of {r['cycles']} cycles succeeded")
    for where, traced in (r.get("syscalls") or {}).items():
        if not (traced.get("ok") and traced.get("del_ok")):
            problems.append(f"{where}: the traced ADD or its DEL failed")
    for where, left in (r.get("left") or {}).items():
        found = {k: v for k, v in left.items() if v}
        if found:
            problems.append(f"left on the {where} node: {found}")
    ratios = {op: (med["waiting"][op] / med["none"][op] if med["none"][op] else float("nan"))
              for op in ("add", "del", "add_cpu")}
    if ratios["add"] != ratios["add"]:  # nan: nothing measured
        verdict = "MISS" if problems else "n/a"
    else:
        verdict = "PASS" if ratios["add"] <= TARGET and not problems else "MISS"
    # The kernel's part, where measured: its ratio, and academy's against it.
    floor, against_floor = floormod.medians(runs, NODES, ratios, _median)
    calls = {where: (r.get("syscalls") or {}).get(where, {}) for where in NODES}
    return {"median_ms": med, "ratio": ratios, "verdict": verdict, "target": TARGET,
            "floor_ms": floor, "against_floor": against_floor,
            "syscalls": {where: c.get("total_calls") for where, c in calls.items()},
            "openat": {where: c.get("openat") for where, c in calls.items()},
            "problems": problems}


def markdown(r: dict | None, s: dict | None) -> str:
    if not r or not s:
        return ""
    n, m = r["networks"], s["median_ms"]

    def calls(where):
        total = s["syscalls"][where]
        return "-" if total is None else f"{total} ({s['openat'][where]} openat)"

    lines = [
        "", f"### ADD beside {n} networks waiting for release", "",
        f"A steady plain network on each of two private nodes, a resident attachment on "
        f"each; on one node {n} more networks wait for their release (each had a container "
        f"come and go, releaseUnusedAfter {RELEASE_AFTER_S} s), on the other none. "
        f"{r['cycles']} ADD+DEL cycles each, interleaved (`waiting.py`); medians:", "",
        f"| | beside {n} waiting | beside none | ratio | target | |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| ADD | {m['waiting']['add']:.2f} ms | {m['none']['add']:.2f} ms "
        f"| {s['ratio']['add']:.2f}x | <= {s['target']}x | {s['verdict']} |",
        f"| ADD, CPU (user + sys) | {m['waiting']['add_cpu']:.2f} ms "
        f"| {m['none']['add_cpu']:.2f} ms | {s['ratio']['add_cpu']:.2f}x | | |",
        f"| DEL | {m['waiting']['del']:.2f} ms | {m['none']['del']:.2f} ms "
        f"| {s['ratio']['del']:.2f}x | | |",
        f"| syscalls per ADD (strace -c -f) | {calls('waiting')} | {calls('none')} | | | |",
    ]
    f = s.get("floor_ms")
    if f:
        lines += floormod.rows(f, NODES)
        a = s["against_floor"]
        lines += ["", "The waiting networks keep their bridges in the node; the floor, "
                      "timed in the same cycles on the same bridges, shows what the kernel "
                      "itself does slower beside them. academy's ratio against the floor's: "
                      f"ADD {a['add']:.2f}x, DEL {a['del']:.2f}x."]
    lines.append("")
    lines += [f"- {p}" for p in s["problems"][:5]]
    return "\n".join(lines) + ("\n\n" if s["problems"] else "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--academy", required=True)
    p.add_argument("--networks", type=int, default=FULL["networks"])
    p.add_argument("--cycles", type=int, default=FULL["cycles"])
    args = p.parse_args()
    r = labmod.run_alone("waiting", args.academy, lambda sp, binary, lab: run(
        sp, binary, lab, args.networks, args.cycles, progress=lambda m: print(m, file=sys.stderr)))
    print(markdown(r, summary(r)))


if __name__ == "__main__":
    main()
