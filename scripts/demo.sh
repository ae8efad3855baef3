#!/usr/bin/env bash
# Seed 002's gate, run by hand the way the lab runs it: cnitool drives the installed
# academy against a throwaway netns. Each step prints what it did and whether it passed;
# everything the demo made is removed at the end, pass or fail.
set -uo pipefail

export CNI_PATH=${CNI_BIN_DIR:-/opt/cni/lab-bin} NETCONFPATH=${CNI_CONF_DIR:-/etc/cni/lab-net.d}
NET=harness
NS=academy-demo-$$
NSPATH=/var/run/netns/$NS
conflist=$NETCONFPATH/10-harness.conflist
BRIDGE=$(jq -r '.plugins[0].bridge' "$conflist")
GATEWAY=$(jq -r '.plugins[0].gateway' "$conflist")
bridge_existed=0
ip link show "$BRIDGE" >/dev/null 2>&1 && bridge_existed=1
failures=0

step() { printf '\n==> %s\n' "$*"; }
ok() { printf '    PASS: %s\n' "$*"; }
bad() { printf '    FAIL: %s\n' "$*"; failures=$((failures + 1)); }

cleanup() {
  step "cleanup: DEL, netns, and the bridge if the demo created it"
  cnitool del "$NET" "$NSPATH" >/dev/null 2>&1
  ip netns del "$NS" 2>/dev/null
  ((bridge_existed)) || ip link del "$BRIDGE" 2>/dev/null
  left=$(ip -o link show type veth | grep -c "academy:$NET:cnitool-" || true)
  echo "    netns removed; academy veths left for this network: $left"
}
trap cleanup EXIT

step "ip netns add $NS"
ip netns add "$NS" && ok "netns $NSPATH"

step "cnitool add $NET $NSPATH"
if result=$(cnitool add "$NET" "$NSPATH"); then
  echo "$result" | jq .
  addr=$(echo "$result" | jq -r '.ips[0].address // empty')
  if [[ -n $addr ]]; then ok "result has ips[0].address = $addr"; else bad "result has no ips"; fi
else
  bad "cnitool add failed"; exit 1
fi

step "ip -n $NS -br addr show; ip -n $NS route"
ip -n "$NS" -br addr show
ip -n "$NS" route
if ip -n "$NS" -o addr show | grep -q " ${addr} "; then ok "$addr is on the container interface"; else bad "$addr is not in the netns"; fi
if ip -n "$NS" route | grep -q "^default via $GATEWAY "; then ok "default route via $GATEWAY"; else bad "no default route via $GATEWAY"; fi

step "ip netns exec $NS ping -c2 $GATEWAY"
if ip netns exec "$NS" ping -c2 -W2 "$GATEWAY"; then ok "gateway answers"; else bad "gateway does not answer"; fi

step "cnitool check $NET $NSPATH"
if cnitool check "$NET" "$NSPATH"; then ok "CHECK-OK"; else bad "CHECK failed"; fi

step "cnitool del $NET $NSPATH (twice)"
if cnitool del "$NET" "$NSPATH"; then ok "first DEL"; else bad "first DEL failed"; fi
if out=$(cnitool del "$NET" "$NSPATH") && [[ -z $out ]]; then ok "SECOND-DEL-OK (exit 0, no output)"; else bad "second DEL failed or printed: $out"; fi

step "ip -n $NS -br addr show (only lo is left)"
ip -n "$NS" -br addr show
if [[ $(ip -n "$NS" -o link show | wc -l) -eq 1 ]]; then ok "only lo"; else bad "interfaces left in the netns"; fi

echo
if ((failures)); then echo "demo: $failures step(s) failed"; exit 1; fi
echo "demo: every step passed"
