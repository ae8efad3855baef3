"""The two plugins under test, invoked directly as a runtime does: CNI_* variables in
the environment, the network config on stdin, the result (or error) on stdout."""

import json
from dataclasses import dataclass, field

from proc import Run, Spawner

# What a runtime passes besides CNI_*: a plain PATH (the reference bridge runs
# host-local through CNI_PATH, not PATH).
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


@dataclass
class Plugin:
    key: str  # "academy" or "reference"
    binary: str
    conf: dict  # the network config, without prevResult
    cni_path: str
    bridge: str
    store: str  # the directory holding this network's reservations
    node: str | None = None  # a private "host" netns to run in (None: the host's own)

    def env(self, command: str, cid: str, netns: str, ifname: str) -> dict:
        return dict(
            BASE_ENV,
            CNI_COMMAND=command,
            CNI_CONTAINERID=cid,
            CNI_NETNS=netns,
            CNI_IFNAME=ifname,
            CNI_PATH=self.cni_path,
        )

    def stdin(self, prev: dict | None = None) -> bytes:
        # libcni hands the cached ADD result to CHECK and DEL as prevResult; so do we.
        conf = dict(self.conf, prevResult=prev) if prev else self.conf
        return json.dumps(conf).encode()

    def argv(self) -> list:
        return [self.binary]


@dataclass
class Attachment:
    """One container's interface: what ADD reported, to feed CHECK and DEL."""

    cid: str
    netns: str
    ifname: str = "eth0"
    result: dict | None = None
    errors: list = field(default_factory=list)


def invoke(sp: Spawner, plugin: Plugin, command: str, att: Attachment) -> Run:
    prev = att.result if command in ("CHECK", "DEL") else None
    run = sp.run(
        plugin.argv(),
        plugin.env(command, att.cid, att.netns, att.ifname),
        plugin.stdin(prev),
        plugin.node,
    )
    judge(run, command, att)
    return run


def start(sp: Spawner, plugin: Plugin, command: str, att: Attachment):
    """For bursts: start without waiting; finish with sp.finish() then judge()."""
    prev = att.result if command in ("CHECK", "DEL") else None
    return sp.start(
        plugin.argv(),
        plugin.env(command, att.cid, att.netns, att.ifname),
        plugin.stdin(prev),
        plugin.node,
    )


def judge(run: Run, command: str, att: Attachment):
    """Marks run.rc non-zero unless the plugin succeeded *and* said something sensible;
    keeps ADD's result on the attachment."""
    if run.ok and command == "ADD":
        try:
            result = json.loads(run.stdout)
            address(result)
            att.result = result
        except (ValueError, KeyError, IndexError, TypeError):
            run.rc = 255
    if not run.ok:
        att.errors.append(
            f"{command} rc={run.rc}: {run.stdout.decode(errors='replace')[:300]}"
            f" {run.stderr.decode(errors='replace')[:300]}".strip()
        )


def address(result: dict) -> str:
    """The container's address (without prefix) from an ADD result."""
    return result["ips"][0]["address"].split("/")[0]
