"""The invariants that need only the model and a snapshot (observe.snapshot): pure, so
the unit tests give them a model and a made-up snapshot and expect each violation.

Each returns a list of violations, {"invariant": NAME, "what": TEXT}. The ones that
run academy or send packets (CHECK, the gateway, the ports, isolation) are in
checks.py.
"""

from model import LIVE, network_key

# A pending release must have happened this long after it fell due (the watch
# releases at the due time; a killed watch is started again within a few seconds).
RELEASE_SLACK = 10.0

NO_DOUBLE = "no address held twice"
OWNED = "nothing exists that no live attachment or pending release owns"
RESERVED = "every live attachment's address is reserved for it"
RELEASE = "a network left with nothing is released once its grace is over"
LEFT = "at the end nothing of academy's is left"


def violation(name, what):
    return {"invariant": name, "what": what}


def owned_networks(model, snap):
    """Networks that may have their own objects now: an attachment may own them, or
    their release is pending."""
    return {n for n in model.networks
            if model.in_network(n) or n in snap["records"]}


def owned_bridges(model, snap):
    nets = owned_networks(model, snap)
    return {model.networks[n].bridge for n in nets}


def _owner_of_comment(model, comment):
    """(network, cid, ifname) of an owner comment naming a soak network, else None."""
    for name in model.networks:
        prefix = network_key(name) + ":"
        if comment.startswith(prefix):
            cid, _, ifname = comment[len(prefix):].rpartition(":")
            return name, cid, ifname
    return None


def _alias_owner(model, alias):
    if not alias or not alias.startswith("academy:"):
        return None
    parts = alias.split(":")
    if len(parts) != 4 or parts[1] not in model.networks:
        return None
    return parts[1], parts[2], parts[3]


def addresses(model, snap):
    found = []
    held = {}
    for a in model.live():
        for addr in a.addresses():
            if addr in held:
                found.append(violation(NO_DOUBLE, "%s is held by %s and by %s (ADD results)"
                                       % (addr, held[addr], "/".join(a.key))))
            held[addr] = "/".join(a.key)
    on = {}
    for ns, pairs in snap["addrs"].items():
        for ifname, addr in pairs:
            if not any(n.holds(addr) for n in model.networks.values()):
                continue
            on.setdefault(addr, []).append("%s %s" % (ns, ifname))
    for addr, where in sorted(on.items()):
        if len(where) > 1:
            found.append(violation(NO_DOUBLE, "%s is on %s (kernel)" % (addr, ", ".join(where))))
    for a in model.live():
        store = snap["store"].get(a.network, {}).get("reservations", {})
        for addr in a.addresses():
            holder = store.get(addr)
            if holder != "%s:%s" % (a.cid, a.ifname):
                found.append(violation(RESERVED, "%s of %s: the store says %s"
                                       % (addr, "/".join(a.key), holder or "not reserved")))
            if a.netns in snap["addrs"] and (a.ifname, addr) not in snap["addrs"][a.netns]:
                found.append(violation(RESERVED, "%s of %s is not on %s in %s"
                                       % (addr, "/".join(a.key), a.ifname, a.netns)))
    return found


