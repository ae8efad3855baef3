"""From raw samples to the figures that matter: medians, ratios, targets, and the
markdown table the README includes."""

import statistics

# The issue's targets. Informational: printed as PASS/MISS, never asserted.
ADD_VS_REFERENCE = 0.35
RSS_VS_REFERENCE = 0.75
SCALING_32K_VS_EMPTY = 2.0
DEL_VS_FLOOR = 1.15
BANDWIDTH_VS_PLAIN = 1.3


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def stats(samples: list, key: str = "wall_ms") -> dict:
    """median/min/max of the successful samples, and how many failed."""
    good = [s for s in samples if s.get("rc", 0) == 0 and s.get("ok", True)]
    xs = [s[key] for s in good]
    out = {"n": len(xs), "failures": len(samples) - len(good)}
    if xs:
        out.update(median=median(xs), min=min(xs), max=max(xs))
    return out


def summarize(results: dict) -> dict:
    series = results["cycles"]["series"]
    s = {name: stats(samples) for name, samples in series.items()}
    for name, samples in series.items():
        if "maxrss_kib" in (samples[0] if samples else {}):
            s[name]["rss"] = stats(samples, "maxrss_kib")
            s[name]["cpu"] = stats(
                [dict(x, cpu_ms=x["user_ms"] + x["sys_ms"]) for x in samples], "cpu_ms")
            s[name]["faults"] = stats(samples, "faults")
            s[name]["user"] = stats(samples, "user_ms")
            s[name]["sys"] = stats(samples, "sys_ms")

    def ratio(a, b, key="median"):
        try:
            return s[a][key] / s[b][key]
        except (KeyError, ZeroDivisionError):
            return float("nan")

    ratios = {
        "ADD": ratio("academy.ADD", "reference.ADD"),
        "CHECK": ratio("academy.CHECK", "reference.CHECK"),
        "DEL": ratio("academy.DEL", "reference.DEL"),
        "ADD_masq": ratio("academy-masq.ADD", "reference-masq.ADD"),
        "DEL_masq": ratio("academy-masq.DEL", "reference-masq.DEL"),
        "academy_ADD_masq_vs_plain": ratio("academy-masq.ADD", "academy.ADD"),
        "reference_ADD_masq_vs_plain": ratio("reference-masq.ADD", "reference.ADD"),
        "rss_peak": _rss_ratio(s, "max"),
        "rss_median": _rss_ratio(s, "median"),
        "academy_DEL_vs_floor": ratio("academy.DEL", "floor.del_bare"),
        "reference_DEL_vs_floor": ratio("reference.DEL", "floor.del_bare"),
        "academy_DEL_vs_wired_floor": ratio("academy.DEL", "floor.del_wired"),
        "reference_DEL_vs_wired_floor": ratio("reference.DEL", "floor.del_wired"),
        "academy_ADD_vs_ip_floor": ratio("academy.ADD", "floor.add_ip"),
        "reference_ADD_vs_ip_floor": ratio("reference.ADD", "floor.add_ip"),
        "academy_ADD_vs_c_floor": ratio("academy.ADD", "floor.add_c"),
        "reference_ADD_vs_c_floor": ratio("reference.ADD", "floor.add_c"),
        "academy_ADD_bw_vs_plain": ratio("academy-bw.ADD", "academy.ADD"),
        "academy_DEL_bw_vs_plain": ratio("academy-bw.DEL", "academy.DEL"),
        "academy_ADD_bw_vs_plain_paired": paired_ratio(series, "academy-bw.ADD", "academy.ADD"),
        "academy_DEL_bw_vs_plain_paired": paired_ratio(series, "academy-bw.DEL", "academy.DEL"),
    }
    scaling = scaling_stats(results["scaling"])
    ratios["academy_scaling_DEL_last_vs_first"] = (scaling_del(scaling) or {}).get(
        "ratio", float("nan"))
    out = {"stats": s, "ratios": ratios, "scaling": scaling,
           "targets": targets(ratios, scaling), "versus": versus_summary(results, s),
           "lifetime": lifetime_summary(s)}
    if results.get("bursts"):
        out["bursts"] = bursts_summary(results["bursts"])
    if results.get("solo"):
        out["solo"] = solo_summary(results["solo"])
    out["issue_targets"] = issue_targets(dict(results, summary=out))
    return out


def paired_ratio(series: dict, a: str, b: str) -> float:
    """The median of a/b cycle by cycle (the two series are recorded in the same cycles,
    one sample each per cycle), over the cycles where both succeeded."""
    pairs = [(x_["wall_ms"], y["wall_ms"]) for x_, y in zip(series.get(a, []), series.get(b, []))
             if x_.get("rc", 0) == 0 and y.get("rc", 0) == 0 and y["wall_ms"] > 0]
    return median([p / q for p, q in pairs])


def _rss_ratio(s, key):
    try:
        return s["academy.ADD"]["rss"][key] / s["reference.ADD"]["rss"][key]
    except (KeyError, ZeroDivisionError):
        return float("nan")


def scaling_stats(scaling: dict) -> dict:
    out = {}
    for point in scaling["points"]:
        for who, runs in point["runs"].items():
            st = stats(runs, "cycle_ms")
            st["add_median"] = stats(runs, "add_ms").get("median")
            st["del_median"] = stats(runs, "del_ms").get("median")
            st["held"] = point["held"]
            out.setdefault(who, []).append(st)
    out["stopped"] = scaling["points"][-1]["stopped"] if scaling["points"] else {}
    return out


def targets(ratios: dict, scaling: dict) -> list:
    acad = [p for p in scaling.get("academy", []) if "median" in p]
    if len(acad) >= 2 and acad[0]["held"] == 0:
        grow = acad[-1]["median"] / acad[0]["median"]
        grow_name = f"academy cycle at {acad[-1]['held']:,} held ≤ {SCALING_32K_VS_EMPTY}x at 0 held"
    else:
        grow, grow_name = float("nan"), "academy cycle at 32k held ≤ 2x at 0 held"
    rows = [
        ("ADD median ≤ 0.35 x reference's", ratios["ADD"], ADD_VS_REFERENCE),
        ("peak RSS ≤ 0.75 x reference's", ratios["rss_peak"], RSS_VS_REFERENCE),
        (grow_name, grow, SCALING_32K_VS_EMPTY),
        ("DEL median ≤ 1.15 x floor (ip link del, veth with peer in a netns)",
         ratios["academy_DEL_vs_floor"], DEL_VS_FLOOR),
        ("ADD with ipMasq ≤ 0.25 x reference's with ipMasq", ratios["ADD_masq"], 0.25),
        ("DEL with ipMasq ≤ 0.5 x reference's with ipMasq", ratios["DEL_masq"], 0.5),
        ("academy ADD with ipMasq ≤ 1.3 x without", ratios["academy_ADD_masq_vs_plain"], 1.3),
        (f"academy ADD with a bandwidth limit ≤ {BANDWIDTH_VS_PLAIN} x ADD without",
         ratios.get("academy_ADD_bw_vs_plain", float("nan")), BANDWIDTH_VS_PLAIN),
    ]
    return [{"target": name, "value": v, "limit": lim,
             "verdict": "PASS" if v <= lim else ("MISS" if v == v else "n/a")}
            for name, v, lim in rows]


