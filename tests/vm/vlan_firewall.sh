#!/bin/bash
# Runs inside the throwaway VM on Debian 12's stock kernel (scripts/kernel-vm/run-in-vm.sh),
# started by tests/it/vlan.rs, with the shared folder as cwd holding academy-debug (the
# test build). Issue 31: with `vlan` and `isGateway` routed traffic goes through
# <bridge>.<vid>; the FORWARD accepts under a DROP policy, the isolation (ingressPolicy
# same-bridge) and the loopback guard must hold for it, as for the same scenario on an
# untagged bridge. Two networks, na (bra, untagged) and nb (brb, VLAN 10 in the vlan
# case), one container each, routed to each other by the VM. Prints PASS/FAIL lines;
# exits 1 if any check failed.
set -u
# From the VM's own tmpfs: under TCG a binary executed off the 9p share pages in at
# several hundred ms per exec (tests/vm/vlan.sh).
D=/tmp/vlanfw; mkdir -p "$D" && cp "$PWD"/academy-debug "$D"/ && cd "$D" || { echo "FAIL copying academy-debug into $D"; exit 1; }
A=$D/academy-debug
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
echo "kernel $(uname -r)"
sysctl -qw net.ipv4.ip_forward=1
cni() { CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=/run/netns/$3 CNI_IFNAME=eth0 CNI_PATH=$D "$A" <<<"$4"; }
conf() { printf '{"cniVersion":"1.0.0","name":"%s","type":"academy","bridge":"%s","subnet":"%s","dataDir":"%s/data-%s"%s}' "$1" "$2" "$3" "$D" "$1" "${4:-}"; }
ip4() { jq -r '.ips[0].address | split("/")[0]' <<<"$1"; }
pings() { ip netns exec "$1" ping -c1 -W2 "$2" >/dev/null 2>&1; }
run_case() { # label extraA extraB
  local label=$1
  for ns in ca cb; do ip netns del $ns 2>/dev/null; ip netns add $ns; done
  local ca cb ra rb
  ca=$(conf na bra 10.1.0.0/24 "$2"); cb=$(conf nb brb 10.2.0.0/24 "$3")
  ra=$(cni ADD a ca "$ca") || { fail "$label ADD a: $ra"; return; }
  rb=$(cni ADD b cb "$cb") || { fail "$label ADD b: $rb"; return; }
  echo "$label: a $(ip4 "$ra"), b $(ip4 "$rb"); links: $(ip -br link | awk '{print $1}' | tr '\n' ' ')"
  echo "$label: $4"
  eval "$5"
  cni DEL a ca "$ca" >/dev/null; cni DEL b cb "$cb" >/dev/null
  ip link del brb.10 2>/dev/null; ip link del bra 2>/dev/null; ip link del brb 2>/dev/null
  for ns in ca cb; do ip netns del $ns; done
}
# 1. DROP policy: academy's accepts must let both directions through.
nft add table ip filter
nft 'add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }'
forward_checks='
  if pings cb $(ip4 "$ra"); then pass "$label b->a under DROP"; else fail "$label b->a under DROP"; nft list table ip filter; fi
  if pings ca $(ip4 "$rb"); then pass "$label a->b under DROP"; else fail "$label a->b under DROP"; fi'
run_case untagged '' '' "FORWARD DROP" "$forward_checks"
run_case vlan '' ',"vlan":10' "FORWARD DROP" "$forward_checks"
nft delete table ip filter
# 2. isolation: open first (routing works), then both same-bridge, policy accept: nothing between them.
iso_checks='
  if pings cb $(ip4 "$ra"); then fail "$label b->a isolated"; nft list set inet academy _isolated; else pass "$label b->a isolated"; fi
  if pings ca $(ip4 "$rb"); then fail "$label a->b isolated"; else pass "$label a->b isolated"; fi'
open_checks='
  if pings cb $(ip4 "$ra"); then pass "$label b->a open"; else fail "$label b->a open"; fi'
run_case untagged '' '' open "$open_checks"
run_case vlan '' ',"vlan":10' open "$open_checks"
run_case untagged ',"ingressPolicy":"same-bridge"' ',"ingressPolicy":"same-bridge"' isolation "$iso_checks"
run_case vlan ',"ingressPolicy":"same-bridge"' ',"vlan":10,"ingressPolicy":"same-bridge"' isolation "$iso_checks"
# 3. loopback guard: a port published on 127.0.0.1 sets route_localnet on the routed interface, guarded.
lo_checks='
  gw=brb; [ "$label" = vlan ] && gw=brb.10
  if [ "$(cat /proc/sys/net/ipv4/conf/$gw/route_localnet 2>/dev/null)" = 1 ]; then pass "$label route_localnet on $gw"; else fail "$label route_localnet on $gw"; fi
  if nft list set inet academy _localnet 2>/dev/null | grep -q "\"$gw\""; then pass "$label $gw guarded"; else fail "$label $gw guarded"; nft list set inet academy _localnet; fi'
pm=',"capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[{"hostPort":18080,"containerPort":80,"protocol":"tcp","hostIP":"127.0.0.1"}]}'
run_case untagged '' "$pm" "loopback guard" "$lo_checks"
run_case vlan '' ",\"vlan\":10$pm" "loopback guard" "$lo_checks"
echo "failed checks: $fails"
exit $((fails > 0))
