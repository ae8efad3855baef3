//! academy's integration tests: one test binary (`cargo test --test it`), one module per
//! concern, shared helpers in [`common`]. Root only: they build real network
//! namespaces, bridges and veths, and run the plugin as cnitool and podman do.
//!
//! | module        | concern                                                        |
//! |---------------|----------------------------------------------------------------|
//! | `gate`        | seed 002's gate through cnitool, and the cases that must fail  |
//! | `cli_conventions` | `--version`, `help`, `--help`, usage errors (exit 2, stderr), |
//! |               | academy(8) through groff, the bash completion through bash     |
//! | `protocol/`   | the CNI protocol at its edges, as refusal tables by subject:   |
//! |               | env, config, versions, namespaces, conflicts; DEL and CHECK    |
//! | `ipam_lab`    | seed 000: the address store under real namespaces, in parallel |
//! | `failure/`    | failure atomicity: a fault at every netlink request and store  |
//! |               | call (route attributes and DAD too); seed 004's restart;       |
//! |               | ADD/DEL/GC bursts and races                                    |
//! | `leaks/`      | leaks: self-healing, `academy list` and `academy reclaim`      |
//! | `hardening`   | what a hostile or unlucky host puts in academy's way           |
//! | `masquerade`  | ipMasq end to end, against an outside the test makes           |
//! | `non_masquerade` | nonMasqueradeCIDRs: a pod keeps its address to another     |
//! |               | node's pods and is masqueraded to the internet; the rule follows |
//! |               | the config through CHECK, STATUS, ADD and restore           |
//! | `macspoof`    | macspoofchk end to end, and beside the reference bridge 1.1.1  |
//! | `mac_filter_parts` | a MAC filter with a part deleted: restore, ADD and DEL complete it |
//! | `dropin/`     | academy as a drop-in for the reference bridge + host-local,    |
//! |               | one file per subject (addresses, static requests, keys, ...)   |
//! | `multinet`    | a container on several networks (academy's, the reference's)   |
//! | `route_attrs` | routes with priority, table, scope, mtu, advmss                |
//! | `mtu_auto/`   | `"mtu": "auto"`: the node's default route's MTU, CHECK after it |
//! |               | changes, an existing bridge of another MTU                     |
//! | `iface_keys`  | enabledad, disableContainerInterface, ipam.resolvConf          |
//! | `layer2`      | a network without ipam: interfaces on the bridge, no address   |
//! | `forward/`    | a dropping iptables FORWARD policy (Docker's): the bridge accepted, |
//! |               | no wider than `firewall`; iptables reloads and flushes         |
//! | `bandwidth`   | the bandwidth capability and keys: TCP flows measured against  |
//! |               | the rate, every operation of its kind, refusals, netns budget  |
//! | `isolation`   | ingressPolicy same-bridge beside the reference firewall plugin: |
//! |               | the outcome table, a flush restored, the last DEL's release    |
//! | `keys_off`    | a key turned off since ADD: DEL, GC and the release still take |
//! |               | the MAC filter, the masquerade element, the ifb                |
//! | `kinds`       | each kind of nf_tables state through every operation of the    |
//! |               | table of kinds: CHECK, STATUS, restore, GC, the last DEL   |
//! | `network_lifetime` | a network's own objects go with its last attachment: a   |
//! |               | thousand networks used and emptied, a DEL racing a first ADD   |
//! | `network_grace` | ... or `releaseUnusedAfter` later, by the next invocation on |
//! |               | any network, racing a first ADD; a lifecycle silent on stderr  |
//! | `services`    | Services between pods of one bridge through a kube-proxy-like DNAT, |
//! |               | with and without bridged traffic passing netfilter             |
//! | `netns_entry` | how often, and from which thread, the netns is entered         |
//! | `podman/`     | academy under a real runtime (podman 4.3, CNI backend), as     |
//! |               | named phases of one run                                        |
//! | `podman_multinet` | a podman container on two academy networks, -p, connect; on |
//! |               | two converted networks, its port published once                |
//! | `portmap/`    | ports published by academy itself: outside, host, hairpin,     |
//! |               | podman -p, a CRI hostPort                                     |
//! | `cri`         | academy under containerd's CRI plugin, as kubelet drives it    |
//! | `cri_cluster` | the `install --template --cluster-cidr` template under containerd |
//! |               | 1.6: cniVersions ignored (1.0.0), the cluster left unmasqueraded |
//! | `cluster/`    | a cluster in simulation: three node netns on an underlay, node 1 |
//! |               | under containerd's CRI on the installed cluster template; pod to |
//! |               | pod across nodes, masquerade out, hostPort, DEL/GC isolation, an |
//! |               | installer upgrade under running pods                            |
//! | `installer`   | the installer image (FROM scratch) and its DaemonSet           |
//! | `switching/`  | a podman network on the reference chain beside its `academy convert`ed |
//! |               | entry, the same scenario on each (DROP FORWARD, loopback, iptables |
//! |               | reload and flush, nft flush ruleset, isolation): academy never weaker |
//! | `reference_switch` | a live reference network switched by `academy convert`: DEL |
//! |               | removes the reference's leftovers; convert's report and --in-place |
//! | `restore_lock` | a network released by its last DEL during a restore stays released |
//! | `restore_removal` | an attachment DELed during a restore keeps nothing put back |
//! | `upgrade`     | the previous release and v0.4.0 (built from git history) replaced |
//! |               | under live containers: CHECK, STATUS, the published port, DEL, GC |
//! | `rollback`    | this build replaced by the previous release and v0.4.0 under live |
//! |               | containers, then back: CHECK, DEL, GC; install sweeps what v0.4.0 left |
//! | `vlan`        | the bridge port: VLANs (in a VM on Debian's kernel), isolation |
//! | `flush_ports` | published ports (v4, v6, hostIP) back after `nft flush ruleset`, |
//! |               | a deleted table, a Debian nftables.conf: by the watch, by       |
//! |               | `academy restore`; an older academy's attachment named; the     |
//! |               | runtime record gone with DEL and GC                             |
//! | `watch`       | `academy watch` in a node: flushes, deleted tables, iptables   |
//! |               | reloads put back within a second; lost notifications           |
//! | `ipv6_uplink` | a node's uplink learning its IPv6 routes from radvd keeps them |
//! |               | through the first IPv6 gateway ADD (forwarding on); `academy status` |
//! |               | names an uplink that lost its advertisements                     |
//! | `full_bridge` | a bridge of 1,023 ports: the next ADD says so (code 11) and leaves |
//! |               | nothing; STATUS 50; `academy status` shows ports against the limit |
//! | `soak`        | soak/selftest.py: every stand-in (academy with one rule broken) |
//! |               | reported by the soak; a short soak, fixed and random seed, clean |
//! | `alert_rules` | deploy/prometheus/'s alerts through promtool check and test    |
//! | `metrics`     | `academy watch --metrics` scraped by a real Prometheus in a node; |
//! |               | a silent client, a huge request; `academy status` against `list` |
//!
//! A module with a `/` is a folder: its mod.rs says which file holds which subject and
//! keeps what they share, so a failing test's path names its subject
//! (`failure::races::...`, `dropin::keys::...`).
//!
//! # Adding a test module
//!
//! 1. Put the file at `tests/it/<concern>.rs` and add `mod <concern>;` below. When it
//!    grows toward the 600-line limit, make it a folder `tests/it/<concern>/` of one file
//!    per subject, with `mod.rs` holding the shared helpers and a table of the files.
//! 2. Start it with `use crate::common::*;` (not `mod common;`: the helpers are already
//!    compiled into this binary once).
//! 3. Build every test on its own `Lab::new("tag")`: the lab takes the next slot of the one
//!    allocator (`common/alloc.rs`), which gives its subnet 10.A.n.0/24 (and fd00:A:n::/64),
//!    its bridge and every other name. Never pick a subnet or a name by hand. A file written
//!    for the older layout with `Lab::new("tag", N)` only loses the N.
//! 4. A helper two modules need goes into the `common` submodule of its job (processes,
//!    lab objects, kernel, snapshots, assertions, strace, shim); one that only one module
//!    needs stays in that module. Nothing here allows dead code: an unused helper is an
//!    error, so delete it rather than keep it "for later".
//! 5. Tests run concurrently (`--test-threads`), all modules in one process. A test that
//!    changes or compares something host-wide holds a lock for it: dropin's reference lock
//!    (the forwarding sysctls the reference bridge plugin flips) and the podman test's file
//!    lock (`/run/academy-podman-test.lock`, also against other processes: it compares
//!    /run/netns before and after), the installer's (`/run/academy-installer-test.lock`)
//!    and one per CRI test (`/run/academy-cri-<tag>.lock`), all taken with
//!    `common::lock_file`. A new test of that kind takes the lock it shares a resource
//!    with, or adds one beside it.
//! 6. Every program a test runs must be installed by `make setup`; a test fails (never
//!    skips, never installs) when one is missing, saying so.

mod common;

mod alert_rules;
mod bandwidth;
mod cli_conventions;
mod cli_inputs;
mod cluster;
mod cri;
mod cri_cluster;
mod dropin;
mod failure;
mod flush_ports;
mod foreign_sys;
mod forward;
mod full_bridge;
mod gate;
mod hardening;
mod iface_keys;
mod installer;
mod ipam_lab;
mod ipv6_uplink;
mod isolation;
mod keys_off;
mod kinds;
mod layer2;
mod leaks;
mod mac_filter_parts;
mod macspoof;
mod masquerade;
mod metrics;
mod mtu_auto;
mod multinet;
mod nat_identity;
mod nat_repair;
mod netns_entry;
mod network_grace;
mod network_lifetime;
mod non_masquerade;
mod podman;
mod podman_multinet;
mod portmap;
mod protocol;
mod reference_switch;
mod restore_lock;
mod restore_removal;
mod rollback;
mod route_attrs;
mod services;
mod shared_bridge;
mod soak;
mod switching;
mod upgrade;
mod vlan;
mod watch;
mod watch_conf;
