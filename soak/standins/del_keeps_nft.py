#!/usr/bin/env python3
"""Stand-in: a DEL that skips nf_tables (its attachment's elements stay)."""

import json
import os
import subprocess

from standin import exec_real, config, passthrough, real, stdin_text, verb  # noqa: I100
from model import owner_comment  # noqa: E402 (standin puts soak/ on the path)

if not verb():
    exec_real()
text = stdin_text()
if verb() != "DEL":
    passthrough(real(text))
conf = config(text)

owner = owner_comment(conf.get("name", ""), os.environ.get("CNI_CONTAINERID", ""),
                      os.environ.get("CNI_IFNAME", ""))
ruleset = json.loads(subprocess.run(["nft", "-j", "list", "ruleset"], capture_output=True,
                                    text=True).stdout or "{}")
keep = []
for item in ruleset.get("nftables", []):
    for kind in ("set", "map"):
        o = item.get(kind)
        if not o:
            continue
        mine = [e for e in o.get("elem", []) if owner in json.dumps(e)]
        if mine:
            keep.append({"add": {"element": {"family": o["family"], "table": o["table"],
                                             "name": o["name"], "elem": mine}}})
p = real(text)
if keep:
    subprocess.run(["nft", "-j", "-f", "-"], input=json.dumps({"nftables": keep}),
                   capture_output=True, text=True)
passthrough(p)
