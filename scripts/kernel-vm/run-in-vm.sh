#!/bin/bash
# run-in-vm.sh SCRIPT [SHARED_DIR]    run SCRIPT on Debian 12's stock kernel in a throwaway VM
# run-in-vm.sh --prepare              only download/unpack the kernel and build the initramfs
#
# academy's integration tests need a kernel with bridge VLAN filtering, which the build
# machine may lack (tests/it/vlan.rs). This boots Debian 12's stock kernel
# (linux-image-amd64, 6.1.x) in a throwaway QEMU microvm, runs SCRIPT (with bash)
# inside as root, prints its output and exits with its exit code. No network device,
# no disk: the root fs is an initramfs (busybox-static + Debian's bash/iproute2/
# nftables/kmod with their libs + the kernel's net/ module tree); the host is reached
# only through 9p. The kernel package is `apt-get download`ed and unpacked into the
# cache, never installed. The packages it needs come from scripts/setup.sh.
#
#   SHARED_DIR (optional) is mounted read-write inside the VM at the SAME
#   absolute path as on the host (and also at /shared); SCRIPT runs with it
#   as cwd.  Without it, cwd is /tmp (tmpfs).
#
# Environment knobs:
#   KVM_VM_CACHE   cache dir for kernel/initramfs (default /var/cache/academy-kernel-vm)
#   VM_KERNEL_PKG  kernel package (default: what linux-image-amd64 depends on)
#   VM_MODULES     modules to modprobe before the test
#                  (default "bridge veth 8021q nf_tables"); others autoload via
#                  the in-VM /sbin/modprobe (real kmod), e.g. nft_* expressions.
#   VM_EXTRA_BINS  extra host binaries (absolute paths) to copy into the
#                  initramfs with their shared libs (space separated)
#   VM_ACCEL       tcg (default) | kvm
#   VM_MEM         guest RAM in MiB (default 1024)
#   VM_SMP         vCPUs (default 1)
#   VM_TIMEOUT     seconds before the VM is killed (default 600)
#   VM_CMDLINE     extra kernel cmdline
#   VM_VERBOSE=1   echo the serial console (kernel log) to stderr
#   VM_QUIET=1     don't print the timing line on stderr
#
# Exit code: SCRIPT's exit code; 125 if the VM died without reporting one
# (console log is printed to stderr then); 124 on timeout.
#
# Traps met on the way (measured on a 2-vCPU machine whose /dev/kvm is a software PVM
# that cannot boot a stock kernel, hence TCG): the bzImage's in-guest xz decompression
# took ~10 s under TCG, so the uncompressed vmlinux is extracted and booted through its
# PVH entry point; about 1 boot in 3 hung in PIT-based TSC calibration until the host's
# TSC frequency was passed as tsc_early_khz (0 hangs in 14 boots after); a boot watchdog
# retries anyway. Debian's busybox sh runs its own applets before PATH, so /init calls
# /sbin/modprobe and /usr/sbin/ip by full path. Boot to the script's first line: ~3.5 s.
set -euo pipefail