# ---- markdown ------------------------------------------------------------------------


def ms(x) -> str:
    if x is None or x != x:
        return "–"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def cell(st: dict | None, fmt=ms) -> str:
    if not st or "median" not in st:
        return "–"
    text = f"{fmt(st['median'])} ({fmt(st['min'])}–{fmt(st['max'])})"
    if st.get("failures"):
        text += f", **{st['failures']} failed**"
    return text


def ms0(v) -> str:
    return "–" if v is None or v != v else f"{v:.0f}"


def x(v) -> str:
    return "–" if v is None or v != v else f"{v:.2f}"


def _mem(meminfo: str) -> str:
    try:
        return f"{int(meminfo.split()[0]) / 2**20:.0f} GiB RAM"
    except (ValueError, IndexError):
        return meminfo


def kib(v) -> str:
    return f"{v / 1024:.1f} MiB"


def markdown(results: dict, summary: dict, chart_path: str | None) -> str:
    m, pv, st = results["machine"], results["provenance"], summary["stats"]
    r = summary["ratios"]
    n = results["settings"]["cycles"]
    lines = [
        "## Benchmark: academy vs the reference bridge + host-local",
        "",
        f"Run {m['date_utc']} on {m['cpu']}, {m['nproc']} cores, {_mem(m['memory'])}, "
        f"kernel {m['kernel']}, Debian {m['debian']} (shared machine; load "
        f"{m['loadavg_start'][0]:.2f} at start, {m.get('loadavg_end', [float('nan')])[0]:.2f} at end). "
        f"academy {pv['git_commit']}{' + uncommitted src' if pv['git_dirty_src'] else ''} "
        f"(release binary, {pv['academy_size'] / 1e6:.1f} MB), reference "
        f"{pv['reference_version']}. `make bench` ({results['machine'].get('runtime_s', '?')} s).",
        "",
        load_line(m),
        "",
        f"Both invoked directly as a runtime does (CNI_* environment, config on stdin, "
        f"prevResult to CHECK and DEL), {n} cycles interleaved with a rotating order, "
        "each network holding one resident attachment throughout (steady state: no ADD "
        "is a network's first, no DEL its last). "
        "Wall time in ms from spawn to reap: median (min–max). The machine is shared and "
        "noisy: the ratios, taken in the same run, are the result, not the absolutes.",
        "",
        "| | academy | reference | academy / reference |",
        "| --- | --- | --- | --- |",
    ]
    for op in ("ADD", "CHECK", "DEL"):
        lines.append(f"| {op} | {cell(st.get('academy.' + op))} | "
                     f"{cell(st.get('reference.' + op))} | **{x(r[op])}** |")
    for op in ("ADD", "DEL"):
        lines.append(f"| {op} with ipMasq | {cell(st.get('academy-masq.' + op))} | "
                     f"{cell(st.get('reference-masq.' + op))} | **{x(r[op + '_masq'])}** |")
    a_add, r_add = st.get("academy.ADD", {}), st.get("reference.ADD", {})
    if "rss" in a_add and "rss" in r_add:
        rss_note = "" if pv["clean_rss"] else " (polluted: spawned from Python)"
        lines.append(f"| peak RSS over the ADDs{rss_note} | {kib(a_add['rss']['max'])} | "
                     f"{kib(r_add['rss']['max'])} | **{x(r['rss_peak'])}** |")
    sc = results["syscalls"]
    for op in ("ADD", "DEL"):
        a = sc["academy"]["requests"][op]
        b = sc["reference"]["requests"][op]
        lines.append(f"| setns / netlink round trips per {op} | {a['setns']} / "
                     f"{a['netlink_requests']} | {b['setns']} / {b['netlink_requests']} | |")
    for op in ("ADD", "DEL"):
        a = sc["academy"]["summary"][op]["total_calls"]
        b = sc["reference"]["summary"][op]["total_calls"]
        lines.append(f"| syscalls per {op} (strace -c -f) | {a} | {b} | {x(a / b)} |")
    lines += burst_rows(results["burst"])
    lines += scaling_rows(summary["scaling"])
    lines += health_rows(results)
    lines += scaling_del_line(summary["scaling"], results["scaling"].get("errors"))
    lines += bandwidth_rows(st, r)
    if summary.get("lifetime") and not summary["lifetime"]["with_baseline"]:
        lines += lifetime_rows(summary["lifetime"], results["cycles"].get("lifetime_cycles"))
    lines += ["", "Targets (informational; judged on the ratios above):", "",
              "| target | measured | |", "| --- | --- | --- |"]
    for t in summary["targets"]:
        lines.append(f"| {t['target']} | {x(t['value'])} | **{t['verdict']}** |")
    lines += floor_rows(st, r, sc)
    lines += time_rows(st, sc)
    if chart_path:
        lines += ["", f"![ADD+DEL cycle time against addresses held]({chart_path})"]
    return "\n".join(lines) + "\n"


def load_line(m: dict) -> str:
    """The 1-minute load average as each phase began, and at the end (2 cores: above 2,
    something waited for a CPU)."""
    phases = m.get("loadavg_phases", {})
    parts = [f"{name} {v[0]:.2f}" for name, v in phases.items()]
    if "loadavg_end" in m:
        parts.append(f"end {m['loadavg_end'][0]:.2f}")
    return ("Load average (1 min) as each phase began: " + ", ".join(parts) + "."
            if parts else "")


def health_rows(results: dict) -> list:
    """Failures and debris: a fast plugin that fails or leaks is not fast."""
    cyc = results["cycles"]
    left = {k: v for k, v in cyc["leftovers"].items() if any(v.values())}
    rows = [""]
    if cyc["errors"]:
        rows.append(f"**{len(cyc['errors'])} failed invocations in the cycles**, first: "
                    f"`{cyc['errors'][0][:300]}`")
    else:
        rows.append("Every invocation in the cycles succeeded (ADD results checked: "
                    "an address was reported).")
    rows.append("")
    if left:
        rows.append(f"**Left behind after the cycles:** {left}")
    else:
        rows.append("Nothing left behind after the cycles: no port on either bridge, "
                    "no reservation in either store.")
    return rows


def burst_rows(burst: dict) -> list:
    rows = []
    n = burst["parallel"]
    for op in ("ADD", "DEL"):
        cells = {}
        for who, rounds in burst["rounds"].items():
            walls = [rd[op]["wall_ms"] for rd in rounds]
            fails = sum(rd[op]["failures"] for rd in rounds)
            extra = ""
            if op == "ADD":
                distinct = min(rd["distinct_addresses"] for rd in rounds)
                extra = f", {distinct} distinct addresses"
            else:
                left = sum(rd["leftover_ports"] + rd["leftover_reservations"] for rd in rounds)
                extra = f", {left} left behind"
            rounds_note = f"median of {len(rounds)} rounds, " if len(rounds) > 1 else ""
            cells[who] = (median(walls), f"{ms(median(walls))} ({rounds_note}"
                                         f"{fails} failed{extra})")
        ratio = cells["academy"][0] / cells["reference"][0]
        rows.append(f"| {n} parallel {op}s, total wall | {cells['academy'][1]} | "
                    f"{cells['reference'][1]} | {x(ratio)} |")
    return rows


