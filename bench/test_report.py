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


NAN = float("nan")


def one_burst(n=110, add_ms=100.0, del_ms=50.0, add_fail=0, distinct=None, left=None,
              killed=0, crowded=None):
    b = {"parallel": n,
         "ADD": {"wall_ms": add_ms, "failures": add_fail, "killed_at_deadline": killed,
                 "distinct_addresses": n if distinct is None else distinct,
                 "per_pod_ms": {"median": 10.0, "max": 20.0}},
         "DEL": {"wall_ms": del_ms, "failures": 0, "killed_at_deadline": 0,
                 "per_pod_ms": {"median": 5.0, "max": 9.0}},
         "left": dict({"veths": 0, "store_files": 0, "nft_elements": 0, "iptables_chains": 0},
                      **(left or {}))}
    if crowded:
        b["crowded"] = crowded
    return b


def cycles_of(**adds):
    """crowd_cycles' output: key -> list of ADD times (all ok)."""
    return {"runs": {k: [{"add_ms": v, "del_ms": 1.0, "ok": True} for v in vs]
                     for k, vs in adds.items()}, "errors": [], "stopped": None}


def bursts_result(aca110, ref110, aca250=None, ref250=None):
    out = {"bursts": {"110": {"academy": aca110, "reference": ref110}}, "crowd_cycles": 3,
           "converted_plugins": ["academy"]}
    if aca250:
        out["bursts"]["250"] = {"academy": aca250, "reference": ref250}
    return out


class Verdicts(unittest.TestCase):
    def test_ratio_against_limit(self):
        self.assertEqual(report.verdict(0.2, 0.3), "PASS")
        self.assertEqual(report.verdict(0.3, 0.3), "PASS")
        self.assertEqual(report.verdict(0.31, 0.3), "MISS")

    def test_not_measured_is_na(self):
        self.assertEqual(report.verdict(NAN, 0.3), "n/a")

    def test_a_fast_result_with_faults_is_no_pass(self):
        self.assertEqual(report.verdict(0.01, 0.3, ["3 ADDs failed"]), "MISS")


class Bursts(unittest.TestCase):
    def test_faults_name_failures_addresses_leftovers_and_kills(self):
        faults = report.side_faults(one_burst(add_fail=2, distinct=107, killed=4,
                                              left={"veths": 1, "iptables_chains": 2}))
        text = "; ".join(faults)
        self.assertIn("2 ADDs failed", text)
        self.assertIn("107 distinct addresses for 110 pods", text)
        self.assertIn("4 processes killed", text)
        self.assertIn("1 veths", text)
        self.assertIn("2 iptables chains", text)
        self.assertEqual(report.side_faults(one_burst()), [])

    def test_ratios_of_total_walls(self):
        bs = report.bursts_summary(bursts_result(one_burst(add_ms=30, del_ms=10),
                                                 one_burst(add_ms=300, del_ms=100)))
        e = bs["sizes"]["110"]
        self.assertAlmostEqual(e["ADD"], 0.1)
        self.assertAlmostEqual(e["DEL"], 0.1)
        self.assertAlmostEqual(e["total"], 40 / 400)

    def test_crowded_against_empty_and_one_resident(self):
        c = cycles_of(burst=[5.0, 6.0, 7.0], empty=[10.0, 10.0, 10.0], one=[5.0, 5.0, 5.0])
        bs = report.bursts_summary(bursts_result(one_burst(), one_burst(),
                                                 one_burst(250, crowded=c), one_burst(250)))
        a = bs["crowded"]["academy"]
        self.assertEqual(a["pods"], 250)
        self.assertAlmostEqual(a["ratio"], 0.6)
        self.assertAlmostEqual(a["ratio_vs_one"], 1.2)
        self.assertEqual(a["failures"], 0)

    def test_rows_show_failures_and_leftovers(self):
        r = bursts_result(one_burst(add_fail=1, distinct=109, left={"store_files": 3}),
                          one_burst())
        rows = "\n".join(report.bursts_rows(r))
        self.assertIn("**", rows)
        self.assertIn("1 failed", rows)
        self.assertIn("109 distinct addresses of 110", rows)
        self.assertIn("left: 3 store files", rows)
        self.assertIn("nothing left", rows)  # the reference's clean DEL


