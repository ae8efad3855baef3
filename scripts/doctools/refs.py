"""The docs' file:line references, checked against the code they describe.

A reference is the visible text `src/ipam/store.rs:376` followed, on the same line, by a
comment saying what that line must contain:

    `src/ipam/store.rs:376` <!-- ref: src/ipam/store.rs:376 contains "holder.matches(&c)" -->

Line 376 of src/ipam/store.rs must contain the snippet (a plain substring without double
quotes). Every visible path:line reference to a .rs file needs such a comment on its
line, so no reference goes unchecked. With fix, a reference whose snippet moved is moved
(comment and visible text on that line) to the snippet's line: the only one, or the
nearest to the old line; a snippet that is gone stays an error."""

import re
from dataclasses import dataclass

REF = re.compile(r'<!-- ref: ([^ ]+):([0-9]+) contains "([^"]*)" -->')
VISIBLE = re.compile(r"((?:src|tests|benches|examples)/[A-Za-z0-9_./-]+\.rs):([0-9]+)")


@dataclass
class Ref:
    path: str
    line: int
    snippet: str


def refs_in(line: str) -> list:
    """The checked references (comments) of one doc line."""
    return [Ref(m.group(1), int(m.group(2)), m.group(3)) for m in REF.finditer(line)]


def unchecked_in(line: str) -> list:
    """Visible path:line references of one doc line that no comment on it covers."""
    covered = {(r.path, r.line) for r in refs_in(line)}
    visible = VISIBLE.findall(REF.sub("", line))
    return [f"{p}:{n}" for p, n in visible if (p, int(n)) not in covered]


def nearest(hits: list, line: int) -> int:
    """The hit closest to `line`; the first of two equally close."""
    return min(hits, key=lambda h: abs(h - line))


def move(doc_line: str, path: str, old: int, new: int) -> str:
    """doc_line with every `path:old` (the visible text and the comment) now `path:new`."""
    return re.sub(re.escape(path) + ":" + str(old) + r"(?![0-9])", f"{path}:{new}", doc_line)


class Checker:
    """Checks (and with fix, mends) docs. `read_code(path)` gives a code file's lines, or
    None when it does not exist. Problems are kept as text, one per broken reference."""

    def __init__(self, read_code, fix: bool = False):
        self.read_code = read_code
        self.fix = fix
        self.problems = []
        self.moved = []
        self.checked = 0

    def doc(self, name: str, text: str) -> str:
        """Checks one doc; returns its text (changed only with fix)."""
        lines = text.split("\n")
        for n, line in enumerate(lines, 1):
            for ref in refs_in(line):
                self.checked += 1
                line = self._ref(f"{name}:{n}", ref, line)
            for ref in unchecked_in(line):
                self.problems.append(
                    f'{name}:{n}: {ref} has no <!-- ref: {ref} contains "..." --> on its line')
            lines[n - 1] = line
        return "\n".join(lines)

    def _ref(self, where: str, ref: Ref, line: str) -> str:
        where = f"{where}: {ref.path}:{ref.line}"
        if not ref.snippet:
            self.problems.append(f"{where}: empty snippet")
            return line
        code = self.read_code(ref.path)
        if code is None:
            self.problems.append(f"{where}: {ref.path} does not exist")
            return line
        actual = code[ref.line - 1] if 0 < ref.line <= len(code) else ""
        if ref.snippet in actual:
            return line
        hits = [i for i, l in enumerate(code, 1) if ref.snippet in l]
        if not hits:
            self.problems.append(
                f'{where}: line {ref.line} does not contain "{ref.snippet}", and no line of '
                f"{ref.path} does now\n    line {ref.line} is: {actual}")
            return line
        best = nearest(hits, ref.line)
        if self.fix:
            self.moved.append(f"{where}: moved to {ref.path}:{best} ({ref.snippet})")
            return move(line, ref.path, ref.line, best)
        self.problems.append(
            f'{where}: line {ref.line} does not contain "{ref.snippet}"\n'
            f"    line {ref.line} is: {actual}\n"
            f"    the snippet is now at line(s): {' '.join(map(str, hits))} "
            f"(scripts/check-refs.sh --fix moves the reference to {best})")
        return line
