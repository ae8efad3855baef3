#!/bin/bash
# Runs inside the throwaway VM on Debian 12's stock kernel (scripts/kernel-vm/run-in-vm.sh),
# started by tests/it/vlan.rs, with the shared folder as cwd holding: academy (the static
# release binary), academy-debug + fault-shim.so (the test build and the netlink fault
# shim of tests/it/common/shim.rs), and the reference plugins bridge and host-local
# (Debian's 1.1.1). The VM is the test's own: names and subnets need no lab allocator,
# and nothing outlives it. Prints PASS/FAIL lines; exits 1 if any check failed.
set -u
# Everything runs from the VM's own tmpfs: under TCG a binary executed off the 9p share
# pages in at several hundred ms per exec (academy --version: ~500 ms from the share,
# ~60 ms from tmpfs), and part 7 executes academy hundreds of times.
D=/tmp/vlan
mkdir -p "$D" && cp "$PWD"/* "$D"/ && cd "$D" || { echo "FAIL copying the shared folder into $D"; exit 1; }
A=$D/academy
export CNI_PATH=$D
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
expect() { # what command...: PASS when the command succeeds
  local what=$1; shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
same() { # what want got: PASS when they are equal
  if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: got '$3', want '$2'"; fi
}
refuse() { # what command...: PASS when the command fails
  local what=$1; shift
  if "$@"; then fail "$what"; else pass "$what"; fi
}

# conf NAME BRIDGE SUBNET EXTRA: the reference form, host-local in the shared folder.
conf() {
  printf '{"cniVersion":"1.0.0","name":"%s","type":"academy","releaseUnusedAfter":0,"bridge":"%s","ipam":{"type":"host-local","subnet":"%s","dataDir":"%s/data"}%s}' \
    "$1" "$2" "$3" "$D" "${4:-}"
}
with_prev() { jq -c --argjson r "$2" '. + {prevResult: $r}' <<<"$1"; }
# cni PLUGIN COMMAND CID NETNS CONFIG: one invocation; its stdout is the result or error.
cni() { CNI_COMMAND=$2 CNI_CONTAINERID=$3 CNI_NETNS=/run/netns/$4 CNI_IFNAME=eth0 "$1" <<<"$5"; }
# add PLUGIN CID NETNS CONFIG: ADD that must succeed; prints the result.
add() {
  local out
  if out=$(cni "$1" ADD "$2" "$3" "$4"); then echo "$out"; else
    echo "FAIL ADD $2 with $(basename "$1"): $out" >&2; fails=$((fails + 1)); echo '{}'
  fi
}
ip4() { jq -r '.ips[0].address | split("/")[0]' <<<"$1"; }
hostveth() { jq -r '.interfaces[1].name' <<<"$1"; }
pings() { ip netns exec "$1" ping -c1 -W2 "$2" >/dev/null 2>&1; }
# The port's VLANs, sorted, as "vid:flag,flag" words (bridge -j vlan show).
port_vlans() {
  bridge -j vlan show dev "$1" 2>/dev/null |
    jq -r '[.[] | .vlans[]?] | sort_by(.vlan) | map("\(.vlan):\((.flags // []) | sort | join(","))") | join(" ")'
}
filtering() { ip -j -d link show "$1" | jq -r '.[0].linkinfo.info_data.vlan_filtering'; }
isolated() { ip -j -d link show "$1" | jq -r '.[0].linkinfo.info_slave_data.isolated'; }
reservations() { # the store's live files of network $1: addresses and holders
  local dir=$D/data/$1
  { ls "$dir" 2>/dev/null | grep -E '^[0-9a-f.:]+$'; ls "$dir/holders" 2>/dev/null; } | grep -v '^\.tmp' | sort | tr '\n' ' '
}
ns() { for n in "$@"; do ip netns add "$n"; done; }
echo "kernel $(uname -r)"

# --- 1. vlan: an access port; same VLAN talks, another VLAN does not ----------------
echo "part 1 at ${SECONDS}s"
ns v1 v2 v3
V10=$(conf v10 brv 10.10.0.0/24 ',"isGateway":true,"vlan":10')
V20=$(conf v20 brv 10.10.0.0/24 ',"vlan":20')
V20=$(jq -c '.ipam.rangeStart="10.10.0.100" | .ipam.rangeEnd="10.10.0.150"' <<<"$V20")
R1=$(add "$A" c1 v1 "$V10")
R2=$(add "$A" c2 v2 "$V10")
R3=$(add "$A" c3 v3 "$V20")
same "the bridge filters by VLAN" 1 "$(filtering brv)"
same "c1's port is an untagged access port of VLAN 10 (vid 1 kept)" \
  "1:Egress Untagged 10:Egress Untagged,PVID" "$(port_vlans "$(hostveth "$R1")")"
same "c3's port is in VLAN 20" "1:Egress Untagged 20:Egress Untagged,PVID" "$(port_vlans "$(hostveth "$R3")")"
expect "the gateway of VLAN 10 is on brv.10, reported after the container" \
  test "$(jq -r '.interfaces[3].name' <<<"$R1")" = brv.10
expect "brv.10 holds the gateway address" bash -c "ip -j addr show brv.10 | jq -e '.[0].addr_info[] | select(.local == \"10.10.0.1\")' >/dev/null"
expect "c1 reaches c2 in VLAN 10" pings v1 "$(ip4 "$R2")"
expect "c1 reaches its gateway in VLAN 10" pings v1 10.10.0.1
refuse "c1 (VLAN 10) cannot reach c3 (VLAN 20)" pings v1 "$(ip4 "$R3")"
refuse "c3 (VLAN 20) cannot reach c2 (VLAN 10)" pings v3 "$(ip4 "$R2")"
expect "CHECK of c1 passes" cni "$A" CHECK c1 v1 "$(with_prev "$V10" "$R1")"
H1=$(hostveth "$R1")
bridge vlan del dev "$H1" vid 10
OUT=$(cni "$A" CHECK c1 v1 "$(with_prev "$V10" "$R1")")
expect "CHECK names the VLAN taken off the port" bash -c "jq -e '.code == 120 and (.msg | contains(\"VLAN 10 is missing\"))' <<<'$OUT' >/dev/null"
for c in c1:v1:"$V10" c2:v2:"$V10" c3:v3:"$V20"; do
  IFS=: read -r cid n cfg <<<"$c"
  expect "DEL $cid" cni "$A" DEL "$cid" "$n" "$cfg"
done
gone="$(hostveth "$R1") $(hostveth "$R2") $(hostveth "$R3")"
expect "DEL took the ports and their VLAN entries" \
  test -z "$(bridge -j vlan show | jq -r --arg gone "$gone" '.[] | select(.ifname as $n | $gone | split(" ") | index($n)) | .ifname')"
same "DEL left only the VLAN gateway's port on brv" 1 "$(ip -j link show master brv | jq length)"
expect "DEL freed every address of v10 and v20" test -z "$(reservations v10)$(reservations v20)"

# --- 2. preserveDefaultVlan false: only the asked VLAN stays -------------------------
echo "part 2 at ${SECONDS}s"
ns p1
P=$(conf pd brp 10.11.0.0/24 ',"vlan":30,"preserveDefaultVlan":false')
RP=$(add "$A" p1 p1 "$P")
same "without the default VLAN the port has VLAN 30 alone" "30:Egress Untagged,PVID" "$(port_vlans "$(hostveth "$RP")")"
expect "CHECK with preserveDefaultVlan false passes" cni "$A" CHECK p1 p1 "$(with_prev "$P" "$RP")"
bridge vlan add dev "$(hostveth "$RP")" vid 1 untagged
OUT=$(cni "$A" CHECK p1 p1 "$(with_prev "$P" "$RP")")
expect "CHECK notices the default VLAN added back" bash -c "jq -e '.code == 120 and (.msg | contains(\"VLANs 1 besides\"))' <<<'$OUT' >/dev/null"
# GC of an attachment it is not told about takes its port and the port's VLANs, as DEL.
HP=$(hostveth "$RP")
GC=$(jq -c '.cniVersion = "1.1.0" | .["cni.dev/valid-attachments"] = []' <<<"$P")
expect "GC with an empty valid list" env CNI_COMMAND=GC bash -c "$A <<<'$GC'"
same "GC took the port" gone "$(ip link show "$HP" >/dev/null 2>&1 && echo present || echo gone)"
same "and its VLAN entries" "" "$(bridge -j vlan show | jq -r --arg p "$HP" '.[] | select(.ifname == $p) | .ifname')"
same "GC freed the address" "" "$(reservations pd)"

# --- 3. vlanTrunk: tagged frames cross the trunk port --------------------------------
echo "part 3 at ${SECONDS}s"
ns t1 t2
T=$(conf trunk brt 10.12.0.0/24 ',"vlanTrunk":[{"id":10},{"minID":20,"maxID":22}]')
ACC=$(conf acc brt 10.13.0.0/24 ',"vlan":21')
RT=$(add "$A" t1 t1 "$T")
RA=$(add "$A" t2 t2 "$ACC")
same "the trunk port carries 10 and 20-22 tagged (and the default VLAN)" \
  "1:Egress Untagged,PVID 10: 20: 21: 22:" "$(port_vlans "$(hostveth "$RT")")"
ip -n t1 link add link eth0 name eth0.21 type vlan id 21
ip -n t1 addr add 10.13.0.200/24 dev eth0.21
ip -n t1 link set eth0.21 up
expect "a VLAN 21 subinterface in the trunk's netns reaches the VLAN 21 container" pings t1 "$(ip4 "$RA")"
ip -n t1 link add link eth0 name eth0.23 type vlan id 23
ip -n t1 addr add 10.14.0.200/24 dev eth0.23
ip -n t1 link set eth0.23 up
ip -n t2 addr add 10.14.0.201/24 dev eth0
refuse "VLAN 23, not in the trunk, does not cross it" pings t1 10.14.0.201
expect "CHECK of the trunk passes" cni "$A" CHECK t1 t1 "$(with_prev "$T" "$RT")"
cni "$A" DEL t1 t1 "$T"
cni "$A" DEL t2 t2 "$ACC"
same "DEL of the trunk removed its port" 0 "$(ip -j link show master brt | jq length)"

# --- 4. portIsolation: isolated ports reach the gateway, not each other --------------
echo "part 4 at ${SECONDS}s"
ns i1 i2
I=$(conf iso bri 10.15.0.0/24 ',"isGateway":true,"portIsolation":true')
RI1=$(add "$A" i1 i1 "$I")
RI2=$(add "$A" i2 i2 "$I")
same "the port is isolated" true "$(isolated "$(hostveth "$RI1")")"
refuse "isolated ports cannot reach each other" pings i1 "$(ip4 "$RI2")"
expect "isolated port 1 reaches the gateway" pings i1 10.15.0.1
expect "isolated port 2 reaches the gateway" pings i2 10.15.0.1
expect "CHECK of an isolated port passes" cni "$A" CHECK i1 i1 "$(with_prev "$I" "$RI1")"
cni "$A" DEL i1 i1 "$I"
cni "$A" DEL i2 i2 "$I"

# --- 5. side by side with the reference bridge plugin (1.1.1 has vlan) ---------------
echo "part 5 at ${SECONDS}s"
# Two subnets: one host cannot route one subnet to two VLAN gateways.
ns r1 a1
REF=$(conf refnet brr 10.16.0.0/24 ',"isGateway":true,"vlan":40')
REF=$(jq -c '.type = "bridge"' <<<"$REF")
ACA=$(conf acanet bra 10.19.0.0/24 ',"isGateway":true,"vlan":40')
RR=$(add "$D/bridge" r1 r1 "$REF")
RC=$(add "$A" a1 a1 "$ACA")
same "the reference's bridge filters by VLAN" 1 "$(filtering brr)"
same "academy and the reference give the container's port the same VLANs" \
  "$(port_vlans "$(hostveth "$RR")")" "$(port_vlans "$(hostveth "$RC")")"
gwport() { ip -j link show master "$1" | jq -r --arg c "$2" '.[] | select(.ifname != $c) | .ifname'; }
same "the VLAN gateway's port has the same VLANs in both" \
  "$(port_vlans "$(gwport brr "$(hostveth "$RR")")")" "$(port_vlans "$(gwport bra "$(hostveth "$RC")")")"
gwaddr() { ip -j addr show "$1" | jq -r '[.[0].addr_info[] | select(.family == "inet") | "\(.local)/\(.prefixlen)"] | join(" ")'; }
same "both put the gateway on <bridge>.40" "$(gwaddr brr.40 | sed 's/10.16/X/')" "$(gwaddr bra.40 | sed 's/10.19/X/')"
shape() { jq -r '[(.interfaces | length), .interfaces[3].name, (.interfaces[3].sandbox // "")] | join(" ")' <<<"$1"; }
same "both results list 4 interfaces, the 4th <bridge>.40 on the host" \
  "$(shape "$RR" | sed 's/brr/X/')" "$(shape "$RC" | sed 's/bra/X/')"
same "the same host part of the address" "$(ip4 "$RR" | cut -d. -f4)" "$(ip4 "$RC" | cut -d. -f4)"
expect "reference container reaches its VLAN gateway" pings r1 10.16.0.1
expect "academy container reaches its VLAN gateway" pings a1 10.19.0.1
expect "reference: DEL" cni "$D/bridge" DEL r1 r1 "$REF"
expect "academy: DEL" cni "$A" DEL a1 a1 "$ACA"
same "after DEL both bridges keep only the VLAN gateway's port" \
  "$(ip -j link show master brr | jq length)" "$(ip -j link show master bra | jq length)"

# --- 6. the seed gate and ipMasq on this kernel --------------------------------------
echo "part 6 at ${SECONDS}s"
ns g1
G='{"cniVersion":"1.0.0","name":"gate","type":"academy","releaseUnusedAfter":0,"bridge":"brg","subnet":"10.17.0.0/24","gateway":"10.17.0.1","dataDir":"'$D'/data","ipMasq":true}'
RG=$(add "$A" g1 g1 "$G")
expect "gate: the container has its address" bash -c "ip -n g1 -j addr show eth0 | jq -e '.[0].addr_info[] | select(.local == \"$(ip4 "$RG")\")' >/dev/null"
expect "gate: ping the gateway" pings g1 10.17.0.1
expect "gate: CHECK" cni "$A" CHECK g1 g1 "$(with_prev "$G" "$RG")"
expect "ipMasq: the container's address is in academy's nf_tables set" \
  bash -c "nft -j list table inet academy | jq -e '.nftables[] | select(.set.name == \"gate-v4\") | .set.elem[] | select((.elem.val // .) == \"$(ip4 "$RG")\")' >/dev/null"
expect "ipMasq: the masquerade rule exists" bash -c "nft list chain inet academy postrouting | grep -q 'masquerade'"
expect "gate: DEL" cni "$A" DEL g1 g1 "$G"
expect "gate: a second DEL is silent" test -z "$(cni "$A" DEL g1 g1 "$G")"
expect "ipMasq: DEL removed the element" \
  bash -c "! nft -j list table inet academy | jq -e '.nftables[] | select(.set.name == \"gate-v4\") | .set.elem' >/dev/null"
same "gate: DEL removed the port" 0 "$(ip -j link show master brg | jq length)"

# --- 7. a refused or killed netlink request at every point of a VLAN ADD ------------
echo "part 7 at ${SECONDS}s"
ns f1
F=$(conf fault brf 10.18.0.0/24 ',"isGateway":true,"vlan":50,"preserveDefaultVlan":false,"portIsolation":true')
# shim K [SIGKILL]: the test build's ADD with netlink send #K refused (or killed).
shim() {
  LD_PRELOAD=$D/fault-shim.so FAULT_SHIM_AT=$1 FAULT_SHIM_ACTION=${2:-} FAULT_SHIM_COUNT=1 \
    cni "$D/academy-debug" ADD f1 f1 "$F"
}
sends() { { shim 0 >/dev/null; } 2>&1 | sed -n 's/^fault-shim: \([0-9]*\) netlink sends$/\1/p'; }
# (ip -o and awk, not jq: jq 1.6 takes ~600 ms to start under TCG, and this runs once
# per fault.)
ports() { ip -o link show master brf 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort | tr '\n' ' '; }
bare() { ip link del brf.50 2>/dev/null; ip link del brf 2>/dev/null; }
# What a failed ADD must leave: the container's pair is gone (eth0 in f1 dies with it),
# no reservation, and the bridge's ports as before (the shared bridge and VLAN gateway
# may stay, as they do after any ADD).
leftovers() { # base-ports
  local left=""
  ip -n f1 link show eth0 >/dev/null 2>&1 && left="$left eth0 left in the netns;"
  [ -z "$(reservations fault)" ] || left="$left reservations: $(reservations fault);"
  [ "$1" = "*" ] || [ "$(ports)" = "$1" ] || left="$left ports of brf: '$(ports)' (before: '$1');"
  echo "$left"
}
faults() { # what N base-ports action setup
  local what=$1 n=$2 base=$3 action=$4 setup=$5 before=$fails k out rc left
  for k in $(seq 1 "$n"); do
    $setup
    out=$(shim "$k" "$action" 2>&1)
    rc=$?
    left=""
    [ $rc -ne 0 ] || left="ADD succeeded although send #$k failed;"
    grep -q "fault-shim: .* at netlink send #$k " <<<"$out" || left="$left the shim did not hit send #$k;"
    if [ "$action" = SIGKILL ]; then
      cni "$A" DEL f1 f1 "$F" >/dev/null || left="$left DEL after the kill failed;"
    fi
    left="$left$(leftovers "$base")"
    if [ -n "$left" ]; then
      fail "$what, send #$k of $n: $left $(tail -c 300 <<<"$out")"
      cni "$A" DEL f1 f1 "$F" >/dev/null
    fi
  done
  [ "$fails" -eq "$before" ] && pass "$what: all $n sends, nothing left"
}
# On a bare node, so that every request of a VLAN ADD is made: the bridge (with VLAN
# filtering), the VLAN's gateway and its port, the container's pair, port and VLANs.
# (A warm node makes a subset; each fault under TCG costs about 2 s, so once is enough.)
bare
N=$(sends)
cni "$A" DEL f1 f1 "$F"
expect "a first VLAN ADD makes netlink requests to fault (${N:-none})" test "${N:-0}" -gt 8
faults "refused on a bare node" "${N:-0}" "*" "" bare
# Killed: DEL finishes the job, and the next ADD completes a half-made VLAN gateway.
faults "killed on a bare node, then DEL" "${N:-0}" "*" SIGKILL bare
RF=$(add "$A" f1 f1 "$F")
same "after the faults a clean ADD gives an isolated VLAN 50 port alone" \
  "50:Egress Untagged,PVID true" "$(port_vlans "$(hostveth "$RF")") $(isolated "$(hostveth "$RF")")"
same "and its gateway port has VLAN 50 alone" "50:Egress Untagged,PVID" \
  "$(port_vlans "$(ip -j link show master brf | jq -r --arg c "$(hostveth "$RF")" '.[] | select(.ifname != $c) | .ifname')")"
expect "and it reaches its gateway" pings f1 10.18.0.1
cni "$A" DEL f1 f1 "$F"

# --- 8. macspoofchk on this kernel: academy's bridge-family table -------------------
# Its expressions (bridge family, iifname and ether saddr lookups) are what 6.1 must
# accept as 6.18 does.
echo "part 8 at ${SECONDS}s"
ns m1 m2
M='{"cniVersion":"1.0.0","name":"spoof","type":"academy","releaseUnusedAfter":0,"bridge":"brm","subnet":"10.20.0.0/24","gateway":"10.20.0.1","dataDir":"'$D'/data","macspoofchk":true}'
RM1=$(add "$A" m1 m1 "$M")
RM2=$(add "$A" m2 m2 "$M")
expect "macspoofchk: the table bridge academy exists" bash -c "nft list table bridge academy >/dev/null"
expect "macspoofchk: m1 reaches the gateway with its own MAC" pings m1 10.20.0.1
expect "macspoofchk: CHECK passes" cni "$A" CHECK m1 m1 "$(with_prev "$M" "$RM1")"
OWN=$(jq -r '.interfaces[2].mac' <<<"$RM1")
ip -n m1 link set eth0 address 02:5a:00:00:00:01
ip -n m1 neigh flush all
ip neigh flush dev brm
refuse "macspoofchk: m1 with another MAC cannot reach the gateway" pings m1 10.20.0.1
expect "macspoofchk: m2, unchanged, still reaches it" pings m2 10.20.0.1
ip -n m1 link set eth0 address "$OWN"
ip -n m1 neigh flush all
expect "macspoofchk: m1 with its MAC back reaches it again" pings m1 10.20.0.1
expect "macspoofchk: DEL m1" cni "$A" DEL m1 m1 "$M"
guarded() { # the ports in network spoof's guarded set
  nft -j list table bridge academy |
    jq -r '[.nftables[] | .set? | select(.name == "spoof-guarded") | .elem[]? | .elem.val] | sort | join(" ")'
}
elements() { # elements left in network spoof's sets and map
  nft -j list table bridge academy | jq '[.nftables[] | (.set // .map)? | select(.name != null and (.name | startswith("spoof-"))) | .elem[]?] | length'
}
same "macspoofchk: DEL left only m2's port guarded" "$(hostveth "$RM2")" "$(guarded)"
expect "macspoofchk: DEL m2" cni "$A" DEL m2 m2 "$M"
same "macspoofchk: DEL left no element" 0 "$(elements)"

echo "failed checks: $fails (${SECONDS}s)"
exit $((fails > 0))
