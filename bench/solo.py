"""The single-container cycle: one network, one container, ADD and DEL repeated.

    python3 bench/solo.py --academy target/release/academy --reference-dir /opt/cni/lab-bin

The commonest pattern of all (`podman run --rm`, a CI job, a node's first pod): the
network has no other attachment, so each ADD finds it empty and each DEL leaves it
empty. academy makes a network's own nf_tables objects with its first attachment and
deletes them with its last, so in this cycle it may pay for them every time, which
bench.py's steady-state cycles (a resident on every network) never show.

Each shape is measured twice in the same interleaved cycles: on a network with no
other attachment (the single-container cycle) and on a network of the same shape that
keeps one resident attachment, with the same kind of port mapping, ADDed before the
recorded cycles and DELed after them (the steady state). The shapes, each for academy
and for the reference:

- plain: academy's flat config against bridge + host-local (bench.py's plain pair);
- ipMasq: the same with ipMasq (bench.py's ipMasq pair);
- ipMasq and a published port: bridge with ipMasq + host-local, then portmap, against
  its `academy convert` (bursts.py's lists), one hostPort per container;
- the podman chain: podman's generated list on the reference plugins (bridge with
  ipMasq and hairpinMode, host-local, portmap, firewall, tuning) against its `academy
  convert` (chains.py's lists), one hostPort per container;

and academy alone, each on a network of its own with no other attachment: a bandwidth
limit (bench.py's), and ipMasq with the portMappings capability publishing three ports
against publishing none (the earlier rounds' targets, in this cycle).

Each cycle runs every ADD, then every DEL (and the DEL floor: `ip link del` of a veth
whose peer is in a netns), each group in an order that rotates every cycle; each timed
operation waits SETTLE_S first, as bench.py's. Lists run as libcni runs them, every
plugin spawned through spawnstat (its wall, CPU and peak RSS; a list's figure is the
sum of its plugins' walls). academy's networks share one private node, the reference's
another (lab.add_node: the bench's own netns standing in for the host, its own
nf_tables and iptables), so that each side's table, shared maps and iptables chains
hold that side's networks only; the steady networks keep those shared objects alive
beside the cycling ones, as on a host that runs more than one network. After the
cycles and the residents' DELs nothing may be left on the bridges or in the stores.
Also a phase of bench.py; the figures and targets are report.py's (solo_*).
"""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bursts  # noqa: E402
import chains  # noqa: E402
import cni  # noqa: E402
import lab as labmod  # noqa: E402
from lab import PREFIX, Lab, sh  # noqa: E402
from proc import Spawner  # noqa: E402

SETTLE_S = 0.02  # as bench.py
FULL = dict(cycles=20, warmup=1)
QUICK = dict(cycles=3, warmup=1)
# academy's ADD and DEL of the bandwidth network (bench.py's).
BANDWIDTH = {"ingressRate": 8000000, "ingressBurst": 80000,
             "egressRate": 8000000, "egressBurst": 80000}
SHAPES = ("plain", "masq", "port", "podman")
MODES = ("solo", "steady")
# academy alone, single-container cycle only: shape, its caps.
ALONE = ("bw", "port0", "port3")
# Subnets: /24s of 10.242.16.0/20 and 10.242.32.0/20 (the podman lists take /20s: 48,
# 64, 80, 96), inside the bench's 10.240-10.246 (lab.py) and apart from every other
# phase's /20 of 10.242 (bench.py, chains.py, bursts.py).
PODMAN_NETS = ["10.242.48", "10.242.64", "10.242.80", "10.242.96"]
BASE_PORT, RESIDENT_PORT = 32000, 32100
# In the networks' names and bridges (bnchbr-s + side + shape + 1 or r: 12 characters).
SHAPE_TAGS = {"plain": "pl", "masq": "ma", "port": "pt", "podman": "pm", "bw": "bw",
              "port0": "p0", "port3": "p3"}


def keys() -> list:
    """Every network of the phase: side.shape.mode."""
    out = [f"{side}.{shape}.{mode}" for side in ("academy", "reference")
           for shape in SHAPES for mode in MODES]
    return out + [f"academy.{shape}.solo" for shape in ALONE]


def caps_of(key: str, port: int) -> dict:
    """What the runtime passes a network's container: a hostPort for the port shapes
    (three for port3, none for port0), the bandwidth for bw."""
    shape = key.split(".")[1]
    if shape in ("port", "podman"):
        return bursts.mapping(port)
    if shape == "port3":
        return {"portMappings": [{"hostPort": port + 200 + j, "containerPort": 80,
                                  "protocol": "tcp"} for j in range(3)]}
    if shape == "bw":
        return {"bandwidth": dict(BANDWIDTH)}
    return {}


