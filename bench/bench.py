#!/usr/bin/env python3
"""academy against the reference bridge + host-local, side by side in one run.

    python3 bench/bench.py --academy target/release/academy --reference-dir /opt/cni/lab-bin

Both plugins are invoked directly, as a runtime does (CNI_* in the environment, config
on stdin), never through cnitool, and interleaved cycle by cycle (the order rotates) so
that the noise of this shared machine falls on both alike. In the same run it measures
the kernel floors the plugins are judged against, counts setns calls and netlink round
trips, runs a parallel burst and the IPAM scaling series, whole chains with port
mapping (chains.py), with --baseline an older academy in the same cycles and GC
(baseline.py), and 110 and 250 pods at once on a node (bursts.py), then prints a table of
ratios with the performance targets as PASS/MISS (informational: this is a benchmark,
not a test, nothing here fails on time) and writes bench/results/: latest.json (raw
samples, machine), latest.md (the table, ready for the README) and scaling.svg.

Needs root, iproute2 and strace; a C compiler for the two small native helpers
(spawnstat for clean RSS figures, nlfloor for the tight ADD floor); perf is optional.
"""

import argparse
import atexit
import gc
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import baseline  # noqa: E402
import bursts  # noqa: E402
import chains  # noqa: E402
import chart  # noqa: E402
import cni  # noqa: E402
import density  # noqa: E402
import grace  # noqa: E402
import provenance  # noqa: E402
import report  # noqa: E402
import scrape  # noqa: E402
import solo  # noqa: E402
import trace  # noqa: E402
import waiting  # noqa: E402
from cni import Attachment, Plugin  # noqa: E402
from lab import Lab, ports, sh  # noqa: E402
from proc import Run, Spawner  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# One /16 per use, inside the 10.240.0.0/16 .. 10.246.0.0/16 this bench may use; the
# floor takes 10.242.0.0/20 only, and the other /20s of 10.242 go to the networks of the
# private nodes (baseline.py, bursts.py).
NET_ACADEMY, NET_REFERENCE, NET_FLOOR = "10.240", "10.241", "10.242"
FLOOR_PREFIX = 20
NET_SCALE_ACADEMY, NET_SCALE_HOSTLOCAL = "10.243", "10.244"
NET_MASQ_ACADEMY, NET_MASQ_REFERENCE = "10.245", "10.246"
# The last /20 of 10.242: academy's network with a bandwidth limit, on the host like the
# plain one it is compared with.
NET_BW_ACADEMY, BW_PREFIX = "10.242.240", 20
# docs/bandwidth.md: 8 Mbit/s each way, 80 kbit buckets, through the capability (what
# containerd and CRI-O send for a pod's bandwidth annotations).
BANDWIDTH = {"ingressRate": 8000000, "ingressBurst": 80000,
             "egressRate": 8000000, "egressBurst": 80000}

FULL = dict(cycles=100, warmup=3, lifetime_cycles=15, burst=50, burst_rounds=2,
            points=[0, 1000, 8000, 32000], scale_cycles=11,
            gc_attachments=50, gc_rounds=4, restore_attachments=250, restore_rounds=4,
            burst_sizes=[110, 250], crowd_cycles=20,
            solo_cycles=solo.FULL["cycles"], scrape_networks=scrape.FULL["networks"])
QUICK = dict(cycles=6, warmup=1, lifetime_cycles=2, burst=20, burst_rounds=1,
             points=[0, 1000, 8000], scale_cycles=3,
             gc_attachments=10, gc_rounds=1, restore_attachments=20, restore_rounds=1,
             burst_sizes=[20, 40], crowd_cycles=3,
            solo_cycles=solo.QUICK["cycles"], scrape_networks=scrape.QUICK["networks"])
HOSTLOCAL_BUDGET_S = 60.0  # per scaling point: beyond it host-local's series stops
# Bringing a bridged veth up leaves the kernel busy for a few ms after the request has
# been answered (addrconf, bridge port set-up): a /bin/true spawned then takes 1-4 ms
# instead of 0.6. Each timed operation waits this long first, so that it pays for its
# own work and not for the tail of the previous one.
SETTLE_S = 0.02


def ip_at(net: str, offset: int) -> str:
    """The address `offset` places into the /16 `net`."""
    return f"{net}.{offset >> 8}.{offset & 255}"


def offset_in(address: str) -> int:
    """ip_at's inverse: an address's offset into its /16."""
    c, d = address.split(".")[2:]
    return (int(c) << 8) | int(d)


def rotate(items: list, i: int) -> list:
    """Cycle i's order: each item goes first in turn, so none is always warmest."""
    k = i % len(items)
    return items[k:] + items[:k]


# ---- set-up ----------------------------------------------------------------------


