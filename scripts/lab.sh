#!/usr/bin/env bash
# The seed labs (002, 001, 000, 004), run for real against the installed academy with
# cnitool, exactly as the seeds run them. Each run's commands and output go to
# docs/lab/<run>.txt ("# command" then its output, as on a terminal), with what varies from
# run to run masked (MACs, ifindexes, ping times, pids, temp names); the write-ups in
# docs/seeds/*.md embed those files between <!-- lab:NAME --> and <!-- /lab --> markers,
# and their file:line references are refreshed (scripts/check-refs.sh --fix).
#
#   scripts/lab.sh                   run everything (root), refresh outputs, docs and refs
#   scripts/lab.sh --embed           only re-embed docs/lab/*.txt into the docs, refresh refs
#   scripts/lab.sh --refresh-refs    only update the docs' file:line references
#   scripts/lab.sh --summarize-trace FILE [NETNS]   one line per step of an `strace -f -s 256` of academy
#
# Adapted from the seeds only where it must be: namespaces are called acl-* (the lab's
# own); the 000 and 004 parts use their own networks (lab000 on br-lab000 10.98.10.0/24,
# the /29 10.98.11.0/29; lab002 on br-lab002 10.98.20.0/24; lab004 on br-lab004
# 10.98.40.0/24) with conflists in /run/academy-lab, never editing /etc; the killed ADD is
# made deterministic with strace's syscall fault injection; GC is invoked on the binary
# (cnitool 1.1.2 has no gc). The gate itself uses the installed harness conflist, as the
# seed does. Only the gateway of the lab's own bridge is pinged, from the lab's own netns.
# Everything the run makes is removed at the end (trap), also on failure or ^C.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SELF=$ROOT/scripts/lab.sh
OUT=$ROOT/docs/lab
DOCS=$ROOT/docs
BIN=${CNI_BIN_DIR:-/opt/cni/lab-bin}
CONF=${CNI_CONF_DIR:-/etc/cni/lab-net.d}
WORK=/run/academy-lab
LOCK=/run/academy-lab.lock
STORE=/var/lib/cni/academy
CACHE=/var/lib/cni/results
NETWORKS=(lab000 lab002 lab004)
BRIDGES=(br-lab000 br-lab002 br-lab004)

# --- the Python helpers ---------------------------------------------------------------------

# The trace summarizer, the embedder and the reference checker are scripts/doctools
# (unit-tested Python, `make pyunit`); this script keeps the transcript.
doctools() { PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" python3 -m doctools "$@"; }

# One line per step of an `strace -f -s 256` of academy (FILE [NETNS]).
summarize_trace() { doctools summarize-trace "$@"; }

# Rewrites every <!-- lab:NAME --> ... <!-- /lab --> block of docs/**/*.md with a fenced
# copy of docs/lab/NAME.txt.
embed() { doctools embed-lab; }

case "${1:-}" in
  --summarize-trace) summarize_trace "$2" "${3:-}"; exit ;;
  --embed) embed && "$ROOT/scripts/check-refs.sh" --fix; exit ;;
  --refresh-refs) exec "$ROOT/scripts/check-refs.sh" --fix ;;
  "") ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac

# --- preconditions ----------------------------------------------------------------------

[[ $(id -u) -eq 0 ]] || { echo "lab.sh: run as root (it makes namespaces, bridges, veths)" >&2; exit 1; }
for tool in cnitool strace jq ping ip python3 flock sha512sum; do
  command -v "$tool" >/dev/null || { echo "lab.sh: $tool is missing (make setup installs the lab's tools)" >&2; exit 1; }
done
[[ -x $BIN/academy ]] || { echo "lab.sh: $BIN/academy is not installed (make install)" >&2; exit 1; }
[[ -f $CONF/10-harness.conflist ]] || { echo "lab.sh: $CONF/10-harness.conflist is missing (make install)" >&2; exit 1; }
if [[ -x $ROOT/target/release/academy ]] && ! cmp -s "$ROOT/target/release/academy" "$BIN/academy"; then
  echo "lab.sh: warning: $BIN/academy differs from target/release/academy (run make install first?)" >&2
fi

exec 9>"$LOCK"
flock -w 600 9 || { echo "lab.sh: another lab.sh holds $LOCK" >&2; exit 1; }

