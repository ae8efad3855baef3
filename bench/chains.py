"""Whole chains as runtimes run them, and academy's port mapping, in one run.

    python3 bench/chains.py --academy target/release/academy --reference-dir /opt/cni/lab-bin

- podman's generated chain (bridge with ipMasq and hairpinMode, portmap, firewall,
  tuning) on the reference plugins, against the same network converted by
  `academy convert` (one academy entry: it accepts its bridge's forwarding itself where
  iptables' FORWARD policy drops), each with one port mapping: ADD and DEL cycles
  interleaved, the same with a UDP port (both flush its stale conntrack entries), then
  50 parallel ADDs (and DELs) of each; and, for comparison, the converted network with
  the reference `firewall` kept after it;
- academy alone: ADD with 3 port mappings against ADD without, and ADD with one port
  mapping with 1,000 other containers' ports in the map against none (in two private
  "host" namespaces, each with its own academy table), and ADD with a UDP port against
  one with a TCP port.

Steady state: academy makes a network's own nf_tables objects at its first ADD and
deletes them at its last DEL. So that the recorded cycles measure ordinary ADDs and DELs
(as bench.py's cycles do), every chain's network (the reference's too, for symmetry)
holds one resident attachment, in a netns of its own and without port mappings, ADDed
(untimed) before its recorded cycles and DELed after them; then nothing may be left on
the bridges or in the stores. The parallel bursts run after the residents went, on
empty networks, as before.

Chains are run as libcni runs them: each plugin in order with the previous one's result
as prevResult and runtimeConfig for the capabilities it declares, DEL in reverse order.
Only ratios are reported: the machine is shared and noisy. Also a phase of bench.py.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import PREFIX, Lab, ports, sh  # noqa: E402

DEBIAN_PLUGINS = "/usr/lib/cni"  # firewall and tuning, as podman on Debian 12 runs them
# /20s of 10.242.0.0/16, inside the bench's 10.240-10.246 (lab.py); a /20 is 4,094
# addresses, more than any of these networks holds.
NET_REF, NET_ACADEMY, NET_ALONE = "10.242.192", "10.242.208", "10.242.224"
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
FAKE_HOLDER = f"{PREFIX}-fake"


def podman_list(name: str, bridge: str, net: str, store: str) -> dict:
    """What `podman network create --subnet NET.0/20` writes (podman 4.3, CNI)."""
    return {"cniVersion": "0.4.0", "name": name, "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": True,
         "hairpinMode": True, "capabilities": {"ips": True},
         "ipam": {"type": "host-local", "dataDir": store, "routes": [{"dst": "0.0.0.0/0"}],
                  "ranges": [[{"subnet": f"{net}.0/20", "gateway": f"{net}.1"}]]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "firewall", "backend": ""},
        {"type": "tuning"},
    ]}


def converted(academy: str, conflist: dict, scratch: str) -> dict:
    path = os.path.join(scratch, f"{conflist['name']}.conflist")
    with open(path, "w") as f:
        json.dump(conflist, f)
    out = sh(academy, "convert", path)
    return json.loads(out.stdout)


class Chain:
    """One network's conflist, run plugin by plugin from `cni_path`."""

    def __init__(self, conflist: dict, cni_path: str, launcher: list | None = None):
        self.list = conflist
        self.cni_path = cni_path
        self.launcher = launcher or []

    def _run(self, plugin: dict, command: str, cid: str, netns: str, caps: dict,
             prev: dict | None) -> dict | None:
        conf = dict(plugin, name=self.list["name"], cniVersion=self.list["cniVersion"])
        wanted = {k: v for k, v in caps.items() if plugin.get("capabilities", {}).get(k)}
        if wanted:
            conf["runtimeConfig"] = wanted
        if prev:
            conf["prevResult"] = prev
        env = dict(ENV, CNI_COMMAND=command, CNI_CONTAINERID=cid, CNI_NETNS=netns,
                   CNI_IFNAME="eth0", CNI_PATH=self.cni_path)
        binary = os.path.join(self.cni_path, plugin["type"])
        r = subprocess.run([*self.launcher, binary], input=json.dumps(conf).encode(), env=env,
                           capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"{plugin['type']} {command} failed: {r.stdout!r} {r.stderr!r}")
        return json.loads(r.stdout) if r.stdout.strip() else prev

    def add(self, cid: str, netns: str, caps: dict) -> tuple[float, dict]:
        t0 = time.perf_counter()
        prev = None
        for plugin in self.list["plugins"]:
            prev = self._run(plugin, "ADD", cid, netns, caps, prev)
        return (time.perf_counter() - t0) * 1e3, prev

    def delete(self, cid: str, netns: str, caps: dict, result: dict) -> float:
        t0 = time.perf_counter()
        for plugin in reversed(self.list["plugins"]):
            self._run(plugin, "DEL", cid, netns, caps, result)
        return (time.perf_counter() - t0) * 1e3


