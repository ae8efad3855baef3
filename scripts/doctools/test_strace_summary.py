"""Unit tests of strace_summary.py: strace's C strings and netlink attributes decoded, and
two real traces of academy (an ADD that makes its bridge, then its DEL with the netns gone)
summarized exactly as docs/lab shows them. The fixtures were traced with lab.sh's strace
options from a debug build, and their expected output made by lab.sh's decoder before it
moved here."""

import pathlib
import unittest

from doctools import strace_summary as s

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


class Decoding(unittest.TestCase):
    def test_c_strings_as_strace_prints_them(self):
        self.assertEqual(s.cstr(r"a\r\nb"), b"a\r\nb")
        self.assertEqual(s.cstr(r"\x14\0\1"), b"\x14\x00\x01")
        self.assertEqual(s.cstr(r"\177x\""), b'\x7fx"')

    def test_netlink_attributes(self):
        # IFLA_IFNAME "eth0" (len 9, padded to 12), then IFLA_MTU 1500.
        b = (b"\x09\x00\x03\x00eth0\x00\x00\x00\x00" + b"\x08\x00\x04\x00" +
             (1500).to_bytes(4, "little"))
        self.assertEqual(s.attrs(b), [(3, b"eth0\x00"), (4, (1500).to_bytes(4, "little"))])
        self.assertEqual(s.zstr(b"eth0\x00junk"), "eth0")
        self.assertEqual(s.ip4(bytes([10, 98, 0, 1])), "10.98.0.1")

    def test_a_truncated_attribute_ends_the_list(self):
        self.assertEqual(s.attrs(b"\x02\x00\x03\x00"), [])


class RealTraces(unittest.TestCase):
    def summary(self, name, netns=""):
        with open(FIXTURES / f"{name}.strace") as f:
            return s.render(s.summarize(f, netns))

    def expected(self, name):
        return (FIXTURES / f"{name}.expected").read_text().splitlines()

    def test_add(self):
        self.assertEqual(self.summary("add", "arch-fx1"), self.expected("add"))

    def test_del(self):
        self.assertEqual(self.summary("del"), self.expected("del"))

    def test_add_steps_in_order(self):
        whats = [line.split("]", 1)[1] for line in self.summary("add")]
        first = lambda needle: next(i for i, w in enumerate(whats) if needle in w)
        # The reservation is linked before the first netlink request; the netns is
        # entered once, from the thread that configures the container side.
        self.assertLess(first("linkat (O_TMPFILE)"), first("RTM_GETLINK"))
        setns = [l for l in self.summary("add") if "setns(CNI_NETNS" in l]
        self.assertEqual(len(setns), 1)
        self.assertTrue(setns[0].startswith("[netns]"))


if __name__ == "__main__":
    unittest.main()