class IssueTargets(unittest.TestCase):
    def targets(self, aca, ref, chains=None, aca250=None, ref250=None):
        results = bursts_result(aca, ref, aca250, ref250)
        results = {"bursts": results}
        if chains:
            results["chains"] = chains
        results["summary"] = {"bursts": report.bursts_summary(results["bursts"])}
        return {t["target"].split(",")[0].split(" ≤")[0]: t for t in report.issue_targets(results)}

    def test_burst_pass_and_miss(self):
        t = self.targets(one_burst(add_ms=20), one_burst(add_ms=100))
        self.assertEqual(t["110 pods at once"]["verdict"], "PASS")
        t = self.targets(one_burst(add_ms=40), one_burst(add_ms=100))
        self.assertEqual(t["110 pods at once"]["verdict"], "MISS")

    def test_fast_but_leaky_burst_is_a_miss_and_says_why(self):
        t = self.targets(one_burst(add_ms=1, left={"nft_elements": 5}), one_burst())
        self.assertEqual(t["110 pods at once"]["verdict"], "MISS")
        self.assertIn("5 nft elements", t["110 pods at once"]["note"])

    def test_a_failing_reference_makes_the_ratio_na(self):
        t = self.targets(one_burst(add_ms=1), one_burst(add_fail=3))
        self.assertEqual(t["110 pods at once"]["verdict"], "n/a")
        self.assertIn("reference: 3 ADDs failed", t["110 pods at once"]["note"])

    def test_crowded_target_and_chain_targets(self):
        c = cycles_of(burst=[13.0], empty=[10.0])
        chains = {"chain_ratio": {"ADD": 0.05, "DEL": 0.25}, "three_vs_none": 1.1}
        t = self.targets(one_burst(), one_burst(), chains, one_burst(250, crowded=c),
                         one_burst(250))
        self.assertEqual(t["academy ADD with 250 pods on the bridge"]["verdict"], "MISS")
        self.assertEqual(t["converted network ADD"]["verdict"], "PASS")
        self.assertEqual(t["converted network DEL"]["verdict"], "MISS")
        self.assertEqual(t["academy ADD with 3 port mappings"]["verdict"], "PASS")

    def test_crowded_target_reads_the_empty_bridge_and_shows_the_resident_beside(self):
        c = cycles_of(burst=[13.0], empty=[10.0], one=[12.0])
        t = self.targets(one_burst(), one_burst(), None, one_burst(250, crowded=c),
                         one_burst(250))
        row = t["academy ADD with 250 pods on the bridge"]
        self.assertAlmostEqual(row["value"], 1.3)  # against the empty bridge: the target
        self.assertEqual(row["verdict"], "MISS")
        self.assertIn("empty bridge", row["target"])
        self.assertIn("first ADD", row["target"])
        self.assertIn("one resident pod", row["note"])
        self.assertIn("not the target", row["note"])
        self.assertIn("1.08x", row["note"])  # 13 / 12, beside it
        rows = "\n".join(report.bursts_rows(bursts_result(one_burst(), one_burst(),
                                                           one_burst(250, crowded=c),
                                                           one_burst(250))))
        self.assertIn("on an empty bridge", rows)
        self.assertIn("one resident pod", rows)

    def test_chain_leftovers_make_chain_targets_a_miss(self):
        chains = {"chain_ratio": {"ADD": 0.05, "DEL": 0.1}, "three_vs_none": 1.0,
                  "leftovers": {"academy": {"ports": ["veth9"], "reservations": []}},
                  "resident_errors": []}
        t = self.targets(one_burst(), one_burst(), chains)
        self.assertEqual(t["converted network ADD"]["verdict"], "MISS")
        self.assertIn("veth9", t["converted network ADD"]["note"])

    def test_no_bursts_no_burst_targets(self):
        results = {"chains": {"chain_ratio": {"ADD": 0.05, "DEL": 0.1}, "three_vs_none": 1.0},
                   "summary": {}}
        self.assertEqual(len(report.issue_targets(results)), 3)


def gc_runs(valid_ms, stale_ms):
    return {"valid": [{"rc": 0, "wall_ms": v} for v in valid_ms],
            "stale": [{"rc": 0, "wall_ms": v} for v in stale_ms]}


