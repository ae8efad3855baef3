"""The bench's own corner of the machine: network namespaces, bridges, stores, tools.

Everything made here is named with the prefix "bnch" (netns "bnch-*", links "bnch*"), lives
in 10.240.0.0/16 .. 10.246.0.0/16 and under one scratch directory, so that cleanup (at
the end, on Ctrl-C, or at the start of the next run after a kill) can find it all by
name without touching anything else on the node. No packet is ever sent.

Some phases run on private "nodes": a netns of the bench's own standing in for the host
(lo up, its own bridges, nf_tables and iptables), where the plugins are spawned through
Spawner(netns=...). What they make there is out of everyone else's way (other users'
tests on the host, the host's shared academy table), deleting the node takes it all
with it, and what is left there after a phase is that phase's alone.
"""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time

from proc import Spawner

PREFIX = "bnch"
# Where academy keeps a lock file per network (src/firewall/network/).
NETWORK_LOCKS = "/run/academy/networks"
BRIDGE_LOCKS = "/run/academy/bridges"
# The stores live where real ones do (/var/lib/cni/...), on the same file system.
SCRATCH = "/var/lib/cni/academy-bench"
LOCK = "/run/academy-bench.lock"
NETNS_DIR = "/var/run/netns"
HERE = os.path.dirname(os.path.abspath(__file__))


def sh(*argv, check=True, input=None) -> subprocess.CompletedProcess:
    """Runs a set-up or clean-up command (never timed)."""
    return subprocess.run(
        argv, input=input, capture_output=True, text=True, check=check
    )