# cnitool's container id for a netns path: "cnitool-" + 20 hex digits of its SHA-512.
cnitool_id() { printf 'cnitool-%s' "$(printf %s "$1" | sha512sum | cut -c1-20)"; }

HARNESS_BRIDGE=$(jq -r '.plugins[0].bridge' "$CONF/10-harness.conflist")
HARNESS_GW=$(jq -r '.plugins[0].gateway' "$CONF/10-harness.conflist")
HARNESS_BRIDGE_EXISTED=0
ip link show "$HARNESS_BRIDGE" >/dev/null 2>&1 && HARNESS_BRIDGE_EXISTED=1
WATCHER=
# academy turns on forwarding when it puts a gateway on a bridge, as the reference plugin
# does; put back what the run found (only a 0 it found: never undo somebody else's 1).
FORWARDING=()
for f in /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv6/conf/all/forwarding; do
  [[ -r $f && $(cat "$f") == 0 ]] && FORWARDING+=("$f")
done

cleanup() {
  [[ -n $WATCHER ]] && kill "$WATCHER" 2>/dev/null && wait "$WATCHER" 2>/dev/null
  WATCHER=
  # The gate's attachment on the shared harness network: its own DEL, nothing else.
  if ip netns list | grep -qw acl-a1 || [[ -e $STORE/harness/holders/$(cnitool_id /var/run/netns/acl-a1):eth0 ]]; then
    CNI_PATH=$BIN NETCONFPATH=$CONF cnitool del harness /var/run/netns/acl-a1 >/dev/null 2>&1
  fi
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep '^acl-'); do ip netns del "$ns"; done
  local link
  for link in $(ip -j link show type veth | jq -r '.[] | select((.ifalias // "") | test("^academy:lab00[024]:")) | .ifname'); do
    ip link del "$link" 2>/dev/null
  done
  for link in "${BRIDGES[@]}"; do ip link del "$link" 2>/dev/null; done
  if ((!HARNESS_BRIDGE_EXISTED)) && ip link show "$HARNESS_BRIDGE" >/dev/null 2>&1 \
     && [[ -z $(ip -br link show master "$HARNESS_BRIDGE") ]]; then
    ip link del "$HARNESS_BRIDGE"
  fi
  local n
  for n in "${NETWORKS[@]}"; do rm -rf "${STORE:?}/$n"; rm -f "$CACHE/$n"-*; done
  rm -rf "$WORK"
  local f
  for f in "${FORWARDING[@]}"; do echo 0 >"$f"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup   # leftovers of a run that was killed before its trap could run
mkdir -p "$WORK/raw" "$WORK/net.d" "$WORK/net29.d" "$WORK/net-noips.d" "$WORK/bin" "$OUT"

# --- capture ----------------------------------------------------------------------------

CUR=
NAMES=()
FAILED=()
begin() { CUR=$WORK/raw/$1.txt; : >"$CUR"; NAMES+=("$1"); }
# run 'command line': shows it as "# command line" and appends its stdout and stderr.
run() {
  printf '# %s\n' "$1" >>"$CUR"
  eval "$1" >>"$CUR" 2>&1
  LAST_RC=$?
}
# claim 'what the write-up says' test...: the run fails if the code no longer does it.
claim() {
  local what=$1; shift
  if "$@"; then printf '  ok    %s\n' "$what"; else printf '  FAIL  %s\n' "$what"; FAILED+=("$what"); fi
}
has() { grep -qE -- "$1" "$CUR"; }
hasnt() { ! has "$1"; }
count_addr() { find "$STORE/$1" -maxdepth 1 -name '10.*' 2>/dev/null | wc -l; }
eq() { [[ $1 == "$2" ]]; }
# The kernel dismantles a deleted netns (and the veth pairs with an end in it) a moment
# after `ip netns del` returns; wait for that, so the next step sees the same every run.
wait_gone() {
  local i
  for i in $(seq 1 50); do ip link show "$1" >/dev/null 2>&1 || return 0; sleep 0.1; done
  echo "lab.sh: $1 still exists 5 s after its netns was deleted" >&2
}

