#!/usr/bin/env bash
# setup.sh: everything academy's tests, demo and lab need on Debian 12 (bookworm), as root.
# Idempotent: a second run checks and changes nothing (a few seconds).
#
# Everything comes from Debian packages through apt (no git clone, no other download):
#   containernetworking-plugins   the reference plugins (bridge, host-local, loopback, portmap,
#                                 firewall: its ingressPolicy beside academy's, tests/it/isolation.rs)
#   golang-go + golang-github-appc-cni-dev + the golang-github-appc-cni source package
#                                 cnitool, built offline against Debian's libcni
#   iproute2 iputils-ping strace jq conntrack procps
#                                 the tests look at the kernel with these (conntrack's
#                                 table, sysctls of a test's own netns)
#   nftables iptables                        the tests read NAT rules with these
#   podman runc containerd busybox-static    the runtimes tests drive academy through
#   gcc libc6-dev                            the static pause binary of the containerd test
#   python3 python3-grpcio python3-protobuf protobuf-compiler
#                                 the CRI client of the containerd test (tests/it/cri/)
#   python3-yaml                  the installer test reads deploy/kubernetes/academy.yaml
#   prometheus python3-prometheus-client
#                                 the metrics tests run Debian's prometheus (a test tool, never
#                                 a service: its unit is disabled here and it is installed with
#                                 service starts refused) against academy watch --metrics, parse
#                                 the exposition with prometheus_client, and run promtool on
#                                 deploy/prometheus/ (tests/it/metrics.rs, tests/it/alert_rules.rs)
#   radvd                         the IPv6 uplink test's router (tests/it/ipv6_uplink.rs): a test
#                                 tool run by PID in a netns of the test's, never a service
#   groff-base git                the CLI test formats academy(8) with groff and checks
#                                 --version's commit against git (tests/it/cli_conventions.rs)
#   qemu-system-x86 cpio kmod     the VLAN tests boot Debian 12's stock kernel in a throwaway
#                                 VM (scripts/kernel-vm/run-in-vm.sh); its linux-image package
#                                 is downloaded and unpacked into /var/cache/academy-kernel-vm,
#                                 never installed
# Produces:
#   /usr/local/bin/cnitool                            (CNITOOL_DEST)
#   /opt/cni/lab-bin/{bridge,host-local,loopback,portmap,firewall}   (LAB_BIN)
#   /etc/cni/lab-net.d/                               (LAB_NETCONF_DIR, created empty)
# Rust is not installed here: it comes from rustup (scripts/check-toolchain.sh says so).
#
# Usage: scripts/setup.sh [--check] [--force]
#   --check  change nothing; exit 0 when all is installed and current, 1 otherwise
#   --force  rebuild cnitool and recopy the plugins
#
# cnitool is not in the -dev package (Debian excludes its directory), so its one source
# file is taken from the Debian source package: a deb-src list is derived from the
# machine's own apt sources into a private folder; the system's apt setup is untouched.
set -euo pipefail

CNITOOL_DEST=${CNITOOL_DEST:-/usr/local/bin/cnitool}
LAB_BIN=${LAB_BIN:-/opt/cni/lab-bin}
LAB_NETCONF_DIR=${LAB_NETCONF_DIR:-/etc/cni/lab-net.d}
PLUGINS=(bridge host-local loopback portmap firewall)
PKGS=(
  golang-go golang-github-appc-cni-dev containernetworking-plugins xz-utils
  iproute2 iputils-ping strace jq conntrack procps
  nftables iptables
  podman runc containerd busybox-static
  gcc libc6-dev
  python3 python3-grpcio python3-protobuf protobuf-compiler python3-yaml
  groff-base git
  qemu-system-x86 cpio kmod
  prometheus python3-prometheus-client
  radvd
)
# Packages whose maintainer scripts would start (and enable) a service we only want as a
# program: prometheus.service listening on :9090 of the host, radvd.service advertising on
# the host's interfaces.
NO_SERVICE=(prometheus radvd)
CNITOOL_SRC_PKG=golang-github-appc-cni
CNITOOL_SHA256=996324788ccae4f7a2208ebd9e3b78ee8a48860c4f6568628bc514129588f79c # v1.1.2
GOPATH_DEBIAN=/usr/share/gocode
GO=/usr/lib/go/bin/go