def mapping(*host_ports: int, protocol: str = "tcp") -> dict:
    return {"portMappings": [{"hostPort": p, "containerPort": 80, "protocol": protocol}
                             for p in host_ports]}


def networks_of(chains: dict) -> dict:
    """One chain key per network (by name: "academy-fw" is academy's network with the
    reference firewall after it, the same bridge and store), in the chains' order."""
    out = {}
    for k, chain in chains.items():
        out.setdefault(chain.list["name"], k)
    return out


class Residents:
    """One attachment per network of `chains`, each in a netns of its own, no port
    mappings, ADDed untimed (add) and DELed untimed (remove); failures in `errors`."""

    def __init__(self, lab: Lab, chains: dict, tag: str, keys: list | None = None):
        self.chains = chains
        self.keys = keys or list(networks_of(chains).values())
        self.netns = {k: lab.add_netns(f"{PREFIX}-{tag}r{i}") for i, k in enumerate(self.keys)}
        self.results, self.errors = {}, []
        self.tag = tag

    def add(self):
        for k in self.keys:
            try:
                _, self.results[k] = self.chains[k].add(f"{PREFIX}-{self.tag}-res-{k}",
                                                        self.netns[k], {})
            except RuntimeError as e:
                self.errors.append(f"resident {k} ADD: {str(e)[:300]}")

    def remove(self):
        for k, result in self.results.items():
            try:
                self.chains[k].delete(f"{PREFIX}-{self.tag}-res-{k}", self.netns[k], {}, result)
            except RuntimeError as e:
                self.errors.append(f"resident {k} DEL: {str(e)[:300]}")
        self.results = {}


def reservations(store: str) -> list:
    """Address files in a host-local store directory (not its lock or last-reserved)."""
    try:
        names = os.listdir(store)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n[:1].isdigit() or ":" in n)


def left_behind(left: dict) -> dict:
    """The non-empty part of {network key: {what: [items]}}."""
    return {k: {w: v for w, v in d.items() if v} for k, d in left.items()
            if any(d.values())}


def median_ratio(a: list, b: list) -> float:
    return round(statistics.median(a) / statistics.median(b), 3)


def cycles(chains: dict, netns: dict, n: int, caps: dict) -> dict:
    """n ADD/DEL cycles of each chain, the order rotating each cycle."""
    times = {k: {"ADD": [], "DEL": []} for k in chains}
    keys = list(chains)
    for i in range(n + 1):  # the first is a warm-up (bridges, tables, chains created)
        for k in keys[i % len(keys):] + keys[:i % len(keys)]:
            cid = f"{PREFIX}-ch-{k}-{i}"
            add, result = chains[k].add(cid, netns[k], caps)
            time.sleep(0.02)
            delete = chains[k].delete(cid, netns[k], caps, result)
            time.sleep(0.02)
            if i:
                times[k]["ADD"].append(add)
                times[k]["DEL"].append(delete)
    return times