# What varies between runs, masked so that two runs diff only where behaviour changed.
mask() {
  sed -E \
    -e 's/\b([0-9a-f]{2}:){5}[0-9a-f]{2}\b/<mac>/g' \
    -e 's#fe80::[0-9a-f:]+/64#fe80::<eui64>/64#g' \
    -e 's/@if[0-9]+/@if<n>/g' \
    -e 's/time=[0-9.]+ ms/time=<t> ms/g' \
    -e 's/, time [0-9]+ms/, time <t>ms/g' \
    -e 's#(rtt min/avg/max/mdev = ).*#\1<t>#' \
    -e 's/\.tmp\.[0-9]+\.[0-9]+\.[0-9]+/.tmp.<pid>.<ns>.<seq>/g' \
    -e 's/^[0-9]+ (sendto|setns|\+\+\+)/<pid> \1/' \
    -e 's/IFLA_MASTER\}, [0-9]+/IFLA_MASTER}, <ifindex>/g' \
    "$@"
}

lab_conflist() { # name bridge subnet gateway
  jq -n --arg n "$1" --arg b "$2" --arg s "$3" --arg g "$4" \
    '{cniVersion: "1.0.0", name: $n, plugins: [{type: "academy", bridge: $b, subnet: $s, gateway: $g}]}'
}
lab_conflist lab000 br-lab000 10.98.10.0/24 10.98.10.1 >"$WORK/net.d/20-lab000.conflist"
lab_conflist lab002 br-lab002 10.98.20.0/24 10.98.20.1 >"$WORK/net.d/20-lab002.conflist"
lab_conflist lab004 br-lab004 10.98.40.0/24 10.98.40.1 >"$WORK/net.d/20-lab004.conflist"

cd "$ROOT"
echo "lab.sh: academy $("$BIN/academy" 2>&1 | head -1 | sed 's/.* v//'), runs in $WORK"

# --- 002: the gate, on the installed harness network --------------------------------------

echo "002 gate"
begin 002-gate
A1=/var/run/netns/acl-a1
run "export CNI_PATH=$BIN NETCONFPATH=$CONF"
run "ip netns add acl-a1"
run "cnitool add harness $A1 | jq ."
GATE_ADDR=$(grep -oE '"address": "[0-9.]+' "$CUR" | head -1 | grep -oE '[0-9.]+$')
GATE_VETH=$(grep -oE '"veth[0-9a-f]{11}"' "$CUR" | head -1 | tr -d '"')
claim "gate: the result has an ips entry in the harness subnet" test -n "$GATE_ADDR"
run "ip netns exec acl-a1 ip -br addr show; ip netns exec acl-a1 ip route"
claim "gate: the address of the result is on eth0" has "eth0@if[0-9]+ +UP +$GATE_ADDR/24"
claim "gate: default route via the gateway" has "^default via $HARNESS_GW dev eth0"
run "ip netns exec acl-a1 ping -c2 $HARNESS_GW"
claim "gate: the gateway answers" has '2 packets transmitted, 2 received'
run "cnitool check harness $A1 && echo CHECK-OK"
claim "gate: CHECK-OK" has '^CHECK-OK$'
run "cnitool del harness $A1"
run "cnitool del harness $A1 && echo SECOND-DEL-OK"
claim "gate: SECOND-DEL-OK" has '^SECOND-DEL-OK$'
run "ip netns exec acl-a1 ip -br addr show"
claim "gate: only lo is left" eq "$(ip -n acl-a1 -br link | awk '{print $1}')" lo
run "ip netns del acl-a1"
run "ip -br link show | grep -c $GATE_VETH"
claim "gate: the host veth is gone" eq "$(tail -1 "$CUR")" 0
# The harness store is shared with whoever else uses the harness: the address the gate
# gets depends on their runs (round-robin hint), so it is masked.
mask -e "s/\b${GATE_ADDR//./\\.}\b/10.98.0.<n>/g" "$CUR" >"$OUT/002-gate.txt"

# --- 002: the steps of ADD, seen by strace -------------------------------------------------