def scaling_rows(sc: dict) -> list:
    rows = []
    ref = {p["held"]: p for p in sc.get("reference", [])}
    for p in sc.get("academy", []):
        rp = ref.get(p["held"])
        ratio = p["median"] / rp["median"] if rp and "median" in rp else float("nan")
        ref_cell = (f"{cell(rp)}; ADD {ms(rp['add_median'])}, DEL {ms(rp['del_median'])}"
                    if rp else "not run (" + sc["stopped"].get("reference", "") + ")")
        rows.append(f"| ADD+DEL cycle, {p['held']:,} of the /16 held | {cell(p)}; ADD "
                    f"{ms(p['add_median'])}, DEL {ms(p['del_median'])} | {ref_cell} | {x(ratio)} |")
    return rows


def scaling_del(sc: dict) -> dict | None:
    """academy's DEL medians per point of the scaling series and the last point's over
    the first's (a DEL that reads nothing but its own entries stays flat)."""
    pts = [p for p in sc.get("academy", []) if p.get("del_median") is not None]
    if len(pts) < 2:
        return None
    return {"points": [(p["held"], p["del_median"]) for p in pts],
            "ratio": _div(pts[-1]["del_median"], pts[0]["del_median"])}


def scaling_del_line(sc: dict, errors: list | None = None) -> list:
    d = scaling_del(sc)
    lines = []
    if d:
        pts = ", ".join(f"{ms(v)} at {h:,}" for h, v in d["points"])
        lines += ["", f"Scaling, academy's DEL alone (medians, ms): {pts} held; "
                      f"{d['points'][-1][0]:,} / {d['points'][0][0]:,} held: "
                      f"**{x(d['ratio'])}x**. Each network of the series keeps one resident "
                      "attachment throughout, so no point's ADD is the network's first nor "
                      "its DEL the last."]
    if errors:
        lines += ["", f"**Scaling phase problems:** {'; '.join(e[:200] for e in errors[:3])}"]
    return lines


def floor_drift(sc: dict) -> str | None:
    """None when the C floor made academy's ADD requests (as many netlink round trips and
    setns calls, both traced in this run) or did not run; else what differs. The floor is a
    hand-written copy of academy's requests: this keeps the copy honest."""
    floor = sc.get("nlfloor", {}).get("requests", {}).get("ADD")
    ours = sc.get("academy", {}).get("requests", {}).get("ADD")
    if not floor or not ours:
        return None
    keys = ("netlink_requests", "setns")
    if all(floor.get(k) == ours.get(k) for k in keys):
        return None
    return (f"DRIFT: the C floor (bench/native/nlfloor.c) made {floor.get('netlink_requests')} "
            f"netlink round trips and {floor.get('setns')} setns per ADD, academy "
            f"{ours.get('netlink_requests')} and {ours.get('setns')}: make nlfloor.c send "
            "academy's requests again, or its ratio compares unlike things")


def floor_rows(st: dict, r: dict, sc: dict) -> list:
    nlf = sc.get("nlfloor", {}).get("requests", {}).get("ADD")
    c_note = (f"{nlf['setns']} setns, {nlf['netlink_requests']} round trips" if nlf else "")
    rows = [
        "",
        "Kernel floors, measured in the same cycles:",
        "",
        "| floor | median (min–max) | academy / floor | reference / floor |",
        "| --- | --- | --- | --- |",
        f"| DEL: `ip link del` of a veth whose peer is in a netns | {cell(st.get('floor.del_bare'))} | "
        f"**{x(r['academy_DEL_vs_floor'])}** | {x(r['reference_DEL_vs_floor'])} |",
        f"| DEL: the same, veth wired like a plugin's (on the bridge, up, addressed) | "
        f"{cell(st.get('floor.del_wired'))} | {x(r['academy_DEL_vs_wired_floor'])} | "
        f"{x(r['reference_DEL_vs_wired_floor'])} |",
        f"| ADD: `ip -batch` (veth up on the bridge, alias) + `ip -n NS -batch` (up, address, route) | "
        f"{cell(st.get('floor.add_ip'))} | **{x(r['academy_ADD_vs_ip_floor'])}** | "
        f"{x(r['reference_ADD_vs_ip_floor'])} |",
    ]
    if st.get("floor.add_c"):
        rows.append(
            f"| ADD: one C process making academy's netlink requests ({c_note}) | "
            f"{cell(st.get('floor.add_c'))} | **{x(r['academy_ADD_vs_c_floor'])}** | "
            f"{x(r['reference_ADD_vs_c_floor'])} |")
    rows.append(f"| any process: spawn and reap `/bin/true` | {cell(st.get('floor.spawn'))} | | |")
    drift = floor_drift(sc)
    if drift:
        rows += ["", f"**{drift}**"]
    return rows


def time_rows(st: dict, sc: dict) -> list:
    """Where an ADD's time goes: the same figures for the plugins and the floors."""
    cols = [("academy", "academy.ADD"), ("reference", "reference.ADD"),
            ("C floor", "floor.add_c"), ("/bin/true", "floor.spawn")]
    keys = {"academy": "academy", "reference": "reference", "C floor": "nlfloor",
            "/bin/true": "true"}
    cols = [(c, series) for c, series in cols if series in st and keys[c] in sc]

    def fig(col, tool, field):
        try:
            v = sc[keys[col]][tool]["ADD"][field]
        except KeyError:
            return "–"
        return f"{v:.2f}" if isinstance(v, float) and v != int(v) else f"{v:.0f}"

    def row(label, fn):
        return f"| {label} | " + " | ".join(fn(c, s_) for c, s_ in cols) + " |"

    rows = [
        "",
        "Where an ADD's time goes (wall and CPU: medians of the cycles above; the rest: "
        "one traced ADD each, counts only):",
        "",
        "| per ADD | " + " | ".join(c for c, _ in cols) + " |",
        "| --- |" + " --- |" * len(cols),
        row("wall ms", lambda c, s_: ms(st[s_]["median"])),
        row("CPU ms, user+sys", lambda c, s_: ms(st[s_].get("cpu", {}).get("median"))),
        row("peak RSS", lambda c, s_: kib(st[s_]["rss"]["max"]) if "rss" in st[s_] else "–"),
        row("page faults (median)", lambda c, s_: ms0(st[s_].get("faults", {}).get("median"))),
        row("context switches (perf stat)", lambda c, s_: fig(c, "perf", "context-switches")),
        row("syscalls (strace -c -f)", lambda c, s_: fig(c, "summary", "total_calls")),
        row("processes + threads", lambda c, s_: fig(c, "requests", "tasks")),
        row("netlink round trips", lambda c, s_: fig(c, "requests", "netlink_requests")),
        row("setns", lambda c, s_: fig(c, "requests", "setns")),
        row("new files (O_EXCL / O_TMPFILE)", lambda c, s_: fig(c, "requests", "new_files")),
    ]
    fs = [(k, st.get(f"fs.create.{k}")) for k in ("academy", "reference")]
    fs_text = ", ".join(f"{k}'s {cell(v)}" for k, v in fs if v)
    if fs_text:
        rows += ["", f"One new file (create, write, close) in each store's directory, "
                     f"in-process, ms: {fs_text}."]
    rows.append("")
    for who in ("academy", "reference"):
        for op in ("ADD", "DEL"):
            calls = sc.get(who, {}).get("summary", {}).get(op, {}).get("calls", {})
            if calls:
                top = ", ".join(f"{name} {c['calls']}" for name, c in list(calls.items())[:10])
                rows.append(f"- {who} {op}, most frequent syscalls: {top}")
    rows += above_floor(sc)
    return rows


