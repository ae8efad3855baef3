"""The "Layout of the code" block of docs/design.md (DOC) against the tree: every path it
lists exists, and every module at the top of src/ is listed (unit-test files,
`*_tests.rs`, go with the module beside them). A folder's description that names files
of its own (`objects.rs`, `ports/`) names all its own, each one there (or in a subfolder
it names): so a file moved,
renamed or added shows up as a problem, not as a layout that quietly drifted. Run by
scripts/check-refs.sh, so `make lint` fails on a layout that drifted from the code."""

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


def descriptions(doc: str) -> dict:
    """Each src/ folder of the block (its first path ending in '/') and the names of its
    own files and folders its description mentions (`batch.rs`, `ports/`; a name with a
    '/' inside is a path of its own, not the folder's)."""
    if HEADING not in doc:
        return {}
    section = doc.split(HEADING, 1)[1]
    block = re.search(r"```[a-z]*\n(.*?)```", section, re.S)
    found, folder = {}, None
    for line in (block.group(1).splitlines() if block else []):
        if not line.strip():
            continue
        if not line[0].isspace():
            head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            first = head.replace(",", " ").split()[0]
            folder = first if first.startswith("src/") and first.endswith("/") else None
            line = line.strip()[len(head):]
        if folder is None:
            continue
        names = found.setdefault(folder, set())
        for token in re.findall(r"(?<![\w/.])([a-z_0-9]+(?:\.rs|/))(?![\w/])", line):
            names.add(token)
    return found


def problems(doc: str, exists, src_entries: list, name: str = DOC, children=None) -> list:
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
    for folder, names in (descriptions(doc).items() if children else []):
        if not names:
            continue
        # A name may be of a subfolder the description names too (`store/: mod.rs ...`).
        subfolders = [""] + sorted(n for n in names if n.endswith("/"))
        for n in sorted(names):
            if n != "mod.rs" and not any(exists(folder + sub + n) for sub in subfolders):
                out.append(f"{name} layout: {folder} names {n}, which is not there")
        for child in children(folder):
            if child == "mod.rs" or child.endswith("_tests.rs") or child.endswith(".proptest-regressions"):
                continue
            if child not in names:
                out.append(f"{name} layout: {folder}{child} is not named in {folder}'s description")
    return out