class Versus(unittest.TestCase):
    def test_no_baseline_no_table(self):
        self.assertIsNone(report.versus_summary({}, {"academy.ADD": {"median": 1.0}}))
        self.assertEqual(report.versus_markdown({"summary": {"versus": None}}), "")

    def test_ratios_current_over_baseline_with_gc(self):
        st = {"current.ADD": {"median": 3.0, "min": 3.0, "max": 3.0},
              "baseline.ADD": {"median": 4.0, "min": 4.0, "max": 4.0},
              "current.DEL": {"median": 20.0, "min": 20.0, "max": 20.0},
              "baseline.DEL": {"median": 20.0, "min": 20.0, "max": 20.0}}
        results = {"gc": {"attachments": 50, "problems": [],
                          "runs": {"current": gc_runs([2, 2, 3], [30]),
                                   "baseline": gc_runs([2, 2, 2], [120])}}}
        v = report.versus_summary(results, st)
        ratio = {r["what"]: r["ratio"] for r in v["rows"]}
        self.assertAlmostEqual(ratio["ADD"], 0.75)
        self.assertAlmostEqual(ratio["DEL"], 1.0)
        self.assertAlmostEqual(ratio["GC, 50 attachments all valid (nothing to remove)"], 1.0)
        stale = [k for k in ratio if k.startswith("GC, 50 stale")]
        self.assertEqual(len(stale), 1)
        self.assertAlmostEqual(ratio[stale[0]], 0.25)
        self.assertNotEqual(ratio["CHECK"], ratio["CHECK"])  # not measured: nan

    def test_markdown_reports_gc_problems(self):
        results = {"gc": {"attachments": 5, "problems": ["current round 0: GC of 5 stale left "
                                                         "{'nft_elements': 2}"],
                          "runs": {"current": gc_runs([1], [2]), "baseline": gc_runs([1], [2])}},
                   "cycles": {"errors": [], "leftovers": {}}, "provenance": {}}
        results["summary"] = {"versus": report.versus_summary(results, {})}
        md = report.versus_markdown(results)
        self.assertIn("### academy vs its baseline", md)
        self.assertIn("**1 problems:**", md)
        self.assertIn("nft_elements", md)


def med(v, failures=0):
    return {"median": v, "min": v, "max": v, "n": 5, "failures": failures}


class VersusTargets(unittest.TestCase):
    """Issue 35 item 7: each shape's ADD, CHECK and DEL at most 1.05x the baseline's."""

    def summary(self, st, results=None):
        return report.versus_summary(dict(results or {}, cycles={"leftovers": {}}), st)

    def test_each_shape_each_op_has_a_target_row(self):
        v = self.summary({"current.ADD": med(2.0), "baseline.ADD": med(2.0)})
        rows = {r["what"]: r for r in v["rows"]}
        for what in ("ADD", "CHECK with ipMasq", "DEL with a published port",
                     "ADD, podman's chain converted", "CHECK, podman's chain converted"):
            self.assertEqual(rows[what]["limit"], 1.05, what)
        self.assertEqual(len(v["rows"]), 12)
        self.assertEqual(rows["ADD"]["verdict"], "PASS")
        self.assertEqual(rows["DEL"]["verdict"], "n/a")  # not measured

    def test_limit_is_inclusive_and_failures_miss(self):
        st = {"current-port.ADD": med(10.5), "baseline-port.ADD": med(10.0),
              "current-port.DEL": med(10.6), "baseline-port.DEL": med(10.0),
              "current-podman.ADD": med(5.0, failures=1), "baseline-podman.ADD": med(10.0),
              "current-podman.DEL": med(5.0), "baseline-podman.DEL": med(10.0, failures=2)}
        rows = {r["what"]: r for r in self.summary(st)["rows"]}
        self.assertEqual(rows["ADD with a published port"]["verdict"], "PASS")
        self.assertEqual(rows["DEL with a published port"]["verdict"], "MISS")
        self.assertEqual(rows["ADD, podman's chain converted"]["verdict"], "MISS")
        self.assertEqual(rows["DEL, podman's chain converted"]["verdict"], "MISS")
        self.assertIn("baseline: 2 failed", rows["DEL, podman's chain converted"]["faults"])

    def test_leftovers_of_a_network_miss_its_rows(self):
        st = {"current-port.ADD": med(1.0), "baseline-port.ADD": med(1.0),
              "current.ADD": med(1.0), "baseline.ADD": med(1.0)}
        results = {"cycles": {"leftovers": {
            "current-port": {"ports": ["veth1"], "reservations": []},
            "current": {"ports": [], "reservations": []}}}}
        rows = {r["what"]: r for r in report.versus_summary(results, st)["rows"]}
        self.assertEqual(rows["ADD with a published port"]["verdict"], "MISS")
        self.assertIn("veth1", rows["ADD with a published port"]["faults"][0])
        self.assertEqual(rows["ADD"]["verdict"], "PASS")

    def restore(self, n=250, masq=250):
        runs = {"gc_valid": [{"rc": 0, "wall_ms": 9.0}], "restore": [{"rc": 0, "wall_ms": 6.0}],
                "gc_stale": [{"rc": 0, "wall_ms": 80.0}]}
        return {"attachments": n, "problems": [],
                "runs": {"current": runs, "baseline": dict(runs, restore=[
                    {"rc": 0, "wall_ms": 4.0}])},
                "put_back": {w: [{"attachments": n, "masq_elements": masq}] * 3
                             for w in ("current", "baseline")}}

    def test_restore_rows_are_reported_only(self):
        v = self.summary({}, {"restore": self.restore()})
        rows = {r["what"]: r for r in v["rows"]}
        restore = [k for k in rows if k.startswith("restore of 250 attachments")]
        self.assertEqual(len(restore), 1)
        self.assertAlmostEqual(rows[restore[0]]["ratio"], 1.5)
        self.assertIsNone(rows[restore[0]]["limit"])
        self.assertIn("GC, 250 stale attachments (netns gone)", rows)
        self.assertEqual(v["put_back"]["current"],
                         {"restores": 3, "attachments": 250, "min": 250, "max": 250})

    def test_markdown_has_a_target_column(self):
        results = {"restore": self.restore(masq=240), "provenance": {},
                   "cycles": {"errors": [], "leftovers": {}}}
        st = {"current.ADD": med(2.1), "baseline.ADD": med(2.0)}
        results["summary"] = {"versus": report.versus_summary(results, st)}
        md = report.versus_markdown(results)
        self.assertIn("| | current | baseline | current / baseline | target |", md)
        self.assertIn("| **1.05** | <= 1.05 PASS |", md)
        self.assertRegex(md, r"\| restore of 250 attachments [^\n]*\| \*\*1\.50\*\* \| - \|")
        self.assertIn("current: 240 of 250, in each of 3 restores", md)
        self.assertIn("current's restores put back 240 of the 250 elements", md)
        self.assertNotIn("every restore put back", md)


