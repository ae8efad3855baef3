"""python3 -m doctools COMMAND (scripts/ on PYTHONPATH), run from anywhere:

    check-refs [--fix] [FILE.md ...]   the docs' file:line references (default: README.md
                                       and every .md under docs/), and README's layout
                                       block against src/; exit 1 on a problem
    embed-lab                          docs/lab/*.txt into the docs' lab blocks
    embed-bench                        bench/results/latest.md into README.md
    summarize-trace FILE [NETNS]       one line per step of an `strace -f -s 256` of academy
"""

import pathlib
import sys

from . import blocks, layout, refs, strace_summary

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
        if doc == ROOT / "README.md":
            src = sorted(e.name + ("/" if e.is_dir() else "") for e in (ROOT / "src").iterdir())
            checker.problems += layout.problems(doc.read_text(), lambda p: (ROOT / p).exists(), src)
    if checker.problems:
        for p in checker.problems:
            print(p, file=sys.stderr)
        print(f"check-refs: {len(checker.problems)} problem(s) in {checker.checked} reference(s)",
              file=sys.stderr)
        return 1
    print(f"check-refs: {checker.checked} reference(s) point at the code they describe")
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


def embed_bench(_args: list) -> int:
    readme = ROOT / "README.md"
    latest = (ROOT / "bench" / "results" / "latest.md").read_text()
    try:
        readme.write_text(blocks.embed_bench(readme.read_text(), latest))
    except blocks.MarkerError as e:
        print(f"embed-bench: README.md: {e}", file=sys.stderr)
        return 1
    print("embed-bench: README.md now shows bench/results/latest.md")
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
