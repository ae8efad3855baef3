"""What waits out an RCU grace period: DEL with a bandwidth limit, a network's first ADD.

    python3 bench/grace.py --academy target/release/academy

Two costs the steady cycles hide (issue 37, items 3 and 4), in one private node
(lab.add_node), interleaved cycles, every operation settled first as bench.py's:

- DEL with a bandwidth limit against DEL without: deleting a link waits out RCU grace
  periods, once per deletion request; academy deletes a shaped attachment's host veth
  and ifb in one request (wire::removal_group). Target: at most TARGET_BW_DEL times.
- a network's first ADD with ipMasq (its set and rule made, another network's rule
  already in the postrouting chain; releaseUnusedAfter 0, so every cycle's ADD is the
  network's first and its DEL its last) against an ordinary plain ADD: a batch that
  re-sent the existing chain made the nf_tables socket's close wait out a grace
  period (8-12 ms). Target: at most TARGET_FIRST_ADD times.

Each network but the first-ADD one keeps a resident attachment, so its cycles are the
steady state. Also a phase of bench.py (run(), markdown()).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cni  # noqa: E402
from cni import Attachment, Plugin  # noqa: E402
from lab import PREFIX, Lab, run_alone  # noqa: E402
from proc import Spawner  # noqa: E402

SETTLE_S = 0.02  # as bench.py
TARGET_BW_DEL = 1.2
TARGET_FIRST_ADD = 2.0
FULL = dict(cycles=30)
QUICK = dict(cycles=4)
NODE = f"{PREFIX}-grace"
BANDWIDTH = {"ingressRate": 8000000, "ingressBurst": 80000,
             "egressRate": 8000000, "egressBurst": 80000}
# /24s of 10.246, in the node only (scrape.py's take 10.246.0-99).
NETS = {"plain": "10.246.240", "bw": "10.246.241", "masq": "10.246.242",
        "first": "10.246.243"}


def _plugin(academy: str, lab: Lab, node: str, key: str) -> Plugin:
    net = NETS[key]
    bridge, name = f"{PREFIX}br-g{key[:2]}", f"{PREFIX}-grace-{key}"
    store = lab.scratch("store-grace")
    conf = {"cniVersion": "1.0.0", "name": name, "type": "academy", "bridge": bridge,
            "subnet": f"{net}.0/24", "gateway": f"{net}.1", "dataDir": store,
            "releaseUnusedAfter": 0}
    if key in ("masq", "first"):
        conf["ipMasq"] = True
    if key == "bw":
        conf.update(capabilities={"bandwidth": True}, runtimeConfig={"bandwidth": BANDWIDTH})
    return Plugin("academy", academy, conf, os.path.dirname(academy), bridge,
                  os.path.join(store, name), node)


def run(sp: Spawner, academy: str, lab: Lab, cycles: int, progress=None) -> dict:
    node = lab.add_node(NODE)
    nets = {k: _plugin(academy, lab, node, k) for k in NETS}
    samples = {f"{k}.{op}": [] for k in nets for op in ("ADD", "DEL")}
    errors = []
    residents = {k: Attachment(f"grace-res-{k}", lab.add_netns(f"{PREFIX}-gr-{k}"))
                 for k in nets if k != "first"}
    netns = {k: lab.add_netns(f"{PREFIX}-gc-{k}") for k in nets}

    def invoke(key, verb, att):
        time.sleep(SETTLE_S)
        r = cni.invoke(sp, nets[key], verb, att)
        if not r.ok:
            errors.extend(att.errors[-1:])
        return r

    for k, a in residents.items():
        invoke(k, "ADD", a)
    # Unrecorded: the first network's bridge is made by its first ADD ever.
    warm = Attachment("grace-warm", netns["first"])
    invoke("first", "ADD", warm)
    invoke("first", "DEL", warm)
    order = list(nets)
    for c in range(cycles + 1):
        order = order[1:] + order[:1]
        atts = {}
        for k in order:
            atts[k] = Attachment(f"grace-{c}-{k}", netns[k])
            r = invoke(k, "ADD", atts[k])
            if c and r.ok:
                samples[f"{k}.ADD"].append(r.wall_ms)
        for k in order:
            r = invoke(k, "DEL", atts[k])
            if c and r.ok:
                samples[f"{k}.DEL"].append(r.wall_ms)
        if progress:
            progress(f"grace: {c}/{cycles}")
    for k, a in residents.items():
        invoke(k, "DEL", a)
    return {"samples": samples, "errors": errors, "cycles": cycles}


def summary(r: dict | None) -> dict | None:
    if not r:
        return None
    med = {k: statistics.median(v) for k, v in r["samples"].items() if v}

    def ratio(a, b):
        return round(med[a] / med[b], 3) if a in med and b in med else None

    bw, first = ratio("bw.DEL", "plain.DEL"), ratio("first.ADD", "plain.ADD")
    ok = not r["errors"]
    return {"medians_ms": {k: round(v, 2) for k, v in med.items()},
            "bw_DEL_vs_plain": bw, "first_masq_ADD_vs_plain": first,
            "first_masq_ADD_vs_masq": ratio("first.ADD", "masq.ADD"),
            "bw_DEL_met": ok and bw is not None and bw <= TARGET_BW_DEL,
            "first_ADD_met": ok and first is not None and first <= TARGET_FIRST_ADD,
            "errors": len(r["errors"])}


def markdown(r: dict | None, s: dict | None) -> str:
    if not r or not s:
        return ""
    med = s["medians_ms"]
    word = {True: "PASS", False: "MISS"}
    lines = ["", "### What waits out a grace period", "",
             f"{r['cycles']} interleaved cycles on a private node (`grace.py`); medians, ms.",
             "", "| | ADD | DEL |", "| --- | --- | --- |"]
    for k, what in (("plain", "plain (resident beside)"),
                    ("bw", "a bandwidth limit (resident beside)"),
                    ("masq", "ipMasq (resident beside)"),
                    ("first", "ipMasq, the network's first ADD and last DEL")):
        lines.append(f"| {what} | {med.get(k + '.ADD', '-')} | {med.get(k + '.DEL', '-')} |")
    lines += ["",
              f"- DEL with a bandwidth limit / DEL without: {s['bw_DEL_vs_plain']}x "
              f"(target ≤ {TARGET_BW_DEL}x): {word[s['bw_DEL_met']]}",
              f"- a network's first ADD with ipMasq / an ordinary ADD: "
              f"{s['first_masq_ADD_vs_plain']}x (target ≤ {TARGET_FIRST_ADD}x; "
              f"/ an ordinary ipMasq ADD: {s['first_masq_ADD_vs_masq']}x): "
              f"{word[s['first_ADD_met']]}"]
    if r["errors"]:
        lines.append(f"- **{len(r['errors'])} failed invocations**, first: {r['errors'][0]}")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--academy", required=True)
    p.add_argument("--cycles", type=int, default=FULL["cycles"])
    args = p.parse_args()
    r = run_alone("grace", args.academy,
                  lambda sp, academy, lab: run(sp, academy, lab, args.cycles))
    print(markdown(r, summary(r)))


if __name__ == "__main__":
    main()
