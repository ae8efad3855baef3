# academy: build, install, test. Targets that touch the kernel need root.

CNI_BIN_DIR     ?= /opt/cni/lab-bin
CNI_CONF_DIR    ?= /etc/cni/lab-net.d
# academy(8) and the bash completion, where man-db and bash-completion look for a
# locally installed tool.
MAN_DIR         ?= /usr/local/share/man/man8
COMPLETION_DIR  ?= /usr/local/share/bash-completion/completions
CARGO           ?= cargo
# The release binary links glibc statically (measured by bench/profiles.py: ADD 0.89x,
# peak RSS 3.4 -> 1.9 MiB with opt-level "s", no ld.so or libgcc_s at start). An
# explicit --target keeps RUSTFLAGS off the proc-macros, which cannot be static.
# It is copied to target/release/academy, where every doc and script looks for it.
HOST            := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
RELEASE_BIN     := target/release/academy
# Written by the release binary from the table it parses its arguments with
# (src/cli/definitions.rs), so they cannot describe another command line.
MAN_PAGE        := target/release/academy.8
COMPLETION      := target/release/academy.bash

.PHONY: all build release install uninstall test unit pyunit lint setup demo bench clean lab check-refs soak

all: build

build:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --target $(HOST)
	install -D -m 0755 target/$(HOST)/release/academy $(RELEASE_BIN)
	$(RELEASE_BIN) man > $(MAN_PAGE).new && mv -f $(MAN_PAGE).new $(MAN_PAGE)
	$(RELEASE_BIN) completions bash > $(COMPLETION).new && mv -f $(COMPLETION).new $(COMPLETION)

release: build

# The release binary into the harness's bin folder (atomically: a runtime may be
# executing the old one), the harness conflist beside cnitool's other configs, the man
# page and the bash completion.
install: build
	install -d $(CNI_BIN_DIR) $(CNI_CONF_DIR)
	install -m 0755 $(RELEASE_BIN) $(CNI_BIN_DIR)/.academy.new
	mv -f $(CNI_BIN_DIR)/.academy.new $(CNI_BIN_DIR)/academy
	install -m 0644 conflists/10-harness.conflist $(CNI_CONF_DIR)/10-harness.conflist
	install -D -m 0644 $(MAN_PAGE) $(MAN_DIR)/academy.8
	install -D -m 0644 $(COMPLETION) $(COMPLETION_DIR)/academy

uninstall:
	rm -f $(CNI_BIN_DIR)/academy $(CNI_CONF_DIR)/10-harness.conflist
	rm -f $(MAN_DIR)/academy.8 $(COMPLETION_DIR)/academy

# Everything the tests, the demo and the lab need on a fresh Debian 12 machine (Debian
# packages: cnitool built from source, the reference plugins, the test tools, podman,
# containerd). Idempotent; a second run changes nothing. Then: is Rust there?
setup:
	scripts/setup.sh
	@scripts/check-toolchain.sh

# The static release binary (the installer image test needs it), unit tests (no root
# needed), the Python of scripts/ and bench/, and the root
# integration tests against real namespaces: one binary, tests/it (`cargo test --test it`).
# The longest tests of tests/it, minutes each on one core (the VM tests of vlan.rs emulate
# a machine): started first, beside the rest, instead of last and alone (libtest runs
# tests in name order). Their output follows the rest's.
LONG_TESTS      := in_a_vm
test: setup build pyunit
	$(CARGO) test --all-targets --no-run
	$(CARGO) test --test it -- $(LONG_TESTS) --test-threads=4 > target/long-tests.log 2>&1 & long=$$!; \
	$(CARGO) test --all-targets -- --test-threads=$${TEST_THREADS:-4} $(addprefix --skip ,$(LONG_TESTS)); rest=$$?; \
	wait $$long; long=$$?; echo "--- the longest tests, run beside (target/long-tests.log):"; cat target/long-tests.log; \
	[ $$rest -eq 0 ] && [ $$long -eq 0 ]

# The docs tooling and the bench's report logic (standard library only, no root).
pyunit:
	python3 -m unittest discover -s scripts -t scripts -p 'test_*.py'
	python3 -m unittest discover -s bench -t bench -p 'test_*.py'
	python3 -m unittest discover -s soak -t soak -p 'test_*.py'

unit:
	$(CARGO) test --lib

lint: check-refs pyunit
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

# The seed labs run for real (root): refreshes docs/lab/*.txt, the docs that embed them,
# and their file:line references.
lab: setup install
	scripts/lab.sh

# The docs' file:line references still point at the code they describe.
check-refs:
	scripts/check-refs.sh

# Seed 002's gate with cnitool in a throwaway netns, step by step, then cleanup.
demo: setup install
	scripts/demo.sh

# academy against the reference bridge + host-local, side by side in one run; writes
# bench/results/ (raw JSON, ratio table, chart). Not a test: nothing here can fail on time.
# BASELINE=path/to/an/older/academy adds the "academy vs its baseline" table (bench/README.md);
# BENCH_ARGS passes anything else to bench.py.
bench: setup build
	python3 bench/bench.py --academy $(RELEASE_BIN) --reference-dir $(CNI_BIN_DIR) $(if $(BASELINE),--baseline $(BASELINE)) $(BENCH_ARGS)
	PYTHONPATH=scripts python3 -m doctools embed-bench

# Random lifecycles with faults and flushes against academy in a private node netns,
# every invariant checked against a model (docs/failure-model.md#the-soak). Root.
# SOAK_SEED replays a run; ACADEMY is the binary under test (a stand-in, an old release).
# `make test` runs a short one and the stand-ins through tests/it/soak.rs.
SOAK_SECONDS    ?= 300
ACADEMY         ?= $(RELEASE_BIN)
soak: build
	python3 soak/soak.py --seconds $(SOAK_SECONDS) --academy $(ACADEMY) $(if $(SOAK_SEED),--seed $(SOAK_SEED))

clean:
	$(CARGO) clean