def above_floor(sc: dict) -> list:
    """academy's ADD against the C floor's, item by item (trace.ITEMS): what academy
    spends that one C process making the same netlink requests does not."""
    try:
        ours = sc["academy"]["items"]["ADD"]["items"]
        floor = sc["nlfloor"]["items"]["ADD"]["items"]
    except KeyError:
        return []
    rows = ["", "Above the C floor, item by item (one ADD each under `strace -f -yy -T`; "
                "traced µs are inflated by strace and only rank the items):", "",
            "| per ADD | academy syscalls | C floor syscalls | above the floor | academy traced µs |",
            "| --- | --- | --- | --- | --- |"]
    total = [0, 0]
    for item, a in ours.items():
        f = floor.get(item, {"calls": 0, "us": 0.0})
        if not a["calls"] and not f["calls"]:
            continue
        total[0] += a["calls"]
        total[1] += f["calls"]
        rows.append(f"| {item} | {a['calls']} | {f['calls']} | {a['calls'] - f['calls']:+d} | "
                    f"{a['us']:.0f} |")
    rows.append(f"| total | {total[0]} | {total[1]} | {total[0] - total[1]:+d} | |")
    return rows


# ---- academy vs its baseline (--baseline) -------------------------------------------

# Issue 35 item 7: ADD, CHECK and DEL of each shape no worse than the baseline's in the
# same run. GC and restore rows are reported only.
VERSUS_LIMIT = 1.05
VERSUS_SHAPES = [("", ""), ("-masq", " with ipMasq"), ("-port", " with a published port"),
                 ("-podman", ", podman's chain converted")]
VERSUS_OPS = [(f"{op}{label}", f"current{key}.{op}", f"baseline{key}.{op}")
              for key, label in VERSUS_SHAPES for op in ("ADD", "CHECK", "DEL")]
VERSUS_KEYS = [f"{who}{key}" for who in ("current", "baseline") for key, _ in VERSUS_SHAPES]


def _ratio_of(a: dict | None, b: dict | None) -> float:
    try:
        return a["median"] / b["median"]
    except (KeyError, TypeError, ZeroDivisionError):
        return float("nan")


def _failed(label: str, st: dict | None) -> list:
    return [f"{label}: {st['failures']} failed"] if st and st.get("failures") else []


def versus_row(what: str, cur: dict | None, base: dict | None,
               limit: float | None = None, faults: list | None = None) -> dict:
    """One row of the table: the medians' ratio, and against `limit` (None: reported
    only) its verdict, a MISS when either side had failures or `faults`."""
    ratio = _ratio_of(cur, base)
    faults = _failed("current", cur) + _failed("baseline", base) + list(faults or [])
    return {"what": what, "current": cur, "baseline": base, "ratio": ratio, "limit": limit,
            "verdict": verdict(ratio, limit, faults) if limit else None, "faults": faults}


def versus_summary(results: dict, st: dict) -> dict | None:
    """current / baseline: the medians' ratios of the cycles' series (each against
    VERSUS_LIMIT), of GC (valid: every attachment listed, nothing to remove; stale: none
    listed, their netns gone) and of the restore phase (a restore after the table's
    delete, GC valid and stale, at its own size). None without a baseline in the run."""
    gc, rs = results.get("gc"), results.get("restore")
    if not gc and not rs and not any(k.startswith("baseline") for k in st):
        return None
    left = results.get("cycles", {}).get("leftovers", {})

    def left_by(cur: str, base: str) -> list:
        """What the cycles left on this row's two networks (ports, reservations)."""
        keys = (cur.rsplit(".", 1)[0], base.rsplit(".", 1)[0])
        return [f"{k} left {dict((w, n) for w, n in left[k].items() if n)}"
                for k in keys if any((left.get(k) or {}).values())]

    rows = [versus_row(label, st.get(cur), st.get(base), VERSUS_LIMIT, left_by(cur, base))
            for label, cur, base in VERSUS_OPS]
    if gc:
        n = gc["attachments"]
        for kind, label in (("valid", f"GC, {n} attachments all valid (nothing to remove)"),
                            ("stale", f"GC, {n} stale attachments (netns gone; frees their "
                                      "addresses and nf_tables elements)")):
            rows.append(versus_row(label, stats(gc["runs"]["current"][kind]),
                                   stats(gc["runs"]["baseline"][kind])))
    if rs:
        n = rs["attachments"]
        for kind, label in (
                ("restore", f"restore of {n} attachments (`nft delete table inet academy` "
                            "in the node, then `academy restore --conf-dir`)"),
                ("gc_valid", f"GC, {n} attachments all valid (nothing to remove)"),
                ("gc_stale", f"GC, {n} stale attachments (netns gone)")):
            rows.append(versus_row(label, stats(rs["runs"]["current"][kind]),
                                   stats(rs["runs"]["baseline"][kind])))
    problems = list(gc.get("problems", [])) if gc else []
    problems += list(rs.get("problems", [])) if rs else []
    pb = put_back(rs)
    short = [f"{w}'s restores put back {p['min']} of the {p['attachments']} elements"
             for w, p in (pb or {}).items() if p["min"] < p["attachments"]]
    if not any("restore put back" in p for p in problems):  # baseline.py's own word
        problems += short
    return {"rows": rows, "problems": problems, "put_back": pb, "short": short,
            "ratios": {r["what"]: r["ratio"] for r in rows}}


def put_back(rs: dict | None) -> dict | None:
    """Per binary, what its restores put back: the fewest and most elements of the
    masquerade set over the restores, against the attachments."""
    if not rs:
        return None
    out = {}
    for w, runs in rs.get("put_back", {}).items():
        if runs:
            got = [r["masq_elements"] for r in runs]
            out[w] = {"restores": len(runs), "attachments": min(r["attachments"] for r in runs),
                      "min": min(got), "max": max(got)}
    return out


def lifetime_summary(st: dict) -> dict | None:
    """A network's first ADD and last DEL (timed on empty networks, before the cycles'
    residents came) against the cycles' ordinary ADD and DEL (a resident beside them):
    the current binary's and, with a baseline, the baseline's on the same kind of
    network. None when the run timed no first ADD."""
    if "current.ADD.first" in st:
        pairs = [("", "current", "baseline"), (" with ipMasq", "current-masq", "baseline-masq")]
    elif "academy.ADD.first" in st:
        pairs = [("", "academy", None), (" with ipMasq", "academy-masq", None)]
    else:
        return None
    rows = []
    for suffix, cur, base in pairs:
        for op, which, word in (("ADD", "ADD.first", "first"), ("DEL", "DEL.last", "last")):
            first, ordinary = st.get(f"{cur}.{which}"), st.get(f"{cur}.{op}")
            b_first = st.get(f"{base}.{which}") if base else None
            b_ordinary = st.get(f"{base}.{op}") if base else None
            rows.append({"what": f"a network's {word} {op}{suffix}", "first": first,
                         "ordinary": ordinary, "baseline": b_first,
                         "vs_ordinary": _ratio_of(first, ordinary),
                         "vs_baseline": _ratio_of(first, b_first),
                         "baseline_vs_ordinary": _ratio_of(b_first, b_ordinary)})
    return {"current": pairs[0][1], "with_baseline": pairs[0][2] is not None, "rows": rows,
            "ratios": {r["what"]: {k: r[k] for k in ("vs_ordinary", "vs_baseline",
                                                     "baseline_vs_ordinary")} for r in rows}}


