"""README's "Layout of the code" block against the tree: every path it lists exists, and
every module at the top of src/ is listed (unit-test files, `*_tests.rs`, go with the
module beside them). Run by scripts/check-refs.sh, so `make lint` fails on a layout that
drifted from the code."""

import re

HEADING = "## Layout of the code"


def listed(readme: str) -> list:
    """The paths of the layout block, in order. A line starts with its paths, then two or
    more spaces and what they are; a bare name after a path is in that path's folder
    (`src/add.rs del.rs` is src/add.rs and src/del.rs); indented lines continue the one
    before."""
    if HEADING not in readme:
        return []
    section = readme.split(HEADING, 1)[1]
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


def problems(readme: str, exists, src_entries: list) -> list:
    """What is wrong with the layout block: listed paths that do not exist (`exists(path)`),
    and entries of src/ (`src_entries`: names, folders ending in '/') that it lists not."""
    paths = listed(readme)
    if not paths:
        return [f"README.md has no {HEADING!r} block"]
    out = [f"README.md layout: {p} does not exist" for p in paths if not exists(p)]
    for entry in src_entries:
        if entry.endswith("_tests.rs"):
            continue
        if f"src/{entry}" not in paths:
            out.append(f"README.md layout: src/{entry} is not listed")
    return out