class Bench:
    """What every phase needs: the lab, the spawner, the plugins and the floors."""

    def __init__(self, args, lab: Lab):
        self.args = args
        self.lab = lab
        launcher = lab.build_native("spawnstat")
        self.sp = Spawner(launcher)
        self.nlfloor = lab.build_native("nlfloor")
        academy_bin = lab.snapshot(args.academy, "academy")
        self.academy_sha = provenance.sha256(academy_bin)
        ref_dir = os.path.abspath(args.reference_dir)

        self.ns = {
            "academy": lab.add_netns("bnch-a"),
            "reference": lab.add_netns("bnch-r"),
        }
        self.plugins = {
            "academy": self.academy(academy_bin, "bnchbr-a", NET_ACADEMY, "bnch-academy"),
            "reference": self.reference(ref_dir, "bnchbr-r", NET_REFERENCE, "bnch-reference"),
        }
        # The same two with ipMasq: academy programs nf_tables over netlink, the
        # reference execs iptables (iptables-nft on Debian 12). Cycles only.
        self.ns["academy-masq"] = lab.add_netns("bnch-am")
        self.ns["reference-masq"] = lab.add_netns("bnch-rm")
        self.masq = {
            "academy-masq": self.academy(academy_bin, "bnchbr-am", NET_MASQ_ACADEMY,
                                         "bnch-academy-masq", self.lab.scratch("store-am")),
            "reference-masq": self.reference(ref_dir, "bnchbr-rm", NET_MASQ_REFERENCE,
                                             "bnch-reference-masq",
                                             self.lab.scratch("store-rm")),
        }
        for plugin in self.masq.values():
            plugin.conf["ipMasq"] = True
        # academy with a bandwidth limit, against the plain network (cycles only).
        self.ns["academy-bw"] = lab.add_netns("bnch-abw")
        bw = self.academy(academy_bin, "bnchbr-abw", None, "bnch-academy-bw",
                          self.lab.scratch("store-abw"),
                          subnet=(f"{NET_BW_ACADEMY}.0/{BW_PREFIX}", f"{NET_BW_ACADEMY}.1"))
        bw.conf.update(capabilities={"bandwidth": True},
                       runtimeConfig={"bandwidth": dict(BANDWIDTH)})
        self.bw = {"academy-bw": bw}
        self.floors = Floors(self, lab)
        # --baseline: the current binary and the older one, each on a private node of
        # its own (baseline.py), in the same cycles.
        self.versus = None
        self.baseline_sha = None
        if args.baseline:
            baseline_bin = lab.snapshot(args.baseline, "baseline")
            self.baseline_sha = provenance.sha256(baseline_bin)
            self.versus = baseline.Versus(lab, academy_bin, baseline_bin)
        # Each network's resident attachment, in a netns of its own (cycles()).
        self.resident_ns = {k: lab.add_netns(f"bnch-rs-{k}") for k in networks(self)}

    def academy(self, binary, bridge, net, name, data_dir=None, subnet=None) -> Plugin:
        """academy on the /16 `net`, or on `subnet` (its CIDR and gateway)."""
        data_dir = data_dir or self.lab.scratch("store-academy")
        self.lab.track_bridge(bridge)
        cidr, gateway = subnet or (f"{net}.0.0/16", f"{net}.0.1")
        # releaseUnusedAfter 0: the first-ADD table times a network's very first ADD and
        # last DEL (its objects made and released each cycle); the residents keep every
        # other cycle steady, so the grace would change nothing there.
        conf = {
            "cniVersion": "1.0.0", "name": name, "type": "academy", "bridge": bridge,
            "subnet": cidr, "gateway": gateway, "dataDir": data_dir,
            "releaseUnusedAfter": 0,
        }
        return Plugin("academy", binary, conf, os.path.dirname(binary), bridge,
                      os.path.join(data_dir, name))

    def reference(self, ref_dir, bridge, net, name, data_dir=None) -> Plugin:
        data_dir = data_dir or self.lab.scratch("store-hostlocal")
        self.lab.track_bridge(bridge)
        conf = {
            "cniVersion": "1.0.0", "name": name, "type": "bridge", "bridge": bridge,
            "isGateway": True,
            "ipam": {"type": "host-local", "subnet": f"{net}.0.0/16", "dataDir": data_dir},
        }
        return Plugin("reference", os.path.join(ref_dir, "bridge"), conf, ref_dir, bridge,
                      os.path.join(data_dir, name))


class Floors:
    """The kernel's own cost of what the plugins ask for, measured the same way.

    ADD, two ways: `ip -batch` on the host then `ip -n NS -batch` in the netns (the two
    processes' times added), and nlfloor, one small C process making academy's exact
    netlink requests. DEL: `ip link del` of a veth whose peer is in a netns, bare (made
    by `ip link add ... peer name eth0 netns NS`, the issue's floor) and wired (the
    ip-batch floor's veth: up, on the bridge, addressed and routed inside, like a
    plugin's). Spawn: /bin/true, the cost of any process at all."""

    BRIDGE = "bnchbr-f"

    def __init__(self, bench: Bench, lab: Lab):
        self.sp = bench.sp
        self.nlfloor = bench.nlfloor
        self.ns_ip = lab.add_netns("bnch-fip")
        self.ns_c = lab.add_netns("bnch-fc")
        self.ns_bare = lab.add_netns("bnch-fd")
        lab.add_bridge(self.BRIDGE, f"{NET_FLOOR}.0.1/{FLOOR_PREFIX}")
        self.env = dict(cni.BASE_ENV)

    def _ip(self, *argv, stdin: str = "") -> Run:
        return self.sp.run(["/usr/sbin/ip", *argv], self.env, stdin.encode())

    def add_ip(self, i: int) -> Run:
        host, ns = f"bnchfi{i:06x}", os.path.basename(self.ns_ip)
        host_side = self._ip("-batch", "-", stdin=(
            f"link add {host} up master {self.BRIDGE} type veth peer name eth0 netns {ns}\n"
            f"link set dev {host} alias academy:floor:c{i}:eth0\n"))
        inside = self._ip("-n", ns, "-batch", "-", stdin=(
            "link set dev eth0 up\n"
            f"addr add {ip_at(NET_FLOOR, i + 2)}/{FLOOR_PREFIX} dev eth0\n"
            f"route add default via {NET_FLOOR}.0.1 dev eth0\n"))
        return _sum_runs(host_side, inside)

    def add_c(self, i: int) -> Run | None:
        if not self.nlfloor:
            return None
        return self.sp.run(
            [self.nlfloor, self.BRIDGE, f"bnchfc{i:06x}", f"academy:floor:c{i}:eth0",
             self.ns_c, "eth0", ip_at(NET_FLOOR, i + 2), str(FLOOR_PREFIX), f"{NET_FLOOR}.0.1"],
            self.env)

    def spawn(self) -> Run:
        return self.sp.run(["/bin/true"], self.env)

    def prepare_bare(self, i: int):
        ns = os.path.basename(self.ns_bare)
        sh("ip", "link", "add", f"bnchd{i:06x}", "type", "veth", "peer", "name", "eth0",
           "netns", ns)

    def del_bare(self, i: int) -> Run:
        return self._ip("link", "del", f"bnchd{i:06x}")

    def del_wired(self, i: int) -> Run:
        return self._ip("link", "del", f"bnchfi{i:06x}")

    def del_c(self, i: int):
        if self.nlfloor:
            sh("ip", "link", "del", f"bnchfc{i:06x}", check=False)