def conflist(key: str, i: int, academy: str, lab: Lab) -> tuple[dict, str, str]:
    """Network `key`'s list, its store directory and its bridge; `i` its index in keys()."""
    side, shape, mode = key.split(".")
    tag = f"{side[0]}{SHAPE_TAGS[shape]}{'r' if mode == 'steady' else '1'}"
    name, bridge = f"{PREFIX}-s-{tag}", f"{PREFIX}br-s{tag}"
    data_dir = lab.scratch(f"store-s{tag}")
    lab.track_bridge(bridge)
    if shape == "podman":
        net = PODMAN_NETS[(side == "academy") * 2 + (mode == "steady")]
        ref = chains.podman_list(name, bridge, net, data_dir)
    else:
        net = f"10.242.{16 + i}"
        if shape in ("plain", "masq", "bw"):
            if side == "academy":
                entry = {"type": "academy", "bridge": bridge, "subnet": f"{net}.0/24",
                         "gateway": f"{net}.1", "dataDir": data_dir}
                if shape == "masq":
                    entry["ipMasq"] = True
                if shape == "bw":
                    entry["capabilities"] = {"bandwidth": True}
            else:
                entry = {"type": "bridge", "bridge": bridge, "isGateway": True,
                         "ipMasq": shape == "masq",
                         "ipam": {"type": "host-local", "subnet": f"{net}.0/24",
                                  "dataDir": data_dir}}
            return ({"cniVersion": "1.0.0", "name": name, "plugins": [entry]},
                    os.path.join(data_dir, name), bridge)
        ref = bursts.reference_list(name, bridge, net, data_dir)
        for plugin in ref["plugins"]:  # a /24 of its own, not bursts' /20
            if "ipam" in plugin:
                plugin["ipam"]["ranges"] = [[{"subnet": f"{net}.0/24"}]]
    if side == "academy":
        ref = bursts._convert(academy, ref, lab.scratch("solo"))
    return ref, os.path.join(data_dir, name), bridge


class Net:
    """One network of the phase, on its side's node: its chain, the netns of the
    container that cycles, and for a steady network the resident's."""

    def __init__(self, key: str, chain: bursts.NodeChain, pod: str, resident: str | None,
                 port: int):
        self.key, self.chain, self.pod, self.resident = key, chain, pod, resident
        self.caps = caps_of(key, port)
        self.resident_caps = caps_of(key, port + RESIDENT_PORT - BASE_PORT)
        self.tag = chain.list["name"].removeprefix(f"{PREFIX}-s-")

    def cid(self, i) -> str:
        """A container ID of this network's own: academy derives the host veth's name
        from it, and every academy network of the phase shares one node."""
        return f"{PREFIX}-sc-{self.tag}-{i}"


class Floor:
    """The DEL floor on academy's node: `ip link del` of a veth whose peer is in a netns
    (bench.py's floor.del_bare), timed in the same cycles."""

    def __init__(self, sp: Spawner, node: str, peer_ns: str):
        self.sp, self.node, self.peer_ns = sp, node, peer_ns

    def prepare(self, i: int):
        sh("ip", "-n", os.path.basename(self.node), "link", "add", f"{PREFIX}sd{i:06x}",
           "type", "veth", "peer", "name", "eth0", "netns", os.path.basename(self.peer_ns))

    def delete(self, i: int) -> dict:
        run = self.sp.run(["/usr/sbin/ip", "link", "del", f"{PREFIX}sd{i:06x}"],
                          dict(cni.BASE_ENV), b"", self.node)
        return dict(run.sample(), ok=run.ok)


def sample(op: dict) -> dict:
    """A NodeChain answer as a series sample (report.stats' fields)."""
    s = {k: round(op[k], 4) if isinstance(op[k], float) else op[k]
         for k in ("wall_ms", "maxrss_kib", "user_ms", "sys_ms", "faults") if k in op}
    return dict(s, rc=0 if op["ok"] else 1)


def one_cycle(nets: dict, floor: Floor | None, i: int, keep: bool, record):
    """Cycle i: every network's ADD, then every DEL and the floor, each group in a
    rotating order. A DEL runs even after a failed ADD (it cleans up)."""
    results = {}
    for k in _rotate(list(nets), i):
        net = nets[k]
        time.sleep(SETTLE_S)
        a = net.chain.add(net.cid(i), net.pod, net.caps)
        results[k] = a["result"]
        record(f"{k}.ADD", a, keep)
    if floor:
        floor.prepare(i)
    for k in _rotate(list(nets) + (["floor"] if floor else []), i):
        time.sleep(SETTLE_S)
        if k == "floor":
            d = floor.delete(i)
            record("floor.del_bare", dict(d, error=None if d["ok"] else "ip link del failed"),
                   keep)
            continue
        net = nets[k]
        d = net.chain.delete(net.cid(i), net.pod, net.caps, results[k])
        record(f"{k}.DEL", d, keep)


def _rotate(items: list, i: int) -> list:
    k = i % len(items)
    return items[k:] + items[:k]


