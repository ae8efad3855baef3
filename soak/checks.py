"""The invariants that run academy or send packets: CHECK of every live attachment,
its gateway, its published ports from the outside netns, and isolation. Each waits
a bounded time for the watch to settle (a flush a moment ago is not a violation; the
watch's target is a second), then reports what is still wrong.
"""

import json
import subprocess
import time

from invariants import violation

CHECK = "every live attachment passes CHECK once the watch has settled"
GATEWAY = "each live container reaches its gateway"
PORTS = "each published port answers from the outside netns"
ISOLATED = "isolated networks stay isolated"

# How long the watch may take to put back what a flush took (its target is 1 s).
SETTLE = 15.0


def until(deadline, attempt):
    """Calls attempt() until it returns None (passed) or the deadline (monotonic) has
    passed; the last failure, or None. One deadline serves a whole look: the watch
    settles once for every attachment."""
    while True:
        failure = attempt()
        if failure is None or time.monotonic() > deadline:
            return failure
        time.sleep(0.3)


def settle():
    return time.monotonic() + SETTLE


def check_config(att):
    c = json.loads(json.dumps(att.config))
    c["prevResult"] = att.result
    return c


def checks_pass(ctx, model):
    """CHECK, as the runtime sends it: the config of the ADD, its result as prevResult.
    An attachment ADDed before a key of its conflist changed is CHECKed too: the watch
    follows the conf dir, so a key turned on again is put back for it at once. Only one
    ADDed with a key that is off now is passed over: the watch puts back what the
    conflist now asks, so after a flush it lacks what its ADD made (its DEL still
    removes it). Those are counted as skipped, not failed."""
    deadline = settle()
    found, skipped = [], 0
    for a in model.live():
        net = model.networks[a.network]
        if net.toggle and not net.toggled_on and net.made_with_toggle(a.config):
            skipped += 1
            continue

        def attempt(a=a):
            o = ctx.academy.cni("CHECK", check_config(a), a.cid, "/var/run/netns/" + a.netns,
                                a.ifname)
            return None if o.ok else o.brief()
        failure = until(deadline, attempt)
        if failure:
            found.append(violation(CHECK, "CHECK of %s: %s" % ("/".join(a.key), failure)))
    return found, skipped


def ping(ns, addr, ifname=None):
    args = ["ip", "netns", "exec", ns, "ping", "-n", "-q", "-c", "1", "-W", "1"]
    if ifname:
        args += ["-I", ifname]
    return subprocess.run(args + [addr], capture_output=True).returncode == 0


def gateways(ctx, model):
    deadline = settle()
    found = []
    for a in model.live():
        for gw in model.networks[a.network].gateways():
            failure = until(deadline, lambda: None if ping(a.netns, gw, a.ifname) else "no answer")
            if failure:
                found.append(violation(GATEWAY, "%s (netns %s) does not reach its gateway %s"
                                       % ("/".join(a.key), a.netns, gw)))
    return found


def port_targets(ctx, a):
    """Where the outside reaches each of the attachment's ports."""
    targets = []
    for p in a.ports:
        if p.get("hostIP"):
            host = p["hostIP"]
            targets.append(("[%s]" % host if ":" in host else host) + ":%d" % p["hostPort"])
        else:
            targets.append("%s:%d" % (ctx.node_v4, p["hostPort"]))
            if any(":" in addr for addr in a.addresses()):
                targets.append("[%s]:%d" % (ctx.node_v6, p["hostPort"]))
    return targets


def connect(ctx, targets):
    out = subprocess.run(["ip", "netns", "exec", ctx.out_ns, "python3", ctx.probe, "connect"]
                         + targets, capture_output=True, text=True)
    try:
        return json.loads(out.stdout)
    except ValueError:
        return {t: "" for t in targets}


def ports(ctx, model):
    deadline = settle()
    found = []
    for a in model.live():
        targets = port_targets(ctx, a)
        if not targets:
            continue

        def attempt(a=a, targets=targets):
            got = connect(ctx, targets)
            bad = ["%s: %r %s" % (t, got.get(t), got.get(t + " error", ""))
                   for t in targets if got.get(t) != "hello"]
            return "; ".join(bad) or None
        failure = until(deadline, attempt)
        if failure:
            found.append(violation(PORTS, "ports of %s from the outside: %s"
                                   % ("/".join(a.key), failure)))
    return found


def isolation(ctx, model, rng, pairs=3):
    """A container of one isolated network never reaches one of another isolated
    network on another bridge; the same container does reach one of an open network
    (else the first look proves nothing)."""
    deadline = settle()
    found = []
    live = model.live()
    iso = [a for a in live if model.networks[a.network].isolated]
    open_ = [a for a in live if not model.networks[a.network].isolated]
    cand = [(a, b) for a in iso for b in iso
            if model.networks[a.network].bridge != model.networks[b.network].bridge]
    rng.shuffle(cand)
    ctx.count("isolated pairs tried", min(pairs, len(cand)))
    for a, b in cand[:pairs]:
        for target in same_family(a, b):
            if ping(a.netns, target, a.ifname) or ping(a.netns, target, a.ifname):
                found.append(violation(ISOLATED, "%s (isolated, bridge %s) reaches %s of %s "
                                       "(isolated, bridge %s)" % (
                                           "/".join(a.key), model.networks[a.network].bridge,
                                           target, "/".join(b.key),
                                           model.networks[b.network].bridge)))
        controls = [(c, addr) for c in open_ for addr in same_family(a, c)]
        if controls:
            c, addr = rng.choice(controls)
            failure = until(deadline, lambda: None if ping(a.netns, addr, a.ifname) else "no")
            if failure:
                found.append(violation(ISOLATED, "control: %s (isolated) does not reach %s of "
                                       "%s (open network), so isolation proves nothing"
                                       % ("/".join(a.key), addr, "/".join(c.key))))
    return found


def same_family(a, b):
    """b's addresses of a family a has an address of (a has a route for)."""
    fams = {":" in x for x in a.addresses()}
    return [x for x in b.addresses() if (":" in x) in fams]