def ownership(model, snap):
    """Every link, element, object, rule, reservation and record the snapshot shows
    has an owner in the model (or a pending release)."""
    found = []
    nets = owned_networks(model, snap)
    bridges = owned_bridges(model, snap)
    soak_bridges = {n.bridge for n in model.networks.values()}
    dirty_bridges = {model.networks[a.network].bridge for a in model.dirty()}

    def owns(net, cid, ifname):
        return (cid, ifname) in model.owners(net)

    for l in snap["links"]:
        o = _alias_owner(model, l["alias"])
        if o and not owns(*o):
            found.append(violation(OWNED, "link %s (%s, alias %s) of no attachment"
                                   % (l["name"], l["kind"], l["alias"])))
        elif (not o and l["master"] in soak_bridges and l["kind"] == "veth"
              and l["master"] not in dirty_bridges):
            found.append(violation(OWNED, "unlabelled veth %s on bridge %s, and no killed "
                                   "operation there" % (l["name"], l["master"])))
    for e in snap["nft"]["elements"]:
        o = _owner_of_comment(model, e["comment"]) if e["comment"] else None
        where = "%s %s %s" % (e["family"], e["table"], e["set"])
        if o and not owns(*o):
            found.append(violation(OWNED, "element %s in %s of no attachment" % (e["text"], where)))
        elif not e["comment"]:
            named = [b for b in soak_bridges if '"%s"' % b in e["text"]]
            if any(b not in bridges for b in named):
                found.append(violation(OWNED, "element %s in %s: its bridge has no network "
                                       "in use or pending release" % (e["text"], where)))
    for o in snap["nft"]["objects"]:
        for name in model.networks:
            if o["name"].startswith(name + "-") and name not in nets:
                found.append(violation(OWNED, "%s %s in %s %s: network %s has no attachment "
                                       "and no pending release" % (o["kind"], o["name"],
                                                                   o["family"], o["table"], name)))
    for r in snap["nft"]["rules"]:
        for name in model.networks:
            if (name in r["comment"] or "@%s-" % name in r["text"]) and name not in nets:
                found.append(violation(OWNED, "rule %r in %s %s %s: network %s has no "
                                       "attachment and no pending release"
                                       % (r["comment"], r["family"], r["table"], r["chain"], name)))
    for line in snap["iptables"]:
        for b in soak_bridges:
            if " %s " % b in line + " " and b not in bridges:
                found.append(violation(OWNED, "iptables rule of bridge %s, which has no "
                                       "network in use or pending release: %s" % (b, line)))
    for name, s in snap["store"].items():
        owners = model.owners(name)
        for addr, holder in sorted(s["reservations"].items()):
            if tuple(holder.split(":", 1)) not in owners:
                found.append(violation(OWNED, "reservation %s of %s in %s's store: no such "
                                       "attachment" % (addr, holder, name)))
        for kind in ("holders", "runtime"):
            for f in s[kind]:
                if tuple(f.split(":", 1)) not in owners:
                    found.append(violation(OWNED, "%s record %s in %s's store: no such "
                                           "attachment" % (kind, f, name)))
        if s["tmp"] and not any(a.network == name for a in model.dirty()):
            found.append(violation(OWNED, "temporary files %s in %s's store, and no killed "
                                   "operation on it" % (s["tmp"], name)))
    return found


def releases(model, snap, now):
    """A network left with nothing is released within RELEASE_SLACK of falling due.
    (A record beside a live attachment is not judged: the release looks again under
    the network's lock and leaves a network in use alone; CHECK judges its objects.)"""
    found = []
    for name, due in sorted(snap["records"].items()):
        if name not in model.networks or model.in_network(name):
            continue
        if now > due + RELEASE_SLACK:
            found.append(violation(RELEASE, "network %s's release fell due %.1f s ago and has "
                                   "not happened" % (name, now - due)))
    return found


def steady(model, snap, now):
    """The invariants that hold after every step."""
    return addresses(model, snap) + ownership(model, snap) + releases(model, snap, now)


def leftovers(model, snap, outside_link):
    """At the end (every DEL, a GC and the releases done): nothing of academy's, for
    the soak's networks, in the node or the stores."""
    found = []
    bridges = {n.bridge for n in model.networks.values()}
    for name in sorted(snap["records"]):
        found.append(violation(LEFT, "release record of %s" % name))
    for l in snap["links"]:
        if l["name"] not in bridges | {"lo", outside_link}:
            found.append(violation(LEFT, "link %s (%s, alias %s, master %s)"
                                   % (l["name"], l["kind"], l["alias"], l["master"])))
    for q in snap["qdiscs"]:
        if q["kind"] != "noqueue":
            found.append(violation(LEFT, "qdisc %s on %s" % (q["kind"], q["dev"])))
    for e in snap["nft"]["elements"]:
        found.append(violation(LEFT, "element %s in %s %s %s"
                               % (e["text"], e["family"], e["table"], e["set"])))
    for o in snap["nft"]["objects"]:
        if any(o["name"].startswith(n + "-") for n in model.networks):
            found.append(violation(LEFT, "%s %s in %s %s" % (o["kind"], o["name"],
                                                            o["family"], o["table"])))
    for r in snap["nft"]["rules"]:
        if any(n in r["comment"] or "@%s-" % n in r["text"] for n in model.networks):
            found.append(violation(LEFT, "rule %r in %s %s %s"
                                   % (r["comment"], r["family"], r["table"], r["chain"])))
    for line in snap["iptables"]:
        found.append(violation(LEFT, "iptables rule %s" % line))
    for name, s in sorted(snap["store"].items()):
        for kind in ("reservations", "holders", "runtime", "tmp", "other"):
            if s[kind]:
                found.append(violation(LEFT, "%s in %s's store: %s"
                                       % (kind, name, sorted(s[kind]))))
    return found