def lifetime_rows(lt: dict | None, cycles_n: int | None = None) -> list:
    """Its own small table: what a network's first ADD and last DEL cost, which the
    cycles (a resident on every network) no longer include."""
    if not lt:
        return []
    n = f"{cycles_n} " if cycles_n else ""
    lines = [
        "",
        "A network's first ADD and last DEL: academy makes a network's own nf_tables "
        "objects (masquerade rule and sets, MAC filter, FORWARD accepts, hairpin mark) with "
        "its first attachment and deletes them with its last, so the ADD that finds a network "
        "empty and the DEL that leaves it empty do more than an ordinary one. The cycles "
        "above keep a resident attachment on every network and so measure ordinary ADDs and "
        f"DELs; these {n}cycles, run before the residents came, on the same networks while "
        "still empty, time the other kind. Medians (min–max), ms.",
        "",
    ]
    if lt["with_baseline"]:
        lines += ["| | current | current, ordinary (resident beside) | first or last / ordinary "
                  "| baseline, same on an empty network | current / baseline |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in lt["rows"]:
            lines.append(f"| {r['what']} | {cell(r['first'])} | {cell(r['ordinary'])} | "
                         f"**{x(r['vs_ordinary'])}** | {cell(r['baseline'])} (its ordinary: "
                         f"{x(r['baseline_vs_ordinary'])}x) | **{x(r['vs_baseline'])}** |")
    else:
        lines += ["| | academy | academy, ordinary (resident beside) | first or last / ordinary |",
                  "| --- | --- | --- | --- |"]
        for r in lt["rows"]:
            lines.append(f"| {r['what']} | {cell(r['first'])} | {cell(r['ordinary'])} | "
                         f"**{x(r['vs_ordinary'])}** |")
    return lines


def bandwidth_rows(st: dict, r: dict) -> list:
    """academy's ADD and DEL with a bandwidth limit against the plain network's, in the
    same cycles."""
    if "academy-bw.ADD" not in st:
        return []
    lines = [
        "",
        "academy with a bandwidth limit (the `bandwidth` capability, runtimeConfig 8 Mbit/s "
        "each way with 80 kbit buckets: a TBF on the host veth, an ifb with its own TBF; "
        "docs/bandwidth.md), its own network on the host with a resident pod, in the same "
        "cycles as the plain network it is compared with. Medians (min–max), ms; the ratio "
        "of the medians, and the median of the cycle-by-cycle ratios.",
        "",
        "| | with the limit | without (the plain network above) | with / without | "
        "cycle by cycle |",
        "| --- | --- | --- | --- | --- |",
    ]
    for op in ("ADD", "DEL"):
        lines.append(f"| {op} | {cell(st.get('academy-bw.' + op))} | "
                     f"{cell(st.get('academy.' + op))} | **{x(r.get(f'academy_{op}_bw_vs_plain'))}** | "
                     f"{x(r.get(f'academy_{op}_bw_vs_plain_paired'))} |")
    return lines


def _built_from(pv: dict) -> str:
    head, src = pv.get("git_commit", "?"), pv.get("src_commit")
    return head if not src or src == head else f"{head}, src as of {src}"


def versus_markdown(results: dict) -> str:
    v = results.get("summary", {}).get("versus")
    if not v:
        return ""
    pv = results.get("provenance", {})
    left = {k: x_ for k, x_ in results["cycles"].get("leftovers", {}).items()
            if k.startswith(("current", "baseline")) and (x_["ports"] or x_["reservations"])}
    errors = [e for e in results["cycles"].get("errors", [])
              if any(f" {k}." in e for k in VERSUS_KEYS)]
    lines = [
        "",
        "### academy vs its baseline",
        "",
        f"The current binary ({_built_from(pv)}, sha256 "
        f"{pv.get('academy_sha256', '?')[:12]}) against the baseline "
        f"{pv.get('baseline_label', '?')} (sha256 {str(pv.get('baseline_sha256', '?'))[:12]}), "
        "each on a private node of its own with its own networks, bridges, subnets and "
        "stores, in the same interleaved cycles as the table above (a resident attachment "
        "on each network: ordinary ADDs and DELs). The shapes: plain, ipMasq, one published "
        "TCP port (the portMappings capability; the resident publishes its own), and podman's "
        "generated chain after the current binary's `academy convert` (one academy entry: "
        "ipMasq, hairpinMode, host-local ranges, portMappings; the same entry on both, with a "
        "port). Then GC of a network on each, rounds alternating, and at a larger size a "
        "restore after the node's academy table was deleted, and GC again. Medians "
        "(min–max), ms. Target: current / baseline at most "
        f"{VERSUS_LIMIT} for each ADD, CHECK and DEL (a failure or a leftover on either "
        "network is a MISS); the GC and restore rows are reported only.",
        "",
        "| | current | baseline | current / baseline | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in v["rows"]:
        goal = f"<= {r['limit']} {r['verdict']}" if r.get("limit") else "-"
        lines.append(f"| {r['what']} | {cell(r['current'])} | {cell(r['baseline'])} | "
                     f"**{x(r['ratio'])}** | {goal} |")
    lines.append("")
    pb = v.get("put_back")
    if pb:
        lines.append("What each restore put back (elements of the GC network's masquerade "
                     "set, one per live attachment): " + "; ".join(
                         f"{w}: {p['min']}" + (f" to {p['max']}" if p["max"] != p["min"] else "")
                         + f" of {p['attachments']}, in each of {p['restores']} restores"
                         for w, p in pb.items()) + ".")
        lines.append("")
    problems = v["problems"] + errors[:5]
    if problems:
        lines.append(f"**{len(problems)} problems:** " + "; ".join(f"`{p[:300]}`" for p in problems))
    else:
        lines.append("Every invocation of both succeeded; every GC removed exactly the stale "
                     "(nothing when all were valid; every reservation, veth and nf_tables "
                     "element when none was)" + ("; every restore put back the masquerade "
                     "set's elements of every live attachment." if pb and not v.get("short")
                     else "."))
    if left:
        lines += ["", f"**Left behind after the cycles:** {left}"]
    lt = results.get("summary", {}).get("lifetime")
    if lt and lt["with_baseline"]:
        lines += lifetime_rows(lt, results["cycles"].get("lifetime_cycles"))
    return "\n".join(lines) + "\n"


# ---- bursts on a node (bursts.py) ------------------------------------------------------

ISSUE_BURST_110 = 0.3
ISSUE_CROWDED_250 = 1.2


def side_faults(burst: dict) -> list:
    """What went wrong on one side of one burst: failed ADDs or DELs, fewer distinct
    addresses than pods, anything left on the node after the DELs."""
    n = burst["parallel"]
    out = []
    for op in ("ADD", "DEL"):
        if burst[op]["failures"]:
            out.append(f"{burst[op]['failures']} {op}s failed")
        if burst[op].get("killed_at_deadline"):
            out.append(f"{burst[op]['killed_at_deadline']} processes killed at the deadline")
    distinct = burst["ADD"].get("distinct_addresses", n)
    if distinct != n:
        out.append(f"{distinct} distinct addresses for {n} pods")
    left = {k: v for k, v in burst["left"].items() if v}
    if left:
        out.append("left: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in left.items()))
    return out


def bursts_summary(b: dict) -> dict:
    """Per size: academy / reference of the ADDs' and DELs' total walls and of both
    together; each side's faults; the crowded / empty ADD medians per side."""
    out = {"sizes": {}, "crowded": {}}
    for size, sides in b["bursts"].items():
        aca, ref = sides.get("academy"), sides.get("reference")
        entry = {"faults": {k: side_faults(v) for k, v in sides.items()}}
        if aca and ref:
            for op in ("ADD", "DEL"):
                entry[op] = _div(aca[op]["wall_ms"], ref[op]["wall_ms"])
            entry["total"] = _div(aca["ADD"]["wall_ms"] + aca["DEL"]["wall_ms"],
                                  ref["ADD"]["wall_ms"] + ref["DEL"]["wall_ms"])
        out["sizes"][size] = entry
        for side, burst in sides.items():
            c = burst.get("crowded")
            if not c:
                continue
            adds = {k: [r["add_ms"] for r in runs if r["ok"]] for k, runs in c["runs"].items()}
            crowded, empty = median(adds.get("burst", [])), median(adds.get("empty", []))
            entry_c = {
                "pods": int(size), "cycles": len(adds.get("burst", [])),
                "crowded_ms": crowded, "empty_ms": empty, "ratio": _div(crowded, empty),
                "failures": sum(not r["ok"] for runs in c["runs"].values() for r in runs),
                "stopped": c.get("stopped"),
            }
            if "one" in adds:
                entry_c["one_ms"] = median(adds["one"])
                entry_c["ratio_vs_one"] = _div(crowded, entry_c["one_ms"])
            out["crowded"][side] = entry_c
    return out


def _div(a, b) -> float:
    try:
        return a / b
    except (TypeError, ZeroDivisionError):
        return float("nan")


def verdict(value: float, limit: float, faults: list | None = None) -> str:
    """PASS/MISS of a ratio against its limit; a fast result with faults is no PASS."""
    if value != value:
        return "n/a"
    if faults:
        return "MISS"
    return "PASS" if value <= limit else "MISS"


def issue_targets(results: dict) -> list:
    """The issue's targets (26 item 8, and the chains' earlier ones) as rows of
    {target, value, limit, verdict, note}."""
    rows = []
    bs = results.get("summary", {}).get("bursts")
    if bs is not None:
        e = bs["sizes"].get("110")
        if e:
            faults = e["faults"].get("academy", [])
            ref_faults = e["faults"].get("reference", [])
            note = "; ".join(faults + [f"reference: {f}" for f in ref_faults])
            v = verdict(e.get("ADD", float("nan")), ISSUE_BURST_110, faults)
            if ref_faults and v == "PASS":
                v = "n/a"  # the reference did not do the same work
            rows.append({"target": f"110 pods at once, ADD total wall ≤ {ISSUE_BURST_110}x "
                                   "the reference chain's", "value": e.get("ADD", float("nan")),
                         "limit": ISSUE_BURST_110, "verdict": v, "note": note})
        c = bs["crowded"].get("academy")
        if c and c["pods"] == 250:
            faults = [f"{c['failures']} failed"] if c["failures"] else []
            rows.append(crowded_target(c))
    ch = results.get("chains")
    if ch:
        import chains  # noqa: PLC0415 (its faults: residents, leftovers)
        faults = chains.faults(ch)
        for what, value, limit in (
                ("converted network ADD ≤ 0.10x podman's reference chain", ch["chain_ratio"]["ADD"], 0.10),
                ("converted network DEL ≤ 0.20x podman's reference chain", ch["chain_ratio"]["DEL"], 0.20),
                ("academy ADD with 3 port mappings ≤ 1.2x without", ch["three_vs_none"], 1.2)):
            rows.append({"target": what, "value": value, "limit": limit,
                         "verdict": verdict(value, limit, faults), "note": "; ".join(faults)})
    return rows


def crowded_target(c: dict) -> dict:
    """The 250-pods target on its literal reading, against an empty bridge (for academy
    the network's first ADD, which makes its nf_tables objects); beside it, not the
    target, the same against a bridge with one resident pod (an ordinary ADD)."""
    faults = [f"{c['failures']} failed"] if c["failures"] else []
    note = faults[:]
    if "ratio_vs_one" in c:
        note.append(f"against a bridge with one resident pod (ordinary ADD, not the target): "
                    f"{x(c['ratio_vs_one'])}x ({ms(c['crowded_ms'])} / {ms(c['one_ms'])})")
    return {"target": f"academy ADD with {c['pods']} pods on the bridge ≤ {ISSUE_CROWDED_250}x "
                      "ADD on an empty bridge (literal reading: the network's first ADD, "
                      f"{ms(c['crowded_ms'])} / {ms(c['empty_ms'])})",
            "value": c["ratio"], "limit": ISSUE_CROWDED_250,
            "verdict": verdict(c["ratio"], ISSUE_CROWDED_250, faults), "note": "; ".join(note)}


def _burst_cell(burst: dict, op: str) -> str:
    n = burst["parallel"]
    o = burst[op]
    text = f"{ms(o['wall_ms'])} ({o['failures']} failed"
    if op == "ADD":
        text += f", {o.get('distinct_addresses', 0)} distinct addresses of {n}"
    else:
        left = {k: v for k, v in burst["left"].items() if v}
        text += ("; left: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in left.items())
                 if left else "; nothing left")
    if o.get("killed_at_deadline"):
        text += f"; {o['killed_at_deadline']} killed at the deadline"
    text += f"; per pod {ms(o['per_pod_ms']['median'])}, max {ms(o['per_pod_ms']['max'])})"
    if o["failures"] or (op == "ADD" and o.get("distinct_addresses") != n) or (
            op == "DEL" and any(burst["left"].values())):
        text = f"**{text}**"
    return text


def bursts_rows(b: dict, bs: dict | None = None) -> list:
    bs = bs or bursts_summary(b)
    rows = ["| pods at once, one node | academy (converted) | reference chain | "
            "academy / reference |", "| --- | --- | --- | --- |"]
    for size, sides in b["bursts"].items():
        aca, ref = sides.get("academy"), sides.get("reference")
        e = bs["sizes"][size]
        for op in ("ADD", "DEL"):
            rows.append(f"| {size} {op}s, total wall | {_burst_cell(aca, op) if aca else '–'} | "
                        f"{_burst_cell(ref, op) if ref else '–'} | **{x(e.get(op))}** |")
        if aca and ref:
            rows.append(f"| {size} ADDs then DELs, both walls | "
                        f"{ms(aca['ADD']['wall_ms'] + aca['DEL']['wall_ms'])} | "
                        f"{ms(ref['ADD']['wall_ms'] + ref['DEL']['wall_ms'])} | "
                        f"**{x(e.get('total'))}** |")
    cr = bs["crowded"]
    if cr:
        def crowd(side):
            c = cr.get(side)
            if not c:
                return "–"
            text = (f"**{x(c['ratio'])}x** ({ms(c['crowded_ms'])} / {ms(c['empty_ms'])}, "
                    f"{c['cycles']} cycles")
            if c["failures"]:
                text += f", **{c['failures']} failed**"
            if c["stopped"]:
                text += f", {c['stopped']}"
            return text + ")"
        pods = next(iter(cr.values()))["pods"]
        rows.append(f"| ADD with {pods} pods on the bridge / on an empty bridge (ADD medians, "
                    f"ms; for academy the network's first ADD, which makes its nf_tables "
                    f"objects: the target's literal reading) | {crowd('academy')} | "
                    f"{crowd('reference')} | |")
        a = cr.get("academy", {})
        if "ratio_vs_one" in a:
            rows.append(f"| ADD with {pods} pods on the bridge / on a bridge with one resident "
                        f"pod (an ordinary ADD: the network's nf_tables objects exist in both; "
                        f"not the target) | "
                        f"**{x(a['ratio_vs_one'])}x** ({ms(a['crowded_ms'])} / "
                        f"{ms(a['one_ms'])}) | | |")
    return rows


def bursts_markdown(results: dict) -> str:
    b = results.get("bursts")
    targets = results.get("summary", {}).get("issue_targets") or issue_targets(results)
    lines = []
    if b:
        bs = results.get("summary", {}).get("bursts") or bursts_summary(b)
        lines += [
            "",
            "### Bursts on a node: pods at once, ipMasq and a published port each",
            "",
            "The reference chain (bridge with ipMasq + host-local, then portmap, run as "
            "libcni runs a chain) against the same list after `academy convert` ("
            f"{' + '.join(b['converted_plugins'])} with ipMasq and the portMappings "
            "capability), each pod with its own hostPort, each side on private nodes of "
            "its own. All ADDs are released at once, then all DELs; total wall from the "
            "release to the last one's end, ms. Left: veths, store files, nf_tables "
            "elements and per-container iptables chains on the node after the DELs. Then, "
            f"while the largest burst's pods are up, {b['crowd_cycles']} ADD+DEL cycles of "
            "one more pod beside them against the same on an empty bridge (another node; "
            "for academy that ADD is the network's first and makes its nf_tables objects) "
            "and, for academy, on a bridge with one resident pod (a third node; an ordinary "
            "ADD), interleaved. The target is read literally (empty bridge); the resident "
            "figure stands beside it.",
            "",
        ]
        lines += bursts_rows(b, bs)
        if b.get("warmup_errors"):
            lines += ["", f"**Warm-up failures:** {b['warmup_errors'][:3]}"]
        left = {k: {kk: vv for kk, vv in v.items() if vv}
                for k, v in b.get("empty_left", {}).items()}
        left = {k: v for k, v in left.items() if v}
        if left:
            lines += ["", f"**Left on the empty nodes after their cycles:** {left}"]
    if targets:
        lines += ["", "The issue's targets (informational, as above; a fast result that failed "
                      "or left something behind is a MISS):", "",
                  "| target | measured | | |", "| --- | --- | --- | --- |"]
        for t in targets:
            lines.append(f"| {t['target']} | {x(t['value'])} | **{t['verdict']}** | "
                         f"{t['note']} |")
    return "\n".join(lines) + "\n" if lines else ""


# ---- the single-container cycle (solo.py) ----------------------------------------------

# Issue 29 item 2: in the single-container cycle (one network, one container, no
# resident), ADD and DEL each against a steady one (same shape, a resident beside), and
# against the reference in the same cycle.
SOLO_VS_STEADY = 1.3
SOLO_MASQ_ADD_VS_REFERENCE = 0.25
SOLO_CHAIN_ADD, SOLO_CHAIN_DEL = 0.10, 0.20

SOLO_SHAPES = [("plain", ""), ("masq", " with ipMasq"),
               ("port", " with ipMasq and a published port"),
               ("podman", ", podman's chain (academy: its `academy convert`)")]
SOLO_ALONE = [("bw", "ADD", "academy ADD with a bandwidth limit"),
              ("bw", "DEL", "academy DEL with a bandwidth limit"),
              ("port3", "ADD", "academy ADD with ipMasq and 3 published ports"),
              ("port0", "ADD", "academy ADD with ipMasq and the portMappings capability, "
                               "no port published")]


def _solo_target(what, num, den, limit, field="median"):
    return {"target": what, "num": num, "den": den, "limit": limit, "field": field}


# What is judged, each a ratio of two series' medians (or of their peak RSS): first the
# issue's, then the earlier rounds' targets (bench.py's and chains.py's), in this cycle.
SOLO_TARGETS = [
    _solo_target("ipMasq: ADD in the single-container cycle ≤ 1.3x a steady ADD",
                 "academy.masq.solo.ADD", "academy.masq.steady.ADD", SOLO_VS_STEADY),
    _solo_target("ipMasq: DEL in the single-container cycle ≤ 1.3x a steady DEL",
                 "academy.masq.solo.DEL", "academy.masq.steady.DEL", SOLO_VS_STEADY),
    _solo_target("ipMasq and a published port: ADD in the cycle ≤ 1.3x a steady ADD",
                 "academy.port.solo.ADD", "academy.port.steady.ADD", SOLO_VS_STEADY),
    _solo_target("ipMasq and a published port: DEL in the cycle ≤ 1.3x a steady DEL",
                 "academy.port.solo.DEL", "academy.port.steady.DEL", SOLO_VS_STEADY),
    _solo_target("ADD with ipMasq ≤ 0.25x the reference's with ipMasq, both in the cycle",
                 "academy.masq.solo.ADD", "reference.masq.solo.ADD",
                 SOLO_MASQ_ADD_VS_REFERENCE),
    _solo_target("converted podman network ADD ≤ 0.10x podman's reference chain, both in "
                 "the cycle", "academy.podman.solo.ADD", "reference.podman.solo.ADD",
                 SOLO_CHAIN_ADD),
    _solo_target("converted podman network DEL ≤ 0.20x podman's reference chain, both in "
                 "the cycle", "academy.podman.solo.DEL", "reference.podman.solo.DEL",
                 SOLO_CHAIN_DEL),
    _solo_target("earlier round: ADD ≤ 0.35x the reference's", "academy.plain.solo.ADD",
                 "reference.plain.solo.ADD", ADD_VS_REFERENCE),
    _solo_target("earlier round: peak RSS ≤ 0.75x the reference's (over the ADDs)",
                 "academy.plain.solo.ADD", "reference.plain.solo.ADD", RSS_VS_REFERENCE,
                 "rss"),
    _solo_target("earlier round: DEL ≤ 1.15x floor (ip link del, veth with peer in a netns)",
                 "academy.plain.solo.DEL", "floor.del_bare", DEL_VS_FLOOR),
    _solo_target("earlier round: DEL with ipMasq ≤ 0.5x the reference's with ipMasq",
                 "academy.masq.solo.DEL", "reference.masq.solo.DEL", 0.5),
    _solo_target("earlier round: academy ADD with ipMasq ≤ 1.3x without",
                 "academy.masq.solo.ADD", "academy.plain.solo.ADD", 1.3),
    _solo_target("earlier round: academy ADD with a bandwidth limit ≤ 1.3x ADD without",
                 "academy.bw.solo.ADD", "academy.plain.solo.ADD", BANDWIDTH_VS_PLAIN),
    _solo_target("earlier round: academy ADD with 3 port mappings ≤ 1.2x without",
                 "academy.port3.solo.ADD", "academy.port0.solo.ADD", 1.2),
]


def _network_of(series: str) -> str | None:
    """"academy.masq.solo.ADD" -> "academy.masq.solo"; the floor has no network."""
    parts = series.split(".")
    return ".".join(parts[:3]) if len(parts) == 4 else None


def solo_faults(r: dict, st: dict, series: list) -> list:
    """What makes a fast result on these series no PASS: failed samples in them, a
    failed resident ADD or DEL on their networks (the steady state was not), anything
    left on their networks' bridges or in their stores."""
    out = []
    veths = r.get("leftovers", {}).get("nodes", {}).get("veths")
    if veths:
        out.append(f"left on the nodes: {len(veths)} veths")
    for s in series:
        failures = (st.get(s) or {}).get("failures")
        if failures:
            out.append(f"{s}: {failures} failed")
    nets = [n for n in dict.fromkeys(_network_of(s) for s in series) if n]
    for n in nets:
        out += [e for e in r.get("resident_errors", []) if e.startswith(f"resident {n} ")]
        left = {k: v for k, v in r.get("leftovers", {}).get(n, {}).items() if v}
        if left:
            out.append(f"{n}: left {left}")
    return out


def _solo_value(st: dict, t: dict) -> float:
    a, b = st.get(t["num"]), st.get(t["den"])
    if t["field"] == "rss":
        return _div(((a or {}).get("rss") or {}).get("max"),
                    ((b or {}).get("rss") or {}).get("max"))
    return _ratio_of(a, b)


def solo_stats(r: dict) -> dict:
    st = {}
    for name, samples in r.get("series", {}).items():
        st[name] = stats(samples)
        if samples and "maxrss_kib" in samples[0]:
            st[name]["rss"] = stats(samples, "maxrss_kib")
    return st


def solo_summary(r: dict) -> dict:
    """Per shape and operation: academy in the cycle and steady, the reference in the
    cycle and steady, their ratios; the targets as rows of {target, value, limit,
    verdict, note}."""
    st = solo_stats(r)
    rows = []
    for shape, label in SOLO_SHAPES:
        for op in ("ADD", "DEL"):
            a1, a_s = st.get(f"academy.{shape}.solo.{op}"), st.get(f"academy.{shape}.steady.{op}")
            r1, r_s = (st.get(f"reference.{shape}.solo.{op}"),
                       st.get(f"reference.{shape}.steady.{op}"))
            rows.append({"what": f"{op}{label}", "shape": shape, "op": op,
                         "academy": a1, "academy_steady": a_s, "vs_steady": _ratio_of(a1, a_s),
                         "reference": r1, "reference_steady": r_s,
                         "reference_vs_steady": _ratio_of(r1, r_s),
                         "vs_reference": _ratio_of(a1, r1)})
    targets = []
    for t in SOLO_TARGETS:
        value = _solo_value(st, t)
        faults = solo_faults(r, st, [t["num"], t["den"]])
        targets.append({"target": t["target"], "value": value, "limit": t["limit"],
                        "verdict": verdict(value, t["limit"], faults),
                        "note": "; ".join(faults)})
    return {"stats": st, "rows": rows, "targets": targets,
            "ratios": {t["target"]: t["value"] for t in targets}}


def solo_markdown(r: dict, ss: dict | None = None) -> str:
    """The single-container cycle's table beside the steady state, and its targets."""
    if not r:
        return ""
    ss = ss or solo_summary(r)
    st = ss["stats"]
    lines = [
        "",
        "### The single-container cycle: one network, one container, ADD and DEL repeated",
        "",
        "What `podman run --rm` and a CI job do: the network has no other attachment, so "
        "each ADD finds it empty and each DEL leaves it empty (academy makes a network's "
        "own nf_tables objects with its first attachment and deletes them with its last). "
        "Beside each such network, one of the same shape keeps a resident attachment (with "
        "its own port where the shape publishes one) from before the recorded cycles to "
        f"after them: the steady state. {r['cycles']} cycles, every ADD then every DEL "
        "(and the DEL floor), the order rotating, academy and the reference interleaved; "
        "each side's networks on a private node of their own (`bench/solo.py`). Wall "
        "time from spawn to reap (a list's: its plugins' added), ms: median (min–max).",
        "",
        "| | academy, single-container cycle | academy, steady (a resident beside) | "
        "cycle / steady | reference, single-container cycle | reference, steady | "
        "reference: cycle / steady | academy / reference, in the cycle |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in ss["rows"]:
        lines.append(f"| {row['what']} | {cell(row['academy'])} | {cell(row['academy_steady'])} "
                     f"| **{x(row['vs_steady'])}** | {cell(row['reference'])} | "
                     f"{cell(row['reference_steady'])} | {x(row['reference_vs_steady'])} | "
                     f"**{x(row['vs_reference'])}** |")
    a_rss = (st.get("academy.plain.solo.ADD") or {}).get("rss")
    r_rss = (st.get("reference.plain.solo.ADD") or {}).get("rss")
    if a_rss and r_rss and "max" in a_rss and "max" in r_rss:
        lines.append(f"| peak RSS over the ADDs (plain) | {kib(a_rss['max'])} | | | "
                     f"{kib(r_rss['max'])} | | | **{x(_div(a_rss['max'], r_rss['max']))}** |")
    for shape, op, what in SOLO_ALONE:
        s = st.get(f"academy.{shape}.solo.{op}")
        if s:
            lines.append(f"| {what} | {cell(s)} | | | | | | |")
    if st.get("floor.del_bare"):
        lines.append(f"| DEL floor: `ip link del` of a veth whose peer is in a netns (on "
                     f"academy's node) | {cell(st['floor.del_bare'])} | | | | | | |")
    lines += ["", "Targets in the single-container cycle (informational; a fast result "
                  "that failed or left something behind is a MISS):", "",
              "| target | measured | | |", "| --- | --- | --- | --- |"]
    for t in ss["targets"]:
        lines.append(f"| {t['target']} | {x(t['value'])} | **{t['verdict']}** | {t['note']} |")
    lines.append("")
    errors = r.get("errors", []) + r.get("resident_errors", [])
    if errors:
        lines.append(f"**{len(errors)} failed invocation{'s' if len(errors) > 1 else ''}**, "
                     f"first: `{errors[0][:300]}`")
    else:
        lines.append("Every invocation succeeded, the residents' too (ADD results checked: "
                     "an address was reported).")
    left = {k: {kk: vv for kk, vv in v.items() if vv}
            for k, v in r.get("leftovers", {}).items()}
    left = {k: v for k, v in left.items() if v}
    lines.append("")
    lines.append(f"**Left after the cycles and the residents' DELs:** {left}" if left
                 else "Left after the cycles and the residents' DELs: nothing (bridge ports, "
                      "store files, veths on the nodes).")
    return "\n".join(lines) + "\n"
