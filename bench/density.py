"""Density: ADD and DEL beside 1,000 pods on one bridge, against an empty bridge.

    python3 bench/density.py --academy target/release/academy
    python3 bench/density.py --academy target/release/academy --pods 50 --cycles 3  # a look

A Linux bridge takes at most 1,023 ports (academy's ADD beyond says so: src/wire/
capacity.rs). This phase asks what an ADD and a DEL cost on a bridge close to that:
- two private nodes (lab.add_node), each with one plain academy network (isGateway, a
  /20, releaseUnusedAfter 0: no network objects, so every ADD below is an ordinary one,
  none a network's first);
- PODS pods brought up on the dense node one after the other (each in its own netns,
  made beforehand by one `ip -batch`, so `ip netns add` is not in the figures): the wall
  from the first ADD's start to the last one's end, and the ADD medians of the first and
  the last tenth, wall and CPU (how the cost grows as the bridge fills);
- with them up, CYCLES ADD+DEL cycles of one more pod on the dense bridge and on the
  empty one, interleaved, the order rotating, each operation after SETTLE_S; the
  medians' ratios, dense / empty, against TARGET (at most 1.2x, issue 37 item 5);
  beside each, the kernel's own part: nlfloor (bench/native/nlfloor.c, one small C
  process making academy's netlink requests) and `ip link del` of its veth, in the same
  node on the same bridge, so the report says how much of the growth is the kernel's
  (academy's ratio against the floor's is shown, not judged);
- the PODS pods brought down one after the other (the wall), then what is left on the
  dense node: veths, store files, nf_tables elements.
Every plugin is spawned into its node by spawnstat before its clock starts (as bench.py
times the host's). A failed operation or a leftover makes the verdicts a MISS, however
fast. Also a phase of bench.py; summary() and markdown() are its report
(bench/test_density.py).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bursts  # noqa: E402  (store_files, shared with the bursts' leftover count)
import cni  # noqa: E402
import floor as floormod  # noqa: E402
import lab as labmod  # noqa: E402
from cni import Attachment, Plugin  # noqa: E402
from floor import Floor  # noqa: E402
from lab import PREFIX, Lab  # noqa: E402
from proc import Spawner  # noqa: E402

TARGET = 1.2
FULL = dict(pods=1000, cycles=20)
QUICK = dict(pods=50, cycles=3)
SETTLE_S = 0.02  # as bench.py: each timed cycle operation waits this long first
# /20s of 10.243.0.0/16 inside the private nodes only (scaling uses 10.243 on the host;
# a node's routes are its own, so the two never meet).
NETS = {"dense": "10.243.0", "empty": "10.243.16"}


def _plugin(academy: str, lab: Lab, where: str, node: str) -> Plugin:
    name, bridge = f"{PREFIX}-dense-{where}", f"{PREFIX}br-d{where[0]}"
    data_dir = lab.scratch(f"store-density-{where}")
    net = NETS[where]
    conf = {
        "cniVersion": "1.0.0", "name": name, "type": "academy", "bridge": bridge,
        "subnet": f"{net}.0/20", "gateway": f"{net}.1", "dataDir": data_dir,
        "releaseUnusedAfter": 0,
    }
    return Plugin("academy", academy, conf, os.path.dirname(academy), bridge,
                  os.path.join(data_dir, name), node=node)


def _one_by_one(sp: Spawner, plugin: Plugin, command: str, pods: list,
                progress) -> dict:
    """`command` for every pod, one after the other: the wall and each one's figures."""
    walls, cpus, errors = [], [], []
    t0 = time.perf_counter()
    for j, att in enumerate(pods):
        if j % 100 == 0:
            progress(f"density: {command} {j}/{len(pods)}")
        run = cni.invoke(sp, plugin, command, att)
        walls.append(round(run.wall_ms, 3))
        cpus.append(round(run.user_ms + run.sys_ms, 3))
        if not run.ok:
            errors.append(att.errors[-1][:300])
    return {"wall_ms": round((time.perf_counter() - t0) * 1e3, 1), "per_pod_ms": walls,
            "per_pod_cpu_ms": cpus, "failures": len(errors), "errors": errors[:5]}