class Lab:
    def __init__(self, academy: str | None = None):
        self.netns: list[str] = []
        self.bridges: list[str] = []
        # The private nodes' netns inodes: academy's hint of each (@<inode>.next in
        # NETWORK_LOCKS) goes at the end, as the node does.
        self.node_inodes: list[int] = []
        self._lock_fd = None
        # The binary under test: the clean-up has it release the bench's networks.
        self.academy = academy

    # -- lifetime ------------------------------------------------------------------

    def lock(self):
        """Two runs at once would share names: the second one refuses to start."""
        self._lock_fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"another benchmark run holds {LOCK}; not starting")

    def preclean(self):
        """Removes what a killed earlier run left behind (found by prefix only)."""
        if self.academy:
            release_unused(self.academy)
        for ns in _our_netns():
            sh("ip", "netns", "del", ns, check=False)
        for link in _our_links():
            sh("ip", "link", "del", link, check=False)
        shutil.rmtree(SCRATCH, ignore_errors=True)
        os.makedirs(SCRATCH, mode=0o700)

    def cleanup(self):
        """Everything, best effort and idempotent: called from finally and atexit.
        A second Ctrl-C must not cut it short, so interrupts wait until it is done."""
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._cleanup()
        finally:
            signal.signal(signal.SIGINT, old)

    def _cleanup(self):
        # Deleting a netns destroys the container ends, and with them both veth ends.
        # A plugin still running in one of the bench's nodes (an interrupted burst) is
        # the bench's own: it goes first.
        for ns in set(self.netns) | set(_our_netns()):
            kill_in_netns(f"{NETNS_DIR}/{ns}")
            sh("ip", "netns", "del", ns, check=False)
        for br in self.bridges:
            for port in _ports(br):
                sh("ip", "link", "del", port, check=False)
        for link in _our_links():
            sh("ip", "link", "del", link, check=False)
        if self.academy:
            release_unused(self.academy)
        _clean_nftables()
        _clean_reference_firewall()
        # academy's per-network locks of the bench's networks, its hints of the bench's
        # nodes and the locks of the bench's bridges (nothing holds them now; a GC or a
        # restore would drop a gone node's, at the cost of a look at every node).
        hints = {f"@{inode}.next" for inode in self.node_inodes}
        for folder in (NETWORK_LOCKS, BRIDGE_LOCKS):
            for name in os.listdir(folder) if os.path.isdir(folder) else []:
                if name.startswith(PREFIX) or name in hints:
                    try:
                        os.remove(os.path.join(folder, name))
                    except OSError:
                        pass
        self.netns.clear()
        self.bridges.clear()
        shutil.rmtree(SCRATCH, ignore_errors=True)

    # -- objects ---------------------------------------------------------------------

    def add_netns(self, name: str) -> str:
        assert name.startswith(PREFIX + "-")
        sh("ip", "netns", "add", name)
        self.netns.append(name)
        return f"{NETNS_DIR}/{name}"

    def add_netns_many(self, names: list) -> list:
        """`ip -batch` makes many namespaces in one process."""
        for n in names:
            assert n.startswith(PREFIX + "-")
        self.netns.extend(names)
        sh("ip", "-batch", "-", input="".join(f"netns add {n}\n" for n in names))
        return [f"{NETNS_DIR}/{n}" for n in names]

    def add_node(self, name: str) -> str:
        """A private "host" netns (see the module's doc), lo up; its path."""
        path = self.add_netns(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        self.node_inodes.append(os.stat(path).st_ino)
        return path

    def del_netns_many(self, names: list):
        sh("ip", "-batch", "-", input="".join(f"netns del {n}\n" for n in names), check=False)
        self.netns = [n for n in self.netns if n not in names]

    def track_bridge(self, name: str):
        """A bridge a plugin creates on its first ADD; ours to remove at the end."""
        assert name.startswith(PREFIX) and len(name) <= 15
        self.bridges.append(name)

    def add_bridge(self, name: str, gateway_cidr: str):
        self.track_bridge(name)
        sh("ip", "link", "add", name, "type", "bridge")
        sh("ip", "link", "set", name, "up")
        sh("ip", "addr", "add", gateway_cidr, "dev", name)

    def scratch(self, *parts) -> str:
        path = os.path.join(SCRATCH, *parts)
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    # -- tools ------------------------------------------------------------------------

    def build_native(self, name: str) -> str | None:
        """Compiles native/<name>.c (static if possible: smaller and faster to exec)."""
        src = os.path.join(HERE, "native", name + ".c")
        out = os.path.join(self.scratch("bin"), name)
        for extra in (["-static"], []):
            r = sh("cc", "-O2", "-Wall", *extra, "-o", out, src, check=False)
            if r.returncode == 0:
                return out
        print(f"bench: cannot compile {src} (no C compiler?): {r.stderr.strip()[:300]}")
        return None

    def snapshot(self, binary: str, name: str, attempts: int = 30) -> str:
        """A private copy of the binary under test: another engineer may rebuild the
        original mid-run. A missing or half-written binary is waited for (it must
        answer VERSION), for up to about a minute."""
        dest = os.path.join(self.scratch("bin"), name)
        last = ""
        for _ in range(attempts):
            try:
                shutil.copyfile(binary, dest + ".new")
                os.chmod(dest + ".new", 0o755)
                os.replace(dest + ".new", dest)
                r = subprocess.run(
                    [dest],
                    env={"CNI_COMMAND": "VERSION"},
                    input=b"{}",
                    capture_output=True,
                )
                if r.returncode == 0 and "supportedVersions" in json.loads(r.stdout):
                    return dest
                last = r.stdout.decode() + r.stderr.decode()
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(2)
        raise SystemExit(f"bench: {binary} is not a working CNI plugin: {last[:300]}")


def _our_netns() -> list:
    r = sh("ip", "-j", "netns", "list", check=False)
    try:
        return [n["name"] for n in json.loads(r.stdout or "[]") if n["name"].startswith(PREFIX + "-")]
    except ValueError:
        return []


def _links(*filters) -> list:
    r = sh("ip", "-j", "link", "show", *filters, check=False)
    try:
        return [l["ifname"] for l in json.loads(r.stdout or "[]")]
    except ValueError:
        return []


def release_unused(academy: str, node: str | None = None) -> int:
    """academy's own release of the bench's networks that wait for theirs: a network's
    objects outlive its last DEL by releaseUnusedAfter (60 s by default), recorded in
    NETWORK_LOCKS/<name>@<node>.unused with a marker <name>@<node>.<due ms>.due, and
    only an academy invocation on the node releases them. The bench's records are made
    due (release after 0 s, the marker renamed to due at 0, the node's hint
    @<node>.next removed) and one invocation run (VERSION: every CNI invocation
    releases what is due), so every kind's objects go
    as they would on a node; deleting the records instead left them for good (the
    loopback guard's element of a bench bridge, which _clean_nftables does not know).
    With `node` (a private node's netns path): only that node's records, and the
    invocation runs in it. Returns how many records were made due."""
    if not os.path.isdir(NETWORK_LOCKS):
        return 0
    inode = os.stat(node).st_ino if node else None
    due = 0
    dated = set()
    for name in os.listdir(NETWORK_LOCKS):
        if not (name.startswith(PREFIX) and name.endswith(".due") and "@" in name):
            continue
        who = name[: -len(".due")].rsplit(".", 1)[0]
        if inode is not None and not who.endswith(f"@{inode}"):
            continue
        path = os.path.join(NETWORK_LOCKS, who + ".unused")
        try:
            with open(path) as f:
                record = json.load(f)
            record["release_after"] = 0
            tmp = f"{path}.bench.tmp"
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, path)
            os.replace(os.path.join(NETWORK_LOCKS, name),
                       os.path.join(NETWORK_LOCKS, f"{who}.{record['unused_since_ms']}.due"))
            due += 1
            dated.add(who.rsplit("@", 1)[1])
        except (OSError, ValueError, KeyError):
            continue
    # A marker dated earlier is announced by no node's hint (@<node>.next, the earliest
    # due time of its markers): without one, the node's next invocation lists them all.
    for n in dated:
        try:
            os.unlink(os.path.join(NETWORK_LOCKS, f"@{n}.next"))
        except OSError:
            pass
    if due:
        enter = ["nsenter", f"--net={node}"] if node else []
        subprocess.run(enter + [academy], input='{"cniVersion": "1.1.0"}', text=True,
                       capture_output=True, env={"CNI_COMMAND": "VERSION", "PATH": "/usr/bin:/bin"})
    return due


