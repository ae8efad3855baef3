#!/usr/bin/env python3
"""Stand-in: an ADD whose address the store forgets at once, so the next ADD hands
the same address out again."""

import os

from standin import exec_real, config, passthrough, real, stdin_text, store_dir, verb

if not verb():
    exec_real()
text = stdin_text()
p = real(text)
if verb() == "ADD" and p.returncode == 0:
    result = config(p.stdout)
    for ip in result.get("ips", []):
        try:
            os.remove(os.path.join(store_dir(config(text)), ip["address"].split("/")[0]))
        except OSError:
            pass
passthrough(p)
