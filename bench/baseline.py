"""academy against an older academy (--baseline OLD_BINARY): the same cycles, GC and restore.

The two binaries never share a network, a store or a bridge (the owner comment of an
nf_tables element has changed form between versions: `<cid>:<ifname>` before,
`<network>:<cid>:<ifname>` now), nor even a node: each runs on a private node of its
own (lab.add_node), the current binary on one and the baseline on the other, so that
neither reads the other's objects in a shared table and neither sees the host's. On
each node, run in bench.py's cycles (interleaved with everything else): a plain network,
one with ipMasq, one publishing a TCP port (the portMappings capability, runtimeConfig as
a runtime passes it; the resident publishes a port of its own), and podman's chain
(chains.podman_list) after `academy convert` by the current binary, the same converted
entry on both (the baseline runs what the current binary's convert writes; v0.5.0 runs
every key of it), with a port as well. And a GC network (this module's phases).

GC, for each binary, rounds alternating which goes first: N pods ADDed (untimed), then
GC with all N in cni.dev/valid-attachments (nothing to remove: the cost of looking),
timed GC_VALID_REPEAT times; then the N pods' netns are deleted (their veths go with
them: containers gone, the runtime's DELs lost) and GC with an empty list frees their
addresses and nf_tables elements, timed once. What GC left or wrongly removed is
counted each time.

Restore and GC at scale (restore_phase), for each binary, rounds alternating which goes
first: N pods (250 in a full run) ADDed (untimed) on its GC network; GC with all N valid,
timed GC_VALID_REPEAT times; then RESTORE_REPEAT times: `nft delete table inet academy`
inside that binary's node (only there: the node is the bench's own netns), and
`academy restore --conf-dir DIR` (DIR holds the GC network's conflist alone) timed in the
node, what it put back checked (the network's masquerade set holds the N addresses again,
and every set and map of the node has as many elements as before the delete); then the
N netns deleted and GC of the N stale timed once, and what it left counted.
"""

import dataclasses
import json
import os
import subprocess
import time

import chains
import cni
import lab as labmod
from cni import Attachment, Plugin
from lab import PREFIX, Lab
from proc import Spawner

# /20s of 10.242.0.0/16 (the floor keeps 10.242.0.0/20); the port and podman networks
# take /20s of 10.244, inside the nodes only (on the host 10.244 is the scaling phase's).
NETS = {"current": "10.242.16", "current-masq": "10.242.32",
        "baseline": "10.242.48", "baseline-masq": "10.242.64",
        "current-port": "10.244.16", "baseline-port": "10.244.32",
        "current-podman": "10.244.48", "baseline-podman": "10.244.64"}
NET_GC = {"current": "10.242.80", "baseline": "10.242.96"}
WHO = ("current", "baseline")
# A network's shape (the key's tail) -> its tag in names: bridge bnchbr-v<who><tag>,
# pod netns, container IDs (academy derives a host veth's name from the container ID, and
# a node's networks share its links).
SHAPES = {"": "", "masq": "m", "port": "p", "podman": "k"}
# The host ports of the port-publishing shapes: the cycles' container's, the resident's
# (each node's own: the two shapes share a node, so they publish different ports).
PORTS = {"port": (33001, 33101), "podman": (33002, 33102)}
# Where a network's first ADD and last DEL are timed (bench.py's lifetime cycles).
LIFETIME_KEYS = ("current", "current-masq", "baseline", "baseline-masq")
GC_VALID_REPEAT = 3
RESTORE_REPEAT = 3
SETTLE_S = 0.02


def shape_of(key: str) -> str:
    """"current-masq" -> "masq", "baseline" -> ""."""
    return key.partition("-")[2]


def tag_of(key: str) -> str:
    """c, cm, cp, ck, b, bm, bp, bk."""
    return f"{key[0]}{SHAPES[shape_of(key)]}"