def run(sp: Spawner, academy: str, reference_dir: str, lab: Lab, n: int, warmup: int = 1,
        progress=lambda _m: None) -> dict:
    """The phase: the networks on two private nodes, `warmup` unrecorded cycles (they
    make the bridges), the residents, n recorded cycles, the residents' DELs, then what
    is left; every netns of the phase deleted at the end."""
    cni_path = lab.scratch("solo-bin")
    for name in ("bridge", "host-local", "portmap"):
        os.symlink(os.path.join(os.path.abspath(reference_dir), name),
                   os.path.join(cni_path, name))
    for name in ("firewall", "tuning"):
        os.symlink(os.path.join(chains.DEBIAN_PLUGINS, name), os.path.join(cni_path, name))
    aca_bin = os.path.join(cni_path, "academy")
    with open(academy, "rb") as src, open(aca_bin, "wb") as dst:
        dst.write(src.read())
    os.chmod(aca_bin, 0o755)

    made = []  # every netns of the phase, deleted at the end

    def netns(name):
        made.append(name)
        return lab.add_netns(name)

    nodes = {}
    for side in ("academy", "reference"):
        made.append(f"{PREFIX}-sn{side[0]}")
        nodes[side] = lab.add_node(f"{PREFIX}-sn{side[0]}")
    nets = {}
    out = {"cycles": n, "warmup": warmup, "series": {}, "errors": [], "resident_errors": [],
           "networks": {}}
    try:
        for i, k in enumerate(keys()):
            side, shape, mode = k.split(".")
            lst, store, bridge = conflist(k, i, aca_bin, lab)
            chain = bursts.NodeChain(sp, lst, cni_path, nodes[side], store, bridge)
            nets[k] = Net(k, chain, netns(f"{PREFIX}-sp{i}"),
                          netns(f"{PREFIX}-sr{i}") if mode == "steady" else None,
                          BASE_PORT + i)
            out["networks"][k] = {"plugins": [p["type"] for p in lst["plugins"]],
                                  "resident": mode == "steady"}
        floor = Floor(sp, nodes["academy"], netns(f"{PREFIX}-sfd"))

        def record(name, op, keep):
            if keep:
                out["series"].setdefault(name, []).append(sample(op))
            if op.get("error"):
                out["errors"].append(f"{name}: {op['error'][:300]}")

        for i in range(warmup):
            one_cycle(nets, floor, i, False, record)
            progress(f"single-container cycle: warm-up {i + 1}/{warmup}")
        residents = {}
        for k, net in nets.items():
            if net.resident:
                a = net.chain.add(net.cid("res"), net.resident, net.resident_caps)
                if a["ok"]:
                    residents[k] = a["result"]
                else:
                    out["resident_errors"].append(f"resident {k} ADD: {a['error'][:300]}")
        out["residents"] = sorted(residents)
        for i in range(warmup, warmup + n):
            one_cycle(nets, floor, i, True, record)
            progress(f"single-container cycle {i + 1 - warmup}/{n}")
        for k, result in residents.items():
            net = nets[k]
            d = net.chain.delete(net.cid("res"), net.resident, net.resident_caps, result)
            if not d["ok"]:
                out["resident_errors"].append(f"resident {k} DEL: {d['error'][:300]}")
        out["leftovers"] = {k: {"ports": labmod.ports(net.chain.bridge, net.chain.node),
                                "reservations": bursts.store_files(net.chain.store)}
                            for k, net in nets.items()}
        out["leftovers"]["nodes"] = {"veths": [v for node in nodes.values()
                                               for v in labmod.node_veths(node)]}
    finally:
        for node in nodes.values():
            labmod.kill_in_netns(node)
        lab.del_netns_many(made)
    return out


def _exit_on_signal(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds through main's finally: the clean-up


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--academy", required=True)
    p.add_argument("--reference-dir", required=True)
    p.add_argument("--cycles", type=int, default=FULL["cycles"])
    p.add_argument("--warmup", type=int, default=FULL["warmup"])
    p.add_argument("--out", help="write the JSON and the markdown here (a directory)")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("solo: needs root")
    import report  # noqa: PLC0415 (the markdown lives with the other tables)
    lab = Lab(args.academy)
    lab.lock()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    try:
        lab.preclean()
        sp = Spawner(lab.build_native("spawnstat"))
        r = run(sp, os.path.abspath(args.academy), args.reference_dir, lab, args.cycles,
                args.warmup, progress=lambda m: print(m, file=sys.stderr))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "solo.json"), "w") as f:
                json.dump(r, f, indent=1)
        md = report.solo_markdown(r)
        print(md)
        if args.out:
            with open(os.path.join(args.out, "solo.md"), "w") as f:
                f.write(md)
    finally:
        lab.cleanup()


if __name__ == "__main__":
    main()