def _sum_runs(a: Run, b: Run) -> Run:
    """Two processes run back to back, as one measurement."""
    return Run(
        rc=a.rc or b.rc,
        wall_ms=a.wall_ms + b.wall_ms,
        maxrss_kib=max(a.maxrss_kib, b.maxrss_kib),
        user_ms=a.user_ms + b.user_ms,
        sys_ms=a.sys_ms + b.sys_ms,
        stdout=a.stdout + b.stdout,
        stderr=a.stderr + b.stderr,
        faults=a.faults + b.faults,
    )


# ---- phase 1: ADD, CHECK, DEL cycles ------------------------------------------------


def cycles(b: Bench, n: int, warmup: int, lifetime: int = 0) -> dict:
    """n recorded cycles (after `warmup` unrecorded ones, which also create the
    plugins' bridges). Each cycle: every ADD (plugins and floors), both CHECKs, every
    DEL, each group in a rotating order.

    Steady state: before the recorded cycles every network gets one resident
    attachment of its own (academy's, the reference's, the baseline's), DELed after
    them, so each cycle's ADD is not the network's first nor its DEL the last. academy
    makes a network's own nf_tables objects with its first ADD and deletes them with its
    last DEL; that cost is measured apart, before the residents come: `lifetime` cycles
    on the empty networks (the baseline's when there is one, else academy's own), series
    `<key>.ADD.first` and `<key>.DEL.last`."""
    series: dict[str, list] = {}
    errors: list[str] = []
    total = n + warmup

    def record(name, run, keep=True, label=""):
        if run is None:
            return
        if isinstance(run, dict):  # fs_create's probe: a sample already, never failing
            series.setdefault(name, []).append(run)
            return
        if keep:
            series.setdefault(name, []).append(run.sample())
        if not run.ok:
            errors.append(f"{label} {name}: rc={run.rc} "
                          f"{run.stdout.decode(errors='replace')[:200]}"
                          f"{run.stderr.decode(errors='replace')[:200]}")

    for i in range(warmup):
        one_cycle(b, i, False, record)
        _progress(f"cycles: warm-up {i + 1}/{warmup}")
    first_last(b, lifetime, warmup, record)
    resident = residents(b)
    for op in resident["errors"]:
        errors.append(f"resident {op}")
    for i in range(warmup, total):
        one_cycle(b, i, True, record)
        _progress(f"cycles {i + 1 - warmup}/{n}")
    errors.extend(f"resident {op}" for op in residents_gone(b, resident))
    _progress_done()
    return {"series": series, "errors": errors, "leftovers": leftovers(b),
            "residents": sorted(resident["atts"]), "lifetime_cycles": lifetime}


def networks(b: Bench) -> dict:
    """Every network in the cycles: key -> plugin (academy's, the reference's, the
    ipMasq pair, the bandwidth-limited one, the baseline comparison's)."""
    return {**b.plugins, **b.masq, **b.bw, **(b.versus.plugins if b.versus else {})}


def residents(b: Bench) -> dict:
    """One attachment on each network, in a netns of its own, ADDed (untimed) before
    the recorded cycles."""
    atts, errs = {}, []
    for k, plugin in networks(b).items():
        att = Attachment(cid=f"bnch-resident-{k}", netns=b.resident_ns[k])
        run = cni.invoke(b.sp, resident_plugin(b, k, plugin), "ADD", att)
        if run.ok:
            atts[k] = att
        else:
            errs.append(f"{k}.ADD: {att.errors[-1][:300]}")
    # The limited network's ADD shapes: its result lists the ifb (docs/bandwidth.md).
    shaped = atts.get("academy-bw")
    if shaped and not any(i.get("name", "").startswith("bwp")
                          for i in shaped.result.get("interfaces", [])):
        errs.append("academy-bw.ADD: no ifb in the result: the ADD did not shape")
    return {"atts": atts, "errors": errs}


def residents_gone(b: Bench, resident: dict) -> list:
    """The residents' DELs (untimed), after the cycles; what failed."""
    nets, errs = networks(b), []
    for k, att in resident["atts"].items():
        if not cni.invoke(b.sp, resident_plugin(b, k, nets[k]), "DEL", att).ok:
            errs.append(f"{k}.DEL: {att.errors[-1][:300]}")
    return errs