def commit_of(binary: str) -> str:
    """What a binary is: `academy --version`'s version and commit ("0.5.0", "0.6.0-dev
    c89b05a"), else the short commit of the git work tree it was built in (only when
    target/release/academy sits at that tree's top: a source tree exported under another
    repository's target/ is not that repository's HEAD), else "unknown"."""
    r = subprocess.run([binary, "--version"], capture_output=True, text=True)
    version = commit = ""
    for line in r.stdout.splitlines():
        if line.startswith("academy "):
            version = line.split()[1]
        elif line.startswith("git commit ") and line.split()[2] != "unknown":
            commit = line.split()[2][:7]
    if not commit:
        top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(binary))))
        g = subprocess.run(["git", "-C", top, "rev-parse", "--show-toplevel", "--short", "HEAD"],
                           capture_output=True, text=True)
        lines = g.stdout.split()
        if g.returncode == 0 and len(lines) == 2 and os.path.samefile(lines[0], top):
            commit = lines[1]
    label = " ".join(x for x in (version, commit) if x)
    return label or "unknown"


class Versus:
    """The two nodes and their networks: `plugins` for the cycles (keys current,
    current-masq, current-port, current-podman and the same for baseline, each with a
    pod netns in `netns`; `residents` the plugin a network's resident is ADDed with, when
    it differs: its own port), `gc` for the GC and restore phases."""

    def __init__(self, lab: Lab, current_bin: str, baseline_bin: str):
        self.lab = lab
        self.nodes = {w: lab.add_node(f"{PREFIX}-vn{w[0]}") for w in WHO}
        self.binaries = {"current": current_bin, "baseline": baseline_bin}
        self.plugins, self.netns, self.residents = {}, {}, {}
        for key, net in NETS.items():
            who, shape, tag = key.split("-")[0], shape_of(key), tag_of(key)
            bridge, name = f"{PREFIX}br-v{tag}", f"{PREFIX}-v-{key}"
            store = lab.scratch(f"store-v{tag}")
            if shape == "podman":
                p = podman_plugin(current_bin, self.binaries[who], bridge, net, name, store,
                                  self.nodes[who], lab.scratch("versus-convert"))
            else:
                p = plugin(self.binaries[who], bridge, net, name, store, self.nodes[who],
                           shape == "masq")
            if shape in PORTS:
                cycle_port, resident_port = PORTS[shape]
                p.conf["capabilities"] = dict(p.conf.get("capabilities", {}),
                                              portMappings=True)
                p.conf["runtimeConfig"] = chains.mapping(cycle_port)
                self.residents[key] = dataclasses.replace(
                    p, conf=dict(p.conf, runtimeConfig=chains.mapping(resident_port)))
            self.plugins[key] = p
            self.netns[key] = lab.add_netns(f"{PREFIX}-vp{tag}")
        self.gc = {w: plugin(self.binaries[w], f"{PREFIX}br-g{w[0]}", NET_GC[w],
                             f"{PREFIX}-gc-{w}", lab.scratch(f"store-g{w[0]}"), self.nodes[w],
                             True, "1.1.0")
                   for w in WHO}

    def resident(self, key: str) -> Plugin:
        """The plugin a network's resident attachment is ADDed and DELed with."""
        return self.residents.get(key, self.plugins[key])

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


def podman_plugin(converter: str, binary: str, bridge: str, net: str, name: str,
                  data_dir: str, node: str, scratch: str) -> Plugin:
    """podman's generated list (chains.podman_list: bridge with ipMasq and hairpinMode,
    host-local, portmap, firewall, tuning) after `academy convert` by `converter` (the
    current binary, for both sides): one academy entry, run by `binary`. As the other
    networks here, releaseUnusedAfter 0 (an older binary ignores it and releases at once
    anyway), so that the current binary too leaves nothing waiting on the node."""
    converted = chains.converted(converter, chains.podman_list(name, bridge, net, data_dir),
                                 scratch)
    entries = converted["plugins"]
    if len(entries) != 1 or entries[0]["type"] != "academy":
        raise SystemExit(f"bench: academy convert of podman's list gave "
                         f"{[e['type'] for e in entries]}, not one academy entry")
    conf = dict(entries[0], name=converted["name"], cniVersion=converted["cniVersion"],
                releaseUnusedAfter=0)
    return Plugin("academy", binary, conf, os.path.dirname(binary), bridge,
                  os.path.join(data_dir, name), node)


