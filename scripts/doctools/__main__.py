"""python3 -m doctools COMMAND (scripts/ on PYTHONPATH), run from anywhere:

    check-refs [--fix] [FILE.md ...]   the docs' file:line references (default: README.md
                                       and every .md under docs/), docs/design.md's layout
                                       block against src/, and (without FILE arguments) every
                                       repository path the prose names (README, docs/,
                                       Cargo.toml and src/, tests/ comments, see
                                       paths.py); exit 1 on a problem
    embed-lab                          docs/lab/*.txt into the docs' lab blocks
    embed-bench                        bench/results/latest.md into docs/performance.md
    summarize-trace FILE [NETNS]       one line per step of an `strace -f -s 256` of academy
"""

import pathlib
import subprocess
import sys

from . import blocks, layout, paths, refs, strace_summary

ROOT = pathlib.Path(__file__).resolve().parents[2]


def default_docs() -> list:
    return sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


def shown(doc: pathlib.Path) -> str:
    """A doc's name in messages: relative to the repository when inside it."""
    return doc.relative_to(ROOT).as_posix() if ROOT in doc.parents else str(doc)


def read_code(path: str):
    try:
        return (ROOT / path).read_text().split("\n")
    except (FileNotFoundError, IsADirectoryError):
        return None


def tree() -> paths.Tree:
    """What a clone holds: git's tracked files and new ones not ignored (so a generated,
    ignored file never satisfies the prose); every file outside a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"], capture_output=True, check=True).stdout
        files = [f for f in listed.decode().split("\0") if f and (ROOT / f).exists()]
    except (OSError, subprocess.CalledProcessError):
        files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()]
    return paths.Tree(files)


def prose_path_problems(seen: list) -> list:
    """Every repository path written in prose that the tree does not hold; the paths
    checked are appended to `seen`."""
    t = tree()
    out = []
    for doc in default_docs():
        out += paths.check(shown(doc), paths.markdown_prose(doc.read_text()), t, seen)
    cargo = ROOT / "Cargo.toml"
    out += paths.check(shown(cargo), paths.toml_comments(cargo.read_text()), t, seen)
    for top in ("src", "tests"):
        for rs in sorted((ROOT / top).rglob("*.rs")):
            out += paths.check(shown(rs), paths.rust_comments(rs.read_text()), t, seen)
    return out


def check_refs(args: list) -> int:
    fix = "--fix" in args
    docs = [pathlib.Path(a).resolve() for a in args if a != "--fix"] or default_docs()
    if fix:
        mender = refs.Checker(read_code, fix=True)
        for doc in docs:
            if doc.is_file():
                text = doc.read_text()
                mended = mender.doc(shown(doc), text)
                if mended != text:
                    doc.write_text(mended)
        for line in mender.moved:
            print(line)
    # What --fix could not mend (a snippet that is gone, a reference without a comment)
    # is reported by a plain check of the result.
    checker = refs.Checker(read_code)
    for doc in docs:
        if not doc.is_file():
            checker.problems.append(f"{doc}: no such file")
            continue
        checker.doc(shown(doc), doc.read_text())
        if doc == ROOT / layout.DOC:
            src = sorted(e.name + ("/" if e.is_dir() else "") for e in (ROOT / "src").iterdir())
            children = lambda folder: sorted(
                e.name + ("/" if e.is_dir() else "") for e in (ROOT / folder).iterdir())
            checker.problems += layout.problems(
                doc.read_text(), lambda p: (ROOT / p).exists(), src, children=children)
    seen = []
    if not [a for a in args if a != "--fix"]:
        if not (ROOT / layout.DOC).is_file():
            checker.problems.append(f"{layout.DOC}: no such file (it holds the layout block)")
        checker.problems += prose_path_problems(seen)
    if checker.problems:
        for p in checker.problems:
            print(p, file=sys.stderr)
        print(f"check-refs: {len(checker.problems)} problem(s) in {checker.checked} reference(s) "
              f"and {len(seen)} prose path(s)", file=sys.stderr)
        return 1
    print(f"check-refs: {checker.checked} reference(s) point at the code they describe, "
          f"{len(seen)} prose path(s) exist")
    return 0


def embed_lab(_args: list) -> int:
    read = blocks.lab_reader(ROOT / "docs" / "lab")
    failed = 0
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        if (ROOT / "docs" / "lab") in doc.parents:
            continue
        text = doc.read_text()
        try:
            embedded = blocks.embed_lab(text, read)
        except blocks.MarkerError as e:
            print(f"embed-lab: {doc.relative_to(ROOT)}: {e}", file=sys.stderr)
            failed = 1
            continue
        if embedded != text:
            doc.write_text(embedded)
    return failed


BENCH_DOC = "docs/performance.md"


def embed_bench(_args: list) -> int:
    doc = ROOT / BENCH_DOC
    latest = (ROOT / "bench" / "results" / "latest.md").read_text()
    try:
        up = "../" * BENCH_DOC.count("/")
        doc.write_text(blocks.embed_bench(doc.read_text(), latest, up))
    except (blocks.MarkerError, FileNotFoundError) as e:
        print(f"embed-bench: {BENCH_DOC}: {e}", file=sys.stderr)
        return 1
    print(f"embed-bench: {BENCH_DOC} now shows bench/results/latest.md")
    return 0


def summarize_trace(args: list) -> int:
    strace_summary.main(args)
    return 0


COMMANDS = {"check-refs": check_refs, "embed-lab": embed_lab, "embed-bench": embed_bench,
            "summarize-trace": summarize_trace}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
