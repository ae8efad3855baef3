#!/usr/bin/env python3
"""Stand-in: an ADD that fails and leaves what it made (a failed ADD must leave
nothing)."""

import json
import sys

from standin import exec_real, passthrough, real, stdin_text, verb

if not verb():
    exec_real()
text = stdin_text()
p = real(text)
if verb() == "ADD" and p.returncode == 0:
    print(json.dumps({"cniVersion": "1.1.0", "code": 11, "msg": "stand-in: failed after wiring",
                      "details": "everything the ADD made is left"}))
    sys.exit(1)
passthrough(p)
