"""chains.py's pure logic: residents per network, leftovers, the markdown's verdicts.
Standard library only, no root: python3 -m unittest discover -s bench -p 'test_*.py'"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chains  # noqa: E402


def chain(name):
    return chains.Chain({"name": name, "cniVersion": "1.0.0", "plugins": []}, "/nonexistent")


def result(**extra):
    r = {"chain_ratio": {"ADD": 0.08, "DEL": 0.15}, "udp_chain_ratio": {"ADD": 0.1, "DEL": 0.2},
         "fw_ratio": {"ADD": 0.5, "DEL": 0.5}, "burst_ratio": {"ADD": 0.3, "DEL": 0.3},
         "three_vs_none": 1.1, "crowded_vs_empty": 1.0, "udp_vs_tcp": 1.05, "parallel": 50,
         "cycles": 15, "converted_plugins": ["academy", "tuning"],
         "residents": ["reference", "academy"], "resident_errors": [],
         "leftovers": {"reference": {"ports": [], "reservations": []},
                       "academy": {"ports": [], "reservations": []}}}
    r.update(extra)
    return r


class Networks(unittest.TestCase):
    def test_one_resident_per_network_name(self):
        c = {"reference": chain("ref"), "academy": chain("aca"), "academy-fw": chain("aca")}
        self.assertEqual(chains.networks_of(c), {"ref": "reference", "aca": "academy"})


class Leftovers(unittest.TestCase):
    def test_only_what_is_left(self):
        left = {"reference": {"ports": [], "reservations": []},
                "academy": {"ports": ["veth1"], "reservations": []}}
        self.assertEqual(chains.left_behind(left), {"academy": {"ports": ["veth1"]}})

    def test_reservations_are_address_files(self):
        import tempfile  # noqa: PLC0415
        with tempfile.TemporaryDirectory() as d:
            for n in ("10.242.208.2", "lock", "last_reserved_ip.0"):
                open(os.path.join(d, n), "w").close()
            self.assertEqual(chains.reservations(d), ["10.242.208.2"])
        self.assertEqual(chains.reservations("/nonexistent/store"), [])


class Markdown(unittest.TestCase):
    def test_clean_run_passes_and_says_steady_state(self):
        md = chains.markdown(result())
        self.assertIn("<= 0.1 PASS", md)
        self.assertIn("resident attachment", md)
        self.assertIn("nothing", md)
        self.assertEqual(chains.faults(result()), [])

    def test_a_ratio_over_its_limit_is_a_miss(self):
        md = chains.markdown(result(chain_ratio={"ADD": 0.25, "DEL": 0.15}))
        self.assertIn("0.25x | <= 0.1 MISS", md)

    def test_leftovers_or_resident_failures_make_a_fast_result_a_miss(self):
        leaky = result(leftovers={"academy": {"ports": ["veth1"], "reservations": []}})
        md = chains.markdown(leaky)
        self.assertNotIn("PASS", md)
        self.assertIn("**Left after the cycles", md)
        failed = result(resident_errors=["resident academy DEL: boom"])
        self.assertNotIn("PASS", chains.markdown(failed))
        self.assertIn("boom", chains.markdown(failed))
        self.assertEqual(chains.faults(failed), ["resident academy DEL: boom"])


if __name__ == "__main__":
    unittest.main()