die() { echo "run-in-vm: $*" >&2; exit 125; }
PREPARE=0
if [ "${1:-}" = --prepare ] && [ $# -eq 1 ]; then PREPARE=1; else
  [ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 SCRIPT [SHARED_DIR] | --prepare"
  SCRIPT=$(readlink -f "$1"); [ -f "$SCRIPT" ] || die "no such script: $1"
fi
SHARED=""
if [ $# -eq 2 ]; then SHARED=$(readlink -f "$2"); [ -d "$SHARED" ] || die "no such dir: $2"; fi

CACHE=${KVM_VM_CACHE:-/var/cache/academy-kernel-vm}
MODULES=${VM_MODULES:-bridge veth 8021q nf_tables}
ACCEL=${VM_ACCEL:-tcg}
MEM=${VM_MEM:-1024}
SMP=${VM_SMP:-1}
TIMEOUT=${VM_TIMEOUT:-600}
SELF=$(readlink -f "$0")
T0=$(date +%s.%N)

# ---------------------------------------------------------------- packages
# The packages come from scripts/setup.sh: a test never installs anything.
ensure_pkgs() {
  local need=() p
  for p in qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 nftables jq; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] || die "missing packages ${need[*]}: run make setup (scripts/setup.sh)"
}

# ------------------------------------------------------------ kernel + initrd
# The kernel .deb is only downloaded and unpacked into the cache (never
# installed), so no bootloader/initramfs hooks run on the host.
build_kernel() {
  local pkg=$1; local kdir=$CACHE/$pkg
  [ -f "$kdir/vmlinux" ] && [ -f "$kdir/modules.ok" ] && return 0
  rm -rf "$kdir.tmp"; mkdir -p "$kdir.tmp"
  ( cd "$kdir.tmp" && apt-get download "$pkg" >/dev/null 2>&1 ) || die "apt-get download $pkg failed"
  dpkg-deb -x "$kdir.tmp"/*.deb "$kdir.tmp/root"
  local vmlinuz off
  vmlinuz=$(ls "$kdir.tmp"/root/boot/vmlinuz-*)
  # Extract the uncompressed ELF vmlinux from the bzImage: QEMU boots it via
  # the PVH entry point, skipping BIOS real-mode setup and the (slow under
  # TCG) in-guest xz decompression.
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
  [ -n "$off" ] || die "no xz payload in $vmlinuz"
  tail -c +$((off + 1)) "$vmlinuz" | xz -dcq > "$kdir.tmp/vmlinux" 2>/dev/null || true
  [ "$(head -c4 "$kdir.tmp/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] || die "vmlinux extraction failed"
  rm -f "$kdir.tmp"/*.deb
  touch "$kdir.tmp/modules.ok"
  rm -rf "$kdir"; mv "$kdir.tmp" "$kdir"
}

copy_with_libs() { # dest bin...
  local dest=$1; shift; local b l
  for b in "$@"; do
    [ -e "$b" ] || die "missing host binary $b"
    mkdir -p "$dest$(dirname "$b")"; cp -L "$b" "$dest$b"
    for l in $(ldd "$b" 2>/dev/null | grep -o '/[^ ]*'); do
      [ -e "$dest$l" ] && continue
      mkdir -p "$dest$(dirname "$l")"; cp -L "$l" "$dest$l"
    done
  done
}

build_initrd() {
  local pkg=$1 out=$2; local kdir=$CACHE/$pkg
  local kver; kver=$(ls "$kdir/root/lib/modules")
  local st; st=$(mktemp -d "$CACHE/initrd.XXXXXX")
  local m=$kdir/root/lib/modules/$kver
  mkdir -p "$st"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,ctl,shared,var,lib/modules/$kver}
  ln -s ../run "$st/var/run"; ln -s lib "$st/lib64" 2>/dev/null || true

  # --- modules: net/ (minus big irrelevant stacks) + some drivers/net, 9p,
  # virtio; closed over modules.dep.  Debian 6.1 modules are plain .ko.
  depmod -b "$kdir/root" "$kver"
  local seeds
  seeds=$(cd "$m" && find kernel/net kernel/fs/9p kernel/drivers/virtio \
            kernel/drivers/net/veth.ko kernel/drivers/net/dummy.ko kernel/drivers/net/macvlan.ko \
            kernel/drivers/net/ipvlan kernel/drivers/net/vxlan kernel/drivers/net/geneve.ko \
            kernel/drivers/net/bonding kernel/drivers/net/vrf.ko kernel/drivers/net/tun.ko \
            kernel/drivers/net/ifb.ko kernel/drivers/net/nlmon.ko kernel/drivers/net/wireguard \
            kernel/crypto/crc32c_generic.ko kernel/arch/x86/crypto/crc32c-intel.ko \
            -name '*.ko' 2>/dev/null \
          | grep -Ev '^kernel/net/(wireless|mac80211|bluetooth|sunrpc|ceph|nfc|rxrpc|ieee802154|mac802154|6lowpan|rfkill|atm|appletalk|dsa|tipc|rds|smc|can|batman-adv|l2tp|sctp|dccp|phonet|qrtr|lapb|x25|rose|netrom|ax25|9p/9pnet_(xen|rdma)|vmw_vsock|nsh|mctp|mpls|caif|iucv|hsr)/')
  local all; all=$( (echo "$seeds"; for s in $seeds; do
                      grep "^$s:" "$m/modules.dep" | cut -d: -f2 | tr ' ' '\n'; done) | grep . | sort -u)
  local f; for f in $all; do mkdir -p "$st/lib/modules/$kver/$(dirname "$f")"; cp "$m/$f" "$st/lib/modules/$kver/$f"; done
  cp "$m"/modules.{order,builtin,builtin.modinfo} "$st/lib/modules/$kver/"
  depmod -b "$st" "$kver"

  # --- userland: busybox for the basics, real Debian tools where it matters
  cp /bin/busybox "$st/bin/busybox"
  local a; for a in $(/bin/busybox --list); do [ -e "$st/bin/$a" ] || ln -s busybox "$st/bin/$a"; done
  # jq: the in-VM tests read JSON. libgcc_s and libdl: a Rust binary that is not static (the test build, run under the netlink
  # fault shim, which needs the dynamic loader) links it.
  copy_with_libs "$st" /bin/bash /usr/sbin/ip /usr/sbin/bridge /usr/sbin/tc /usr/bin/ss /usr/sbin/nft /bin/kmod \
    /lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libdl.so.2 /usr/bin/jq ${VM_EXTRA_BINS:-}
  for a in /usr/sbin/ip /usr/sbin/bridge /usr/sbin/tc /usr/bin/ss /usr/sbin/nft; do ln -sf "$a" "$st/bin/$(basename "$a")"; done
  ln -sf bash "$st/bin/sh.bash"
  for a in modprobe insmod rmmod lsmod depmod modinfo; do rm -f "$st/sbin/$a" "$st/bin/$a"; ln -s /bin/kmod "$st/sbin/$a"; done
  for f in /etc/protocols /etc/services /etc/ethertypes /etc/iproute2 /usr/share/iproute2; do
    [ -e "$f" ] && { mkdir -p "$st$(dirname "$f")"; cp -a "$f" "$st$f"; }
  done
  printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$st/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$st/etc/group"
  echo 'hosts: files' > "$st/etc/nsswitch.conf"; printf '127.0.0.1 localhost\n::1 localhost\n' > "$st/etc/hosts"
  echo vm > "$st/etc/hostname"

  cat > "$st/init" <<'EOF'
#!/bin/busybox sh
# NB: Debian's busybox sh prefers its own applets over PATH; use full paths
# for the real tools (/sbin/modprobe = kmod, /usr/sbin/ip = iproute2).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount --make-rshared / 2>/dev/null
hostname vm; /usr/sbin/ip link set lo up
fail() { echo "VM-INIT: $*" > /dev/console; echo o > /proc/sysrq-trigger; sleep 10; }
/sbin/modprobe -a virtio_mmio 9pnet_virtio 9p || fail "9p modules"
O=trans=virtio,version=9p2000.L,msize=262144,cache=none
mount -t 9p -o $O ctl /ctl || fail "mount ctl"
. /ctl/env
if [ -n "$SHARED_PATH" ]; then
  mount -t 9p -o $O shared /shared || fail "mount shared"
  mkdir -p "$SHARED_PATH" && mount --bind /shared "$SHARED_PATH"
  cd "$SHARED_PATH"
else
  cd /tmp
fi
[ -n "$MODULES" ] && { /sbin/modprobe -a $MODULES || echo "VM-INIT: modprobe -a $MODULES failed" >> /ctl/output; }
echo "@@VM-TEST-START@@" > /dev/console
/bin/bash /ctl/script >> /ctl/output 2>&1 < /dev/null
echo $? > /ctl/rc.tmp && mv /ctl/rc.tmp /ctl/rc
sync
echo o > /proc/sysrq-trigger
sleep 10
EOF
  chmod +x "$st/init"
  ( cd "$st" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 ) > "$out.tmp"
  mv "$out.tmp" "$out"; rm -rf "$st"
}

ensure_pkgs
mkdir -p "$CACHE"
KPKG=${VM_KERNEL_PKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
[ -n "$KPKG" ] || die "cannot resolve linux-image-amd64"
KEY=$( { cat "$SELF"; echo "$KPKG ${VM_EXTRA_BINS:-}";
         dpkg-query -W busybox-static bash iproute2 nftables kmod libc6 2>/dev/null; } | sha256sum | cut -c1-16)
INITRD=$CACHE/initrd-$KPKG-$KEY.cpio
exec 9>"$CACHE/.lock"; flock 9
build_kernel "$KPKG"
[ -f "$INITRD" ] || { echo "run-in-vm: building initramfs (one-off)" >&2; build_initrd "$KPKG" "$INITRD"
                  find "$CACHE" -maxdepth 1 -name 'initrd-*.cpio' ! -path "$INITRD" -delete; }
flock -u 9; exec 9>&-
[ $PREPARE = 1 ] && { echo "run-in-vm: kernel $KPKG and initramfs ready in $CACHE" >&2; exit 0; }

# ---------------------------------------------------------------- run
CTL=$(mktemp -d /tmp/run-in-vm.XXXXXX)
trap 'rm -rf "$CTL"' EXIT
cp "$SCRIPT" "$CTL/script"; : > "$CTL/output"
{ printf 'SHARED_PATH=%q\n' "$SHARED"; printf 'MODULES=%q\n' "$MODULES"; } > "$CTL/env"

ACCEL_ARGS=(-accel tcg,tb-size=256 -cpu max)
[ "$ACCEL" = kvm ] && ACCEL_ARGS=(-accel kvm -cpu host)
FS=(-fsdev "local,id=ctl,path=$CTL,security_model=none" -device virtio-9p-device,fsdev=ctl,mount_tag=ctl)
[ -n "$SHARED" ] && FS+=(-fsdev "local,id=shared,path=$SHARED,security_model=none" -device virtio-9p-device,fsdev=shared,mount_tag=shared)

# Boot watchdog: without tsc_early_khz ~1 in 3 TCG boots hung silently in
# early boot (see below); kept as a safety net.  If the test hasn't started within
# VM_BOOT_TIMEOUT s, kill qemu and boot again (up to VM_BOOT_TRIES times).
# Root cause of the hangs: the kernel's early PIT-based TSC calibration fails
# under TCG when the host is slow/busy ("tsc: Unable to calibrate against
# PIT") and boot stalls. Under TCG the guest TSC *is* the host TSC, so hand
# the kernel the host's TSC frequency (tsc_early_khz) and skip calibration.
TSC_KHZ=${VM_TSC_KHZ:-$(cat /sys/devices/system/cpu/cpu0/tsc_freq_khz 2>/dev/null || awk '/^cpu MHz/{printf "%d", $4*1000; exit}' /proc/cpuinfo)}
TSC_ARGS=""; [ "$ACCEL" = tcg ] && [ -n "$TSC_KHZ" ] && TSC_ARGS="tsc_early_khz=$TSC_KHZ tsc=reliable"
BOOT_TIMEOUT=${VM_BOOT_TIMEOUT:-30}; TRIES=${VM_BOOT_TRIES:-3}
now() { date +%s%N; }
boot_once() { # -> 0 ran to completion, 2 boot hang, 124 timeout
  : > "$CTL/console.log"; rm -f "$CTL/tfirst"
  TSTART=$(date +%s.%N)
  qemu-system-x86_64 "${ACCEL_ARGS[@]}" \
    -M microvm,x-option-roms=off,rtc=on -m "$MEM" -smp "$SMP" \
    -nodefaults -no-user-config -display none -serial stdio -monitor none -nic none -no-reboot \
    -kernel "$CACHE/$KPKG/vmlinux" -initrd "$INITRD" \
    -append "console=ttyS0 quiet loglevel=1 panic=-1 mitigations=off $TSC_ARGS ${VM_CMDLINE:-}" \
    "${FS[@]}" < /dev/null > "$CTL/console.log" 2>&1 &
  QPID=$!
  local tpid=""; [ "${VM_VERBOSE:-0}" = 1 ] && { tail -n +1 -f --pid=$QPID "$CTL/console.log" >&2 & tpid=$!; }
  local t0 started=0 r=0; t0=$(now)
  while kill -0 $QPID 2>/dev/null; do
    if [ $started = 0 ] && grep -qa '@@VM-TEST-START@@' "$CTL/console.log"; then started=1; date +%s.%N > "$CTL/tfirst"; fi
    local el=$(( ($(now) - t0) / 1000000000 ))
    if [ $started = 0 ] && [ $el -ge "$BOOT_TIMEOUT" ]; then r=2; break; fi
    if [ $el -ge "$TIMEOUT" ]; then r=124; break; fi
    sleep 0.05
  done
  [ $r != 0 ] && kill $QPID 2>/dev/null
  wait $QPID 2>/dev/null; QRC=$?
  [ -n "$tpid" ] && wait $tpid 2>/dev/null
  return $r
}
TEND=""; QRC=0
for try in $(seq 1 "$TRIES"); do
  r=0; boot_once || r=$?
  [ $r = 2 ] || break
  echo "run-in-vm: boot hang (no test start after ${BOOT_TIMEOUT}s), attempt $try/$TRIES" >&2
  [ -n "${VM_DEBUG_HANG:-}" ] && cp "$CTL/console.log" "$VM_DEBUG_HANG.$try"
  : > "$CTL/output"
done
[ $r = 124 ] && QRC=124
TEND=$(date +%s.%N)

cat "$CTL/output"
if [ -f "$CTL/rc" ]; then RC=$(cat "$CTL/rc"); else
  RC=125; [ "$QRC" = 124 ] && RC=124
  { echo "run-in-vm: VM exited (qemu rc=$QRC) without a test exit code; console:"; tail -n 40 "$CTL/console.log" 2>/dev/null; } >&2
fi
if [ "${VM_QUIET:-0}" != 1 ]; then
  awk -v t0="$T0" -v ts="$TSTART" -v te="$TEND" -v tf="$(cat "$CTL/tfirst" 2>/dev/null)" -v rc="$RC" 'BEGIN{
    printf "run-in-vm: rc=%s  qemu->test-start %s  qemu wall %.2fs  total %.2fs\n", rc,
      (tf=="" ? "n/a" : sprintf("%.2fs", tf-ts)), te-ts, te-t0 }' >&2
fi
exit "$RC"
