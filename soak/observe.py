"""What exists: the node's links, qdiscs, nf_tables objects and iptables rules, the
stores, academy's records in /run and the containers' addresses, read with ip, tc,
nft and iptables (the soak only looks; academy itself never execs them).

The parsers are pure (the unit tests feed them JSON); `snapshot` runs the tools.
"""

import json
import os
import subprocess

RUN_NETWORKS = "/run/academy/networks"


def run(args, timeout=30):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def in_ns(ns, args):
    return ["ip", "netns", "exec", ns] + list(args)


def parse_links(text):
    """`ip -d -j link` -> [{name, alias, kind, master}]."""
    out = []
    for l in json.loads(text or "[]"):
        out.append({
            "name": l.get("ifname"),
            "alias": l.get("ifalias"),
            "kind": (l.get("linkinfo") or {}).get("info_kind"),
            "master": l.get("master"),
        })
    return out


def parse_qdiscs(text):
    """`tc -j qdisc` -> [{dev, kind}]."""
    return [{"dev": q.get("dev"), "kind": q.get("kind")} for q in json.loads(text or "[]")]


def _comments(value):
    """Every comment in an element's JSON (a set element, or a map's key and value)."""
    if isinstance(value, dict):
        found = [value["comment"]] if isinstance(value.get("comment"), str) else []
        for v in value.values():
            found += _comments(v)
        return found
    if isinstance(value, list):
        return [c for v in value for c in _comments(v)]
    return []


def parse_nft(text):
    """`nft -j list ruleset` -> {objects, elements, rules}.

    objects: [{family, table, kind, name}] for sets, maps and chains;
    elements: [{family, table, set, comment, text}], comment "" when it has none;
    rules: [{family, table, chain, comment, text}] (text: the expressions' JSON)."""
    items = json.loads(text or "{}").get("nftables", [])
    objects, elements, rules = [], [], []
    for item in items:
        for kind in ("set", "map", "chain"):
            if kind in item:
                o = item[kind]
                objects.append({"family": o.get("family"), "table": o.get("table"),
                                "kind": kind, "name": o.get("name")})
                for e in o.get("elem", []) if kind != "chain" else []:
                    cs = _comments(e)
                    elements.append({"family": o.get("family"), "table": o.get("table"),
                                     "set": o.get("name"), "comment": cs[0] if cs else "",
                                     "text": json.dumps(e, sort_keys=True)})
        if "rule" in item:
            r = item["rule"]
            rules.append({"family": r.get("family"), "table": r.get("table"),
                          "chain": r.get("chain"), "comment": r.get("comment", ""),
                          "text": json.dumps(r.get("expr", []), sort_keys=True)})
    return {"objects": objects, "elements": elements, "rules": rules}


def parse_iptables(text):
    """academy's rules in `iptables-save` output (their comment starts "academy")."""
    return [l for l in text.splitlines() if l.startswith("-A ") and "academy" in l]


def read_store(root):
    """One network's store folder -> reservations {address: "cid:ifname"}, holder
    indexes, runtime records, temporary files and anything else found."""
    s = {"reservations": {}, "holders": [], "runtime": [], "tmp": [], "other": []}
    if not os.path.isdir(root):
        return s
    for dirpath, dirnames, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for f in files:
            path = os.path.join(dirpath, f)
            if f.startswith(".tmp."):
                s["tmp"].append(os.path.join(rel, f))
            elif rel == "holders":
                s["holders"].append(f)
            elif rel == "runtime":
                s["runtime"].append(f)
            elif rel == "." and f.startswith("last_reserved_ip."):
                continue
            elif rel == "." and _is_address(f):
                try:
                    with open(path) as fh:
                        lines = fh.read().split("\n")
                except OSError:
                    lines = ["?", "?"]
                s["reservations"][f] = "%s:%s" % (lines[0].strip(),
                                                  (lines[1] if len(lines) > 1 else "").strip())
            elif f == "lock" or f.endswith(".lock"):
                continue
            else:
                s["other"].append(os.path.join(rel, f))
    return s


