"""The waiting-networks phase's report logic (waiting.summary, waiting.markdown): no root,
no plugin."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import waiting  # noqa: E402


def cycles(add, dele, cpu=None, ok=True):
    cpu = cpu or [1.5] * len(add)
    return [{"add_ms": a, "del_ms": d, "add_cpu_ms": c, "ok": ok}
            for a, d, c in zip(add, dele, cpu)]


CLEAN = {"records": 0, "veths": 0, "ports": 0, "nft_elements": 0}


def result(beside=((3.1, 3.2, 3.15), (20.0, 22.0, 21.0)),
           none=((3.0, 3.0, 3.0), (20.0, 20.0, 20.0)), networks=250, records=None,
           left=None, made_failures=0, traced_ok=True):
    return {
        "networks": networks, "cycles": 3, "warmup_errors": [],
        "made": {"wall_ms": 9000.0, "errors": [], "failures": made_failures,
                 "records": 2 * networks},
        "records": records if records is not None else {"waiting": 2 * networks, "none": 0},
        "beside": {"runs": {"waiting": cycles(*beside), "none": cycles(*none)}, "errors": []},
        "syscalls": {"waiting": {"ok": traced_ok, "del_ok": True, "total_calls": 190,
                                 "openat": 12},
                     "none": {"ok": True, "del_ok": True, "total_calls": 190, "openat": 12}},
        "released": networks,
        "left": left or {"waiting": dict(CLEAN), "none": dict(CLEAN)},
    }


class Summary(unittest.TestCase):
    def test_a_ratio_of_the_medians_within_the_target_passes(self):
        s = waiting.summary(result())
        self.assertAlmostEqual(s["ratio"]["add"], 1.05)
        self.assertAlmostEqual(s["ratio"]["del"], 1.05)
        self.assertAlmostEqual(s["ratio"]["add_cpu"], 1.0)
        self.assertEqual(s["verdict"], "PASS")
        self.assertEqual(s["syscalls"], {"waiting": 190, "none": 190})
        self.assertEqual(s["problems"], [])

    def test_an_add_over_the_target_misses_and_del_alone_does_not(self):
        s = waiting.summary(result(beside=((3.3, 3.3, 3.3), (20.0, 20.0, 20.0))))
        self.assertAlmostEqual(s["ratio"]["add"], 1.1)
        self.assertEqual(s["verdict"], "MISS")
        s = waiting.summary(result(beside=((3.0, 3.0, 3.0), (40.0, 40.0, 40.0))))
        self.assertEqual(s["verdict"], "PASS")

    def test_fewer_records_than_networks_is_not_the_case_measured(self):
        s = waiting.summary(result(records={"waiting": 400, "none": 0}))
        self.assertEqual(s["verdict"], "MISS")
        self.assertIn("200 records waited, not 250", s["problems"])
        s = waiting.summary(result(records={"waiting": 500, "none": 2}))
        self.assertIn("the node without waiting networks had records", s["problems"])

    def test_a_failure_or_a_leftover_misses_however_fast(self):
        s = waiting.summary(result(made_failures=3))
        self.assertEqual(s["verdict"], "MISS")
        self.assertIn("3 invocations failed making the waiting networks", s["problems"])
        s = waiting.summary(result(traced_ok=False))
        self.assertIn("waiting: the traced ADD or its DEL failed", s["problems"])
        left = {"waiting": dict(CLEAN, records=4, nft_elements=2), "none": dict(CLEAN)}
        s = waiting.summary(result(left=left))
        self.assertEqual(s["verdict"], "MISS")
        self.assertIn("left on the waiting node: {'records': 4, 'nft_elements': 2}",
                      s["problems"])

    def test_a_failed_cycle_is_not_a_sample_and_the_series_is_short(self):
        r = result()
        r["beside"]["runs"]["waiting"][0]["ok"] = False
        s = waiting.summary(r)
        self.assertAlmostEqual(s["median_ms"]["waiting"]["add"], 3.175)
        self.assertIn("waiting: 2 of 3 cycles succeeded", s["problems"])
        self.assertEqual(s["verdict"], "MISS")

    def test_nothing_measured_is_no_verdict(self):
        self.assertIsNone(waiting.summary(None))
        self.assertIsNone(waiting.summary({"networks": 1, "cycles": 1}))
        r = result(beside=((), ()), none=((), ()))
        r["cycles"] = 0
        s = waiting.summary(r)
        self.assertTrue(math.isnan(s["ratio"]["add"]))
        self.assertEqual(s["verdict"], "n/a")


class Markdown(unittest.TestCase):
    def test_the_table_has_the_add_its_cpu_the_del_and_the_syscalls(self):
        r = result()
        md = waiting.markdown(r, waiting.summary(r))
        self.assertIn("### ADD beside 250 networks waiting for release", md)
        self.assertIn("| ADD | 3.15 ms | 3.00 ms | 1.05x | <= 1.05x | PASS |", md)
        self.assertIn("| ADD, CPU (user + sys) | 1.50 ms | 1.50 ms | 1.00x | | |", md)
        self.assertIn("| DEL | 21.00 ms | 20.00 ms | 1.05x | | |", md)
        self.assertIn("| syscalls per ADD (strace -c -f) | 190 (12 openat) | 190 (12 openat) "
                      "| | | |", md)
        self.assertEqual(waiting.markdown(None, None), "")

    def test_the_floor_s_ratio_and_academy_s_against_it(self):
        r = result(beside=((3.6, 3.6, 3.6), (20.0, 20.0, 20.0)))
        for where, add in (("waiting", 2.4), ("none", 2.0)):
            for c in r["beside"]["runs"][where]:
                c.update({"floor_add_ms": add, "floor_del_ms": 18.0, "floor_ok": True})
        s = waiting.summary(r)
        self.assertEqual(s["floor_ms"]["waiting"]["add"], 2.4)
        # academy 1.2x, the kernel's own 1.2x: academy's part does not grow, 1.0x.
        self.assertAlmostEqual(s["against_floor"]["add"], 1.0)
        self.assertEqual(s["verdict"], "MISS")  # the target is academy's own ratio
        md = waiting.markdown(r, s)
        self.assertIn("| floor ADD: nlfloor, academy's requests from one C process | 2.40 ms "
                      "| 2.00 ms | 1.20x | | |", md)
        self.assertIn("ADD 1.00x, DEL 1.00x", md)
        # A floor that failed once is not reported.
        r["beside"]["runs"]["none"][0]["floor_ok"] = False
        self.assertIsNone(waiting.summary(r)["floor_ms"])

    def test_problems_are_listed(self):
        r = result(made_failures=1)
        self.assertIn("- 1 invocations failed making the waiting networks",
                      waiting.markdown(r, waiting.summary(r)))


if __name__ == "__main__":
    unittest.main()