def _warm(sp: Spawner, v: Versus):
    """Unrecorded: each GC network's bridge and tables made once."""
    for w in WHO:
        pod = v.lab.add_netns(f"{PREFIX}-gw{w[0]}")
        att = Attachment(cid=f"{PREFIX}-gc-warm", netns=pod)
        cni.invoke(sp, v.gc[w], "ADD", att)
        cni.invoke(sp, v.gc[w], "DEL", att)
        v.lab.del_netns_many([os.path.basename(pod)])


def gc_phase(sp: Spawner, v: Versus, n: int, rounds: int, progress=lambda _m: None) -> dict:
    out = {"attachments": n, "rounds": rounds, "valid_repeat": GC_VALID_REPEAT,
           "runs": {w: {"valid": [], "stale": []} for w in WHO}, "problems": []}
    t0 = time.monotonic()
    _warm(sp, v)
    for r in range(rounds):
        for w in (WHO[r % 2:] + WHO[:r % 2]):
            progress(f"GC round {r + 1}/{rounds} {w}")
            gc_round(sp, v, w, n, r, out)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def gc_round(sp: Spawner, v: Versus, w: str, n: int, r: int, out: dict):
    p = v.gc[w]
    names = [f"{PREFIX}-g{w[0]}{j:02d}" for j in range(n)]
    live = _add_pods(sp, v, p, names, lambda j: f"{PREFIX}-gc-{r}-{j:02d}", f"{w} round {r}", out)
    _gc_all_valid(sp, p, live, out["runs"][w]["valid"], f"{w} round {r}", out)
    held = len(_reservations(p.store))
    veths = len(labmod.node_veths(p.node))
    if held != len(live) or veths != len(live):
        out["problems"].append(f"{w} round {r}: GC with every attachment valid left "
                               f"{held} reservations and {veths} veths of {len(live)}")
    _gc_all_stale(sp, v, p, names, len(live), out["runs"][w]["stale"], f"{w} round {r}", out)


def _add_pods(sp: Spawner, v: Versus, p: Plugin, names: list, cid, who: str, out: dict) -> list:
    """A netns each for `names`, each ADDed (untimed) as container cid(j); the live ones."""
    paths = v.lab.add_netns_many(names)
    atts = [Attachment(cid=cid(j), netns=path) for j, path in enumerate(paths)]
    for a in atts:
        if not cni.invoke(sp, p, "ADD", a).ok:
            out["problems"].append(f"{who}: ADD failed: {a.errors[-1][:300]}")
    return [a for a in atts if a.result]


def _gc_all_valid(sp: Spawner, p: Plugin, live: list, samples: list, who: str, out: dict):
    """GC with every live attachment listed, GC_VALID_REPEAT times, each timed."""
    valid = [{"containerID": a.cid, "ifname": a.ifname} for a in live]
    for _ in range(GC_VALID_REPEAT):
        run = _gc(sp, p, valid)
        samples.append(run.sample())
        if not run.ok:
            out["problems"].append(f"{who}: GC (all valid) failed: {_text(run)}")


def _gc_all_stale(sp: Spawner, v: Versus, p: Plugin, names: list, live: int, samples: list,
                  who: str, out: dict):
    """The pods' netns deleted (their veths go with them), then GC with an empty list,
    timed once; what it left is a problem."""
    v.lab.del_netns_many(names)
    _wait_no_veths(p.node)
    run = _gc(sp, p, [])
    samples.append(run.sample())
    if not run.ok:
        out["problems"].append(f"{who}: GC (all stale) failed: {_text(run)}")
    left = {"reservations": len(_reservations(p.store)), "veths": len(labmod.node_veths(p.node)),
            "nft_elements": labmod.node_nft_elements(p.node)}
    if any(left.values()):
        out["problems"].append(f"{who}: GC of {live} stale left {left}")