def resident_plugin(b: Bench, k: str, plugin: Plugin) -> Plugin:
    """What network k's resident is ADDed and DELed with: the network's own plugin, but
    where the baseline comparison's network publishes a port, one publishing the
    resident's own port."""
    return b.versus.resident(k) if b.versus and k in b.versus.plugins else plugin


def lifetime_keys(b: Bench) -> list:
    """Where a network's first ADD and last DEL are timed: the baseline comparison's
    plain and ipMasq networks when there is a baseline, else academy's."""
    return list(baseline.LIFETIME_KEYS) if b.versus else ["academy", "academy-masq"]


def first_last(b: Bench, n: int, i0: int, record):
    """n cycles of one ADD and one DEL on each lifetime network, empty before and after:
    each ADD is the network's first (academy makes its nf_tables objects), each DEL its
    last (academy deletes them). Interleaved, the order rotating."""
    nets = networks(b)
    netns = {**b.ns, **(b.versus.netns if b.versus else {})}
    keys = lifetime_keys(b)
    for c in range(n):
        atts = {k: Attachment(cid=f"bnch-l{k[0]}{'m' if 'masq' in k else ''}-{c:04d}",
                              netns=netns[k]) for k in keys}
        for k in rotate(keys, c):
            record(f"{k}.ADD.first",
                   settled(lambda: cni.invoke(b.sp, nets[k], "ADD", atts[k])), label=f"first {c}")
        for k in rotate(keys, c):
            record(f"{k}.DEL.last",
                   settled(lambda: cni.invoke(b.sp, nets[k], "DEL", atts[k])), label=f"last {c}")
        _progress(f"cycles: first ADD, last DEL {c + 1}/{n}")


def one_cycle(b: Bench, i: int, keep: bool, record):
    """Cycle i: every ADD, both CHECKs, every DEL, each group in a rotating order."""
    label = f"cycle {i}"
    for k in rotate(list(b.plugins), i):
        if keep and os.path.isdir(b.plugins[k].store):
            record(f"fs.create.{k}", settled(lambda: fs_create(b.plugins[k].store, i)))

    atts = {k: Attachment(cid=f"bnch-{k[:3]}-{i:04d}", netns=b.ns[k]) for k in b.plugins}
    atts.update({k: Attachment(cid=f"bnch-{k[:3]}m-{i:04d}", netns=b.ns[k]) for k in b.masq})
    atts.update({k: Attachment(cid=f"bnch-abw-{i:04d}", netns=b.ns[k]) for k in b.bw})
    versus = b.versus.plugins if b.versus else {}
    atts.update({k: Attachment(cid=f"bnch-v{baseline.tag_of(k)}-{i:04d}",
                               netns=b.versus.netns[k]) for k in versus})
    others = {**b.masq, **b.bw, **versus}
    adds = {
        "academy.ADD": lambda: cni.invoke(b.sp, b.plugins["academy"], "ADD", atts["academy"]),
        "reference.ADD": lambda: cni.invoke(b.sp, b.plugins["reference"], "ADD", atts["reference"]),
        "floor.add_ip": lambda: b.floors.add_ip(i),
        "floor.add_c": lambda: b.floors.add_c(i),
        "floor.spawn": b.floors.spawn,
    }
    for k in others:
        adds[f"{k}.ADD"] = lambda k=k: cni.invoke(b.sp, others[k], "ADD", atts[k])
    for name in rotate(list(adds), i):
        record(name, settled(adds[name]), keep, label)

    checked = {**b.plugins, **versus}
    for k in rotate(list(checked), i):
        if atts[k].result is not None:
            record(f"{k}.CHECK",
                   settled(lambda: cni.invoke(b.sp, checked[k], "CHECK", atts[k])), keep, label)

    b.floors.prepare_bare(i)
    dels = {
        "academy.DEL": lambda: cni.invoke(b.sp, b.plugins["academy"], "DEL", atts["academy"]),
        "reference.DEL": lambda: cni.invoke(b.sp, b.plugins["reference"], "DEL", atts["reference"]),
        "floor.del_bare": lambda: b.floors.del_bare(i),
        "floor.del_wired": lambda: b.floors.del_wired(i),
    }
    for k in others:
        dels[f"{k}.DEL"] = lambda k=k: cni.invoke(b.sp, others[k], "DEL", atts[k])
    for name in rotate(list(dels), i):
        record(name, settled(dels[name]), keep, label)
    b.floors.del_c(i)


def fs_create(directory: str, i: int) -> dict:
    """What one new file costs in a store's directory (create, write, close: the
    plugins' own sequence), in-process. On this machine's ext4 it ranges from tens of
    microseconds to a millisecond depending on where and when, so it is measured here,
    in the same run, to tell the store's share of an ADD."""
    path = os.path.join(directory, f".bnch-probe-{i}")
    t0 = time.perf_counter_ns()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.write(fd, b"probe\r\neth0")
    os.close(fd)
    wall = (time.perf_counter_ns() - t0) / 1e6
    os.unlink(path)
    return {"rc": 0, "wall_ms": round(wall, 4)}


def settled(op):
    time.sleep(SETTLE_S)
    return op()


def leftovers(b: Bench) -> dict:
    """What the DELs left behind: ports on the bridges, reservations in the stores."""
    left = {k: {"ports": ports(p.bridge), "reservations": reservations(p.store)}
            for k, p in {**b.plugins, **b.masq, **b.bw}.items()}
    ifbs = shaping_links("bnch-academy-bw")
    if ifbs:
        left["academy-bw"]["ifbs"] = ifbs
    if b.versus:
        left.update(b.versus.leftovers())
    return left