def _cycles(sp: Spawner, plugins: dict, pods: dict, n: int, floor=None) -> dict:
    """n ADD+DEL cycles of one more pod on each node, interleaved, the order rotating;
    after each, the floor's ADD and DEL on the same bridge when `floor` can."""
    runs = {where: [] for where in plugins}
    errors = []
    order = list(plugins)
    for i in range(n):
        k = i % len(order)
        for where in order[k:] + order[:k]:
            att = Attachment(f"{PREFIX}-dc-{where}-{i}", pods[where])
            time.sleep(SETTLE_S)
            a = cni.invoke(sp, plugins[where], "ADD", att)
            time.sleep(SETTLE_S)
            d = cni.invoke(sp, plugins[where], "DEL", att)
            cycle = {"add_ms": round(a.wall_ms, 3), "del_ms": round(d.wall_ms, 3),
                     "ok": a.ok and d.ok}
            if floor:
                cycle.update(floor.cycle(where, plugins[where], i))
                errors += floor.errors[-1:] if not cycle["floor_ok"] else []
            runs[where].append(cycle)
            errors += att.errors
    return {"runs": runs, "errors": errors[:5]}


def _left(plugin: Plugin) -> dict:
    return {
        "veths": len(labmod.node_veths(plugin.node)),
        "ports": len(labmod.ports(plugin.bridge, plugin.node)),
        "store_files": len(bursts.store_files(plugin.store)),
        "nft_elements": labmod.node_nft_elements(plugin.node),
    }


def run(sp: Spawner, academy: str, lab: Lab, pods: int, cycles: int,
        progress=lambda _m: None) -> dict:
    assert pods <= 1000, "a bridge takes 1,023 ports: the pods, the cycle's, headroom"
    nodes = {where: lab.add_node(f"{PREFIX}-dn{where[0]}") for where in NETS}
    plugins = {where: _plugin(academy, lab, where, nodes[where]) for where in NETS}
    cycle_pods = {where: lab.add_netns(f"{PREFIX}-dq{where[0]}") for where in NETS}
    names = [f"{PREFIX}-d{j:04d}" for j in range(pods)]
    out = {"pods": pods, "cycles": cycles, "warmup_errors": []}
    try:
        paths = lab.add_netns_many(names)
        crowd = [Attachment(f"{PREFIX}-dp{j:04d}", paths[j]) for j in range(pods)]
        # Unrecorded: the first ADD on each node makes its bridge.
        for where, plugin in plugins.items():
            warm = Attachment(f"{PREFIX}-dw-{where}", cycle_pods[where])
            for command in ("ADD", "DEL"):
                cni.invoke(sp, plugin, command, warm)
            out["warmup_errors"] += warm.errors
        out["up"] = _one_by_one(sp, plugins["dense"], "ADD", crowd, progress)
        out["ports_up"] = len(labmod.ports(plugins["dense"].bridge, nodes["dense"]))
        progress(f"density: {cycles} cycles beside {pods} pods and on an empty bridge")
        nlfloor = lab.build_native("nlfloor")
        # The /20's last /24, far above the addresses the store hands out.
        addresses = {where: (f"{net.rsplit('.', 1)[0]}.{int(net.rsplit('.', 1)[1]) + 15}.250",
                             20, f"{net}.1") for where, net in NETS.items()}
        floor = Floor(sp, lab, nlfloor, "d", addresses) if nlfloor else None
        out["beside"] = _cycles(sp, plugins, cycle_pods, cycles, floor)
        out["down"] = _one_by_one(sp, plugins["dense"], "DEL", crowd, progress)
        out["left"] = {where: _left(plugin) for where, plugin in plugins.items()}
    finally:
        lab.del_netns_many(names)
        lab.del_netns_many([os.path.basename(p) for p in (*nodes.values(),
                                                           *cycle_pods.values())])
    return out


def _median(xs: list) -> float:
    return statistics.median(xs) if xs else float("nan")


