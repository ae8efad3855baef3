"""The Python behind the docs' tooling (standard library only), each part unit-tested:

- blocks: copy a generated file into a doc between two marker lines (the lab transcripts
  of docs/lab/*.txt into docs/**/*.md, the bench's latest.md into docs/performance.md);
- refs: the docs' `path:line` references, checked against the code and moved when the
  line moved (scripts/check-refs.sh);
- layout: docs/design.md's "Layout of the code" against the tree (run with refs);
- paths: every repository path the prose names (docs, Cargo.toml, code comments) against
  the tree (run with refs);
- strace_summary: one line per step of an `strace -f` of academy (lab.sh's transcripts).

Run as `python3 -m doctools COMMAND` with scripts/ on PYTHONPATH (see __main__.py); the
tests with `make pyunit`.
"""