echo "002 ADD trace"
begin 002-add-trace
run "export CNI_PATH=$BIN"
run "ip netns add acl-t1"
run "jq -c '.plugins[0] + {cniVersion, name}' $WORK/net.d/20-lab002.conflist | tee $WORK/lab002.json"
run "CNI_COMMAND=ADD CNI_CONTAINERID=acl-trace CNI_NETNS=/var/run/netns/acl-t1 CNI_IFNAME=eth0 \\
  strace -f -s 256 -o $WORK/add.strace -e trace=read,write,openat,newfstatat,renameat,linkat,unlinkat,sendto,recvfrom,setns \\
  $BIN/academy < $WORK/lab002.json | jq -c .ips"
claim "trace: ADD succeeded" has '"address":"10.98.20.2/24"'
run "scripts/lab.sh --summarize-trace $WORK/add.strace"
claim "trace: the reservation is linked before the first netlink request" \
  python3 -c 'import sys; t=open(sys.argv[1]).read(); sys.exit(not (0 <= t.find("linkat (O_TMPFILE)") < t.find("RTM_GETLINK")))' "$CUR"
claim "trace: the netns is entered once" eq "$(grep -c 'setns(CNI_NETNS' "$CUR")" 1
run "ip -n acl-t1 -br addr show; ip -n acl-t1 route"
mask "$CUR" >"$OUT/002-add-trace.txt"

# --- 000: DEL frees by container id, with the netns already gone ---------------------------

echo "000 DEL trace"
begin 000-del-trace
run "export CNI_PATH=$BIN"
run "ls -1 $STORE/lab002/ $STORE/lab002/holders/"
run "ip netns del acl-t1                 # the sandbox is gone before DEL, as after a crash"
wait_gone "$(grep -oE 'veth[0-9a-f]{11}' "$OUT/002-add-trace.txt" | head -1)"
run "CNI_COMMAND=DEL CNI_CONTAINERID=acl-trace CNI_IFNAME=eth0 \\
  strace -f -s 256 -o $WORK/del.strace -e trace=read,write,openat,newfstatat,renameat,linkat,unlinkat,sendto,recvfrom,setns \\
  $BIN/academy < $WORK/lab002.json; echo \"exit \$?\""
claim "DEL without a netns exits 0" has '^exit 0$'
run "scripts/lab.sh --summarize-trace $WORK/del.strace"
claim "DEL frees through the holder index" has 'unlink 10\.98\.20\.2 -> ok'
claim "DEL never enters a netns" eq "$(grep -c 'setns(CNI_NETNS' "$CUR")" 0
run "ls -1 $STORE/lab002/ $STORE/lab002/holders/"
mask "$CUR" >"$OUT/000-del-trace.txt"

# --- 002: the gate made to fail on purpose, twice -----------------------------------------

echo "002 fail on purpose"
begin 002-fail-on-purpose
cat >"$WORK/bin/academy-noips" <<EOF
#!/bin/sh
# academy, with "ips" deleted from the ADD result: the first failure the seed asks for
out=\$($BIN/academy); rc=\$?
if [ \$rc -eq 0 ] && [ "\$CNI_COMMAND" = ADD ]; then printf '%s\n' "\$out" | jq -c 'del(.ips)'
else [ -z "\$out" ] || printf '%s\n' "\$out"; exit \$rc; fi
EOF
chmod 755 "$WORK/bin/academy-noips"
jq '.plugins[0].type = "academy-noips"' "$WORK/net.d/20-lab002.conflist" >"$WORK/net-noips.d/20-lab002.conflist"
run "cat $WORK/bin/academy-noips"
run "export CNI_PATH=$WORK/bin:$BIN NETCONFPATH=$WORK/net-noips.d"
run "jq -c . $WORK/net-noips.d/20-lab002.conflist"
run "ip netns add acl-f1"
run "cnitool add lab002 /var/run/netns/acl-f1 | jq -c keys; echo \"exit \${PIPESTATUS[0]}\""
claim "no ips: cnitool 1.1.2 accepts the result (exit 0)" has '^exit 0$'
claim "no ips: the result it accepted has no ips" has '^\["cniVersion","dns","interfaces","routes"\]$'
run "ip netns exec acl-f1 ping -c1 10.98.20.1 | grep received"
claim "no ips: the network works all the same" has '1 received'
run "cnitool del lab002 /var/run/netns/acl-f1"
run "export CNI_PATH=$BIN NETCONFPATH=$WORK/net.d"
run "cnitool add lab002 /var/run/netns/acl-f1 | jq -c .ips"
run "ip netns exec acl-f1 ip link set eth0 down           # the step academy does, undone behind its back"
run "ip netns exec acl-f1 ping -c1 -W1 10.98.20.1; echo \"exit \$?\""
claim "eth0 down: ping fails" has '^exit [12]$'
run "cnitool check lab002 /var/run/netns/acl-f1; echo \"exit \$?\""
claim "eth0 down: CHECK says so and fails" has 'eth0 is down'
run "cnitool del lab002 /var/run/netns/acl-f1"
run "ip netns del acl-f1"
mask "$CUR" >"$OUT/002-fail-on-purpose.txt"