def restore_phase(sp: Spawner, v: Versus, n: int, rounds: int,
                  progress=lambda _m: None) -> dict:
    """Restore and GC of n attachments on each binary's GC network (the module's doc)."""
    out = {"attachments": n, "rounds": rounds, "valid_repeat": GC_VALID_REPEAT,
           "restore_repeat": RESTORE_REPEAT,
           "runs": {w: {"gc_valid": [], "restore": [], "gc_stale": []} for w in WHO},
           "put_back": {w: [] for w in WHO}, "problems": []}
    conf_dirs = {w: conf_dir(v.lab.scratch(f"conf-g{w[0]}"), v.gc[w]) for w in WHO}
    t0 = time.monotonic()
    _warm(sp, v)
    for r in range(rounds):
        for w in (WHO[r % 2:] + WHO[:r % 2]):
            progress(f"restore and GC of {n}, round {r + 1}/{rounds} {w}")
            restore_round(sp, v, w, n, r, conf_dirs[w], out)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def conf_dir(directory: str, p: Plugin) -> str:
    """A CNI config folder holding one conflist: `p`'s network alone."""
    entry = {k: val for k, val in p.conf.items() if k not in ("name", "cniVersion")}
    with open(os.path.join(directory, f"{p.conf['name']}.conflist"), "w") as f:
        json.dump({"cniVersion": p.conf["cniVersion"], "name": p.conf["name"],
                   "plugins": [entry]}, f)
    return directory


def restore_round(sp: Spawner, v: Versus, w: str, n: int, r: int, confs: str, out: dict):
    p = v.gc[w]
    masq_set = f"{p.conf['name']}-v4"
    names = [f"{PREFIX}-vr{w[0]}{j:03d}" for j in range(n)]
    live = _add_pods(sp, v, p, names, lambda j: f"{PREFIX}-rs-{r}-{j:03d}", f"{w} round {r}", out)
    _gc_all_valid(sp, p, live, out["runs"][w]["gc_valid"], f"{w} round {r}", out)
    before = _nonzero(labmod.node_nft_sets(p.node))
    if before.get(masq_set) != len(live):
        out["problems"].append(f"{w} round {r}: {masq_set} holds {before.get(masq_set)} "
                               f"elements for {len(live)} attachments before the delete")
    for k in range(RESTORE_REPEAT):
        labmod.node_delete_academy_table(p.node)
        gone = _nonzero(labmod.node_nft_sets(p.node))
        if masq_set in gone:
            out["problems"].append(f"{w} round {r}: the table outlived its delete: {gone}")
        time.sleep(SETTLE_S)
        run = sp.run([p.binary, "restore", "--conf-dir", confs], dict(cni.BASE_ENV), b"",
                     p.node)
        out["runs"][w]["restore"].append(run.sample())
        after = _nonzero(labmod.node_nft_sets(p.node))
        said = run.stderr.decode(errors="replace").strip()
        # What it put back: the masquerade set's elements (one per live attachment) are
        # the check; every non-empty set and map before the delete and after the restore
        # are kept beside it (the node's other networks have none left by now).
        out["put_back"][w].append({"attachments": len(live),
                                   "masq_elements": after.get(masq_set, 0),
                                   "before": before, "after": after,
                                   "said": said[:300]})
        if not run.ok:
            out["problems"].append(f"{w} round {r}: restore failed: {_text(run)}")
        elif after.get(masq_set, 0) != len(live):
            out["problems"].append(f"{w} round {r}: restore put back {after.get(masq_set, 0)} "
                                   f"of {len(live)} elements of {masq_set}: {said[:200]}")
    _gc_all_stale(sp, v, p, names, len(live), out["runs"][w]["gc_stale"], f"{w} round {r}", out)


def _gc(sp: Spawner, p: Plugin, valid: list):
    conf = dict(p.conf, **{"cni.dev/valid-attachments": valid})
    env = dict(cni.BASE_ENV, CNI_COMMAND="GC", CNI_PATH=p.cni_path)
    time.sleep(SETTLE_S)
    return sp.run(p.argv(), env, json.dumps(conf).encode(), p.node)


def _nonzero(sets: dict | None) -> dict:
    """The sets and maps that hold something (None: nft answered nothing readable)."""
    return {k: n for k, n in (sets or {}).items() if n}


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
