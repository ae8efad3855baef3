"""What should exist: the soak's networks, its containers and their attachments.

Pure data, no process is run here, so the unit tests can drive it. An attachment is
LIVE (its ADD said so: it owns addresses, ports, links and elements) or DIRTY (an ADD
or DEL of it was killed, or ended in an error: it may own any part of that, and a DEL
or a GC must clear it). An attachment the model does not hold owns nothing.
"""

import hashlib
import ipaddress

LIVE = "live"
DIRTY = "dirty"


def network_key(name):
    """The network's part of academy's owner comments, as src/attachment.rs writes
    it: the name's first 20 bytes, '#', 12 hex digits of its SHA-256."""
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return "%s#%s" % (name.encode()[:20].decode(errors="ignore"), digest)


def owner_comment(network, cid, ifname):
    return "%s:%s:%s" % (network_key(network), cid, ifname)


class Network:
    """One soak network: its conflist entry and what the invariants need of it."""

    def __init__(self, name, bridge, subnets, *, form="flat", release_after=None,
                 isolated=False, ports=None, keys=None, toggle=None):
        self.name = name
        self.bridge = bridge
        self.subnets = [ipaddress.ip_network(s) for s in subnets]
        self.form = form
        # None: the default (60 s), not written into the conflist.
        self.release_after = release_after
        self.isolated = isolated
        # None, or "any" / "hostip": ports published without, or with hostIP.
        self.ports = ports
        self.keys = dict(keys or {})
        # (key, value when on): a key the soak turns on and off in the conflist.
        self.toggle = toggle
        self.toggled_on = True
        self.data_dir = None

    def made_with_toggle(self, config):
        """Whether an ADD's config had the toggled key on."""
        return all(config.get(k) == v for k, v in self.toggle[1].items())

    @property
    def release_seconds(self):
        return 60 if self.release_after is None else self.release_after

    def gateways(self):
        return [str(next(s.hosts())) for s in self.subnets]

    def entry(self):
        """The academy plugin entry as the conflist has it now."""
        e = {"type": "academy", "bridge": self.bridge}
        if self.form == "flat":
            (subnet,) = self.subnets
            e.update({"subnet": str(subnet), "gateway": self.gateways()[0],
                      "dataDir": self.data_dir})
        else:
            e.update({"isGateway": True, "isDefaultGateway": True, "ipam": {
                "type": "host-local", "dataDir": self.data_dir,
                "ranges": [[{"subnet": str(s)}] for s in self.subnets]}})
        if self.release_after is not None:
            e["releaseUnusedAfter"] = self.release_after
        if self.isolated:
            e["ingressPolicy"] = "same-bridge"
        if self.ports:
            e["capabilities"] = {"portMappings": True}
        e.update(self.keys)
        if self.toggle and self.toggled_on:
            e.update(self.toggle[1])
        return e

    def conflist(self):
        return {"cniVersion": "1.1.0", "name": self.name, "plugins": [self.entry()]}

    def config(self, port_mappings=None):
        """What a runtime puts on ADD's (or DEL's, CHECK's) stdin now."""
        c = dict(self.entry())
        c["cniVersion"] = "1.1.0"
        c["name"] = self.name
        if self.ports:
            c["runtimeConfig"] = {"portMappings": list(port_mappings or [])}
        return c

    def holds(self, address):
        a = ipaddress.ip_address(address)
        return any(a in s for s in self.subnets)


class Attachment:
    def __init__(self, network, cid, ifname, netns, state, *, config=None,
                 result=None, ports=()):
        self.network = network
        self.cid = cid
        self.ifname = ifname
        self.netns = netns
        self.state = state
        self.config = config
        self.result = result
        self.ports = list(ports)

    @property
    def key(self):
        return (self.network, self.cid, self.ifname)

    def addresses(self):
        if not self.result:
            return []
        return [ip["address"].split("/")[0] for ip in self.result.get("ips", [])]

    def host_veth(self):
        if not self.result:
            return None
        for i in self.result.get("interfaces", []):
            if "sandbox" not in i and i.get("name", "").startswith("veth"):
                return i["name"]
        return None


class Model:
    def __init__(self, networks):
        self.networks = {n.name: n for n in networks}
        self.attachments = {}

    def put(self, att):
        self.attachments[att.key] = att

    def drop(self, key):
        self.attachments.pop(key, None)

    def get(self, key):
        return self.attachments.get(key)

    def in_network(self, network, states=(LIVE, DIRTY)):
        return [a for a in self.attachments.values()
                if a.network == network and a.state in states]

    def owners(self, network):
        """Keys (cid, ifname) that may own something of the network."""
        return {(a.cid, a.ifname) for a in self.in_network(network)}

    def live(self):
        return [a for a in self.attachments.values() if a.state == LIVE]

    def dirty(self):
        return [a for a in self.attachments.values() if a.state == DIRTY]

    def networks_on(self, bridge):
        return [n for n in self.networks.values() if n.bridge == bridge]

    def published_ports(self):
        return {p["hostPort"] for a in self.live() for p in a.ports}

    def gc_valid(self, network, busy=()):
        """The valid list a runtime sends GC: the attachments it knows of (the live
        ones, and those an operation in the same batch is working on)."""
        keys = {(a.cid, a.ifname) for a in self.in_network(network, (LIVE,))}
        keys |= {(cid, ifname) for (net, cid, ifname) in busy if net == network}
        return sorted(keys)

    def after_gc(self, network, valid):
        """A GC that succeeded removed every attachment of the network not in valid."""
        valid = set(valid)
        for a in list(self.in_network(network)):
            if (a.cid, a.ifname) not in valid:
                self.drop(a.key)