# --- 001: what cnitool hands the plugin -----------------------------------------------------

echo "001 cnitool invocation"
begin 001-cnitool-invocation
cat >"$WORK/bin/academy-logged" <<EOF
#!/bin/sh
# academy, with each call's CNI_* environment and stdin keys logged
input=\$(cat)
echo "\$(env | grep '^CNI_' | sort | tr '\n' ' ')stdin: \$(printf '%s' "\$input" | jq -c keys)" >>$WORK/calls.log
printf '%s' "\$input" | $BIN/academy
EOF
chmod 755 "$WORK/bin/academy-logged"
jq '.plugins[0].type = "academy-logged"' "$WORK/net.d/20-lab002.conflist" >"$WORK/net-noips.d/20-lab002.conflist"
run "cat $WORK/bin/academy-logged"
run "export CNI_PATH=$WORK/bin:$BIN NETCONFPATH=$WORK/net-noips.d"
run "ip netns add acl-i1"
run "cnitool add lab002 /var/run/netns/acl-i1 >/dev/null && cnitool check lab002 /var/run/netns/acl-i1 && cnitool del lab002 /var/run/netns/acl-i1"
run "cat $WORK/calls.log"
claim "cnitool: CNI_CONTAINERID is cnitool-<hash of the netns path>" has "CNI_CONTAINERID=$(cnitool_id /var/run/netns/acl-i1) "
claim "cnitool: no VERSION probe" eq "$(grep -c 'CNI_COMMAND=VERSION' "$WORK/calls.log")" 0
run "printf %s /var/run/netns/acl-i1 | sha512sum | cut -c1-20"
run "ip netns del acl-i1"
mask "$CUR" >"$OUT/001-cnitool-invocation.txt"

# --- 000 part 1: forty cycles ------------------------------------------------------------

echo "000 forty cycles"
begin 000-forty-cycles
run "export CNI_PATH=$BIN NETCONFPATH=$WORK/net.d"
run "jq -c . $WORK/net.d/20-lab000.conflist"
run "(while :; do echo \"\$(ls -1 $STORE/lab000/ 2>/dev/null | grep -c '^10\.') \$(ip -br link show master br-lab000 2>/dev/null | grep -c veth)\"; sleep 0.02; done) >$WORK/watch.log &
watcher=\$!             # the seed's second session: address files and veths on the bridge"
WATCHER=$watcher
run "for i in \$(seq 1 40); do
  ip netns add acl-c\$i
  cnitool add lab000 /var/run/netns/acl-c\$i >/dev/null || echo \"ADD failed at \$i\"
  cnitool del lab000 /var/run/netns/acl-c\$i   || echo \"DEL failed at \$i\"
  ip netns del acl-c\$i
