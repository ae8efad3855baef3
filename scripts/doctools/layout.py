"""The "Layout of the code" block of docs/design.md (DOC) against the tree: every path it
lists exists, and every module at the top of src/ is listed (unit-test files,
`*_tests.rs`, go with the module beside them). Run by scripts/check-refs.sh, so
`make lint` fails on a layout that drifted from the code."""

import re

DOC = "docs/design.md"
HEADING = "## Layout of the code"


def listed(doc: str) -> list:
    """The paths of the layout block, in order. A line starts with its paths, then two or
    more spaces and what they are; a bare name after a path is in that path's folder
    (`src/verbs/add.rs del.rs` is src/verbs/add.rs and src/verbs/del.rs); indented lines continue the one
    before."""
    if HEADING not in doc:
        return []
    section = doc.split(HEADING, 1)[1]
    block = re.search(r"```[a-z]*\n(.*?)```", section, re.S)
    paths = []
    for line in (block.group(1).splitlines() if block else []):
        if not line.strip() or line[0].isspace():
            continue
        folder = ""
        for token in re.split(r"\s{2,}", line.strip())[0].replace(",", " ").split():
            if "/" in token:
                path = token
                folder = token if token.endswith("/") else token.rsplit("/", 1)[0] + "/"
            else:
                path = folder + token
            paths.append(path)
    return paths


def problems(doc: str, exists, src_entries: list, name: str = DOC) -> list:
    """What is wrong with the layout block: listed paths that do not exist (`exists(path)`),
    and entries of src/ (`src_entries`: names, folders ending in '/') that it lists not.
    `name` is the doc's name in the messages."""
    paths = listed(doc)
    if not paths:
        return [f"{name} has no {HEADING!r} block"]
    out = [f"{name} layout: {p} does not exist" for p in paths if not exists(p)]
    for entry in src_entries:
        if entry.endswith("_tests.rs"):
            continue
        if f"src/{entry}" not in paths:
            out.append(f"{name} layout: src/{entry} is not listed")
    return out
