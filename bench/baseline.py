"""academy against an older academy (--baseline OLD_BINARY): the same cycles, and GC.

The two binaries never share a network, a store or a bridge (the owner comment of an
nf_tables element has changed form between versions: `<cid>:<ifname>` before,
`<network>:<cid>:<ifname>` now), nor even a node: each runs on a private node of its
own (lab.add_node), the current binary on one and the baseline on the other, so that
neither reads the other's objects in a shared table and neither sees the host's. On
each node: a plain network and one with ipMasq (run in bench.py's cycles, interleaved
with everything else), and a GC network (this module's phase).

GC, for each binary, rounds alternating which goes first: N pods ADDed (untimed), then
GC with all N in cni.dev/valid-attachments (nothing to remove: the cost of looking),
timed GC_VALID_REPEAT times; then the N pods' netns are deleted (their veths go with
them: containers gone, the runtime's DELs lost) and GC with an empty list frees their
addresses and nf_tables elements, timed once. What GC left or wrongly removed is
counted each time.
"""

import json
import os
import subprocess
import time

import cni
import lab as labmod
from cni import Attachment, Plugin
from lab import PREFIX, Lab
from proc import Spawner

# /20s of 10.242.0.0/16 (the floor keeps 10.242.0.0/20).
NETS = {"current": "10.242.16", "current-masq": "10.242.32",
        "baseline": "10.242.48", "baseline-masq": "10.242.64"}
NET_GC = {"current": "10.242.80", "baseline": "10.242.96"}
WHO = ("current", "baseline")
GC_VALID_REPEAT = 3
SETTLE_S = 0.02


