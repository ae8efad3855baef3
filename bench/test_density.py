"""The density phase's report logic (density.summary, density.markdown): no root, no plugin."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import density  # noqa: E402


def cycles(add, dele, ok=True):
    return [{"add_ms": a, "del_ms": d, "ok": ok} for a, d in zip(add, dele)]


def result(dense=((4.0, 4.4, 4.2), (20.0, 22.0, 21.0)),
           empty=((4.0, 4.0, 4.0), (20.0, 20.0, 20.0)), left=None, failures=0, pods=1000):
    return {
        "pods": pods, "cycles": 3, "warmup_errors": [], "ports_up": pods,
        "up": {"wall_ms": 4500.0, "per_pod_ms": [3.0] * 100 + [4.0] * 800 + [5.0] * 100,
               "per_pod_cpu_ms": [2.0] * 100 + [2.5] * 900, "failures": failures, "errors": []},
        "down": {"wall_ms": 21000.0, "per_pod_ms": [], "failures": 0, "errors": []},
        "beside": {"runs": {"dense": cycles(*dense), "empty": cycles(*empty)}, "errors": []},
        "left": left or {"dense": {"veths": 0, "ports": 0, "store_files": 0, "nft_elements": 0},
                         "empty": {"veths": 0, "ports": 0, "store_files": 0, "nft_elements": 0}},
    }


class Summary(unittest.TestCase):
    def test_ratios_of_the_medians_within_the_target_pass(self):
        s = density.summary(result())
        self.assertAlmostEqual(s["ratio"]["add"], 1.05)
        self.assertAlmostEqual(s["ratio"]["del"], 1.05)
        self.assertEqual(s["verdict"], {"add": "PASS", "del": "PASS"})
        self.assertEqual((s["up_first_tenth_ms"], s["up_last_tenth_ms"]), (3.0, 5.0))
        self.assertEqual((s["up_first_tenth_cpu_ms"], s["up_last_tenth_cpu_ms"]), (2.0, 2.5))
        self.assertEqual((s["up_wall_s"], s["down_wall_s"]), (4.5, 21.0))

    def test_a_ratio_over_the_target_misses_alone(self):
        s = density.summary(result(dense=((5.0, 5.0, 5.0), (20.0, 20.0, 20.0))))
        self.assertAlmostEqual(s["ratio"]["add"], 1.25)
        self.assertEqual(s["verdict"], {"add": "MISS", "del": "PASS"})

    def test_a_failure_or_a_leftover_misses_however_fast(self):
        s = density.summary(result(failures=2))
        self.assertEqual(s["verdict"], {"add": "MISS", "del": "MISS"})
        self.assertIn("2 of 1000 pods failed to come up", s["problems"])
        left = {"dense": {"veths": 3, "ports": 0, "store_files": 0, "nft_elements": 0}}
        s = density.summary(result(left=left))
        self.assertEqual(s["verdict"]["add"], "MISS")
        self.assertIn("left on the dense node: {'veths': 3}", s["problems"])

    def test_a_failed_cycle_is_not_a_sample_and_the_series_is_short(self):
        r = result()
        r["beside"]["runs"]["dense"][0]["ok"] = False
        s = density.summary(r)
        self.assertAlmostEqual(s["median_ms"]["dense"]["add"], 4.3)
        self.assertIn("dense: 2 of 3 cycles succeeded", s["problems"])
        self.assertEqual(s["verdict"]["del"], "MISS")

    def test_nothing_measured_is_no_verdict(self):
        self.assertIsNone(density.summary(None))
        self.assertIsNone(density.summary({"pods": 1, "cycles": 1}))
        r = result(dense=((), ()), empty=((), ()))
        r["cycles"] = 0
        s = density.summary(r)
        self.assertTrue(math.isnan(s["ratio"]["add"]))
        self.assertEqual(s["verdict"], {"add": "n/a", "del": "n/a"})


class Markdown(unittest.TestCase):
    def test_the_floor_s_ratio_and_academy_s_against_it(self):
        r = result(dense=((6.0, 6.0, 6.0), (20.0, 20.0, 20.0)))
        for where, add in (("dense", 2.0), ("empty", 1.0)):
            for c in r["beside"]["runs"][where]:
                c.update({"floor_add_ms": add, "floor_del_ms": 18.0, "floor_ok": True})
        s = density.summary(r)
        self.assertEqual(s["floor_ms"]["dense"]["add"], 2.0)
        # academy 1.5x, the kernel's own 2.0x: academy's part shrinks, 0.75x.
        self.assertAlmostEqual(s["against_floor"]["add"], 0.75)
        self.assertAlmostEqual(s["against_floor"]["del"], 1.0)
        self.assertEqual(s["verdict"]["add"], "MISS")  # the target is academy's own ratio
        md = density.markdown(r, s)
        self.assertIn("floor ADD: nlfloor", md)
        self.assertIn("ADD 0.75x", md)
        # A floor that failed once is not reported.
        r["beside"]["runs"]["empty"][0]["floor_ok"] = False
        self.assertIsNone(density.summary(r)["floor_ms"])

    def test_the_table_has_both_operations_and_the_walls(self):
        r = result()
        md = density.markdown(r, density.summary(r))
        self.assertIn("### Density: 1000 pods on one bridge", md)
        self.assertIn("| ADD | 4.20 ms | 4.00 ms | 1.05x | <= 1.2x | PASS |", md)
        self.assertIn("| DEL | 21.00 ms | 20.00 ms | 1.05x | <= 1.2x | PASS |", md)
        self.assertIn("brought up one after the other in 4.5 s (ADD median 3.00 ms, 2.00 ms of "
                      "CPU, over the first tenth; 5.00 ms, 2.50 ms of CPU, over the last)", md)
        self.assertIn("and down in 21.0 s", md)
        self.assertEqual(density.markdown(None, None), "")

    def test_problems_are_listed(self):
        r = result(failures=1)
        self.assertIn("- 1 of 1000 pods failed to come up", density.markdown(r, density.summary(r)))


if __name__ == "__main__":
    unittest.main()
