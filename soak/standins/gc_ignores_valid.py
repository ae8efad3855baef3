#!/usr/bin/env python3
"""Stand-in: a GC that ignores the runtime's valid list (it frees every attachment)."""

import json

from standin import exec_real, config, passthrough, real, stdin_text, verb

if not verb():
    exec_real()
text = stdin_text()
if verb() == "GC":
    conf = config(text)
    conf["cni.dev/valid-attachments"] = []
    text = json.dumps(conf)
passthrough(real(text))