def summary(r: dict | None) -> dict | None:
    """Medians, ratios and verdicts: the ADD and DEL ratios (dense / empty) against
    TARGET; a failure anywhere, a short series or a leftover is a MISS."""
    if not r or "beside" not in r:
        return None
    runs = r["beside"]["runs"]
    med = {where: {op: _median([c[f"{op}_ms"] for c in runs.get(where, []) if c["ok"]])
                   for op in ("add", "del")} for where in ("dense", "empty")}
    problems = list(r.get("warmup_errors") or []) + list(r["beside"].get("errors") or [])
    for phase in ("up", "down"):
        failures = (r.get(phase) or {}).get("failures", 0)
        if failures:
            problems.append(f"{failures} of {r['pods']} pods failed to come {phase}")
    for where in ("dense", "empty"):
        done = sum(1 for c in runs.get(where, []) if c["ok"])
        if done < r["cycles"]:
            problems.append(f"{where}: {done} of {r['cycles']} cycles succeeded")
    for where, left in (r.get("left") or {}).items():
        found = {k: v for k, v in left.items() if v}
        if found:
            problems.append(f"left on the {where} node: {found}")
    ratios, verdicts = {}, {}
    for op in ("add", "del"):
        ratio = med["dense"][op] / med["empty"][op] if med["empty"][op] else float("nan")
        ratios[op] = ratio
        if ratio != ratio:  # nan: nothing measured
            verdicts[op] = "MISS" if problems else "n/a"
        else:
            verdicts[op] = "PASS" if ratio <= TARGET and not problems else "MISS"
    # The kernel's part, where measured: its ratio, and academy's against it.
    floor, against_floor = floormod.medians(runs, ("dense", "empty"), ratios, _median)
    up = (r.get("up") or {}).get("per_pod_ms") or []
    up_cpu = (r.get("up") or {}).get("per_pod_cpu_ms") or []
    tenth = max(1, len(up) // 10)
    return {
        "median_ms": med, "ratio": ratios, "verdict": verdicts, "target": TARGET,
        "floor_ms": floor, "against_floor": against_floor,
        "up_first_tenth_ms": _median(up[:tenth]), "up_last_tenth_ms": _median(up[-tenth:]),
        # CPU (user + sys), which the load of a shared machine moves less than the wall.
        "up_first_tenth_cpu_ms": _median(up_cpu[:tenth]),
        "up_last_tenth_cpu_ms": _median(up_cpu[-tenth:]),
        "up_wall_s": (r.get("up") or {}).get("wall_ms", float("nan")) / 1e3,
        "down_wall_s": (r.get("down") or {}).get("wall_ms", float("nan")) / 1e3,
        "problems": problems,
    }


def markdown(r: dict | None, s: dict | None) -> str:
    if not r or not s:
        return ""
    n = r["pods"]
    m = s["median_ms"]
    lines = [
        f"### Density: {n} pods on one bridge", "",
        f"ADD and DEL of one more pod beside {n} pods ({r.get('ports_up', '?')} bridge ports), "
        f"against the same on an empty bridge ({r['cycles']} cycles each, interleaved):", "",
        f"| | beside {n} | empty bridge | ratio | target | |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for op in ("add", "del"):
        lines.append(f"| {op.upper()} | {m['dense'][op]:.2f} ms | {m['empty'][op]:.2f} ms "
                     f"| {s['ratio'][op]:.2f}x | <= {s['target']}x | {s['verdict'][op]} |")
    f = s.get("floor_ms")
    if f:
        lines += floormod.rows(f, ("dense", "empty"))
        a = s["against_floor"]
        lines += ["", f"academy's ratio against the kernel's own (the floor's, same node, "
                      f"same bridge, same cycles): ADD {a['add']:.2f}x, DEL {a['del']:.2f}x."]
    lines += [
        "",
        f"{n} pods brought up one after the other in {s['up_wall_s']:.1f} s (ADD median "
        f"{s['up_first_tenth_ms']:.2f} ms, {s['up_first_tenth_cpu_ms']:.2f} ms of CPU, over the "
        f"first tenth; {s['up_last_tenth_ms']:.2f} ms, {s['up_last_tenth_cpu_ms']:.2f} ms of CPU, "
        f"over the last), and down in {s['down_wall_s']:.1f} s.", "",
    ]
    lines += [f"- {p}" for p in s["problems"][:5]]
    return "\n".join(lines) + ("\n\n" if s["problems"] else "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--academy", required=True)
    p.add_argument("--pods", type=int, default=FULL["pods"])
    p.add_argument("--cycles", type=int, default=FULL["cycles"])
    args = p.parse_args()
    r = labmod.run_alone("density", args.academy, lambda sp, binary, lab: run(
        sp, binary, lab, args.pods, args.cycles, progress=lambda m: print(m, file=sys.stderr)))
    print(markdown(r, summary(r)))


if __name__ == "__main__":
    main()
