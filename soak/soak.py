"""make soak: random lifecycles with faults and flushes against academy in a private
node netns, every invariant checked against a model (docs/failure-model.md#the-soak).

    python3 soak/soak.py [--seconds N] [--seed S] [--academy PATH] [--json PATH]

Each step draws a batch of up to 8 operations from the seed and the model, runs them
at once, folds their outcomes into the model, then checks the invariants against a
snapshot of the node; every few seconds also CHECK, the gateways, the ports and
isolation. On a violation: the seed, the step, the history and the node's state, exit 1.
The same seed draws the same operations (a timed kill may land elsewhere).
"""

import argparse
import concurrent.futures
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checks  # noqa: E402
import invariants  # noqa: E402
import observe  # noqa: E402
from model import DIRTY, LIVE, Attachment, Model, Network  # noqa: E402
from ops import Academy, Fault, kill_group, start  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CONTAINERS = 12
MAX_IN_FLIGHT = 8
HEAVY_EVERY = 10.0
PROGRESS_EVERY = 5.0
FAULT_RATE = 0.2
PORT_BASE = 20000
# How long a flush waits for the watch to log its restore.
REPAIR_LOOK = 3.0

FLUSHES = {
    "nft flush ruleset": ["nft", "flush", "ruleset"],
    "nft delete table inet academy": ["nft", "delete", "table", "inet", "academy"],
    "nft -f (Debian nftables.conf)": None,
    "iptables reload": None,
}
DEBIAN_NFTABLES_CONF = """#!/usr/sbin/nft -f

flush ruleset

table inet filter {
\tchain input {
\t\ttype filter hook input priority filter;
\t}
\tchain forward {
\t\ttype filter hook forward priority filter;
\t}
\tchain output {
\t\ttype filter hook output priority filter;
\t}
}
"""
# An admin's iptables rules (what iptables-restore of /etc/iptables/rules.v4 loads):
# FORWARD drops, so academy's FORWARD accepts must be there for anything to pass.
ADMIN_IPTABLES = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"


def sh(args, check=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), p.stderr.strip()))
    return p


def soak_networks(tag):
    """Two networks sharing a bridge (one releasing at once, one after a short grace,
    both isolated; one IPv4, one IPv6, since a bridge takes one gateway address per
    IPv4 subnet), a dual-stack one publishing ports with and without hostIP (isolated,
    default grace), a shaped one and a dual-stack MAC-filtered one publishing ports
    (both open)."""
    return [
        Network(tag + "a", "skbs", ["10.181.1.0/24"], release_after=0, isolated=True,
                toggle=("ipMasq", {"ipMasq": True})),
        Network(tag + "b", "skbs", ["fd81:2::/64"], release_after=3, isolated=True,
                keys={"ipMasq": True}, toggle=("macspoofchk", {"macspoofchk": True})),
        Network(tag + "c", "skbd", ["10.181.3.0/24", "fd81:3::/64"], form="ipam",
                isolated=True, ports="hostip", keys={"ipMasq": True}),
        Network(tag + "d", "skbw", ["10.181.4.0/24"], release_after=0, toggle=(
            "bandwidth", {"ingressRate": 8000000, "ingressBurst": 800000,
                          "egressRate": 8000000, "egressBurst": 800000})),
        Network(tag + "e", "skbp", ["10.181.5.0/24", "fd81:5::/64"], form="ipam", release_after=3,
                ports="any", keys={"macspoofchk": True, "ipMasq": True}),
    ]


class Op:
    def __init__(self, kind, **kw):
        self.kind = kind
        self.__dict__.update(kw)
        self.outcome = None
        self.note = ""
        self.fault = kw.get("fault")

    def describe(self):
        what = self.kind
        att = getattr(self, "att", None)
        if att is not None:
            what += " " + "/".join(att.key)
        if getattr(self, "net", None) is not None:
            what += " " + self.net.name
        if getattr(self, "flush", None):
            what += " " + self.flush
        if self.fault:
            what += " [%s]" % self.fault.describe()
        return what