class BuiltFrom(unittest.TestCase):
    def test_a_bench_only_head_names_the_src_commit(self):
        self.assertEqual(report._built_from({"git_commit": "d5ee4a9", "src_commit": "6016029"}),
                         "d5ee4a9, src as of 6016029")
        self.assertEqual(report._built_from({"git_commit": "6016029", "src_commit": "6016029"}),
                         "6016029")
        self.assertEqual(report._built_from({"git_commit": "abc"}), "abc")


class LoadLine(unittest.TestCase):
    def test_phases_and_end(self):
        line = report.load_line({"loadavg_phases": {"cycles": [0.5, 0, 0], "bursts": [7.25, 0, 0]},
                                 "loadavg_end": [9.0, 0, 0]})
        self.assertEqual(line, "Load average (1 min) as each phase began: cycles 0.50, "
                               "bursts 7.25, end 9.00.")
        self.assertEqual(report.load_line({}), "")


if __name__ == "__main__":
    unittest.main()


def st_of(median_ms: float) -> dict:
    return {"n": 5, "failures": 0, "median": median_ms, "min": median_ms, "max": median_ms}


class Lifetime(unittest.TestCase):
    def stats(self, baseline=True):
        st = {"current.ADD.first": st_of(20.0), "current.ADD": st_of(5.0),
              "current.DEL.last": st_of(30.0), "current.DEL": st_of(20.0),
              "current-masq.ADD.first": st_of(40.0), "current-masq.ADD": st_of(8.0),
              "current-masq.DEL.last": st_of(45.0), "current-masq.DEL": st_of(22.0)}
        if baseline:
            st.update({"baseline.ADD.first": st_of(4.0), "baseline.ADD": st_of(4.0),
                       "baseline.DEL.last": st_of(20.0), "baseline.DEL": st_of(20.0),
                       "baseline-masq.ADD.first": st_of(8.0), "baseline-masq.ADD": st_of(7.0),
                       "baseline-masq.DEL.last": st_of(21.0), "baseline-masq.DEL": st_of(21.0)})
        return st

    def test_no_first_add_no_table(self):
        self.assertIsNone(report.lifetime_summary({"academy.ADD": st_of(5.0)}))
        self.assertEqual(report.lifetime_rows(None), [])

    def test_first_over_ordinary_and_over_the_baseline(self):
        lt = report.lifetime_summary(self.stats())
        self.assertTrue(lt["with_baseline"])
        r = lt["ratios"]
        self.assertAlmostEqual(r["a network's first ADD"]["vs_ordinary"], 4.0)
        self.assertAlmostEqual(r["a network's first ADD"]["vs_baseline"], 5.0)
        self.assertAlmostEqual(r["a network's last DEL"]["vs_ordinary"], 1.5)
        self.assertAlmostEqual(r["a network's first ADD with ipMasq"]["vs_baseline"], 5.0)
        self.assertAlmostEqual(r["a network's first ADD with ipMasq"]["baseline_vs_ordinary"],
                               8.0 / 7.0)
        text = "\n".join(report.lifetime_rows(lt, 15))
        self.assertIn("these 15 cycles", text)
        self.assertIn("| a network's last DEL with ipMasq | 45.0 (45.0–45.0) | 22.0", text)
        self.assertIn("**5.00** |", text)

    def test_without_a_baseline_academy_alone(self):
        st = {k.replace("current", "academy"): v for k, v in self.stats(False).items()}
        lt = report.lifetime_summary(st)
        self.assertFalse(lt["with_baseline"])
        self.assertEqual(lt["current"], "academy")
        rows = report.lifetime_rows(lt)
        self.assertTrue(any(r.startswith("| a network's first ADD | 20.0") and "**4.00**" in r
                            for r in rows), rows)
        self.assertFalse(any("baseline" in r for r in rows if r.startswith("|")))


