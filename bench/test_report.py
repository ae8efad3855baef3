"""Unit tests of report.py's self-checks (no root, no bench run)."""

import unittest

import report


def syscalls(academy: dict | None, floor: dict | None) -> dict:
    sc = {}
    if academy is not None:
        sc["academy"] = {"requests": {"ADD": academy}}
    if floor is not None:
        sc["nlfloor"] = {"requests": {"ADD": floor}}
    return sc


class FloorDrift(unittest.TestCase):
    def test_same_requests_is_no_drift(self):
        same = {"netlink_requests": 10, "setns": 1}
        self.assertIsNone(report.floor_drift(syscalls(dict(same), dict(same))))

    def test_a_missing_request_is_drift_naming_both_counts(self):
        drift = report.floor_drift(syscalls({"netlink_requests": 10, "setns": 1},
                                            {"netlink_requests": 9, "setns": 1}))
        self.assertIsNotNone(drift)
        self.assertIn("made 9 netlink round trips", drift)
        self.assertIn("academy 10", drift)

    def test_another_setns_count_is_drift(self):
        self.assertIsNotNone(report.floor_drift(syscalls({"netlink_requests": 10, "setns": 1},
                                                         {"netlink_requests": 10, "setns": 2})))

    def test_no_floor_or_no_trace_is_not_judged(self):
        self.assertIsNone(report.floor_drift(syscalls({"netlink_requests": 10, "setns": 1}, None)))
        self.assertIsNone(report.floor_drift(syscalls(None, {"netlink_requests": 9, "setns": 1})))

    def test_the_floor_table_carries_the_drift(self):
        sc = syscalls({"netlink_requests": 10, "setns": 1}, {"netlink_requests": 9, "setns": 1})
        ratios = {k: float("nan") for k in (
            "academy_DEL_vs_floor", "reference_DEL_vs_floor", "academy_DEL_vs_wired_floor",
            "reference_DEL_vs_wired_floor", "academy_ADD_vs_ip_floor",
            "reference_ADD_vs_ip_floor", "academy_ADD_vs_c_floor", "reference_ADD_vs_c_floor")}
        rows = report.floor_rows({}, ratios, sc)
        self.assertTrue(any(r.startswith("**DRIFT:") for r in rows), rows)


if __name__ == "__main__":
    unittest.main()
