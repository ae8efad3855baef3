#!/usr/bin/env bash
# Checks that the docs' file:line references still point at the code they describe.
#
# A reference is written in a doc as the visible text `src/ipam/store.rs:376`, followed
# on the same line by a comment saying what that line must contain:
#
#   `src/ipam/store.rs:376` <!-- ref: src/ipam/store.rs:376 contains "holder.matches(&c)" -->
#
# For each such comment, line 376 of src/ipam/store.rs must contain the snippet (a plain
# substring; it cannot contain a double quote). Every visible path:line reference to a
# .rs file must have a comment on its line, so no reference goes unchecked.
#
#   scripts/check-refs.sh [--fix] [FILE.md ...]     (default: README.md and docs/**/*.md)
#
# On a mismatch it says where the snippet is now and exits 1. --fix moves the reference
# (comment and visible text on that line) to the line where the snippet now is: the only
# one, or the nearest to the old line when there are several; a snippet that is gone is
# still an error. It also checks the "Layout of the code" block of docs/design.md: every
# path it lists exists, and every module at the top of src/ is listed. Run without FILE
# arguments, it also checks that every src/, tests/, bench/, docs/, scripts/, conflists/
# or deploy/ path written in prose (README.md, docs/, Cargo.toml's comments, comments in
# src/ and tests/) exists in the tree. The work is done by scripts/doctools/refs.py, layout.py and
# paths.py (unit-tested).
set -euo pipefail
case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m doctools check-refs "$@"
