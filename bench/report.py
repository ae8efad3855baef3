"""From raw samples to the figures that matter: medians, ratios, targets, and the
markdown table the README includes."""

import statistics

# The targets. Informational: printed as PASS/MISS, never asserted.
ADD_VS_REFERENCE = 0.35
RSS_VS_REFERENCE = 0.75
SCALING_32K_VS_EMPTY = 2.0
DEL_VS_FLOOR = 1.15


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
    }
    scaling = scaling_stats(results["scaling"])
    return {"stats": s, "ratios": ratios, "scaling": scaling,
            "targets": targets(ratios, scaling)}


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
        f"Both invoked directly as a runtime does (CNI_* environment, config on stdin, "
        f"prevResult to CHECK and DEL), {n} cycles interleaved with a rotating order. "
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
    lines += ["", "Targets (informational; judged on the ratios above):", "",
              "| target | measured | |", "| --- | --- | --- |"]
    for t in summary["targets"]:
        lines.append(f"| {t['target']} | {x(t['value'])} | **{t['verdict']}** |")
    lines += floor_rows(st, r, sc)
    lines += time_rows(st, sc)
    if chart_path:
        lines += ["", f"![ADD+DEL cycle time against addresses held]({chart_path})"]
    return "\n".join(lines) + "\n"


def health_rows(results: dict) -> list:
    """Failures and debris: a fast plugin that fails or leaks is not fast."""
    cyc = results["cycles"]
    left = {k: v for k, v in cyc["leftovers"].items() if v["ports"] or v["reservations"]}
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
        ref_cell = (f"{cell(rp)}; ADD {ms(rp['add_median'])}" if rp
                    else "not run (" + sc["stopped"].get("reference", "") + ")")
        rows.append(f"| ADD+DEL cycle, {p['held']:,} of the /16 held | {cell(p)}; ADD "
                    f"{ms(p['add_median'])} | {ref_cell} | {x(ratio)} |")
    return rows


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
    return rows
