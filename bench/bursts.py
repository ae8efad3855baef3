"""Bursts on a node: many pods at once, each with ipMasq and a published port.

    python3 bench/bursts.py --academy target/release/academy --reference-dir /opt/cni/lab-bin

The reference chain is bridge (ipMasq, isGateway) + host-local + portmap, run as libcni
runs a chain (each plugin in turn, the previous one's result as prevResult, DEL in
reverse, runtimeConfig for the capabilities a plugin declares); academy's side is that
list after `academy convert` (one academy entry with ipMasq and the portMappings
capability). Each pod publishes its own hostPort.

- 110 and 250 ADDs started at once (one netns each), then their DELs at once, for each
  side, the side going first alternating: total wall time (start of the first to end of
  the last), failures, distinct addresses, and what the DELs left behind on the node
  (veths, store files, nf_tables set and map elements, the reference's per-container
  iptables chains). Nothing is hidden: a failed ADD or a leftover is in the table.
- While the 250 pods are up: ADD+DEL cycles of one more pod on that crowded bridge
  against the same on an empty bridge (another node, same config), interleaved; the
  ADD medians' ratio. For academy also on a bridge with one resident pod: on an empty
  bridge academy's ADD also makes the network's own nf_tables objects (the last DEL
  removes them), which the other two find made. The reference's crowded series stops
  once it has spent CROWD_BUDGET_S.

Each side runs on private nodes (lab.add_node: its own netns standing in for the host,
with its own bridge, nf_tables and iptables), so that the 250 pods' ports, elements and
chains are the only ones there and nobody else's (and the empty node is empty for
real: nf_tables' maps are per netns). The plugins are spawned into the node by
spawnstat before its clock starts, so they are measured as bench.py measures the
host's. Each burst operation is bounded: after DEADLINE_S every process still running
in the node is killed and counted as failed. Also a phase of bench.py.
"""

import argparse
import json
import os
import resource
import signal
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cni  # noqa: E402
import lab as labmod  # noqa: E402
from lab import PREFIX, Lab, sh  # noqa: E402
from proc import Spawner  # noqa: E402

# /20s of 10.242.0.0/16 (the floor keeps 10.242.0.0/20); each node is private anyway.
NET_BURST = {"reference": "10.242.112", "academy": "10.242.128"}
NET_EMPTY = {"reference": "10.242.144", "academy": "10.242.160"}
NET_ONE = {"academy": "10.242.176"}  # academy's bridge with a single resident pod
SIDES = ("reference", "academy")
FULL = dict(sizes=[110, 250], crowd_cycles=20)
QUICK = dict(sizes=[20, 40], crowd_cycles=3)
# Per burst operation (all ADDs, or all DELs). The reference's 250 ADDs have taken 200 s
# here (each plugin execs iptables under the one xtables lock).
DEADLINE_S = 420.0
CROWD_BUDGET_S = 90.0  # the reference's crowded cycles stop after this much
SETTLE_S = 0.02  # as bench.py: each timed cycle operation waits this long first
BETWEEN_S = 2.0  # after a burst, for the kernel's tail of 250 veths' removal
BASE_PORT, CYCLE_PORT = 20000, 30000


def reference_list(name: str, bridge: str, net: str, store: str) -> dict:
    """bridge with ipMasq + host-local, then portmap."""
    return {"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": True,
         "ipam": {"type": "host-local", "dataDir": store,
                  "ranges": [[{"subnet": f"{net}.0/20"}]]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]}