def burst(chain: Chain, paths: list, base_port: int) -> dict:
    """len(paths) ADDs at once, each publishing its own port, then their DELs at once."""
    def one_add(j):
        return chain.add(f"{PREFIX}-bu-{j}", paths[j], mapping(base_port + j))[1]

    with ThreadPoolExecutor(len(paths)) as pool:
        t0 = time.perf_counter()
        results = list(pool.map(one_add, range(len(paths))))
        add = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        list(pool.map(lambda j: chain.delete(f"{PREFIX}-bu-{j}", paths[j],
                                             mapping(base_port + j), results[j]),
                      range(len(paths))))
        delete = (time.perf_counter() - t0) * 1e3
    return {"ADD": add, "DEL": delete}


def _fake_address(i: int) -> str:
    """The i-th fake holder's address: the upper half of NET_ALONE's /20 (the plugin
    allocates from the bottom), 250 to a /24."""
    a, b, third = NET_ALONE.split(".")
    return f"{a}.{b}.{int(third) + 8 + i // 250}.{i % 250 + 1}"


def fake_ports(host: str, count: int):
    """`count` other containers' published ports in the v4 map of `host`'s table."""
    lines = [f'add element inet academy _ports-v4 {{ tcp . {40000 + i} comment '
             f'"{FAKE_HOLDER}:c{i}:eth0" : {_fake_address(i)} . 80 }}'
             for i in range(count)]
    sh("ip", "netns", "exec", host, "nft", "-f", "-", input="\n".join(lines) + "\n")


def alone(lab: Lab, cni_path: str, n: int) -> tuple[dict, list]:
    """academy alone, each in a private "host" netns of its own (nf_tables is per netns,
    so one can hold 1,000 other containers' ports while the other holds none, without
    adding and removing them between measurements): 3 mappings against none, and one
    mapping with 1,000 others published against one with none; interleaved."""
    hosts = {k: lab.add_netns(f"{PREFIX}-h{k}") for k in ("empty", "crowded")}
    chains, netns = {}, {}
    for k, path in hosts.items():
        sh("ip", "-n", os.path.basename(path), "link", "set", "lo", "up")
        conflist = {"cniVersion": "1.0.0", "name": f"{PREFIX}-alone", "plugins": [
            {"type": "academy", "bridge": f"{PREFIX}br-al", "isGateway": True,
             "capabilities": {"portMappings": True},
             "ipam": {"type": "host-local", "dataDir": lab.scratch(f"store-al-{k}"),
                      "ranges": [[{"subnet": f"{NET_ALONE}.0/20"}]]}}]}
        chains[k] = Chain(conflist, cni_path, ["nsenter", f"--net={path}"])
        netns[k] = lab.add_netns(f"{PREFIX}-c{k}")
        # The maps exist once a port was published; then the crowd moves in.
        _, result = chains[k].add(f"{PREFIX}-al-init", netns[k], mapping(45000))
        chains[k].delete(f"{PREFIX}-al-init", netns[k], mapping(45000), result)
    fake_ports(os.path.basename(hosts["crowded"]), 1000)
    # Each host's network keeps a resident (no port mapping: the empty host publishes
    # nothing else) while the cycles run, so no recorded ADD is the network's first.
    resident = Residents(lab, chains, "al", keys=list(chains))  # one name, two hosts
    resident.add()
    runs = [("none", "empty", {}), ("three", "empty", mapping(45001, 45002, 45003)),
            ("one", "empty", mapping(45010)), ("one_of_1001", "crowded", mapping(45010)),
            ("one_udp", "empty", mapping(45020, protocol="udp"))]
    t = {key: [] for key, _, _ in runs}
    for i in range(n + 1):
        for key, host, caps in runs[i % len(runs):] + runs[:i % len(runs)]:
            cid = f"{PREFIX}-al-{key}-{i}"
            add, result = chains[host].add(cid, netns[host], caps)
            time.sleep(0.02)
            chains[host].delete(cid, netns[host], caps, result)
            time.sleep(0.02)
            if i:
                t[key].append(add)
    resident.remove()
    return t, resident.errors


