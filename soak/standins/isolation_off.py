#!/usr/bin/env python3
"""Stand-in: an ADD that leaves ingressPolicy out (its network is not isolated), and a
watch and restore that put nothing back (the real ones would isolate it again from
the conflist at the next flush)."""

import json
import signal
import sys

from standin import config, exec_real, passthrough, real, stdin_text, verb

if sys.argv[1:2] == ["watch"]:
    while True:
        signal.pause()  # until SIGTERM (or the soak's SIGKILL)
if sys.argv[1:2] == ["restore"]:
    sys.exit(0)
if not verb():
    exec_real()
text = stdin_text()
if verb() == "ADD":
    conf = config(text)
    conf.pop("ingressPolicy", None)
    text = json.dumps(conf)
passthrough(real(text))