def _clean_reference_firewall():
    """The chains the reference firewall plugin (the chains phase's podman list, and
    academy's converted one with it kept) leaves in the host's filter table on its first
    ADD and never removes: gone once they hold nothing but its own jumps (another
    network's containers or an admin's CNI-ADMIN rules keep them)."""
    for tool in ("iptables", "ip6tables"):
        rules = sh(tool, "-S", "CNI-FORWARD", check=False)
        admin = sh(tool, "-S", "CNI-ADMIN", check=False)
        if rules.returncode != 0 or admin.returncode != 0:
            continue
        own = [l for l in rules.stdout.splitlines() if not l.startswith("-N ")]
        if own not in ([], ['-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin '
                            'overrides" -j CNI-ADMIN']):
            continue
        if [l for l in admin.stdout.splitlines() if not l.startswith("-N ")]:
            continue
        sh(tool, "-D", "FORWARD", "-m", "comment", "--comment", "CNI firewall plugin rules",
           "-j", "CNI-FORWARD", check=False)
        for chain in ("CNI-FORWARD", "CNI-ADMIN"):
            sh(tool, "-F", chain, check=False)
        for chain in ("CNI-FORWARD", "CNI-ADMIN"):
            sh(tool, "-X", chain, check=False)


def _clean_nftables():
    """The masquerade rules and sets of the bench's networks in academy's table, and the
    table itself once nothing else is in it."""

    listing = sh("nft", "-j", "-a", "list", "table", "inet", "academy", check=False)
    if listing.returncode != 0:
        return
    items = json.loads(listing.stdout or "{}").get("nftables", [])
    for item in items:
        rule = item.get("rule", {})
        if rule.get("comment", "").startswith(f"academy ipMasq {PREFIX}"):
            sh("nft", "delete", "rule", "inet", "academy", rule["chain"], "handle",
               str(rule["handle"]), check=False)
    sets = [i["set"]["name"] for i in items if "set" in i]
    for name in sets:
        if name.startswith(PREFIX):
            sh("nft", "delete", "set", "inet", "academy", name, check=False)
    # Published ports are elements of maps shared by every network: only the bench's
    # own (their comment names a bench network) go, and the maps keep the table.
    maps = [i["map"] for i in items if "map" in i]
    for m in maps:
        for key, _ in m.get("elem", []):
            elem = key.get("elem", {}) if isinstance(key, dict) else {}
            if elem.get("comment", "").startswith(PREFIX):
                value = elem["val"]
                parts = value["concat"] if isinstance(value, dict) else [value]
                text = " . ".join(str(p) for p in parts)
                sh("nft", "delete", "element", "inet", "academy", m["name"],
                   f"{{ {text} }}", check=False)
    # The hairpin marks of the bench's bridges, then the table once nothing but the
    # bench's sets and port mapping's now empty shared objects is in it.
    for item in items:
        s = item.get("set", {})
        if s.get("name") == "_hairpin":
            for pair in s.get("elem", []):
                parts = pair["concat"] if isinstance(pair, dict) else [pair]
                if all(str(p).startswith(PREFIX) for p in parts):
                    text = " . ".join(f'"{p}"' for p in parts)
                    sh("nft", "delete", "element", "inet", "academy", "_hairpin",
                       f"{{ {text} }}", check=False)
    after = sh("nft", "-j", "list", "table", "inet", "academy", check=False)
    left = json.loads(after.stdout or "{}").get("nftables", [])
    holding = [i.get("set") or i.get("map") for i in left if "set" in i or "map" in i]
    if all(h["name"].startswith(PREFIX) or (h["name"].startswith("_") and not h.get("elem"))
           for h in holding):
        sh("nft", "delete", "table", "inet", "academy", check=False)