class Violations(Exception):
    pass


class Soak:
    def __init__(self, args):
        self.args = args
        self.seed = args.seed
        self.rng = random.Random(self.seed)
        self.look_rng = random.Random(self.seed + 1)
        pid = os.getpid() % 100000
        self.tag = "sk%d" % pid
        self.node = self.tag + "-node"
        self.out_ns = self.tag + "-out"
        self.root = "/tmp/academy-soak-%s" % self.tag
        self.conf_dir = os.path.join(self.root, "net.d")
        self.data_dir = os.path.join(self.root, "data")
        self.node_v4, self.node_v6 = "10.181.250.1", "fd81:250::1"
        self.outside_link = "skout"
        self.probe = os.path.join(HERE, "probe.py")
        self.model = Model(soak_networks(self.tag))
        for n in self.model.networks.values():
            n.data_dir = self.data_dir
        self.academy = Academy(args.academy, self.node, self.conf_dir,
                               os.path.join(self.root, "bin"))
        self.containers = [{"i": i, "gen": 0, "netns": None, "server": None}
                           for i in range(CONTAINERS)]
        self.next_port = 0
        self.watch = None
        self.history = []
        self.step = 0
        self.t0 = time.monotonic()
        self.stats = {"operations": {}, "outcomes": {}, "faults": {"injected": 0, "hit": 0,
                                                                   "by_kind": {}},
                      "flushes": {}, "repair_ms": [], "not_repaired": 0,
                      "checks": {}, "check_skipped": 0, "unexpected_errors": [],
                      "violations": []}

    # --- the node ---------------------------------------------------------------

    def setup(self):
        self.cleanup_names()
        os.makedirs(self.conf_dir)
        os.makedirs(self.data_dir)
        os.makedirs(self.academy.cni_path)
        sh(["ip", "netns", "add", self.node])
        sh(["ip", "-n", self.node, "link", "set", "lo", "up"])
        # Its inode names the node in academy's records and bridge locks (the clean-up's).
        self.node_ino = os.stat("/run/netns/" + self.node).st_ino
        for key in ("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"):
            sh(["ip", "netns", "exec", self.node, "sysctl", "-q", "-w", key])
        sh(["ip", "netns", "add", self.out_ns])
        sh(["ip", "-n", self.node, "link", "add", self.outside_link, "type", "veth", "peer",
            "name", "out0", "netns", self.out_ns])
        for ns, dev, host in [(self.node, self.outside_link, 1), (self.out_ns, "out0", 2)]:
            sh(["ip", "-n", ns, "addr", "add", "10.181.250.%d/24" % host, "dev", dev])
            sh(["ip", "-n", ns, "addr", "add", "fd81:250::%d/64" % host, "dev", dev, "nodad"])
            sh(["ip", "-n", ns, "link", "set", dev, "up"])
        sh(["ip", "-n", self.out_ns, "link", "set", "lo", "up"])
        for n in self.model.networks.values():
            self.write_conflist(n)
        self.watch = self.academy.start_watch(os.path.join(self.root, "watch.log"))

    def write_conflist(self, net):
        path = os.path.join(self.conf_dir, "10-%s.conflist" % net.name)
        with open(path + ".tmp", "w") as f:
            json.dump(net.conflist(), f)
        os.rename(path + ".tmp", path)

    def cleanup_names(self):
        """Everything named after this soak, gone: its netns (and with the node's, its
        links and nf_tables), its folder, its records in /run/academy."""
        for c in self.containers:
            self.stop_container(c)
        out = sh(["ip", "netns", "list"], check=False).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name.startswith(self.tag + "-") or name.startswith(self.tag + "c"):
                sh(["ip", "netns", "del", name], check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        # academy's files about the soak's networks (records, state versions, the
        # network's and its removals' locks) and its node (its bridges' locks, its hint).
        # Bridge names are not the soak's own (skbs, ...): only this node's locks of them.
        ino = getattr(self, "node_ino", None)
        of_node = {"%s@%s.lock" % (n.bridge, ino) for n in self.model.networks.values()}
        # And the node's hint of its next release (src/firewall/network/hints.rs).
        of_node.add("@%s.next" % ino)
        for d in ("/run/academy/networks", "/run/academy/networks/removals",
                  "/run/academy/watch", "/run/academy/bridges"):
            for f in os.listdir(d) if os.path.isdir(d) else []:
                if f in of_node or any(
                        f.startswith(n + ".") or f.startswith(n + "-") or f.startswith(n + "@")
                        for n in self.model.networks):
                    try:
                        os.remove(os.path.join(d, f))
                    except OSError:
                        pass

    def teardown(self):
        if self.watch:
            kill_group(self.watch)
            self.watch.wait()
            self.watch = None
        self.cleanup_names()
        # A lock an invocation killed a moment ago was still creating: look once more.
        time.sleep(0.5)
        self.cleanup_names()

    def container_netns(self, c):
        if c["netns"] is None:
            c["netns"] = "%sc%d-%d" % (self.tag, c["i"], c["gen"])
            sh(["ip", "netns", "add", c["netns"]])
            sh(["ip", "-n", c["netns"], "link", "set", "lo", "up"])
        return c["netns"]

    def stop_container(self, c):
        """The container's process gone, then its netns: what a runtime's stop does."""
        if c["server"] is not None:
            kill_group(c["server"])
            c["server"].wait()
            c["server"] = None
        if c["netns"] is not None:
            sh(["ip", "netns", "del", c["netns"]], check=False)
            c["netns"] = None
            c["gen"] += 1

    def ensure_server(self, c):
        if c["server"] is None and c["netns"]:
            c["server"] = start(["ip", "netns", "exec", c["netns"], "python3", self.probe,
                                 "serve", "8080"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def cid(self, c):
        return "%s-c%d-%d" % (self.tag, c["i"], c["gen"])

    def container_of(self, att):
        return self.containers[int(att.cid.split("-c")[1].split("-")[0])]

    # --- drawing a batch ----------------------------------------------------------

    def free_containers(self):
        busy = {a.cid.rsplit("-", 1)[0] for a in self.model.attachments.values()}
        return [c for c in self.containers if "%s-c%d" % (self.tag, c["i"]) not in busy]

    def draw_ports(self, net):
        taken = {p["hostPort"] for a in self.model.attachments.values() for p in a.ports}
        chosen = []
        while len(chosen) < 2:
            self.next_port = (self.next_port + 1) % 1000
            if PORT_BASE + self.next_port not in taken:
                chosen.append(PORT_BASE + self.next_port)
        m = [{"hostPort": chosen[0], "containerPort": 8080, "protocol": "tcp"}]
        if net.ports == "hostip":
            m.append({"hostPort": chosen[1], "containerPort": 8080, "protocol": "tcp",
                      "hostIP": self.node_v4})
        return m

    def fault(self):
        if self.args.fault_rate and self.rng.random() < self.args.fault_rate:
            return Fault.draw(self.rng)
        return None

    def draw_batch(self):
        rng = self.rng
        weights = [("ADD", 30), ("DEL", 20), ("CHECK", 8), ("GC", 5), ("STATUS", 3),
                   ("restore", 3), ("toggle", 3), ("flush", 6), ("watch", 2), ("due", 2)]
        kinds, w = zip(*weights)
        ops, used, singles = [], set(), set()
        nets = list(self.model.networks.values())
        for _ in range(rng.randint(1, MAX_IN_FLIGHT)):
            kind = rng.choices(kinds, w)[0]
            if kind == "ADD":
                free = [c for c in self.free_containers() if c["i"] not in used]
                if not free:
                    continue
                c = rng.choice(free)
                net = rng.choice(nets)
                used.add(c["i"])
                ports = self.draw_ports(net) if net.ports else []
                att = Attachment(net.name, self.cid(c), "eth0", None, None,
                                 config=net.config(ports), ports=ports)
                ops.append(Op("ADD", att=att, c=c, net=None, fault=self.fault()))
            elif kind in ("DEL", "CHECK"):
                pool = [a for a in self.model.attachments.values()
                        if self.container_of(a)["i"] not in used
                        and (kind == "DEL" or a.state == LIVE)]
                # A runtime DELs a failed ADD first.
                dirty = [a for a in pool if a.state == DIRTY]
                if not pool:
                    continue
                att = rng.choice(dirty if dirty and rng.random() < 0.7 else pool)
                used.add(self.container_of(att)["i"])
                if kind == "CHECK":
                    ops.append(Op("CHECK", att=att))
                else:
                    ops.append(Op("DEL", att=att, gone_first=rng.random() < 0.3,
                                  repeat=rng.random() < 0.25, fault=self.fault()))
            elif kind in singles:
                continue
            else:
                singles.add(kind)
                if kind == "GC":
                    ops.append(Op("GC", net=rng.choice(nets), fault=self.fault()))
                elif kind == "STATUS":
                    ops.append(Op("STATUS", net=rng.choice(nets)))
                elif kind == "restore":
                    ops.append(Op("restore", fault=self.fault()))
                elif kind == "toggle":
                    ops.append(Op("toggle", net=rng.choice([n for n in nets if n.toggle])))
                elif kind == "flush":
                    ops.append(Op("flush", flush=rng.choice(sorted(FLUSHES))))
                elif kind == "watch":
                    ops.append(Op("watch", pause=rng.uniform(0, 1.5)))
                elif kind == "due":
                    ops += self.draw_due(used)
        # GC's valid list: the live attachments and those the batch works on.
        busy = {op.att.key for op in ops if getattr(op, "att", None) is not None}
        for op in ops:
            if op.kind == "GC":
                op.valid = self.model.gc_valid(op.net.name, busy)
        return ops

    def draw_due(self, used):
        """A release falling due; when a network with a grace has a bridge-mate and
        neither has an attachment, the mate's first ADD is started the moment the
        release falls due (the race of a delayed release with a first ADD on a shared
        bridge)."""
        rng = self.rng
        nets = list(self.model.networks.values())
        pairs = [(n, m) for n in nets for m in nets if n is not m and n.bridge == m.bridge
                 and n.release_seconds > 0 and not self.model.in_network(n.name)
                 and not self.model.in_network(m.name)]
        free = [c for c in self.free_containers() if c["i"] not in used]
        if not pairs or not free or rng.random() < 0.3:
            return [Op("due", net=rng.choice(nets))]
        net, mate = rng.choice(pairs)
        c = rng.choice(free)
        used.add(c["i"])
        fallen = threading.Event()
        ports = self.draw_ports(mate) if mate.ports else []
        att = Attachment(mate.name, self.cid(c), "eth0", None, None,
                         config=mate.config(ports), ports=ports)
        return [Op("due", net=net, fallen=fallen),
                Op("ADD", att=att, c=c, net=None, fault=None, after=fallen)]

    # --- running it ---------------------------------------------------------------

    def execute(self, op):
        a = self.academy
        if op.kind == "ADD":
            op.att.netns = self.container_netns(op.c)
            if getattr(op, "after", None) is not None:
                op.after.wait(10)
            op.outcome = a.cni("ADD", op.att.config, op.att.cid,
                               "/var/run/netns/" + op.att.netns, op.att.ifname, op.fault)
        elif op.kind == "DEL":
            att = op.att
            c = self.container_of(att)
            if op.gone_first and c["netns"] == att.netns:
                self.stop_container(c)
            net = self.model.networks[att.network]
            config = net.config(att.ports)
            path = "/var/run/netns/%s" % att.netns
            op.outcome = a.cni("DEL", config, att.cid, path, att.ifname, op.fault)
            if op.outcome.ok and op.repeat:
                op.again = a.cni("DEL", config, att.cid, path, att.ifname)
        elif op.kind == "CHECK":
            op.outcome = a.cni("CHECK", checks.check_config(op.att), op.att.cid,
                               "/var/run/netns/" + op.att.netns, op.att.ifname)
        elif op.kind == "GC":
            config = op.net.config()
            config["cni.dev/valid-attachments"] = [
                {"containerID": cid, "ifname": ifname} for cid, ifname in op.valid]
            op.outcome = a.cni("GC", config, fault=op.fault)
        elif op.kind in ("STATUS", "due"):
            if op.kind == "due":
                records = observe.read_records(list(self.model.networks))
                if getattr(op, "fallen", None) is not None:
                    records = {k: v for k, v in records.items() if k == op.net.name}
                due = sorted(records.values())
                if due:
                    wait = min(max(0.0, due[0] - time.time()), 8.0)
                    op.note = "waited %.1f s for a release to fall due" % wait
                    time.sleep(wait)
            if getattr(op, "fallen", None) is not None:
                op.fallen.set()
                op.note += ", with a first ADD on its bridge"
            op.outcome = a.cni("STATUS", op.net.config())
        elif op.kind == "restore":
            op.outcome = a.tool("restore", "--conf-dir", self.conf_dir, fault=op.fault)
        elif op.kind == "toggle":
            op.net.toggled_on = not op.net.toggled_on
            self.write_conflist(op.net)
            op.note = "%s %s" % (op.net.toggle[0], "on" if op.net.toggled_on else "off")
        elif op.kind == "flush":
            self.run_flush(op)
        elif op.kind == "watch":
            kill_group(self.watch)
            self.watch.wait()
            time.sleep(op.pause)
            self.watch = self.academy.start_watch(os.path.join(self.root, "watch.log"))
            op.note = "killed, started again after %.1f s" % op.pause

    def run_flush(self, op):
        ns = ["ip", "netns", "exec", self.node]
        op.log_at = self.watch_restores()
        if op.flush == "nft -f (Debian nftables.conf)":
            path = os.path.join(self.root, "nftables.conf")
            with open(path, "w") as f:
                f.write(DEBIAN_NFTABLES_CONF)
            p = subprocess.run(ns + ["nft", "-f", path], capture_output=True, text=True)
        elif op.flush == "iptables reload":
            p = subprocess.run(ns + ["iptables-nft-restore"], input=ADMIN_IPTABLES,
                               capture_output=True, text=True)
        else:
            p = subprocess.run(ns + FLUSHES[op.flush], capture_output=True, text=True)
        op.note = "exit %d %s" % (p.returncode, p.stderr.strip()[:200])
        # Repaired: the watch logs a restore that started after the flush.
        t0 = time.monotonic()
        while time.monotonic() - t0 < REPAIR_LOOK:
            if self.watch_restores() > op.log_at:
                op.repair_ms = (time.monotonic() - t0) * 1000
                return
            time.sleep(0.02)
        op.repair_ms = None

    def watch_restores(self):
        """How many restores the watch has logged ("put back after", or "could not put back after")."""
        try:
            with open(os.path.join(self.root, "watch.log")) as f:
                return sum(1 for line in f if "put back after" in line)
        except OSError:
            return 0

    def fold(self, op):
        """The operation's outcome into the model; the violations it shows at once."""
        found = []
        o = op.outcome
        st = self.stats
        st["operations"][op.kind] = st["operations"].get(op.kind, 0) + 1
        if op.fault:
            st["faults"]["injected"] += 1
            st["faults"]["by_kind"][op.fault.how] = st["faults"]["by_kind"].get(op.fault.how, 0) + 1
            if o is not None and o.killed:
                st["faults"]["hit"] += 1
        if o is not None:
            word = "killed" if o.killed else ("ok" if o.code == 0 else "error")
            key = "%s %s" % (op.kind, word)
            st["outcomes"][key] = st["outcomes"].get(key, 0) + 1
        if op.kind == "ADD":
            att = op.att
            if o.ok:
                att.state, att.result = LIVE, o.result()
                self.model.put(att)
                if att.ports:
                    self.ensure_server(op.c)
            elif o.killed:
                att.state = DIRTY
                self.model.put(att)
            else:
                self.unexpected(op)
        elif op.kind == "DEL":
            if o.ok:
                self.model.drop(op.att.key)
                again = getattr(op, "again", None)
                if again is not None and not again.ok:
                    found.append(invariants.violation(
                        "DEL never fails", "a repeated DEL of %s: %s" % (
                            "/".join(op.att.key), again.brief())))
            elif o.killed:
                op.att.state = DIRTY
            else:
                found.append(invariants.violation("DEL never fails", "DEL of %s: %s" % (
                    "/".join(op.att.key), o.brief())))
        elif op.kind == "GC":
            if o.ok:
                self.model.after_gc(op.net.name, op.valid)
            elif not o.killed:
                self.unexpected(op)
        elif op.kind == "due" and getattr(op, "fallen", None) is not None:
            st["release_races"] = st.get("release_races", 0) + 1
        elif op.kind == "flush":
            st["flushes"][op.flush] = st["flushes"].get(op.flush, 0) + 1
            if op.repair_ms is None:
                st["not_repaired"] += 1
            else:
                st["repair_ms"].append(round(op.repair_ms, 1))
        elif op.kind in ("restore", "STATUS", "due", "CHECK") and o is not None \
                and not o.ok and not o.killed and op.kind != "CHECK":
            self.unexpected(op)
        return found

    def unexpected(self, op):
        self.stats["unexpected_errors"].append("step %d: %s -> %s" % (
            self.step, op.describe(), op.outcome.brief()))

    def run_batch(self, ops):
        with concurrent.futures.ThreadPoolExecutor(MAX_IN_FLIGHT) as pool:
            list(pool.map(self.execute, ops))
        found = []
        for k, op in enumerate(ops):
            found += self.fold(op)
            line = "step %d.%d %7.1fs %s -> %s" % (
                self.step, k, time.monotonic() - self.t0, op.describe(),
                op.outcome.brief() if op.outcome else "done")
            if op.note:
                line += " (%s)" % op.note
            if getattr(op, "repair_ms", None):
                line += " (repaired in %.0f ms)" % op.repair_ms
            self.history.append(line)
        return found

    # --- looking ------------------------------------------------------------------

    def snapshot(self):
        netns = [c["netns"] for c in self.containers if c["netns"]]
        return observe.snapshot(self.node, list(self.model.networks.values()), netns)

    def count(self, name, n=1):
        self.stats["checks"][name] = self.stats["checks"].get(name, 0) + n

    def steady(self):
        """The snapshot invariants, each violation confirmed by a second look a moment
        later (a release or a restore in its last microseconds is not one)."""
        found = invariants.steady(self.model, self.snapshot(), time.time())
        self.count("snapshot invariants")
        if not found:
            return []
        time.sleep(1.5)
        again = invariants.steady(self.model, self.snapshot(), time.time())
        return [v for v in again if v["invariant"] in {f["invariant"] for f in found}]

    def heavy(self):
        found, skipped = checks.checks_pass(self, self.model)
        self.stats["check_skipped"] += skipped
        self.count("CHECK of every live attachment")
        found += checks.gateways(self, self.model)
        self.count("gateways")
        found += checks.ports(self, self.model)
        self.count("published ports")
        found += checks.isolation(self, self.model, self.look_rng)
        self.count("isolation")
        return found

    # --- the run ------------------------------------------------------------------

    def progress(self, final=False):
        st = self.stats
        ops = sum(st["operations"].values())
        print("[%6.1fs] step %d: %d operations, %d faults (%d hit), %d flushes, "
              "%d live, %d dirty, %d checks, %d violations%s" % (
                  time.monotonic() - self.t0, self.step, ops, st["faults"]["injected"],
                  st["faults"]["hit"], sum(st["flushes"].values()), len(self.model.live()),
                  len(self.model.dirty()), sum(st["checks"].values()),
                  len(st["violations"]), " (end)" if final else ""), flush=True)

    def fail(self, found, phase):
        self.stats["violations"] = found
        raise Violations(phase)

    def random_phase(self):
        last_heavy = last_progress = time.monotonic()
        while time.monotonic() - self.t0 < self.args.seconds:
            self.step += 1
            found = self.run_batch(self.draw_batch())
            found += self.steady()
            # A stand-in's run looks often: its one broken rule may need a heavy look.
            every = HEAVY_EVERY / 3 if self.args.expect else HEAVY_EVERY
            if not found and time.monotonic() - last_heavy > every:
                found += self.heavy()
                last_heavy = time.monotonic()
            found = self.expected_only(found)
            if found:
                self.fail(found, "step %d" % self.step)
            if time.monotonic() - last_progress > PROGRESS_EVERY:
                self.progress()
                last_progress = time.monotonic()

    def expected_only(self, found):
        """With --expect (a stand-in's run): the violations of other invariants are
        noted and the run goes on, so the one the stand-in breaks is seen."""
        if not self.args.expect:
            return found
        pattern = re.compile(self.args.expect_what or "")

        def expected(v):
            return v["invariant"] in self.args.expect and pattern.search(v["what"])
        self.stats.setdefault("other_violations", []).extend(
            [v for v in found if not expected(v)][:10])
        return [v for v in found if expected(v)]

    def end_phase(self):
        """Every DEL (some after the netns is gone, some twice), a GC of each network
        with nothing valid, the releases, then nothing of academy's may be left."""
        self.step += 1
        found = self.heavy() + self.steady()
        if found:
            self.fail(found, "the last look before the end")
        ops = []
        for a in list(self.model.attachments.values()):
            ops.append(Op("DEL", att=a, gone_first=self.rng.random() < 0.5,
                          repeat=self.rng.random() < 0.3, fault=None))
        found = self.run_batch(ops)
        for c in self.containers:
            self.stop_container(c)
        self.run_batch([Op("GC", net=n, valid=[], fault=None)
                        for n in self.model.networks.values()])
        # The releases: the longest grace is the default 60 s.
        deadline = time.time() + 60 + invariants.RELEASE_SLACK
        last_progress = time.monotonic()
        while time.time() < deadline:
            due = observe.read_records(list(self.model.networks))
            if not due:
                break
            time.sleep(min(2.0, max(0.2, min(due.values()) - time.time() + 0.5)))
            if time.monotonic() - last_progress > PROGRESS_EVERY:
                print("[%6.1fs] end: waiting for the releases of %s" % (
                    time.monotonic() - self.t0, ", ".join(sorted(due))), flush=True)
                last_progress = time.monotonic()
        self.count("end: nothing left")
        snap = self.snapshot()
        found += invariants.steady(self.model, snap, time.time())
        found += invariants.leftovers(self.model, snap, self.outside_link)
        if found:
            time.sleep(2)
            snap = self.snapshot()
            found = invariants.leftovers(self.model, snap, self.outside_link) + found[:0]
            found += invariants.steady(self.model, snap, time.time())
        if found:
            self.fail(found, "the end")

    def run(self):
        print("soak: seed %d, %d s, academy %s, node netns %s" % (
            self.seed, self.args.seconds, self.args.academy, self.node), flush=True)
        code = 0
        try:
            self.setup()
            self.random_phase()
            if not self.args.expect:
                self.end_phase()
        except Violations as v:
            code = 1
            self.report(str(v))
        finally:
            self.progress(final=True)
            self.teardown()
        self.summary()
        return code

    # --- what people read ---------------------------------------------------------

    def report(self, phase):
        os.makedirs(self.args.report_dir, exist_ok=True)
        path = os.path.join(self.args.report_dir, "soak-%d-violation.txt" % self.seed)
        state = observe.dump_text(self.node, list(self.model.networks.values()))
        model = "\n".join("%s %s %s ports %s" % ("/".join(a.key), a.state, a.addresses(),
                                                 [p["hostPort"] for p in a.ports])
                          for a in self.model.attachments.values())
        watch_log = ""
        try:
            with open(os.path.join(self.root, "watch.log")) as f:
                watch_log = f.read()[-6000:]
        except OSError:
            pass
        lines = ["VIOLATION at %s, seed %d (replay: make soak SOAK_SEED=%d SOAK_SECONDS=%d)"
                 % (phase, self.seed, self.seed, self.args.seconds)]
        lines += ["  %s: %s" % (v["invariant"], v["what"]) for v in self.stats["violations"]]
        text = "\n".join(lines + ["", "## history"] + self.history
                         + ["", "## model", model, "", "## state", state,
                            "## academy watch's log (its end)", watch_log])
        with open(path, "w") as f:
            f.write(text)
        print("\n".join(lines))
        print("the last steps:\n  " + "\n  ".join(self.history[-25:]))
        print("history, model, kernel and store state: %s" % path, flush=True)
        self.stats["report"] = path
        self.stats["phase"] = phase

    def summary(self):
        st = self.stats
        r = sorted(st["repair_ms"])
        st["repair"] = {"count": len(r), "min_ms": r[0] if r else None,
                        "median_ms": r[len(r) // 2] if r else None,
                        "max_ms": r[-1] if r else None}
        st.update({"seed": self.seed, "seconds": self.args.seconds, "steps": self.step,
                   "academy": self.args.academy,
                   "elapsed_s": round(time.monotonic() - self.t0, 1)})
        print("soak summary (seed %d, %d steps, %.0f s):" % (self.seed, self.step,
                                                            st["elapsed_s"]))
        print("  operations: %s" % ", ".join("%s %d" % kv for kv in sorted(st["operations"].items())))
        print("  outcomes: %s" % ", ".join("%s %d" % kv for kv in sorted(st["outcomes"].items())))
        print("  faults: %d injected (%s), %d killed an invocation" % (
            st["faults"]["injected"], ", ".join("%s %d" % kv for kv in
                                                sorted(st["faults"]["by_kind"].items())),
            st["faults"]["hit"]))
        print("  flushes: %s; the watch's restore logged for %d (after ms: min %s, median %s, max %s), none within 3 s for %d (nothing of academy's there, or the watch down)" % (
            ", ".join("%s %d" % kv for kv in sorted(st["flushes"].items())) or "none",
            len(r), st["repair"]["min_ms"], st["repair"]["median_ms"], st["repair"]["max_ms"],
            st["not_repaired"]))
        print("  releases falling due beside a bridge-mate's first ADD: %d"
              % st.get("release_races", 0))
        print("  invariant checks: %s (CHECK skipped after a key change: %d)" % (
            ", ".join("%s %d" % kv for kv in sorted(st["checks"].items())), st["check_skipped"]))
        print("  errors without a fault: %d%s" % (len(st["unexpected_errors"]), "".join(
            "\n    " + e for e in st["unexpected_errors"][:10])))
        print("  violations: %d" % len(st["violations"]))
        path = self.args.json or os.path.join(self.args.report_dir, "soak-%d.json" % self.seed)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(st, f, indent=1, sort_keys=True)
        print("  json: %s" % path, flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 300)))
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--academy", default=os.environ.get("ACADEMY", "target/release/academy"))
    p.add_argument("--json", default=None)
    p.add_argument("--report-dir", default="target/soak")
    p.add_argument("--fault-rate", type=float, default=FAULT_RATE)
    p.add_argument("--expect", nargs="*", default=None,
                   help="a stand-in's run: stop only on these invariants, no end phase")
    p.add_argument("--expect-what", default=None,
                   help="with --expect: only a violation whose text matches this regex")
    args = p.parse_args(argv)
    if args.seed is None:
        env = os.environ.get("SOAK_SEED")
        args.seed = int(env) if env else random.SystemRandom().randrange(1, 2 ** 31)
    args.academy = os.path.abspath(args.academy)
    if os.geteuid() != 0:
        print("soak: needs root (namespaces, bridges, nf_tables)", file=sys.stderr)
        return 2
    soak = Soak(args)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return soak.run()
    except KeyboardInterrupt:
        soak.teardown()
        return 130


if __name__ == "__main__":
    sys.exit(main())
