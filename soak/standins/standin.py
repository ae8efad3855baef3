"""What every stand-in shares: the real academy (ACADEMY_REAL), run with the
invocation's own environment and stdin, and the few reads a stand-in needs.

A stand-in is academy with one rule broken, as a wrapper around the real binary, so
the soak's report of that rule can be seen to work (soak/selftest.py)."""

import json
import os
import subprocess
import sys

# model.py's owner comment, for the stand-ins that look for an attachment's elements.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def real(stdin_text, args=None):
    """The real academy with this process's arguments (or args) and environment."""
    return subprocess.run([os.environ["ACADEMY_REAL"]] + (sys.argv[1:] if args is None else args),
                          input=stdin_text, capture_output=True, text=True)


def passthrough(p):
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    sys.exit(p.returncode)


def stdin_text():
    return "" if sys.stdin.isatty() else sys.stdin.read()


def config(text):
    try:
        return json.loads(text)
    except ValueError:
        return {}


def store_dir(conf):
    data = conf.get("dataDir") or (conf.get("ipam") or {}).get("dataDir")
    return os.path.join(data, conf["name"])


def verb():
    return os.environ.get("CNI_COMMAND", "")


def exec_real():
    """Not a CNI verb (a subcommand: watch, restore, status): the real one, as is."""
    binary = os.environ["ACADEMY_REAL"]
    os.execv(binary, [binary] + sys.argv[1:])
