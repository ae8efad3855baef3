"""The soak's model and invariants, without root: a made-up snapshot for each rule,
and the violation it must report (or not). Standard library only."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import invariants as inv  # noqa: E402
import observe  # noqa: E402
from model import DIRTY, LIVE, Attachment, Model, Network, network_key, owner_comment  # noqa: E402


def model():
    a = Network("nA", "br0", ["10.1.0.0/24"], release_after=0, isolated=True)
    b = Network("nB", "br0", ["fd00:2::/64"], release_after=3)
    for n in (a, b):
        n.data_dir = "/nowhere"
    return Model([a, b])


def live(m, net, cid, addr, netns="ns1"):
    att = Attachment(net, cid, "eth0", netns, LIVE,
                     result={"ips": [{"address": addr + "/24"}],
                             "interfaces": [{"name": "br0"}, {"name": "veth1"}]})
    m.put(att)
    return att


def empty_snap():
    return {"records": {}, "links": [], "qdiscs": [], "iptables": [], "addrs": {},
            "nft": {"objects": [], "elements": [], "rules": []},
            "store": {"nA": observe.read_store("/nowhere/x"),
                      "nB": observe.read_store("/nowhere/y")}}


def names(found):
    return sorted({v["invariant"] for v in found})


class Comments(unittest.TestCase):
    def test_the_owner_comment_is_academys(self):
        # src/attachment.rs: the name's first 20 bytes, '#', 12 hex digits of SHA-256.
        self.assertEqual(network_key("skprobe10507"), "skprobe10507#46a40715e36c")
        self.assertEqual(owner_comment("skprobe10507", "c1", "eth0"),
                         "skprobe10507#46a40715e36c:c1:eth0")
        self.assertTrue(network_key("n" * 30).startswith("n" * 20 + "#"))


class Addresses(unittest.TestCase):
    def test_a_consistent_attachment_passes(self):
        m, s = model(), empty_snap()
        live(m, "nA", "c1", "10.1.0.2")
        s["store"]["nA"]["reservations"]["10.1.0.2"] = "c1:eth0"
        s["store"]["nA"]["holders"].append("c1:eth0")
        s["addrs"]["ns1"] = [("eth0", "10.1.0.2")]
        self.assertEqual(inv.steady(m, s, 0), [])

    def test_an_address_given_twice(self):
        m, s = model(), empty_snap()
        live(m, "nA", "c1", "10.1.0.2", "ns1")
        live(m, "nA", "c2", "10.1.0.2", "ns2")
        s["addrs"] = {"ns1": [("eth0", "10.1.0.2")], "ns2": [("eth0", "10.1.0.2")]}
        found = inv.addresses(m, s)
        self.assertIn(inv.NO_DOUBLE, names(found))
        self.assertTrue(any("(kernel)" in v["what"] for v in found))
        self.assertTrue(any("(ADD results)" in v["what"] for v in found))

    def test_an_address_the_store_forgot(self):
        m, s = model(), empty_snap()
        live(m, "nA", "c1", "10.1.0.2")
        self.assertEqual(names(inv.addresses(m, s)), [inv.RESERVED])

    def test_addresses_outside_the_soaks_subnets_are_not_looked_at(self):
        m, s = model(), empty_snap()
        s["addrs"] = {"ns1": [("eth0", "192.0.2.1")], "ns2": [("eth0", "192.0.2.1")]}
        self.assertEqual(inv.addresses(m, s), [])


class Ownership(unittest.TestCase):
    def test_an_element_of_a_deleted_attachment(self):
        m, s = model(), empty_snap()
        s["nft"]["elements"].append({"family": "inet", "table": "academy", "set": "nA-v4",
                                     "comment": owner_comment("nA", "gone", "eth0"),
                                     "text": "10.1.0.9"})
        self.assertEqual(names(inv.ownership(m, s)), [inv.OWNED])

    def test_a_dirty_attachment_may_own_anything(self):
        m, s = model(), empty_snap()
        m.put(Attachment("nA", "k", "eth0", "ns1", DIRTY))
        s["nft"]["elements"].append({"family": "inet", "table": "academy", "set": "nA-v4",
                                     "comment": owner_comment("nA", "k", "eth0"), "text": "x"})
        s["links"].append({"name": "veth9", "alias": None, "kind": "veth", "master": "br0"})
        s["store"]["nA"]["reservations"]["10.1.0.3"] = "k:eth0"
        s["store"]["nA"]["tmp"].append(".tmp.k:eth0")
        self.assertEqual(inv.ownership(m, s), [])

    def test_links_reservations_and_records_of_no_attachment(self):
        m, s = model(), empty_snap()
        s["links"].append({"name": "veth1", "alias": "academy:nA:c9:eth0", "kind": "veth",
                           "master": "br0"})
        s["links"].append({"name": "veth2", "alias": None, "kind": "veth", "master": "br0"})
        s["store"]["nA"]["reservations"]["10.1.0.3"] = "c9:eth0"
        s["store"]["nA"]["runtime"].append("c9:eth0")
        s["store"]["nA"]["tmp"].append(".tmp.c9:eth0")
        found = inv.ownership(m, s)
        self.assertEqual(len(found), 5, json.dumps(found, indent=1))

    def test_a_networks_objects_need_an_attachment_or_a_pending_release(self):
        m, s = model(), empty_snap()
        s["nft"]["objects"].append({"family": "inet", "table": "academy", "kind": "set",
                                    "name": "nB-v6"})
        s["nft"]["rules"].append({"family": "inet", "table": "academy", "chain": "postrouting",
                                  "comment": "academy ipMasq nB-v6", "text": "[]"})
        s["nft"]["elements"].append({"family": "inet", "table": "academy", "set": "_isolated",
                                     "comment": "", "text": '{"concat": ["br0", "br0"]}'})
        s["iptables"].append('-A FORWARD -i br0 -m comment --comment "academy: x" -j ACCEPT')
        self.assertEqual(len(inv.ownership(m, s)), 4)
        s["records"]["nB"] = 100.0
        self.assertEqual(inv.ownership(m, s), [])
        live(m, "nA", "c1", "10.1.0.2")
        del s["records"]["nB"]
        # nA in use keeps the bridge's elements and rules, not nB's own objects.
        self.assertEqual(len(inv.ownership(m, s)), 2)


class Releases(unittest.TestCase):
    def test_a_record_beside_an_attachment_is_not_judged(self):
        m, s = model(), empty_snap()
        live(m, "nB", "c1", "fd00:2::2")
        s["records"]["nB"] = 50.0
        self.assertEqual(inv.releases(m, s, 500.0), [])

    def test_an_overdue_release(self):
        m, s = model(), empty_snap()
        s["records"]["nB"] = 50.0
        self.assertEqual(inv.releases(m, s, 50.0 + inv.RELEASE_SLACK - 1), [])
        self.assertEqual(names(inv.releases(m, s, 50.0 + inv.RELEASE_SLACK + 1)),
                         [inv.RELEASE])


class Leftovers(unittest.TestCase):
    def test_nothing_left_but_bridges_lo_and_the_outside(self):
        m, s = model(), empty_snap()
        s["links"] = [{"name": n, "alias": None, "kind": None, "master": None}
                      for n in ("lo", "br0", "out")]
        s["qdiscs"] = [{"dev": "br0", "kind": "noqueue"}]
        s["nft"]["objects"].append({"family": "inet", "table": "academy", "kind": "map",
                                    "name": "_ports-v4"})
        self.assertEqual(inv.leftovers(m, s, "out"), [])

    def test_each_kind_left(self):
        m, s = model(), empty_snap()
        s["records"]["nA"] = 1.0
        s["links"].append({"name": "bwp1", "alias": "academy:nA:c:eth0", "kind": "ifb",
                           "master": None})
        s["qdiscs"].append({"dev": "bwp1", "kind": "tbf"})
        s["nft"]["elements"].append({"family": "inet", "table": "academy", "set": "_localnet",
                                     "comment": "", "text": '"br0"'})
        s["nft"]["objects"].append({"family": "bridge", "table": "academy", "kind": "map",
                                    "name": "nA-ports"})
        s["iptables"].append("-A FORWARD -i br0 -j ACCEPT academy")
        s["store"]["nA"]["other"].append("junk")
        self.assertEqual(len(inv.leftovers(m, s, "out")), 7)


class Model_(unittest.TestCase):
    def test_gc_keeps_the_valid_and_frees_the_rest(self):
        m = model()
        live(m, "nA", "c1", "10.1.0.2")
        m.put(Attachment("nA", "k", "eth0", "ns2", DIRTY))
        m.put(Attachment("nA", "busy", "eth0", "ns3", DIRTY))
        valid = m.gc_valid("nA", busy={("nA", "busy", "eth0")})
        self.assertEqual(valid, [("busy", "eth0"), ("c1", "eth0")])
        m.after_gc("nA", valid)
        self.assertEqual(sorted(a.cid for a in m.in_network("nA")), ["busy", "c1"])

    def test_the_conflist_follows_the_toggled_key(self):
        n = Network("nD", "br1", ["10.4.0.0/24"], toggle=("ipMasq", {"ipMasq": True}))
        n.data_dir = "/d"
        self.assertTrue(n.entry()["ipMasq"])
        n.toggled_on = False
        self.assertNotIn("ipMasq", n.entry())
        self.assertNotIn("releaseUnusedAfter", n.entry())  # the default, 60 s

    def test_an_add_made_with_the_toggled_key_is_told_from_one_without(self):
        n = Network("nD", "br1", ["10.4.0.0/24"], toggle=(
            "bandwidth", {"ingressRate": 8, "egressRate": 8}))
        n.data_dir = "/d"
        on = n.config()
        n.toggled_on = False
        self.assertTrue(n.made_with_toggle(on))
        self.assertFalse(n.made_with_toggle(n.config()))
        self.assertFalse(n.made_with_toggle(dict(on, egressRate=9)))


class Parsers(unittest.TestCase):
    def test_nft_elements_with_comments_in_sets_and_maps(self):
        text = json.dumps({"nftables": [
            {"table": {"family": "inet", "name": "academy"}},
            {"set": {"family": "inet", "table": "academy", "name": "nA-v4",
                     "elem": [{"elem": {"val": "10.1.0.2", "comment": "nA#x:c1:eth0"}}]}},
            {"map": {"family": "inet", "table": "academy", "name": "_ports-v4",
                     "elem": [[{"elem": {"val": {"concat": ["tcp", 1]}, "comment": "k"}},
                               {"concat": ["10.1.0.2", 8080]}]]}},
            {"set": {"family": "inet", "table": "academy", "name": "_isolated",
                     "elem": [{"concat": ["br0", "br0"]}]}},
            {"rule": {"family": "inet", "table": "academy", "chain": "postrouting",
                      "comment": "academy ipMasq nA-v4", "expr": []}}]})
        nft = observe.parse_nft(text)
        self.assertEqual([e["comment"] for e in nft["elements"]], ["nA#x:c1:eth0", "k", ""])
        self.assertEqual(len(nft["objects"]), 3)
        self.assertEqual(nft["rules"][0]["comment"], "academy ipMasq nA-v4")

    def test_a_store_folder(self):
        with tempfile.TemporaryDirectory() as d:
            for rel, body in [("10.1.0.2", "c1\neth0"), ("fd00::2", "c1\neth0"),
                              ("last_reserved_ip.0", "10.1.0.2"), ("holders/c1:eth0", "x"),
                              ("runtime/c1:eth0", "{}"), (".tmp.c2:eth0", ""),
                              ("holders/.tmp.c3:eth0", ""), ("stray", "")]:
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(body)
            s = observe.read_store(d)
        self.assertEqual(s["reservations"], {"10.1.0.2": "c1:eth0", "fd00::2": "c1:eth0"})
        self.assertEqual(s["holders"], ["c1:eth0"])
        self.assertEqual(s["runtime"], ["c1:eth0"])
        self.assertEqual(sorted(s["tmp"]), ["./.tmp.c2:eth0", "holders/.tmp.c3:eth0"])
        self.assertEqual(s["other"], ["./stray"])

    def test_a_release_record(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "nB.unused"), "w") as f:
                json.dump({"unused_since_ms": 10000, "release_after": 3}, f)
            self.assertEqual(observe.read_records(["nA", "nB"], d), {"nB": 13.0})

    def test_a_release_record_of_this_release_s_form_per_node(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "nB@4026532842.unused"), "w") as f:
                json.dump({"unused_since_ms": 10000, "release_after": 3}, f)
            # A marker and another network whose name starts alike are not records.
            open(os.path.join(d, "nB@4026532842.13000.due"), "w").close()
            open(os.path.join(d, "nBx@1.unused"), "w").close()
            self.assertEqual(observe.read_records(["nA", "nB"], d), {"nB": 13.0})


if __name__ == "__main__":
    unittest.main()