def shaping_links(network: str) -> list:
    """The ifb links academy made for a network's shaped attachments (their alias names
    the network): after the DELs, none."""
    r = sh("ip", "-j", "link", "show", "type", "ifb", check=False)
    try:
        links = json.loads(r.stdout or "[]")
    except ValueError:
        return []
    return [l["ifname"] for l in links
            if l.get("ifalias", "").startswith(f"academy:{network}:")]


def reservations(store: str) -> list:
    """Address files in a store (not the index, hint or lock)."""
    try:
        names = os.listdir(store)
    except FileNotFoundError:
        return []
    return [n for n in names if n[:1].isdigit() or ":" in n]


# ---- phase 2: syscalls -------------------------------------------------------------


def syscalls(b: Bench) -> dict:
    """Counts, not times: one ADD and one DEL of each plugin under strace (filtered
    with fds decoded, for netlink requests, setns and new files; then -c for the whole
    summary) and under perf stat when perf works; the same for the floors."""
    tools = {"requests": trace.requests, "summary": trace.summary}
    if trace.perf_works():
        tools["perf"] = trace.perf_stat
    out = {k: {} for k in b.plugins}
    for k, plugin in b.plugins.items():
        for tool, fn in tools.items():
            att = Attachment(cid=f"bnch-trace-{k[:3]}-{tool}", netns=b.ns[k])
            for command in ("ADD", "DEL"):
                prev = att.result if command == "DEL" else None
                t = fn(trace.Invocation(plugin.argv(),
                                        plugin.env(command, att.cid, att.netns, att.ifname),
                                        plugin.stdin(prev)))
                run = Run(t.rc, 0.0, 0, 0.0, 0.0, t.stdout, t.stderr)
                cni.judge(run, command, att)
                out[k].setdefault(tool, {})[command] = dict(t.figures, ok=run.ok)
    # Item by item (trace.ITEMS), academy's ADD beside the C floor's: what is above it.
    tools_above = {"items": trace.items}
    # In the steady state: a resident of its own keeps the network in use meanwhile.
    if "academy" in b.plugins:
        att = Attachment(cid="bnch-trace-aca-items", netns=b.ns["academy"])
        plugin = b.plugins["academy"]
        keeper = Attachment(cid="bnch-trace-aca-keeper", netns=b.lab.add_netns("bnch-trk"))
        cni.invoke(b.sp, plugin, "ADD", keeper)
        for command in ("ADD", "DEL"):
            prev = att.result if command == "DEL" else None
            t = trace.items(trace.Invocation(plugin.argv(),
                                             plugin.env(command, att.cid, att.netns, att.ifname),
                                             plugin.stdin(prev)))
            run = Run(t.rc, 0.0, 0, 0.0, 0.0, t.stdout, t.stderr)
            cni.judge(run, command, att)
            out["academy"].setdefault("items", {})[command] = dict(t.figures, ok=run.ok)
        cni.invoke(b.sp, plugin, "DEL", keeper)
    if b.nlfloor:
        tools = dict(tools, **tools_above)
        out["nlfloor"] = {}
        for tool, fn in tools.items():
            t = fn(trace.Invocation(
                [b.nlfloor, Floors.BRIDGE, "bnchfctrace", "academy:floor:trace:eth0",
                 b.floors.ns_c, "eth0", ip_at(NET_FLOOR, 9), str(FLOOR_PREFIX), f"{NET_FLOOR}.0.1"],
                dict(cni.BASE_ENV)))
            out["nlfloor"][tool] = {"ADD": dict(t.figures, ok=t.rc == 0)}
            sh("ip", "link", "del", "bnchfctrace", check=False)
    out["true"] = {tool: {"ADD": dict(fn(trace.Invocation(["/bin/true"], {})).figures, ok=True)}
                   for tool, fn in tools.items()}
    return out


# ---- phase 3: a parallel burst -------------------------------------------------------


def burst(b: Bench, n: int, rounds: int) -> dict:
    """n ADDs started at once (one netns each, like n pods scheduled together), then
    their n DELs at once; rounds alternate which plugin goes first."""
    names = [f"bnch-b{j:02d}" for j in range(n)]
    paths = b.lab.add_netns_many(names)
    out: dict[str, list] = {k: [] for k in b.plugins}
    try:
        for r in range(rounds):
            for k in rotate(list(b.plugins), r):
                out[k].append(burst_round(b, b.plugins[k], paths, r))
                _progress(f"burst round {r + 1}/{rounds} {k}")
    finally:
        # Not needed any more; the scaling phase runs in the same conditions as the cycles.
        b.lab.del_netns_many(names)
    _progress_done()
    return {"parallel": n, "rounds": out}


def burst_round(b: Bench, plugin: Plugin, paths: list, r: int) -> dict:
    atts = [Attachment(cid=f"bnch-burst-{r}-{j:02d}", netns=p) for j, p in enumerate(paths)]
    res = {}
    for command in ("ADD", "DEL"):
        t0 = time.perf_counter_ns()
        started = [cni.start(b.sp, plugin, command, a) for a in atts]
        runs = [b.sp.finish(s) for s in started]
        wall = (time.perf_counter_ns() - t0) / 1e6
        for run, a in zip(runs, atts):
            cni.judge(run, command, a)
        res[command] = {
            "wall_ms": round(wall, 3),
            "failures": sum(not run.ok for run in runs),
            "per_process_ms": sorted(round(run.wall_ms, 3) for run in runs),
            "errors": [e for a in atts for e in a.errors][:5],
        }
        if command == "ADD":
            addrs = [cni.address(a.result) for a in atts if a.result]
            res["distinct_addresses"] = len(set(addrs))
    res["leftover_ports"] = len(ports(plugin.bridge))
    res["leftover_reservations"] = len(reservations(plugin.store))
    if res["leftover_ports"]:
        # Do not let one round's debris fail the next plugin's ADDs.
        for p in paths:
            sh("ip", "-n", os.path.basename(p), "link", "del", "eth0", check=False)
    return res


