"""The kernel's own part of a cycle, beside academy's: nlfloor (bench/native/nlfloor.c,
one static C process making academy's netlink requests, its veth on the same bridge,
its peer in a netns of the floor's own) and `ip link del` of that veth, each spawned
into the same node as academy. A phase that compares academy on two nodes (density.py:
beside 1,000 pods and on an empty bridge; waiting.py: beside 250 networks waiting for
release and beside none) times the floor in the same cycles, so that what the kernel
itself does slower on one node is told apart from what academy does."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cni  # noqa: E402
from cni import Plugin  # noqa: E402
from lab import PREFIX, Lab  # noqa: E402
from proc import Spawner  # noqa: E402

SETTLE_S = 0.02  # as bench.py: each timed cycle operation waits this long first


class Floor:
    """`addresses`: per node ("where"), the floor's address on the node's bridge, its
    prefix length and the gateway, inside the node's steady network but above what its
    store hands out in the run."""

    def __init__(self, sp: Spawner, lab: Lab, nlfloor: str, tag: str, addresses: dict):
        self.sp, self.nlfloor, self.addresses = sp, nlfloor, addresses
        self.netns = {where: lab.add_netns(f"{PREFIX}-{tag}f{where[0]}") for where in addresses}
        self.errors = []

    def cycle(self, where: str, plugin: Plugin, i: int) -> dict:
        host = f"{PREFIX}f{where[0]}{i:05d}"
        address, prefix_len, gateway = self.addresses[where]
        time.sleep(SETTLE_S)
        add = self.sp.run([self.nlfloor, plugin.bridge, host, f"academy:floor:{where}{i}:eth0",
                           self.netns[where], "eth0", address, str(prefix_len), gateway],
                          dict(cni.BASE_ENV), b"", plugin.node)
        time.sleep(SETTLE_S)
        dele = self.sp.run(["/usr/sbin/ip", "link", "del", host], dict(cni.BASE_ENV), b"",
                           plugin.node)
        ok = add.rc == 0 and dele.rc == 0
        if not ok:
            self.errors.append(f"floor on {where}: " + (add.stderr + dele.stderr)
                               .decode(errors="replace")[:300])
        return {"floor_add_ms": round(add.wall_ms, 3), "floor_del_ms": round(dele.wall_ms, 3),
                "floor_ok": ok}


def medians(runs: dict, pair: tuple, ratios: dict, median) -> tuple:
    """Where every cycle of both nodes (`pair`: the loaded node, then the other) timed the
    floor: its medians per node and op, and academy's ratio (`ratios`, per op) against
    the floor's own. (None, {}) otherwise."""
    loaded, other = pair
    if not (all(c.get("floor_ok") for where in pair for c in runs.get(where, []))
            and any("floor_ok" in c for c in runs.get(loaded, []))):
        return None, {}
    floor = {where: {op: median([c[f"floor_{op}_ms"] for c in runs[where]])
                     for op in ("add", "del")} for where in pair}
    against = {}
    for op in ("add", "del"):
        ratio = floor[loaded][op] / floor[other][op] if floor[other][op] else 0
        against[op] = ratios[op] / ratio if ratio else float("nan")
    return floor, against


def rows(floor: dict, pair: tuple) -> list:
    """The floor's table rows (`medians`' first value), the loaded node first."""
    loaded, other = pair
    names = {"add": "floor ADD: nlfloor, academy's requests from one C process",
             "del": "floor DEL: `ip link del` of that veth"}
    lines = []
    for op in ("add", "del"):
        ratio = floor[loaded][op] / floor[other][op] if floor[other][op] else float("nan")
        lines.append(f"| {names[op]} | {floor[loaded][op]:.2f} ms | {floor[other][op]:.2f} ms "
                     f"| {ratio:.2f}x | | |")
    return lines