def _is_address(name):
    import ipaddress
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def read_records(names, run_dir=RUN_NETWORKS):
    """The networks' pending releases: {name: due (epoch seconds)}, from a record of
    this release's form, `<name>@<node netns inode>.unused`, or an older release's,
    `<name>.unused` (the earliest due when there are several)."""
    try:
        files = os.listdir(run_dir)
    except OSError:
        return {}
    found = {}
    for n in names:
        for f in files:
            if f != n + ".unused" and not (f.startswith(n + "@") and f.endswith(".unused")
                                           and f[len(n) + 1:-len(".unused")].isdigit()):
                continue
            try:
                with open(os.path.join(run_dir, f)) as fh:
                    r = json.load(fh)
                due = (r["unused_since_ms"] + 1000 * r["release_after"]) / 1000.0
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError):
                due = 0.0  # there, unreadable: due at once
            found[n] = min(due, found.get(n, due))
    return found


def parse_addrs(text):
    """`ip -j addr` of a container netns -> [(ifname, address)], global scope only."""
    out = []
    for l in json.loads(text or "[]"):
        for a in l.get("addr_info", []):
            if a.get("scope") == "global":
                out.append((l.get("ifname"), a.get("local")))
    return out


def snapshot(node, networks, container_netns):
    """Everything the invariants look at, read in an order that never shows an owned
    object without its owner's record: records first, then the kernel, then stores."""
    snap = {"records": read_records([n.name for n in networks])}
    _, t, _ = run(["ip", "-n", node, "-d", "-j", "link", "show"])
    snap["links"] = parse_links(t)
    _, t, _ = run(in_ns(node, ["tc", "-j", "qdisc", "show"]))
    snap["qdiscs"] = parse_qdiscs(t)
    _, t, _ = run(in_ns(node, ["nft", "-j", "list", "ruleset"]))
    snap["nft"] = parse_nft(t)
    _, t, _ = run(in_ns(node, ["iptables-nft-save"]))
    snap["iptables"] = parse_iptables(t)
    snap["store"] = {n.name: read_store(os.path.join(n.data_dir, n.name)) for n in networks}
    snap["addrs"] = {}
    for ns in container_netns:
        code, t, _ = run(["ip", "-n", ns, "-j", "addr", "show"])
        if code == 0:
            snap["addrs"][ns] = parse_addrs(t)
    return snap


def dump_text(node, networks):
    """The kernel and store state as people read it, for a violation's report."""
    parts = []
    for title, args in [
        ("ip -d link (node)", ["ip", "-n", node, "-d", "link", "show"]),
        ("ip addr (node)", ["ip", "-n", node, "addr", "show"]),
        ("tc qdisc (node)", in_ns(node, ["tc", "qdisc", "show"])),
        ("nft list ruleset (node)", in_ns(node, ["nft", "list", "ruleset"])),
        ("iptables-nft-save (node)", in_ns(node, ["iptables-nft-save"])),
    ]:
        _, out, err = run(args)
        parts.append("### %s\n%s%s" % (title, out, err))
    for n in networks:
        root = os.path.join(n.data_dir, n.name)
        lines = []
        for dirpath, _, files in os.walk(root):
            for f in sorted(files):
                p = os.path.join(dirpath, f)
                try:
                    with open(p) as fh:
                        body = fh.read(300).replace("\n", " | ")
                except OSError as e:
                    body = str(e)
                lines.append("%s: %s" % (os.path.relpath(p, root), body))
        parts.append("### store %s\n%s\n" % (n.name, "\n".join(lines)))
    recs = [f for f in sorted(os.listdir(RUN_NETWORKS)) if any(
        f.startswith(n.name + ".") or f.startswith(n.name + "@") for n in networks)] if os.path.isdir(RUN_NETWORKS) else []
    parts.append("### %s (the soak's networks)\n%s\n" % (RUN_NETWORKS, "\n".join(recs)))
    return "\n".join(parts)