done"
claim "forty cycles: no ADD or DEL failed" hasnt '^(ADD|DEL) failed at [0-9]'
run "sleep 0.1; kill \$watcher; wait \$watcher 2>/dev/null"
WATCHER=
run "ls -1 $STORE/lab000/ | wc -l"
run "ls -1 $STORE/lab000/ $STORE/lab000/holders/"
run "cat $STORE/lab000/last_reserved_ip.0; echo"
claim "forty cycles: no reservation and no holder index left" eq "$(count_addr lab000) $(ls "$STORE/lab000/holders" | wc -l)" "0 0"
claim "forty cycles: round robin reached .41" eq "$(cat "$STORE/lab000/last_reserved_ip.0")" 10.98.10.41
run "awk '{ files[\$1] = 1; veths[\$2] = 1 }
     END { printf \"address files:\"; for (i = 0; i < 10; i++) if (i in files) printf \" %d\", i
           printf \"; veths on the bridge:\"; for (i = 0; i < 10; i++) if (i in veths) printf \" %d\", i; print \"\" }' $WORK/watch.log"
claim "forty cycles: the counts went between 0 and 1, never higher" \
  has '^address files: 0 1; veths on the bridge: 0 1$'
mask "$CUR" >"$OUT/000-forty-cycles.txt"

# --- 000 part 2: exhaustion ---------------------------------------------------------------

echo "000 exhaustion"
begin 000-exhaustion
run "sed 's#10.98.10.0/24#10.98.11.0/29#; s#10.98.10.1#10.98.11.1#' $WORK/net.d/20-lab000.conflist > $WORK/net29.d/20-lab000.conflist"
run "export CNI_PATH=$BIN NETCONFPATH=$WORK/net29.d"
run "jq -c . $WORK/net29.d/20-lab000.conflist"
SEED_LOOP="for i in \$(seq 1 7); do
  ip netns add acl-x\$i
  cnitool add lab000 /var/run/netns/acl-x\$i >/dev/null 2>$WORK/err\$i || echo \"\$i: \$(cat $WORK/err\$i)\"
done"
run "$SEED_LOOP"
claim "exhaustion, as the seed runs it: all seven fail on the bridge's old gateway" \
  eq "$(grep -c 'already has address 10.98.10.1/24' "$CUR")" 7
run "ls -1 $STORE/lab000/"
claim "exhaustion: the failed ADDs left no reservation" eq "$(count_addr lab000)" 0
run "ip -br addr show dev br-lab000           # part 1's gateway is still on the bridge"
run "for i in \$(seq 1 7); do ip netns del acl-x\$i; done; ip link del br-lab000"
run "$SEED_LOOP"
run "ls -1 $STORE/lab000/"
claim "exhaustion: five reservations (.2 to .6), no sixth half-written" eq "$(count_addr lab000)" 5
claim "exhaustion: the sixth and seventh ADD fail with academy's text" \
  eq "$(grep -cE '^[67]: .*no free address in 10.98.11.0/29 \(5 of 5 held\)' "$CUR")" 2
run "ls -1 $STORE/lab000/holders/"
run "jq -c '.plugins[0] + {cniVersion, name}' $WORK/net29.d/20-lab000.conflist |
  CNI_COMMAND=ADD CNI_CONTAINERID=acl-x8 CNI_NETNS=/var/run/netns/acl-x7 CNI_IFNAME=eth0 CNI_PATH=$BIN $BIN/academy; echo \"exit \$?\""
claim "exhaustion: a CNI error object with code 110" has '"code":110'
run "for i in \$(seq 1 7); do cnitool del lab000 /var/run/netns/acl-x\$i; ip netns del acl-x\$i; done"
run "ls -1 $STORE/lab000/ $STORE/lab000/holders/"
claim "exhaustion: DEL freed all five" eq "$(count_addr lab000)" 0
run "ip link del br-lab000                  # the seed's teardown: the next part is on the /24 again"
mask "$CUR" >"$OUT/000-exhaustion.txt"

# --- 000 part 3: the killed ADD -----------------------------------------------------------

echo "000 killed ADD"
begin 000-killed-add
L1=$(cnitool_id /var/run/netns/acl-leak1)
run "export CNI_PATH=$BIN NETCONFPATH=$WORK/net.d"
run "ip netns add acl-leak1"
run "strace -f -s 256 -o $WORK/leak1.strace -e trace=sendto -e inject=sendto:signal=SIGKILL:when=1 \\
  cnitool add lab000 /var/run/netns/acl-leak1; echo \"exit \$?\"      # SIGKILL at academy's first netlink request"
run "scripts/lab.sh --summarize-trace $WORK/leak1.strace"
run "ls -1 $STORE/lab000/ $STORE/lab000/holders/"
claim "killed ADD: one reservation left" eq "$(count_addr lab000)" 1
run "cat $STORE/lab000/holders/$L1:eth0"
run "cnitool del lab000 /var/run/netns/acl-leak1; echo \"exit \$?\"   # the seed expects: exits 0 and frees nothing"
run "ls -1 $STORE/lab000/ $STORE/lab000/holders/"
claim "killed ADD: DEL of the same id frees it (the holder index was written first)" eq "$(count_addr lab000)" 0

run "ip netns add acl-leak2"
run "strace -f -s 256 -o $WORK/leak2.strace -e trace=sendto,setns -e inject=setns:signal=SIGKILL:when=1 \\
  cnitool add lab000 /var/run/netns/acl-leak2; echo \"exit \$?\"      # SIGKILL as it enters the netns: the pair exists"
run "scripts/lab.sh --summarize-trace $WORK/leak2.strace acl-leak2"
run "ls -1 $STORE/lab000/"
run "ip -br link show master br-lab000; ip -n acl-leak2 -br addr show"
claim "killed after the pair: a reservation and a veth" eq "$(count_addr lab000) $(ip -br link show master br-lab000 | grep -c veth)" "1 1"
run "cnitool add lab000 /var/run/netns/acl-leak2 | jq -c '{ips: [.ips[].address], veth: .interfaces[1].name}'   # the runtime retries"
claim "killed after the pair: the retried ADD succeeds on the same address" has '"ips":\["10\.98\.10\.3/24"\]'
run "ip -br link show master br-lab000; ip -n acl-leak2 -br addr show"
run "cnitool del lab000 /var/run/netns/acl-leak2"

run "ip netns add acl-leak3"
run "strace -f -o $WORK/leak3.strace -e trace=setns -e inject=setns:signal=SIGKILL:when=1 \\
  cnitool add lab000 /var/run/netns/acl-leak3; echo \"exit \$?\"      # and this time DEL never comes"
run "ls -1 $STORE/lab000/; ip -br link show master br-lab000"
run "cnitool gc lab000 /var/run/netns/acl-leak3; echo \"exit \$?\"     # the seed's command"
run "ls -1 $STORE/lab000/; ip -br link show master br-lab000"
claim "cnitool gc: does nothing (cnitool 1.1.2 has no gc)" eq "$(count_addr lab000)" 1
run "echo '{\"cniVersion\":\"1.1.0\",\"name\":\"lab000\",\"type\":\"academy\",\"bridge\":\"br-lab000\",\"subnet\":\"10.98.10.0/24\",\"gateway\":\"10.98.10.1\",\"cni.dev/valid-attachments\":[]}' |
  CNI_COMMAND=GC CNI_PATH=$BIN $BIN/academy; echo \"exit \$?\""
run "ls -1 $STORE/lab000/ $STORE/lab000/holders/; ip -br link show master br-lab000; ip -n acl-leak3 -br link show"
claim "GC with an empty list freed the address and deleted the veth" \
  eq "$(count_addr lab000) $(ip -br link show master br-lab000 | grep -c veth)" "0 0"
run "for i in 1 2 3; do ip netns del acl-leak\$i; done"
mask "$CUR" >"$OUT/000-killed-add.txt"

# --- 004: a node where DEL never came ----------------------------------------------------

echo "004 GC after a runtime restart"
begin 004-gc-after-restart
LIVE=$(cnitool_id /var/run/netns/acl-live)
GC_CONF='{"cniVersion":"1.1.0","name":"lab004","type":"academy","bridge":"br-lab004","subnet":"10.98.40.0/24","gateway":"10.98.40.1"'
run "export CNI_PATH=$BIN NETCONFPATH=$WORK/net.d"
run "for ns in acl-live acl-gone1 acl-gone2; do
  ip netns add \$ns
  cnitool add lab004 /var/run/netns/\$ns | jq -c '{ns: \"'\$ns'\", ip: .ips[0].address, veth: .interfaces[1].name}'
done"
run "ip netns del acl-gone1     # the runtime restarts: gone1's sandbox is removed, its DEL never sent;
                             # gone2 is simply forgotten: its netns and veth stay, no DEL either"
wait_gone "$(grep -oE 'acl-gone1","ip":"[^"]*","veth":"veth[0-9a-f]{11}' "$CUR" | grep -oE 'veth[0-9a-f]{11}')"
run "ls -1 $STORE/lab004/ $STORE/lab004/holders/"
run "grep -a . $STORE/lab004/10.* | tr -d '\\r'"
run "for l in \$(ip -br link show master br-lab004 | cut -d@ -f1); do echo \"\$l \$(cat /sys/class/net/\$l/ifalias)\"; done"
run "ls -1 $CACHE/ | grep lab004            # libcni's cache: still lists all three"
run "ip netns list | grep -o 'acl-[a-z0-9]*'       # namespaces: gone2's is still there"
claim "004: three reservations, two veths before GC" \
  eq "$(count_addr lab004) $(ip -br link show master br-lab004 | grep -c veth)" "3 2"