def commit_of(binary: str) -> str:
    """The short commit of the work tree a binary was built in (target/release/academy
    of a checkout), or "unknown"."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(binary))))
    r = subprocess.run(["git", "-C", top, "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown"


class Versus:
    """The two nodes and their networks: `plugins` for the cycles (keys current,
    current-masq, baseline, baseline-masq, each with a pod netns in `netns`), `gc` for
    the GC phase."""

    def __init__(self, lab: Lab, current_bin: str, baseline_bin: str):
        self.lab = lab
        self.nodes = {w: lab.add_node(f"{PREFIX}-vn{w[0]}") for w in WHO}
        binaries = {"current": current_bin, "baseline": baseline_bin}
        self.plugins, self.netns = {}, {}
        for key, net in NETS.items():
            who = key.split("-")[0]
            masq = key.endswith("-masq")
            tag = f"{who[0]}{'m' if masq else ''}"  # c, cm, b, bm
            self.plugins[key] = plugin(binaries[who], f"{PREFIX}br-v{tag}", net,
                                       f"{PREFIX}-v-{key}", lab.scratch(f"store-v{tag}"),
                                       self.nodes[who], masq)
            self.netns[key] = lab.add_netns(f"{PREFIX}-vp{tag}")
        self.gc = {w: plugin(binaries[w], f"{PREFIX}br-g{w[0]}", NET_GC[w], f"{PREFIX}-gc-{w}",
                             lab.scratch(f"store-g{w[0]}"), self.nodes[w], True, "1.1.0")
                   for w in WHO}

    def leftovers(self) -> dict:
        return {k: {"ports": labmod.ports(p.bridge, p.node),
                    "reservations": [f for f in os.listdir(p.store) if f[:1].isdigit()]
                    if os.path.isdir(p.store) else []}
                for k, p in self.plugins.items()}


def plugin(binary: str, bridge: str, net: str, name: str, data_dir: str, node: str,
           masq: bool, version: str = "1.0.0") -> Plugin:
    conf = {"cniVersion": version, "name": name, "type": "academy", "bridge": bridge,
            "subnet": f"{net}.0/20", "gateway": f"{net}.1", "dataDir": data_dir,
            # As bench.py's: the first-ADD table times very first ADDs (an older binary
            # ignores the key, and releases at once anyway).
            "releaseUnusedAfter": 0}
    if masq:
        conf["ipMasq"] = True
    return Plugin("academy", binary, conf, os.path.dirname(binary), bridge,
                  os.path.join(data_dir, name), node)


def gc_phase(sp: Spawner, v: Versus, n: int, rounds: int, progress=lambda _m: None) -> dict:
    out = {"attachments": n, "rounds": rounds, "valid_repeat": GC_VALID_REPEAT,
           "runs": {w: {"valid": [], "stale": []} for w in WHO}, "problems": []}
    # Unrecorded: the bridge, the tables.
    for w in WHO:
        pod = v.lab.add_netns(f"{PREFIX}-gw{w[0]}")
        att = Attachment(cid=f"{PREFIX}-gc-warm", netns=pod)
        cni.invoke(sp, v.gc[w], "ADD", att)
        cni.invoke(sp, v.gc[w], "DEL", att)
        v.lab.del_netns_many([os.path.basename(pod)])
    for r in range(rounds):
        for w in (WHO[r % 2:] + WHO[:r % 2]):
            progress(f"GC round {r + 1}/{rounds} {w}")
            gc_round(sp, v, w, n, r, out)
    return out


def gc_round(sp: Spawner, v: Versus, w: str, n: int, r: int, out: dict):
    p = v.gc[w]
    names = [f"{PREFIX}-g{w[0]}{j:02d}" for j in range(n)]
    paths = v.lab.add_netns_many(names)
    atts = [Attachment(cid=f"{PREFIX}-gc-{r}-{j:02d}", netns=path) for j, path in enumerate(paths)]
    for a in atts:
        run = cni.invoke(sp, p, "ADD", a)
        if not run.ok:
            out["problems"].append(f"{w} round {r}: ADD failed: {a.errors[-1][:300]}")
    live = [a for a in atts if a.result]
    valid = [{"containerID": a.cid, "ifname": a.ifname} for a in live]
    for _ in range(GC_VALID_REPEAT):
        run = _gc(sp, p, valid)
        out["runs"][w]["valid"].append(run.sample())
        if not run.ok:
            out["problems"].append(f"{w} round {r}: GC (all valid) failed: {_text(run)}")
    held = len(_reservations(p.store))
    veths = len(labmod.node_veths(p.node))
    if held != len(live) or veths != len(live):
        out["problems"].append(f"{w} round {r}: GC with every attachment valid left "
                               f"{held} reservations and {veths} veths of {len(live)}")
    v.lab.del_netns_many(names)
    _wait_no_veths(p.node)
    run = _gc(sp, p, [])
    out["runs"][w]["stale"].append(run.sample())
    if not run.ok:
        out["problems"].append(f"{w} round {r}: GC (all stale) failed: {_text(run)}")
    left = {"reservations": len(_reservations(p.store)), "veths": len(labmod.node_veths(p.node)),
            "nft_elements": labmod.node_nft_elements(p.node)}
    if any(left.values()):
        out["problems"].append(f"{w} round {r}: GC of {len(live)} stale left {left}")


def _gc(sp: Spawner, p: Plugin, valid: list):
    conf = dict(p.conf, **{"cni.dev/valid-attachments": valid})
    env = dict(cni.BASE_ENV, CNI_COMMAND="GC", CNI_PATH=p.cni_path)
    time.sleep(SETTLE_S)
    return sp.run(p.argv(), env, json.dumps(conf).encode(), p.node)


def _text(run) -> str:
    return (run.stdout.decode(errors="replace")[:200] + " "
            + run.stderr.decode(errors="replace")[:200]).strip()


def _reservations(store: str) -> list:
    try:
        return [f for f in os.listdir(store) if f[:1].isdigit()]
    except FileNotFoundError:
        return []


def _wait_no_veths(node: str, timeout_s: float = 20.0):
    """A deleted netns takes its veths with it a little later (the kernel's cleanup
    work): GC of the stale is timed once they are gone."""
    deadline = time.monotonic() + timeout_s
    while labmod.node_veths(node) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # and the kernel's tail of it