# ---- phase 4: IPAM scaling -----------------------------------------------------------


def scaling(b: Bench, points: list, n_cycles: int, seed: int) -> dict:
    """ADD+DEL cycles with 0, 1k, 8k, 32k addresses of the /16 already held, scattered
    (a seeded random sample, as years of churn leave a store), each held by its own
    long-gone container. host-local reads its whole store on every ADD and DEL, so its
    series stops once a point would take more than HOSTLOCAL_BUDGET_S."""
    ref_dir = os.path.abspath(b.args.reference_dir)
    plugins = {
        "academy": b.academy(b.plugins["academy"].binary, "bnchbr-sa", NET_SCALE_ACADEMY,
                             "bnch-scale", b.lab.scratch("scale-academy")),
        "reference": b.reference(ref_dir, "bnchbr-sr", NET_SCALE_HOSTLOCAL, "bnch-scale",
                                 b.lab.scratch("scale-hostlocal")),
    }
    # Scattered: every address but the network, the gateway (.0.1) and the broadcast.
    offsets = random.Random(seed).sample(range(2, 65535), max(points) + len(plugins))
    result = {"seed": seed, "points": []}
    written, stopped = 0, {}
    # Unrecorded: the first ADD creates the bridge, which is no part of the IPAM's cost.
    for k, plugin in plugins.items():
        att = Attachment(cid="bnch-s-warmup", netns=b.ns[k])
        cni.invoke(b.sp, plugin, "ADD", att)
        cni.invoke(b.sp, plugin, "DEL", att)
    # And one resident attachment on each network for the whole phase (one more address
    # held than the point says), as in the cycles: at 0 held, academy's ADD would
    # otherwise be the network's first and its DEL the last (its nf_tables objects made
    # and deleted), while at 1,000 held and more the long-gone holders keep the network
    # in use, so the points would not measure the same ADD and DEL.
    resident = {}
    for k, plugin in plugins.items():
        att = Attachment(cid="bnch-s-resident", netns=b.lab.add_netns(f"bnch-rs-scale-{k}"))
        if cni.invoke(b.sp, plugin, "ADD", att).ok:
            resident[k] = att
        else:
            result.setdefault("errors", []).append(f"{k} resident ADD: {att.errors[-1][:300]}")
    result["resident"] = sorted(resident)
    # The held sample never takes a resident's address (populate writes with O_EXCL).
    taken = {offset_in(cni.address(a.result)) for a in resident.values()}
    offsets = [o for o in offsets if o not in taken][:max(points)]
    for n in points:
        t0 = time.monotonic()
        populate(plugins["academy"].store, NET_SCALE_ACADEMY, offsets, written, n, index=True)
        populate(plugins["reference"].store, NET_SCALE_HOSTLOCAL, offsets, written, n, index=False)
        written = n
        point = {"held": n, "populate_s": round(time.monotonic() - t0, 2), "runs": {}}
        projected = project_hostlocal(result["points"], n) * n_cycles
        if projected > HOSTLOCAL_BUDGET_S * 1000:
            stopped["reference"] = (f"skipped from {n} held: projected {projected / 1000:.0f} s "
                                    f"for {n_cycles} cycles > {HOSTLOCAL_BUDGET_S:.0f} s")
        spent = {k: 0.0 for k in plugins}
        for c in range(n_cycles):
            for k in rotate(list(plugins), c):
                if k in stopped:
                    continue
                att = Attachment(cid=f"bnch-s{n}-{c}", netns=b.ns[k])
                add = settled(lambda: cni.invoke(b.sp, plugins[k], "ADD", att))
                dele = settled(lambda: cni.invoke(b.sp, plugins[k], "DEL", att))
                spent[k] += add.wall_ms + dele.wall_ms
                point["runs"].setdefault(k, []).append({
                    "add_ms": round(add.wall_ms, 3), "del_ms": round(dele.wall_ms, 3),
                    "cycle_ms": round(add.wall_ms + dele.wall_ms, 3),
                    "ok": add.ok and dele.ok, "errors": att.errors[:2],
                })
                if spent[k] > HOSTLOCAL_BUDGET_S * 1000 and k == "reference":
                    stopped[k] = f"stopped at {n} held: a point took over {HOSTLOCAL_BUDGET_S:.0f} s"
            _progress(f"scaling {n} held, cycle {c + 1}/{n_cycles}")
        point["stopped"] = dict(stopped)
        result["points"].append(point)
    for k, att in resident.items():
        if not cni.invoke(b.sp, plugins[k], "DEL", att).ok:
            result.setdefault("errors", []).append(f"{k} resident DEL: {att.errors[-1][:300]}")
    _progress_done()
    return result