run "echo '$GC_CONF}' | CNI_COMMAND=GC CNI_PATH=$BIN $BIN/academy; echo \"exit \$?\""
claim "004: GC without the list is refused" has 'GC needs cni.dev/valid-attachments'
run "printf 'cnitool-%s\\n' \$(printf %s /var/run/netns/acl-live | sha512sum | cut -c1-20)   # the one container the runtime still runs"
run "echo '$GC_CONF,\"cni.dev/valid-attachments\":[{\"containerID\":\"$LIVE\",\"ifname\":\"eth0\"}]}' |
  CNI_COMMAND=GC CNI_PATH=$BIN $BIN/academy; echo \"exit \$?\""
run "ls -1 $STORE/lab004/ $STORE/lab004/holders/"
run "ip -br link show master br-lab004"
claim "004: GC kept the live attachment and freed the two others" \
  eq "$(count_addr lab004) $(ip -br link show master br-lab004 | grep -c veth)" "1 1"
run "cnitool check lab004 /var/run/netns/acl-live && echo CHECK-OK"
run "ip netns exec acl-live ping -c1 10.98.40.1 | grep received"
claim "004: the live container still works" has '^CHECK-OK$'
run "ip netns del acl-gone2                  # the forgotten sandbox's namespace is the runtime's to remove"
run "echo '$GC_CONF,\"cni.dev/valid-attachments\":[]}' |
  CNI_COMMAND=GC CNI_PATH=$BIN $BIN/academy; echo \"exit \$?\"   # a list that forgets the live container"
