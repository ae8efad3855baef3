#!/usr/bin/env bash
# Fails early, with the fix, when what the build and tests need is missing.
set -euo pipefail
fail() { echo "academy setup: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || fail "run as root: the tests create network namespaces, bridges and veths"
command -v cargo >/dev/null || fail "cargo not found: install Rust 1.82 or later (https://rustup.rs), then re-run"
for tool in cnitool ip strace jq ping nft podman containerd ctr runc gcc protoc; do
  command -v "$tool" >/dev/null || fail "$tool not found: run 'make setup' (scripts/setup.sh)"
done
exit 0