FORCE=0 CHECK=0
for a in "$@"; do
  case $a in
    --force) FORCE=1 ;;
    --check) CHECK=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option: $a" >&2; exit 2 ;;
  esac
done

log() { printf 'setup.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must be run as root (the tests create namespaces, bridges and veths)"
[[ -r /etc/debian_version ]] || die "this set-up is for Debian 12 (apt); on another system install the packages listed at the top of $0 by hand"
work=$(mktemp -d /tmp/academy-setup.XXXXXX)
trap 'rm -rf "$work"' EXIT

# 1. Debian packages: one apt-get update and one install, only when something is missing.
installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]; }
missing=()
for p in "${PKGS[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
  ((CHECK)) && { log "missing packages: ${missing[*]}"; exit 1; }
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # invoke-rc.d asks policy-rc.d before starting a service; 101 means "not now". One
  # already there (a container image's) is left as it is; ours goes after the install.
  own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\n# setup.sh: no service starts while it installs packages\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    own_policy=/usr/sbin/policy-rc.d
  fi
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { [[ -n $own_policy ]] && rm -f "$own_policy"; die "apt-get install failed"; }
  [[ -n $own_policy ]] && rm -f "$own_policy"
  for p in "${missing[@]}"; do installed "$p" || die "package $p did not install"; done