run "cnitool check lab004 /var/run/netns/acl-live; echo \"exit \$?\""
claim "004: GC obeys the list even when it is wrong" has 'is not reserved for this container'
run "cnitool del lab004 /var/run/netns/acl-live; ip netns del acl-live"
for ns in acl-gone1 acl-gone2; do   # the missed DELs, so that cnitool's cache is emptied
  CNI_PATH=$BIN NETCONFPATH=$WORK/net.d cnitool del lab004 /var/run/netns/$ns >/dev/null 2>&1
done
mask "$CUR" >"$OUT/004-gc-after-restart.txt"

# --- docs, references, leftovers -----------------------------------------------------------

cleanup
trap - EXIT
echo "leftovers"
claim "no acl-* namespace left" eq "$(ip netns list | grep -c '^acl-')" 0
claim "no lab bridge left" eq "$(ip -br link show | grep -cE '^br-lab00[024] ')" 0
claim "no academy veth of the lab's networks left" \
  eq "$(ip -j link show type veth | jq '[.[] | select((.ifalias // "") | test("^academy:(lab00[024]|harness:'"$(cnitool_id /var/run/netns/acl-a1)"'):"))] | length')" 0
claim "no store of the lab's networks left" eq "$(ls -d $STORE/lab00* 2>/dev/null | wc -l)" 0
claim "no cached result of the lab left" eq "$(ls $CACHE 2>/dev/null | grep -cE '^lab00|acl-|'"$(cnitool_id /var/run/netns/acl-a1)")" 0
claim "the gate freed its harness address" test ! -e "$STORE/harness/holders/$(cnitool_id /var/run/netns/acl-a1):eth0"

echo "docs"
embed || FAILED+=("embedding")
"$ROOT/scripts/check-refs.sh" --fix || FAILED+=("file:line references")

if ((${#FAILED[@]})); then
  echo "lab.sh: ${#FAILED[@]} claim(s) of the write-ups no longer hold:" >&2
  printf '  %s\n' "${FAILED[@]}" >&2
  exit 1
fi
echo "lab.sh: every claim holds; outputs in docs/lab/, docs refreshed (git diff docs/ shows what changed)"