class Bandwidth(unittest.TestCase):
    def test_paired_ratio_is_the_median_of_cycle_ratios_skipping_failures(self):
        series = {"bw": [{"wall_ms": 12.0}, {"wall_ms": 30.0}, {"wall_ms": 9.0, "rc": 1},
                         {"wall_ms": 11.0}],
                  "plain": [{"wall_ms": 10.0}, {"wall_ms": 10.0}, {"wall_ms": 10.0},
                            {"wall_ms": 10.0}]}
        self.assertAlmostEqual(report.paired_ratio(series, "bw", "plain"), 1.2)
        self.assertNotEqual(report.paired_ratio({}, "bw", "plain"),
                            report.paired_ratio({}, "bw", "plain"))  # nan

    def ratios(self, bw):
        return {"ADD": 0.3, "rss_peak": 0.5, "academy_DEL_vs_floor": 1.0, "ADD_masq": 0.2,
                "DEL_masq": 0.4, "academy_ADD_masq_vs_plain": 1.1,
                "academy_ADD_bw_vs_plain": bw}

    def verdict(self, bw):
        rows = report.targets(self.ratios(bw), {})
        row = [t for t in rows if "bandwidth" in t["target"]]
        self.assertEqual(len(row), 1)
        self.assertEqual(row[0]["limit"], 1.3)
        return row[0]["verdict"]

    def test_target_pass_miss_and_not_measured(self):
        self.assertEqual(self.verdict(1.25), "PASS")
        self.assertEqual(self.verdict(1.31), "MISS")
        self.assertEqual(self.verdict(NAN), "n/a")

    def test_rows_only_when_measured(self):
        self.assertEqual(report.bandwidth_rows({"academy.ADD": st_of(5.0)}, {}), [])
        st = {"academy-bw.ADD": st_of(6.0), "academy.ADD": st_of(5.0),
              "academy-bw.DEL": st_of(24.0), "academy.DEL": st_of(20.0)}
        r = {"academy_ADD_bw_vs_plain": 1.2, "academy_ADD_bw_vs_plain_paired": 1.1,
             "academy_DEL_bw_vs_plain": 1.2, "academy_DEL_bw_vs_plain_paired": 1.3}
        rows = report.bandwidth_rows(st, r)
        self.assertIn("| ADD | 6.00 (6.00–6.00) | 5.00 (5.00–5.00) | **1.20** | 1.10 |", rows)


class ScalingDel(unittest.TestCase):
    def test_last_point_over_first(self):
        sc = {"academy": [{"held": 0, "del_median": 20.0}, {"held": 1000, "del_median": 21.0},
                          {"held": 32000, "del_median": 25.0}]}
        d = report.scaling_del(sc)
        self.assertAlmostEqual(d["ratio"], 1.25)
        text = "\n".join(report.scaling_del_line(sc))
        self.assertIn("20.0 at 0, 21.0 at 1,000, 25.0 at 32,000 held", text)
        self.assertIn("**1.25x**", text)

    def test_one_point_is_not_judged_and_errors_are_shown(self):
        self.assertIsNone(report.scaling_del({"academy": [{"held": 0, "del_median": 20.0}]}))
        lines = report.scaling_del_line({}, ["academy resident ADD: rc=1"])
        self.assertTrue(any("resident ADD" in l for l in lines))
