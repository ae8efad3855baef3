"""The scrape phase's report logic (scrape.summary, scrape.markdown): no root, no plugin."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scrape  # noqa: E402


def result(walls, errors=(), scrapes=None, server=None):
    return {"networks": 100, "addresses": 250, "scrapes": len(walls) if scrapes is None else scrapes,
            "walls_ms": list(walls), "server_ms": list(server or walls), "errors": list(errors)}


class Summary(unittest.TestCase):
    def test_a_median_under_the_target_passes(self):
        s = scrape.summary(result([10, 30, 49.9, 200]))
        self.assertEqual(s["median_ms"], 39.95)
        self.assertEqual(s["max_ms"], 200)
        self.assertEqual(s["verdict"], "PASS")

    def test_a_median_at_or_over_the_target_misses(self):
        self.assertEqual(scrape.summary(result([50, 50, 50]))["verdict"], "MISS")
        self.assertEqual(scrape.summary(result([700, 725]))["verdict"], "MISS")

    def test_a_fast_run_with_a_wrong_page_or_missing_scrapes_misses(self):
        wrong = scrape.summary(result([5, 5], errors=["scrape 1: 24999 used, not 25000"]))
        self.assertEqual(wrong["verdict"], "MISS")
        short = scrape.summary(result([5, 5], scrapes=20))
        self.assertEqual(short["verdict"], "MISS")
        self.assertIn("2 of 20 scrapes answered", short["errors"])

    def test_no_samples_is_no_verdict_unless_something_failed(self):
        self.assertIsNone(scrape.summary(None))
        empty = scrape.summary(result([]))
        self.assertEqual(empty["verdict"], "n/a")
        self.assertTrue(math.isnan(empty["median_ms"]))
        failed = scrape.summary({"networks": 1, "addresses": 1, "scrapes": 3,
                                 "errors": ["the scrape client failed: refused"]})
        self.assertEqual(failed["verdict"], "MISS")


class Markdown(unittest.TestCase):
    def test_the_table_names_the_size_the_figures_and_the_verdict(self):
        r = result([20, 40, 60], server=[18, 38, 58])
        md = scrape.markdown(r, scrape.summary(r))
        self.assertIn("(100 networks x 250 addresses)", md)
        self.assertIn("| 3 | 40.0 ms | 60.0 ms | 38.0 ms | < 50 ms | PASS |", md)
        r = result([5], errors=["scrape 0: not the page of 100 networks"])
        self.assertIn("- scrape 0: not the page", scrape.markdown(r, scrape.summary(r)))
        self.assertEqual(scrape.markdown(None, None), "")


if __name__ == "__main__":
    unittest.main()