def run(academy: str, reference_dir: str, lab: Lab, n: int, parallel: int) -> dict:
    scratch = lab.scratch("chains")
    cni_path = lab.scratch("chains-bin")
    for name in ("bridge", "host-local", "portmap"):
        os.symlink(os.path.join(os.path.abspath(reference_dir), name),
                   os.path.join(cni_path, name))
    for name in ("firewall", "tuning"):
        os.symlink(os.path.join(DEBIAN_PLUGINS, name), os.path.join(cni_path, name))
    shutil.copy(academy, os.path.join(cni_path, "academy"))

    ref_list = podman_list(f"{PREFIX}-chain-ref", f"{PREFIX}br-cr", NET_REF,
                           lab.scratch("store-cr"))
    aca_list = converted(academy, podman_list(f"{PREFIX}-chain-aca", f"{PREFIX}br-ca",
                                              NET_ACADEMY, lab.scratch("store-ca")), scratch)
    for br in (f"{PREFIX}br-cr", f"{PREFIX}br-ca"):
        lab.track_bridge(br)
    # The converted network with the reference firewall still after it (as before academy
    # accepted forwarding itself): what keeping it would cost; the bridge is the same.
    with_fw = dict(aca_list, plugins=aca_list["plugins"] + [{"type": "firewall", "backend": ""}])
    chains = {"reference": Chain(ref_list, cni_path), "academy": Chain(aca_list, cni_path),
              "academy-fw": Chain(with_fw, cni_path)}
    netns = {k: lab.add_netns(f"{PREFIX}-ch{i}") for i, k in enumerate(chains)}

    out = {"cycles": n, "parallel": parallel,
           "converted_plugins": [p["type"] for p in aca_list["plugins"]]}
    resident = Residents(lab, chains, "ch")
    out["residents"] = resident.keys
    resident.add()
    print(f"chains: {n} interleaved cycles of each chain ...", file=sys.stderr)
    times = cycles(chains, netns, n, mapping(44001))
    out["chain_ms"] = {k: {c: round(statistics.median(v), 2) for c, v in t.items()}
                       for k, t in times.items()}
    out["chain_ratio"] = {c: median_ratio(times["academy"][c], times["reference"][c])
                          for c in ("ADD", "DEL")}
    out["fw_ratio"] = {c: median_ratio(times["academy-fw"][c], times["reference"][c])
                       for c in ("ADD", "DEL")}

    # A UDP port costs both more: each flushes the port's stale conntrack entries.
    print(f"chains: {n} interleaved cycles with a UDP port ...", file=sys.stderr)
    udp = cycles({k: chains[k] for k in ("reference", "academy")}, netns, n,
                 mapping(44002, protocol="udp"))
    out["udp_chain_ratio"] = {c: median_ratio(udp["academy"][c], udp["reference"][c])
                              for c in ("ADD", "DEL")}
    resident.remove()
    # What the cycles' DELs and the residents' left: ports on the bridges, addresses in
    # the stores (host-local keeps a directory per network name).
    stores = {"reference": os.path.join(lab.scratch("store-cr"), ref_list["name"]),
              "academy": os.path.join(lab.scratch("store-ca"), aca_list["name"])}
    bridges = {"reference": f"{PREFIX}br-cr", "academy": f"{PREFIX}br-ca"}
    out["leftovers"] = {k: {"ports": ports(bridges[k]), "reservations": reservations(stores[k])}
                        for k in ("reference", "academy")}

    print(f"chains: {parallel} parallel ADDs of each chain ...", file=sys.stderr)
    names = [f"{PREFIX}-cb{j:02d}" for j in range(parallel)]
    paths = lab.add_netns_many(names)
    try:
        bursts = {k: burst(chains[k], paths, 46000) for k in ("reference", "academy")}
    finally:
        lab.del_netns_many(names)
    out["burst_ms"] = {k: {c: round(v, 1) for c, v in b.items()} for k, b in bursts.items()}
    out["burst_ratio"] = {c: round(bursts["academy"][c] / bursts["reference"][c], 3)
                          for c in ("ADD", "DEL")}

    print("chains: academy alone, 3 mappings and 1,000 published ...", file=sys.stderr)
    t, alone_errors = alone(lab, cni_path, 2 * n)
    out["resident_errors"] = resident.errors + alone_errors
    out["alone_ms"] = {k: round(statistics.median(v), 2) for k, v in t.items()}
    out["three_vs_none"] = median_ratio(t["three"], t["none"])
    out["crowded_vs_empty"] = median_ratio(t["one_of_1001"], t["one"])
    out["udp_vs_tcp"] = median_ratio(t["one_udp"], t["one"])
    return out