fi
# The packages' services stay stopped and disabled (each run: a later apt upgrade may
# have enabled them again). Without systemd running (a container), systemctl disable
# still removes the unit's enablement links offline; without systemctl, they go by hand.
for svc in "${NO_SERVICE[@]}"; do
  if [[ -d /run/systemd/system ]]; then
    if systemctl -q is-enabled "$svc.service" 2>/dev/null || systemctl -q is-active "$svc.service" 2>/dev/null; then
      ((CHECK)) && { log "$svc.service is enabled or running (only its program is wanted)"; exit 1; }
      log "stopping and disabling $svc.service (a test tool, not a service)"
      systemctl disable --now -q "$svc.service"
    fi
  elif compgen -G "/etc/systemd/system/*.wants/$svc.service" >/dev/null; then
    ((CHECK)) && { log "$svc.service is enabled (only its program is wanted)"; exit 1; }
    log "disabling $svc.service (a test tool, not a service)"
    if command -v systemctl >/dev/null; then
      systemctl disable -q "$svc.service"
    else
      rm -f /etc/systemd/system/*.wants/"$svc.service"
    fi
  fi
done
bridge_path=$(dpkg -L containernetworking-plugins | grep '/bridge$' | head -n1)
[[ -x $bridge_path ]] || die "the reference bridge plugin is missing"
PLUGIN_SRC=${bridge_path%/bridge}
[[ -x $GO ]] || die "$GO not found (golang-go)"

# 2. cnitool, stamped with its source hash and Go version so a re-run can tell it is current.
STAMP="cnitool-v1.1.2-${CNITOOL_SHA256:0:12}+$("$GO" env GOVERSION)"
cnitool_current() {
  [[ -x $CNITOOL_DEST ]] && [[ $("$GO" version -m "$CNITOOL_DEST" 2>/dev/null) == *"main.harnessStamp=$STAMP"* ]]
}
fetch_cnitool_source() { # writes $work/cnitool/cnitool.go from the Debian source package
  local parts=$work/apt/parts lists=$work/apt/lists f
  mkdir -p "$parts" "$lists/partial" "$work/src" "$work/cnitool"
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && sed 's/^Types:.*/Types: deb-src/' "$f" >"$parts/$(basename "$f")"
  done
  if [[ -f /etc/apt/sources.list ]]; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$parts/from-list.list"
  fi
  local opts=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$parts"
    -o Dir::State::Lists="$lists" -o APT::Sandbox::User=root
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
  apt-get "${opts[@]}" update -qq || log "warning: the deb-src list update reported errors"
  (cd "$work/src" && apt-get "${opts[@]}" -qq source --download-only "$CNITOOL_SRC_PKG" >/dev/null) ||
    die "could not download the Debian source package $CNITOOL_SRC_PKG"
  tar -xJf "$work"/src/golang-github-appc-cni_*.orig.tar.xz -C "$work/src" --wildcards '*/cnitool/cnitool.go'
  cp "$work"/src/*/cnitool/cnitool.go "$work/cnitool/cnitool.go"
  echo "$CNITOOL_SHA256  $work/cnitool/cnitool.go" | sha256sum -c --quiet - 2>/dev/null ||
    log "note: Debian's cnitool.go differs from v1.1.2; building Debian's version"
}
if ((FORCE)) || ! cnitool_current; then
  ((CHECK)) && { log "cnitool at $CNITOOL_DEST is missing or not current"; exit 1; }
  fetch_cnitool_source
  log "building cnitool offline against Debian's libcni"
  (cd "$work/cnitool" &&
    env HOME="$work" GOCACHE="$work/gocache" GO111MODULE=off GOPATH="$GOPATH_DEBIAN" GOFLAGS= \
      GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 \
      "$GO" build -ldflags "-X main.harnessStamp=$STAMP" -o "$work/cnitool.bin" .)
  mkdir -p "$(dirname "$CNITOOL_DEST")"
  install -m 0755 "$work/cnitool.bin" "$CNITOOL_DEST.new.$$"
  mv -f "$CNITOOL_DEST.new.$$" "$CNITOOL_DEST"
fi

# 3. The reference plugins, copied (atomically) into the lab's own bin folder.
((CHECK)) || mkdir -p "$LAB_BIN" "$LAB_NETCONF_DIR"
for p in "${PLUGINS[@]}"; do
  if ((FORCE)) || ! cmp -s "$PLUGIN_SRC/$p" "$LAB_BIN/$p"; then
    ((CHECK)) && { log "$LAB_BIN/$p is missing or differs from $PLUGIN_SRC/$p"; exit 1; }
    install -m 0755 "$PLUGIN_SRC/$p" "$LAB_BIN/.$p.new.$$"
    mv -f "$LAB_BIN/.$p.new.$$" "$LAB_BIN/$p"
  fi
done
if ((CHECK)) && [[ ! -d $LAB_NETCONF_DIR ]]; then log "$LAB_NETCONF_DIR is missing"; exit 1; fi

# 4. The VM kernel of the VLAN tests: downloaded, unpacked and its initramfs built once
#    (about 10 s, ~500 MB in the cache); a current cache is left alone.
if ((CHECK)); then
  compgen -G "/var/cache/academy-kernel-vm/initrd-*.cpio" >/dev/null ||
    { log "the VM kernel cache is not built (scripts/kernel-vm/run-in-vm.sh --prepare)"; exit 1; }
else
  VM_QUIET=1 "$(dirname "$0")/kernel-vm/run-in-vm.sh" --prepare
fi

# 5. Smoke tests (change nothing on the network).
[[ $(CNI_COMMAND=VERSION "$LAB_BIN/bridge" </dev/null) == *'"1.0.0"'* ]] || die "reference bridge VERSION failed"
[[ $("$CNITOOL_DEST" 2>&1 || true) == *"add   <net> <netns>"* ]] || die "cnitool does not run"
/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
  die "Debian's python3 cannot import grpc and google.protobuf (python3-grpcio, python3-protobuf)"
containerd --version >/dev/null || die "containerd does not run"
promtool --version >/dev/null 2>&1 || die "promtool does not run (prometheus)"
/usr/bin/python3 -c 'import prometheus_client.parser' 2>/dev/null ||
  die "Debian's python3 cannot import prometheus_client (python3-prometheus-client)"
log "OK: cnitool at $CNITOOL_DEST, reference plugins in $LAB_BIN, containerd, podman, CRI client deps"
