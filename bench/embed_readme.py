#!/usr/bin/env python3
"""Copies bench/results/latest.md into README.md between its bench markers, so the README
always shows the latest run's table and chart (make bench runs this after the bench)."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
START, END = "<!-- bench:latest -->", "<!-- /bench:latest -->"

readme = ROOT / "README.md"
latest = (ROOT / "bench" / "results" / "latest.md").read_text()
# latest.md starts with its own level-2 heading; the README section has one already.
body = re.sub(r"\A## [^\n]*\n+", "", latest).rstrip() + "\n"
text = readme.read_text()
if START not in text or END not in text:
    sys.exit(f"embed_readme: {readme} has no {START} ... {END} block")
head, rest = text.split(START, 1)
_, tail = rest.split(END, 1)
readme.write_text(f"{head}{START}\n{body}{END}{tail}")
print("embed_readme: README.md now shows bench/results/latest.md")