def faults(r: dict) -> list:
    """What makes a fast chain result no PASS: a resident's failed ADD or DEL, anything
    left on the bridges or in the stores after the cycles."""
    out = list(r.get("resident_errors", []))
    left = left_behind(r.get("leftovers", {}))
    if left:
        out.append(f"left: {left}")
    return out


def markdown(r: dict) -> str:
    bad = faults(r)
    target = lambda v, limit: "PASS" if v <= limit and not bad else "MISS"  # noqa: E731
    rows = [
        ("converted network ADD / podman's reference chain ADD", r["chain_ratio"]["ADD"], 0.10),
        ("converted network DEL / podman's reference chain DEL", r["chain_ratio"]["DEL"], 0.20),
        ("the same with a UDP port, ADD", r["udp_chain_ratio"]["ADD"], None),
        ("the same with a UDP port, DEL", r["udp_chain_ratio"]["DEL"], None),
        ("the same with the reference firewall kept after it, ADD", r["fw_ratio"]["ADD"], None),
        ("the same with the reference firewall kept after it, DEL", r["fw_ratio"]["DEL"], None),
        (f"{r['parallel']} parallel ADDs, converted / reference (wall)",
         r["burst_ratio"]["ADD"], None),
        (f"{r['parallel']} parallel DELs, converted / reference (wall)",
         r["burst_ratio"]["DEL"], None),
        ("academy ADD with 3 port mappings / without", r["three_vs_none"], 1.2),
        ("academy ADD with 1,000 other ports published / with none", r["crowded_vs_empty"], 1.2),
        ("academy ADD with a UDP port / with a TCP port (conntrack flush)",
         r["udp_vs_tcp"], None),
    ]
    lines = ["| whole chains and port mapping (medians, one run) | ratio | target |",
             "| --- | --- | --- |"]
    for what, value, limit in rows:
        goal = f"<= {limit} {target(value, limit)}" if limit else "-"
        lines.append(f"| {what} | {value:.2f}x | {goal} |")
    lines.append("")
    lines.append(f"Converted network: {' + '.join(r['converted_plugins'])}; "
                 f"{r['cycles']} interleaved cycles of each chain.")
    if "residents" in r:
        lines.append("Steady state: each chain's network (the reference's too; academy's "
                     "alone ones as well) held one resident attachment, without port "
                     "mappings, from before its recorded cycles to after them, so no "
                     "recorded ADD was the network's first and no DEL its last; the "
                     f"{r['parallel']} parallel ADDs ran after, on empty networks.")
    errors = r.get("resident_errors", [])
    if errors:
        lines.append(f"**Resident failures:** {errors[:3]}")
    if "leftovers" in r:
        left = left_behind(r["leftovers"])
        lines.append(f"**Left after the cycles and the residents' DELs:** {left}" if left
                     else "Left after the cycles and the residents' DELs: nothing "
                          "(bridge ports, store reservations).")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--academy", required=True)
    p.add_argument("--reference-dir", required=True)
    p.add_argument("--cycles", type=int, default=15)
    p.add_argument("--parallel", type=int, default=50)
    p.add_argument("--out", help="write the JSON here")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("chains: needs root")
    lab = Lab(args.academy)
    lab.lock()
    try:
        lab.preclean()
        r = run(os.path.abspath(args.academy), args.reference_dir, lab, args.cycles,
                args.parallel)
        print(json.dumps(r, indent=1))
        print(markdown(r))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(r, f, indent=1)
    finally:
        lab.cleanup()


if __name__ == "__main__":
    main()
