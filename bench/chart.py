"""The scaling chart as a hand-written SVG: ADD+DEL cycle time against addresses held,
both plugins, median with a min–max whisker. No plotting library needed.

x is log-like (log10 of held + 500, so that 0 has a place), y is logarithmic: host-local
grows linearly with the store and would flatten academy's line on a linear axis."""

import math
import shutil
import subprocess

W, H = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 40, 60
COLORS = {"academy": "#1f6fb4", "reference": "#d9541e"}
LABELS = {"academy": "academy", "reference": "reference bridge + host-local"}


def _fx(held, lo, hi):
    f = lambda n: math.log10(n + 500)
    return LEFT + (f(held) - f(lo)) / ((f(hi) - f(lo)) or 1) * (W - LEFT - RIGHT)


def _fy(ms, lo, hi):
    return H - BOTTOM - (math.log10(ms) - math.log10(lo)) / (
        (math.log10(hi) - math.log10(lo)) or 1) * (H - TOP - BOTTOM)


def _ticks(lo, hi):
    out, decade = [], 10 ** math.floor(math.log10(lo))
    while decade <= hi:
        for m in (1, 2, 5):
            v = m * decade
            if lo <= v <= hi:
                out.append(v)
        decade *= 10
    return out


def scaling_svg(results: dict, summary: dict) -> str:
    sc = summary["scaling"]
    series = {k: [p for p in sc.get(k, []) if "median" in p] for k in ("academy", "reference")}
    pts = [p for s in series.values() for p in s]
    if not pts:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
    held = sorted({p["held"] for p in pts})
    ylo = 10 ** math.floor(math.log10(min(p["min"] for p in pts)))
    yhi = 10 ** math.ceil(math.log10(max(p["max"] for p in pts)))
    X = lambda n: _fx(n, held[0], held[-1])
    Y = lambda v: _fy(v, ylo, yhi)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold">'
        "ADD+DEL cycle vs addresses of the /16 already held (scattered)</text>",
    ]
    for v in _ticks(ylo, yhi):
        y = Y(v)
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    for n in held:
        x = X(n)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#eee"/>')
        label = f"{n // 1000}k" if n >= 1000 else str(n)
        out.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{label}</text>')
    out += [
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{H - BOTTOM}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 18}" text-anchor="middle">'
        "addresses held (log scale)</text>",
        f'<text transform="translate(18 {(TOP + H - BOTTOM) / 2}) rotate(-90)" '
        'text-anchor="middle">ms per cycle, median and min–max (log scale)</text>',
    ]
    # The target: academy's cycle at the largest point within 2x its empty-store cycle.
    acad = series["academy"]
    if acad and acad[0]["held"] == 0:
        y = Y(2 * acad[0]["median"])
        out.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{COLORS["academy"]}" stroke-dasharray="4 4" opacity="0.6"/>')
        out.append(f'<text x="{W - RIGHT + 6}" y="{y + 4:.1f}" fill="{COLORS["academy"]}">'
                   "target: 2x academy at 0</text>")
    for i, (who, pts_) in enumerate(series.items()):
        color = COLORS[who]
        path = " ".join(f"{'M' if j == 0 else 'L'}{X(p['held']):.1f},{Y(p['median']):.1f}"
                        for j, p in enumerate(pts_))
        out.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for p in pts_:
            x = X(p["held"])
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{Y(p["min"]):.1f}" '
                       f'y2="{Y(p["max"]):.1f}" stroke="{color}"/>')
            out.append(f'<circle cx="{x:.1f}" cy="{Y(p["median"]):.1f}" r="4" fill="{color}"/>')
            out.append(f'<text x="{x + 7:.1f}" y="{Y(p["median"]) - 6:.1f}" fill="{color}" '
                       f'font-size="11">{p["median"]:.0f}</text>')
        # Legend in the plot's top left: both series start low on the left.
        ly = TOP + 16 + 18 * i
        out.append(f'<line x1="{LEFT + 12}" x2="{LEFT + 32}" y1="{ly}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + 38}" y="{ly + 4}">{LABELS[who]}</text>')
    stopped = sc.get("stopped", {}).get("reference")
    if stopped:
        out.append(f'<text x="{LEFT}" y="{H - 2}" font-size="10" fill="#666">'
                   f"host-local {_esc(stopped)}</text>")
    m = results["machine"]
    out.append(f'<text x="{W - 6}" y="{H - 2}" font-size="10" fill="#666" text-anchor="end">'
               f"{_esc(m['date_utc'])}, {m['nproc']} cores, kernel {_esc(m['kernel'])}</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def png_if_possible(svg_path: str):
    """A PNG beside the SVG when rsvg-convert is installed (librsvg2-bin); else none."""
    if shutil.which("rsvg-convert"):
        subprocess.run(["rsvg-convert", "-o", svg_path[:-4] + ".png", svg_path], check=False)