def populate(store: str, net: str, offsets: list, start: int, end: int, index: bool):
    """Writes reservations start..end of the sample straight into a store, in the
    plugin's own format: `<store>/<address>` holding "containerID\\r\\nifname" and, for
    academy, the holder index `<store>/holders/<containerID>:<ifname>` naming it."""
    os.makedirs(os.path.join(store, "holders") if index else store, mode=0o700, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for k in range(start, end):
        addr, cid = ip_at(net, offsets[k]), f"churn{k:05d}"
        _write(os.path.join(store, addr), f"{cid}\r\neth0", flags)
        if index:
            _write(os.path.join(store, "holders", f"{cid}:eth0"), f"{addr}\n", flags)


def _write(path: str, text: str, flags: int):
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def project_hostlocal(points: list, n: int) -> float:
    """host-local's cycle at n held, extrapolated linearly from the points so far (ms)."""
    done = [(p["held"], report.median([r["cycle_ms"] for r in p["runs"].get("reference", [])]))
            for p in points if p["runs"].get("reference")]
    if len(done) < 2:
        return 0.0
    (n0, c0), (n1, c1) = done[0], done[-1]
    slope = (c1 - c0) / (n1 - n0) if n1 > n0 else 0.0
    return c0 + slope * (n - n0)


# ---- the run ----------------------------------------------------------------------------


def _progress(msg: str):
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[K{msg}")
        sys.stderr.flush()


def _progress_done():
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--academy", required=True, help="academy binary")
    p.add_argument("--reference-dir", required=True, help="dir with bridge and host-local")
    p.add_argument("--quick", action="store_true", help="a fast smoke run (few cycles)")
    p.add_argument("--cycles", type=int, help="recorded ADD/CHECK/DEL cycles")
    p.add_argument("--out", help="results dir (default bench/results, quick: bench/results/quick)")
    p.add_argument("--seed", type=int, default=2024, help="seed of the scattered held addresses")
    p.add_argument("--baseline", metavar="OLD_ACADEMY",
                   help="an older academy binary: measured in the same cycles, and in a GC "
                        "phase, against --academy (the 'academy vs its baseline' table)")
    p.add_argument("--baseline-label", help="what the baseline is, for the table "
                   "(default: the commit of the checkout it was built in)")
    p.add_argument("--lifetime-cycles", type=int,
                   help="cycles on empty networks, timing a network's first ADD and last DEL")
    p.add_argument("--burst-sizes", type=lambda t: [int(x) for x in t.split(",") if x],
                   help="pods started at once on a node, e.g. 110,250 (empty: no bursts)")
    p.add_argument("--crowd-cycles", type=int,
                   help="ADD+DEL cycles beside the largest burst's pods, and on an empty bridge")
    p.add_argument("--solo-cycles", type=int,
                   help="single-container cycles (one network, one container, no resident, "
                        "beside the steady state; 0: not run)")
    p.add_argument("--scrape-networks", type=int,
                   help="networks of the metrics scrape (250 addresses each; 0: not run)")
    p.add_argument("--density-pods", type=int, help="pods on one bridge beside which ADD "
                   "and DEL are timed against an empty bridge (density.py; 0: not run)")
    p.add_argument("--density-cycles", type=int, help="ADD+DEL cycles beside them")
    p.add_argument("--gc-attachments", type=int, help="attachments per GC (with --baseline)")
    p.add_argument("--gc-rounds", type=int, help="GC rounds (with --baseline)")
    p.add_argument("--restore-attachments", type=int,
                   help="attachments a restore (table deleted) and a GC put back and free "
                        "(with --baseline; 0: not run)")
    p.add_argument("--restore-rounds", type=int,
                   help="rounds of the restore phase, the first binary alternating "
                        "(with --baseline)")
    args = p.parse_args()
    preset = QUICK if args.quick else FULL
    for k, v in preset.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    for k, v in (density.QUICK if args.quick else density.FULL).items():
        if getattr(args, f"density_{k}") is None:
            setattr(args, f"density_{k}", v)
    args.out = args.out or os.path.join(HERE, "results", *(["quick"] if args.quick else []))
    if args.baseline and not os.path.exists(args.baseline):
        raise SystemExit(f"bench: --baseline {args.baseline}: no such file")
    if os.geteuid() != 0:
        raise SystemExit("bench: needs root (namespaces, bridges, veths)")
    return args


def main():
    args = parse_args()
    lab = Lab(args.academy)
    lab.lock()

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds through the finally below

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    atexit.register(lab.cleanup)
    started = time.monotonic()
    try:
        lab.preclean()
        b = Bench(args, lab)
        results = {"machine": provenance.machine(), "settings": {
            k: getattr(args, k) for k in ("cycles", "warmup", "lifetime_cycles", "burst",
                                          "burst_rounds",
                                          "points", "scale_cycles", "seed", "quick",
                                          "gc_attachments", "gc_rounds", "burst_sizes",
                                          "crowd_cycles", "solo_cycles",
                                          "scrape_networks", "restore_attachments",
                                          "restore_rounds")}}
        results["provenance"] = provenance.of(b)
        load = results["machine"]["loadavg_phases"] = {}
        gc.disable()  # no collector pauses inside a timed spawn-to-reap
        load["cycles"] = os.getloadavg()
        print(f"bench: {args.cycles} cycles (+{args.warmup} warm-up) ...", file=sys.stderr)
        results["cycles"] = cycles(b, args.cycles, args.warmup, args.lifetime_cycles)
        print("bench: syscalls (strace, perf) ...", file=sys.stderr)
        results["syscalls"] = syscalls(b)
        load["burst"] = os.getloadavg()
        print(f"bench: burst of {args.burst} x {args.burst_rounds} ...", file=sys.stderr)
        results["burst"] = burst(b, args.burst, args.burst_rounds)
        load["scaling"] = os.getloadavg()
        print(f"bench: IPAM scaling {args.points} ...", file=sys.stderr)
        results["scaling"] = scaling(b, args.points, args.scale_cycles, args.seed)
        load["chains"] = os.getloadavg()
        results["chains"] = chains.run(args.academy, args.reference_dir, lab,
                                       15 if not args.quick else 3, args.burst)
        if args.solo_cycles:
            load["solo"] = os.getloadavg()
            print(f"bench: the single-container cycle, {args.solo_cycles} cycles beside the "
                  "steady state ...", file=sys.stderr)
            results["solo"] = solo.run(b.sp, b.plugins["academy"].binary, args.reference_dir,
                                       lab, args.solo_cycles, progress=_progress)
            _progress_done()
        load["grace"] = os.getloadavg()
        print("bench: what waits out a grace period (grace.py) ...", file=sys.stderr)
        results["grace"] = grace.run(b.sp, b.plugins["academy"].binary, lab,
                                     (grace.QUICK if args.quick else grace.FULL)["cycles"],
                                     progress=_progress)
        _progress_done()
        load["waiting"] = os.getloadavg()
        preset = waiting.QUICK if args.quick else waiting.FULL
        print(f"bench: ADD beside {preset['networks']} networks waiting for release "
              "(waiting.py) ...", file=sys.stderr)
        results["waiting"] = waiting.run(b.sp, b.plugins["academy"].binary, lab,
                                         preset["networks"], preset["cycles"], _progress)
        _progress_done()
        if args.scrape_networks:
            load["scrape"] = os.getloadavg()
            preset = scrape.QUICK if args.quick else scrape.FULL
            print(f"bench: a metrics scrape of {args.scrape_networks} networks x "
                  f"{preset['addresses']} addresses ...", file=sys.stderr)
            results["scrape"] = scrape.run(b.plugins["academy"].binary, lab,
                                           args.scrape_networks, preset["addresses"],
                                           preset["scrapes"])
        if args.density_pods:
            load["density"] = os.getloadavg()
            print(f"bench: density, {args.density_pods} pods on one bridge ...", file=sys.stderr)
            results["density"] = density.run(b.sp, b.plugins["academy"].binary, lab,
                                             args.density_pods, args.density_cycles, _progress)
            _progress_done()
        if b.versus:
            load["gc"] = os.getloadavg()
            print(f"bench: GC, {args.gc_attachments} attachments x {args.gc_rounds} rounds, "
                  "current and baseline ...", file=sys.stderr)
            results["gc"] = baseline.gc_phase(b.sp, b.versus, args.gc_attachments,
                                              args.gc_rounds, _progress)
            _progress_done()
            if args.restore_attachments and args.restore_rounds:
                load["restore"] = os.getloadavg()
                print(f"bench: restore and GC, {args.restore_attachments} attachments x "
                      f"{args.restore_rounds} rounds, current and baseline ...",
                      file=sys.stderr)
                results["restore"] = baseline.restore_phase(
                    b.sp, b.versus, args.restore_attachments, args.restore_rounds, _progress)
                _progress_done()
        if args.burst_sizes:
            load["bursts"] = os.getloadavg()
            print(f"bench: bursts of {args.burst_sizes} on a node (ipMasq, a port each) ...",
                  file=sys.stderr)
            results["bursts"] = bursts.run(b.sp, b.plugins["academy"].binary,
                                           args.reference_dir, lab, args.burst_sizes,
                                           args.crowd_cycles, progress=_progress)
            _progress_done()
        gc.enable()
        results["machine"]["loadavg_end"] = os.getloadavg()
        results["machine"]["runtime_s"] = round(time.monotonic() - started, 1)
        summary = report.summarize(results)
        results["summary"] = summary
        os.makedirs(args.out, exist_ok=True)
        md = report.markdown(results, summary, chart_path="bench/results/scaling.svg"
                             if not args.quick else None)
        md += "\n" + chains.markdown(results["chains"])
        md += report.solo_markdown(results.get("solo"), summary.get("solo"))
        md += report.versus_markdown(results)
        md += report.bursts_markdown(results)
        results["summary"]["scrape"] = scrape.summary(results.get("scrape"))
        md += scrape.markdown(results.get("scrape"), results["summary"]["scrape"])
        results["summary"]["density"] = density.summary(results.get("density"))
        md += density.markdown(results.get("density"), results["summary"]["density"])
        results["summary"]["grace"] = grace.summary(results.get("grace"))
        md += grace.markdown(results.get("grace"), results["summary"]["grace"])
        results["summary"]["waiting"] = waiting.summary(results.get("waiting"))
        md += waiting.markdown(results.get("waiting"), results["summary"]["waiting"])
        with open(os.path.join(args.out, "latest.json"), "w") as f:
            json.dump(results, f, indent=1)
        with open(os.path.join(args.out, "latest.md"), "w") as f:
            f.write(md)
        svg = os.path.join(args.out, "scaling.svg")
        with open(svg, "w") as f:
            f.write(chart.scaling_svg(results, summary))
        chart.png_if_possible(svg)
        print(md)
        print(f"bench: wrote {args.out}/latest.json, latest.md, scaling.svg "
              f"in {results['machine']['runtime_s']} s", file=sys.stderr)
        drift = report.floor_drift(results["syscalls"])
        if drift:
            raise SystemExit(f"bench: {drift}")
    except KeyboardInterrupt:
        print("\nbench: interrupted; cleaning up", file=sys.stderr)
        raise SystemExit(130)
    finally:
        lab.cleanup()


if __name__ == "__main__":
    main()
