"""Generated text kept inside hand-written docs, between marker lines:

    <!-- lab:NAME -->          ...  <!-- /lab -->            docs/lab/NAME.txt, fenced
    <!-- bench:latest -->      ...  <!-- /bench:latest -->   bench/results/latest.md

Everything between the markers is replaced; the markers and the rest stay as they are."""

import pathlib
import re

LAB_START = re.compile(r"<!-- lab:([A-Za-z0-9._-]+) -->")
LAB_END = "<!-- /lab -->"
BENCH_START, BENCH_END = "<!-- bench:latest -->", "<!-- /bench:latest -->"


class MarkerError(Exception):
    """A block that cannot be filled: a marker missing, or the file it names."""


def embed_lab(text: str, read) -> str:
    """Fills every `<!-- lab:NAME -->` block of `text` with a ```text fence around
    read(NAME) (the transcript's text; raising KeyError when there is none). A start
    marker without its end marker is an error, so nothing after it can be lost."""
    out, lines, i, missing = [], text.split("\n"), 0, []
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        m = LAB_START.fullmatch(line)
        if not m:
            continue
        try:
            end = lines.index(LAB_END, i)
        except ValueError:
            raise MarkerError(f"{line} has no {LAB_END} after it") from None
        try:
            body = read(m.group(1))
        except KeyError:
            missing.append(m.group(1))
            body = ""
        out += ["```text", *body.splitlines(), "```"]
        i = end
    if missing:
        raise MarkerError("no transcript for " + ", ".join(missing))
    return "\n".join(out)


def embed_bench(doc: str, latest: str, up: str = "") -> str:
    """The doc (docs/performance.md) with its bench block holding `latest`
    (bench/results/latest.md) without its own level-2 heading: the doc has one already.
    latest.md's links are relative to the repository's root (`bench/results/scaling.svg`);
    `up` ("../" for a doc in docs/) is put before each, so they hold from the doc."""
    if BENCH_START not in doc or BENCH_END not in doc:
        raise MarkerError(f"no {BENCH_START} ... {BENCH_END} block")
    body = re.sub(r"\A## [^\n]*\n+", "", latest).rstrip() + "\n"
    if up:
        body = re.sub(r"\]\((?![a-z]+:|#|/)", "](" + up, body)
    head, rest = doc.split(BENCH_START, 1)
    _, tail = rest.split(BENCH_END, 1)
    return f"{head}{BENCH_START}\n{body}{BENCH_END}{tail}"


def lab_reader(lab_dir: pathlib.Path):
    """read(NAME) for embed_lab: the text of lab_dir/NAME.txt."""
    def read(name: str) -> str:
        try:
            return (lab_dir / f"{name}.txt").read_text()
        except FileNotFoundError:
            raise KeyError(name) from None
    return read
