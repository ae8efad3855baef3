"""Paths written in prose, held to the tree: every `src/`, `tests/`, `bench/`, `docs/`,
`scripts/`, `conflists/` or `deploy/` path that README.md, docs/**/*.md, Cargo.toml's
comments or the comments of src/ and tests/ name must exist (a file or a folder), so a
move that leaves the prose behind fails `make lint` instead of misleading the next reader.

What counts as a path of this repository, and how the forms that are not plain are read:

- it starts at one of the top folders above, not inside another path: `/usr/src/x`,
  `../src/x`, `containerd/docs/cri/config.md` and URLs are someone else's;
- a path written after its owner's name (`netavark's src/firewall/mod.rs`) is that
  project's, not ours (unless the owner is academy);
- `<placeholder>` stands for any name: the folder before it must exist
  (`tests/it/<concern>.rs` needs tests/it/);
- `*` is a glob and `{a,b}` a choice: the glob must match something, each choice exist;
- trailing prose punctuation is not part of the path, nor is `:line` after it.
"""

import fnmatch
import re

ROOTS = ("src", "tests", "bench", "docs", "scripts", "conflists", "deploy")

PATH = re.compile(
    r"(?<![\w./~$@-])"                       # not inside a longer path, URL or variable
    r"((?:" + "|".join(ROOTS) + r")/"
    r"(?:\{[\w.,-]*\}|<[^<>\s]*>|[\w./*-])*)")
OWNER = re.compile(r"\b([A-Za-z][\w.-]*)['\u2019]s\s+[`(]?$")
TRAILING = ".,;:'-"


def paths_in(line: str) -> list:
    """The repository paths one line of prose names, as written (punctuation trimmed)."""
    out = []
    for m in PATH.finditer(line):
        owner = OWNER.search(line[: m.start()])
        if owner and owner.group(1).lower() != "academy":
            continue
        out.append(m.group(1).rstrip(TRAILING))
    return out


def expand(path: str) -> list:
    """`{a,b}` choices expanded, left to right."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [x for choice in m.group(1).split(",")
            for x in expand(path[: m.start()] + choice + path[m.end():])]


class Tree:
    """The repository's files (paths relative to its root, '/'-separated) and the
    folders that hold them."""

    def __init__(self, files):
        self.files = set(files)
        self.folders = {"/".join(f.split("/")[:i])
                        for f in self.files for i in range(1, f.count("/") + 1)}

    def has(self, path: str) -> bool:
        path = path.rstrip("/")
        return path in self.files or path in self.folders

    def matches(self, pattern: str) -> bool:
        pattern = pattern.rstrip("/")
        return any(fnmatch.fnmatchcase(p, pattern) for p in self.files | self.folders)


def problem(path: str, tree: Tree):
    """Why `path` (as written in prose) does not hold, or None when it does."""
    for one in expand(path):
        if "<" in one:
            folder = one.split("<", 1)[0].rsplit("/", 1)[0]
            if not tree.has(folder):
                return f"{path}: {folder}/ does not exist"
        elif "*" in one:
            if not tree.matches(one):
                return f"{path} matches nothing"
        elif not tree.has(one):
            return f"{path} does not exist"
    return None


def markdown_prose(text: str):
    """(line number, text) of every line: a doc's code blocks name paths too."""
    return enumerate(text.split("\n"), 1)


def toml_comments(text: str):
    """(line number, comment) of a TOML file's `#` comments."""
    for n, line in enumerate(text.split("\n"), 1):
        i = _outside_strings(line, "#")
        if i is not None:
            yield n, line[i:]


def rust_comments(text: str):
    """(line number, comment) of a Rust file's `//`, `///` and `//!` comments, also after
    code on the same line (a `//` inside a string literal is not one)."""
    for n, line in enumerate(text.split("\n"), 1):
        i = _outside_strings(line, "//")
        if i is not None:
            yield n, line[i:]


def _outside_strings(line: str, marker: str):
    """Index of the first `marker` not inside a "..." string, or None."""
    quoted = False
    i = 0
    while i < len(line):
        c = line[i]
        if quoted and c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif not quoted and line.startswith(marker, i):
            return i
        i += 1
    return None


def check(name: str, lines, tree: Tree, seen=None) -> list:
    """Problems of one source: `lines` are (line number, prose) pairs. Each path checked
    is appended to `seen` when given (for the count in the summary)."""
    out = []
    for n, prose in lines:
        for path in paths_in(prose):
            if seen is not None:
                seen.append(path)
            why = problem(path, tree)
            if why:
                out.append(f"{name}:{n}: {why}")
    return out