def _our_links() -> list:
    """The bench's links by name, and the ifb links academy made for a bench network's
    shaped attachments (named bwp..., their alias names the network)."""
    r = sh("ip", "-j", "link", "show", "type", "ifb", check=False)
    try:
        ifbs = [l["ifname"] for l in json.loads(r.stdout or "[]")
                if l.get("ifalias", "").startswith(f"academy:{PREFIX}")]
    except ValueError:
        ifbs = []
    return [l for l in _links() if l.startswith(PREFIX)] + ifbs


def _ports(bridge: str) -> list:
    return _links("master", bridge)


def ports(bridge: str, node: str | None = None) -> list:
    """Links enslaved to a bridge (to check that DELs left nothing behind), on the host
    or in a node (its netns path)."""
    if node:
        return _links_in(node, "master", bridge)
    return _ports(bridge)


def _links_in(node: str, *filters) -> list:
    r = sh("ip", "-n", os.path.basename(node), "-j", "link", "show", *filters, check=False)
    try:
        return [l["ifname"] for l in json.loads(r.stdout or "[]")]
    except ValueError:
        return []


def node_veths(node: str) -> list:
    """Every veth in a node (after the DELs: none should be left)."""
    return _links_in(node, "type", "veth")


def node_nft_elements(node: str) -> int:
    """Elements of every set and map of every table in a node (academy's masquerade
    sets and published ports, and whatever iptables-nft keeps in sets)."""
    sets = node_nft_sets(node)
    return -1 if sets is None else sum(sets.values())


def node_nft_sets(node: str) -> dict | None:
    """Every set and map of every table in a node: "<table family> <table> <name>" for
    those outside academy's table, the bare name inside it -> how many elements; None
    when nft's answer is not JSON."""
    r = sh("ip", "netns", "exec", os.path.basename(node), "nft", "-j", "list", "ruleset",
           check=False)
    try:
        items = json.loads(r.stdout or "{}").get("nftables", [])
    except ValueError:
        return None
    out = {}
    for i in items:
        s = i.get("set") or i.get("map")
        if s is None:
            continue
        name = s["name"] if (s.get("family"), s.get("table")) == ("inet", "academy") \
            else f"{s.get('family')} {s.get('table')} {s['name']}"
        out[name] = len(s.get("elem", []))
    return out


def node_delete_academy_table(node: str):
    """`nft delete table inet academy` inside a node of the bench's own (a flush by
    another program, as `academy restore` is meant for): never on the host."""
    name = os.path.basename(node)
    assert os.path.dirname(node) == NETNS_DIR and name.startswith(PREFIX + "-")
    sh("ip", "netns", "exec", name, "nft", "delete", "table", "inet", "academy", check=False)


def node_cni_chains(node: str) -> list:
    """The per-container iptables chains of the reference plugins in a node: ipMasq's
    CNI-<hash> and portmap's CNI-DN-<hash> / CNI-SN-<hash> (the shared CNI-HOSTPORT-*
    chains are not a container's)."""
    r = sh("ip", "netns", "exec", os.path.basename(node), "iptables-save", check=False)
    chains = []
    for line in r.stdout.splitlines():
        if line.startswith(":CNI-"):
            name = line[1:].split()[0]
            tail = name.removeprefix("CNI-").removeprefix("DN-").removeprefix("SN-")
            if tail and all(c in "0123456789abcdef" for c in tail):
                chains.append(name)
    return chains


def kill_in_netns(path: str) -> int:
    """SIGKILLs every process whose network namespace is `path` (a node of the bench's
    own: only plugins it spawned there run in it); how many. The bound on a burst."""
    try:
        target = os.stat(path).st_ino
    except OSError:
        return 0
    killed = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == target:
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            pass
    return killed


def run_alone(name: str, academy: str, phase) -> dict:
    """One phase run on its own (`python3 bench/<phase>.py --academy BINARY`): as root,
    the bench's lock held, what a killed run left removed first, the binary snapshotted,
    `phase(spawner, binary, lab)` run, and everything removed after, even on failure."""
    if os.geteuid() != 0:
        raise SystemExit(f"{name}: needs root (namespaces, bridges, veths)")
    lab = Lab(os.path.abspath(academy))
    lab.lock()
    try:
        lab.preclean()
        sp = Spawner(lab.build_native("spawnstat"))
        return phase(sp, lab.snapshot(lab.academy, "academy"), lab)
    finally:
        lab.cleanup()