def mapping(port: int) -> dict:
    return {"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]}


class NodeChain:
    """A conflist run plugin by plugin on a node, through the Spawner (timed by
    spawnstat). The store is the network's directory, to count what DEL left."""

    def __init__(self, sp: Spawner, conflist: dict, cni_path: str, node: str, store: str,
                 bridge: str):
        self.sp, self.list, self.cni_path, self.node = sp, conflist, cni_path, node
        self.store, self.bridge = store, bridge

    def _one(self, plugin: dict, command: str, cid: str, netns: str, caps: dict,
             prev: dict | None):
        conf = dict(plugin, name=self.list["name"], cniVersion=self.list["cniVersion"])
        wanted = {k: v for k, v in caps.items() if plugin.get("capabilities", {}).get(k)}
        if wanted:
            conf["runtimeConfig"] = wanted
        if prev:
            conf["prevResult"] = prev
        env = dict(cni.BASE_ENV, CNI_COMMAND=command, CNI_CONTAINERID=cid, CNI_NETNS=netns,
                   CNI_IFNAME="eth0", CNI_PATH=self.cni_path)
        return self.sp.run([os.path.join(self.cni_path, plugin["type"])], env,
                           json.dumps(conf).encode(), self.node)

    def add(self, cid: str, netns: str, caps: dict) -> dict:
        """ADD through the list; stops at the first failure, as libcni does."""
        prev, wall, error = None, 0.0, None
        spent = _Spent()
        for plugin in self.list["plugins"]:
            run = self._one(plugin, "ADD", cid, netns, caps, prev)
            wall += run.wall_ms
            spent.add(run)
            if not run.ok:
                error = _error(plugin["type"], "ADD", run)
                break
            try:
                prev = json.loads(run.stdout)
                address = cni.address(prev)
            except (ValueError, KeyError, IndexError, TypeError):
                error = f"{plugin['type']} ADD: no address in {run.stdout[:200]!r}"
                break
        ok = error is None
        return {"ok": ok, "wall_ms": wall, "result": prev if ok else None,
                "address": address if ok else None, "error": error, **spent.figures()}

    def delete(self, cid: str, netns: str, caps: dict, result: dict | None) -> dict:
        """DEL through the list in reverse; every plugin runs even after a failure."""
        wall, errors = 0.0, []
        spent = _Spent()
        for plugin in reversed(self.list["plugins"]):
            run = self._one(plugin, "DEL", cid, netns, caps, result)
            wall += run.wall_ms
            spent.add(run)
            if not run.ok:
                errors.append(_error(plugin["type"], "DEL", run))
        return {"ok": not errors, "wall_ms": wall, "error": "; ".join(errors) or None,
                **spent.figures()}


class _Spent:
    """A chain's plugins' figures as one: CPU times and page faults added, the largest
    peak RSS (spawnstat's, per process)."""

    def __init__(self):
        self.maxrss_kib, self.user_ms, self.sys_ms, self.faults = 0, 0.0, 0.0, 0

    def add(self, run):
        self.maxrss_kib = max(self.maxrss_kib, run.maxrss_kib)
        self.user_ms += run.user_ms
        self.sys_ms += run.sys_ms
        self.faults += run.faults

    def figures(self) -> dict:
        return {"maxrss_kib": self.maxrss_kib, "user_ms": round(self.user_ms, 3),
                "sys_ms": round(self.sys_ms, 3), "faults": self.faults}


def _error(kind: str, command: str, run) -> str:
    return (f"{kind} {command} rc={run.rc}: {run.stdout.decode(errors='replace')[:200]} "
            f"{run.stderr.decode(errors='replace')[:200]}").strip()


def left_on(chain: NodeChain) -> dict:
    """What is on a chain's node now: veths, store files, nf_tables elements, the
    reference's per-container iptables chains."""
    return {
        "veths": len(labmod.node_veths(chain.node)),
        "store_files": len(store_files(chain.store)),
        "nft_elements": labmod.node_nft_elements(chain.node),
        "iptables_chains": len(labmod.node_cni_chains(chain.node)),
    }


def store_files(store: str) -> list:
    """Reservations in a store (address files, either plugin's) and academy's holder
    index entries; not the lock or host-local's last_reserved_ip.*."""
    try:
        names = os.listdir(store)
    except FileNotFoundError:
        return []
    found = [n for n in names if n[:1].isdigit() or ":" in n]
    try:
        found += [f"holders/{n}" for n in os.listdir(os.path.join(store, "holders"))]
    except (FileNotFoundError, NotADirectoryError):
        pass
    return found


def at_once(chain: NodeChain, command: str, pods: list, results: list | None,
            deadline_s: float) -> dict:
    """len(pods) operations started together (one thread each, released at once by a
    barrier); the wall from the release to the last one's end. Past the deadline,
    whatever still runs on the node is killed (it then counts as failed)."""
    n = len(pods)
    out: list = [None] * n
    ends = [0.0] * n
    gate = threading.Barrier(n + 1)

    def work(j):
        cid, netns = pods[j]
        gate.wait()
        try:
            if command == "ADD":
                out[j] = chain.add(cid, netns, mapping(BASE_PORT + j))
            else:
                out[j] = chain.delete(cid, netns, mapping(BASE_PORT + j), results[j])
        except Exception as e:  # noqa: BLE001 (a bench thread must report, not vanish)
            out[j] = {"ok": False, "wall_ms": 0.0, "error": f"{type(e).__name__}: {e}"}
        ends[j] = time.perf_counter()

    threads = [threading.Thread(target=work, args=(j,), daemon=True) for j in range(n)]
    for t in threads:
        t.start()
    gate.wait()
    t0 = time.perf_counter()
    killed = 0
    for t in threads:
        while t.is_alive():
            t.join(timeout=max(0.1, t0 + deadline_s - time.perf_counter()))
            if t.is_alive() and time.perf_counter() > t0 + deadline_s:
                killed += labmod.kill_in_netns(chain.node)
    wall = (max(ends) - t0) * 1e3
    errors = [o["error"] for o in out if not o["ok"]]
    res = {
        "wall_ms": round(wall, 1),
        "failures": len(errors),
        "killed_at_deadline": killed,
        "per_pod_ms": {"median": round(statistics.median(o["wall_ms"] for o in out), 2),
                       "max": round(max(o["wall_ms"] for o in out), 2)},
        "errors": errors[:5],
    }
    if command == "ADD":
        addrs = [o["address"] for o in out if o["ok"]]
        res["distinct_addresses"] = len(set(addrs))
    return res, out


def burst(chain: NodeChain, pods: list, deadline_s: float, between=None) -> dict:
    """The ADDs at once, then (after `between`, given the pods' results) the DELs at once,
    then what is left on the node."""
    add, outs = at_once(chain, "ADD", pods, None, deadline_s)
    add["veths_after"] = len(labmod.node_veths(chain.node))
    extra = between() if between else None
    dele, _ = at_once(chain, "DEL", pods, [o.get("result") for o in outs], deadline_s)
    res = {"parallel": len(pods), "ADD": add, "DEL": dele, "left": left_on(chain),
           "loadavg_after": os.getloadavg()}
    if extra is not None:
        res["crowded"] = extra
    if res["left"]["veths"]:
        # Do not let one burst's debris fail the next one's ADDs (it is reported above).
        for _, netns in pods:
            sh("ip", "-n", os.path.basename(netns), "link", "del", "eth0", check=False)
    return res


def crowd_cycles(series: list, n: int, budget_s: float | None) -> dict:
    """n ADD+DEL cycles of one more pod on each (key, chain, pod netns) of `series`
    (the crowded node, the empty one, for academy also the one with a single resident
    pod), interleaved, the order rotating; `budget_s` stops the series early."""
    runs = {key: [] for key, _, _ in series}
    errors = []
    spent = 0.0
    stopped = None
    for i in range(n):
        k = i % len(series)
        for key, chain, pod in series[k:] + series[:k]:
            cid = f"{PREFIX}-cc-{key}-{i}"
            time.sleep(SETTLE_S)
            a = chain.add(cid, pod, mapping(CYCLE_PORT))
            time.sleep(SETTLE_S)
            d = chain.delete(cid, pod, mapping(CYCLE_PORT), a["result"])
            spent += a["wall_ms"] + d["wall_ms"]
            runs[key].append({"add_ms": round(a["wall_ms"], 3), "del_ms": round(d["wall_ms"], 3),
                              "ok": a["ok"] and d["ok"]})
            errors += [e for e in (a["error"], d["error"]) if e]
        if budget_s is not None and spent > budget_s * 1e3:
            stopped = f"stopped after {i + 1} cycles: over {budget_s:.0f} s spent"
            break
    return {"runs": runs, "errors": errors[:5], "stopped": stopped}


def run(sp: Spawner, academy: str, reference_dir: str, lab: Lab, sizes: list,
        n_crowd: int, deadline_s: float = DEADLINE_S, progress=lambda _m: None) -> dict:
    _raise_fd_limit(8 * max(sizes) + 256)
    cni_path = lab.scratch("bursts-bin")
    for name in ("bridge", "host-local", "portmap"):
        os.symlink(os.path.join(os.path.abspath(reference_dir), name),
                   os.path.join(cni_path, name))
    aca_bin = os.path.join(cni_path, "academy")
    with open(academy, "rb") as src, open(aca_bin, "wb") as dst:
        dst.write(src.read())
    os.chmod(aca_bin, 0o755)

    chains = {}
    for where, nets in (("burst", NET_BURST), ("empty", NET_EMPTY), ("one", NET_ONE)):
        for side in nets:
            tag = f"{where[0]}{side[0]}"  # br, ba, er, ea
            name, bridge = f"{PREFIX}-{where}-{side[:3]}", f"{PREFIX}br-n{tag}"
            data_dir = lab.scratch(f"store-n{tag}")
            conflist = reference_list(name, bridge, nets[side], data_dir)
            if side == "academy":
                conflist = _convert(aca_bin, conflist, lab.scratch("bursts"))
                # Every ADD on the empty bridge stays a network's first (its objects
                # made), and the DELs leave nothing: no grace (releaseUnusedAfter).
                for entry in conflist["plugins"]:
                    if entry.get("type") == "academy":
                        entry["releaseUnusedAfter"] = 0
            node = lab.add_node(f"{PREFIX}-n{tag}")
            chains[(where, side)] = NodeChain(sp, conflist, cni_path, node,
                                              os.path.join(data_dir, name), bridge)
    cycle_pods = {key: lab.add_netns(f"{PREFIX}-q{key[0][0]}{key[1][0]}") for key in chains}
    names = [f"{PREFIX}-p{j:03d}" for j in range(max(sizes))]
    paths = lab.add_netns_many(names)
    out = {"sizes": sizes, "crowd_cycles": n_crowd, "deadline_s": deadline_s,
           "converted_plugins": [p["type"] for p in chains[("burst", "academy")].list["plugins"]],
           "bursts": {}, "warmup_errors": []}
    try:
        # Unrecorded: the first ADD makes the bridge (and academy's or iptables' tables).
        for key, chain in chains.items():
            a = chain.add(f"{PREFIX}-warm", cycle_pods[key], mapping(CYCLE_PORT))
            d = chain.delete(f"{PREFIX}-warm", cycle_pods[key], mapping(CYCLE_PORT), a["result"])
            out["warmup_errors"] += [e for e in (a["error"], d["error"]) if e]
        # The one node's resident: its network's objects exist while the cycles run.
        resident = lab.add_netns(f"{PREFIX}-qres")
        res_add = chains[("one", "academy")].add(f"{PREFIX}-resident", resident,
                                                 mapping(CYCLE_PORT + 1))
        if res_add["error"]:
            out["warmup_errors"].append(res_add["error"])
        for s, size in enumerate(sizes):
            pods = [(f"{PREFIX}-bu{size}-{j:03d}", paths[j]) for j in range(size)]
            for side in SIDES[s % 2:] + SIDES[:s % 2]:
                progress(f"bursts: {size} at once, {side}")
                between = None
                if size == max(sizes) and n_crowd:
                    def between(side=side):
                        progress(f"bursts: {n_crowd} cycles beside {size} pods, {side}")
                        series = [(where, chains[(where, side)], cycle_pods[(where, side)])
                                  for where in ("burst", "empty", "one")
                                  if (where, side) in chains]
                        return crowd_cycles(series, n_crowd,
                                            CROWD_BUDGET_S if side == "reference" else None)
                out["bursts"].setdefault(str(size), {})[side] = burst(
                    chains[("burst", side)], pods, deadline_s, between)
                time.sleep(BETWEEN_S)
        d = chains[("one", "academy")].delete(f"{PREFIX}-resident", resident,
                                              mapping(CYCLE_PORT + 1), res_add["result"])
        if d["error"]:
            out["warmup_errors"].append(d["error"])
        out["empty_left"] = {f"{where} {side}": left_on(chains[(where, side)])
                             for where, side in chains if where != "burst"}
    finally:
        lab.del_netns_many(names)
    return out


def _convert(academy: str, conflist: dict, scratch: str) -> dict:
    path = os.path.join(scratch, f"{conflist['name']}.conflist")
    with open(path, "w") as f:
        json.dump(conflist, f)
    return json.loads(sh(academy, "convert", path).stdout)


def _raise_fd_limit(want: int):
    """Every spawn in flight holds a few fds (stdin pipe, three memfds): 250 at once
    needs more than a default soft limit of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def _exit_on_signal(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds through main's finally: the clean-up


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--academy", required=True)
    p.add_argument("--reference-dir", required=True)
    p.add_argument("--sizes", default=",".join(map(str, FULL["sizes"])))
    p.add_argument("--crowd-cycles", type=int, default=FULL["crowd_cycles"])
    p.add_argument("--out", help="write the JSON here")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bursts: needs root")
    import report  # noqa: PLC0415 (the markdown lives with the other tables)
    lab = Lab(args.academy)
    lab.lock()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    try:
        lab.preclean()
        sp = Spawner(lab.build_native("spawnstat"))
        r = run(sp, os.path.abspath(args.academy), args.reference_dir, lab,
                [int(x) for x in args.sizes.split(",")], args.crowd_cycles,
                progress=lambda m: print(m, file=sys.stderr))
        print(json.dumps(r, indent=1))
        print("\n".join(report.bursts_rows(r)))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(r, f, indent=1)
    finally:
        lab.cleanup()


if __name__ == "__main__":
    main()
