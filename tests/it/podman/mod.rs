//! academy under a real runtime: Debian 12's podman 4.3 with the CNI network backend.
//!
//! What cnitool cannot show: podman discovering academy in a plugin folder, probing it
//! with VERSION, invoking ADD and DEL the way a runtime really does (DEL also from the
//! `podman container cleanup` process that conmon starts when a container exits on its
//! own, and DEL without prevResult after a failed ADD), and academy's error reaching the
//! user through podman's own output, and outbound NAT on the network `podman network
//! create` writes (only `type` changed) reaching a made outside, `-p` included. A shim named `academy` in the plugin folder records
//! each call and runs the real binary, so the test can say who called and how.
//!
//! Needs root, and podman, runc and busybox-static from Debian's packages (`make setup`
//! installs them); fails (never skips, never installs) when they are missing. podman's
//! config comes from CONTAINERS_CONF (a test-written containers.conf), its image and
//! container stores from --root/--runroot, its CNI configs from network_config_dir, all
//! in one test folder: the machine's own podman config, networks and images are not read
//! or changed. What podman 4.3 keeps in fixed machine-wide places is network namespaces
//! (/run/netns), libcni's result cache (/var/lib/cni/results) and an image blob-info
//! cache (/var/lib/containers/cache). A Drop guard removes the containers, the image,
//! the test folder and any network namespace the test left; the two networks are labs
//! (subnets and names from the allocator), whose own guards remove the bridges,
//! academy's host veths and the networks' cached results, also when an assertion fails.
//!
//! The test is one run through phases, in order, on one podman and its two networks (the
//! image is built once, and the last phases read what podman did in the earlier ones from
//! the shim's record). Each phase is a function; a failure names its phase on stderr
//! (`podman test: FAILED in phase ...`) after the assertion's own message:
//!
//! | phase (file)                     | what it shows                                       |
//! |----------------------------------|-----------------------------------------------------|
//! | `discovery` (phases.rs)          | podman lists academy as the networks' driver        |
//! | `rm_rounds` (phases.rs)          | three `run --rm`: address, gateway, all undone      |
//! | `fixed_ip_and_mac` (phases.rs)   | --ip and --mac-address honoured through CNI_ARGS    |
//! | `detached_stop_rm` (phases.rs)   | `run -d`, `stop` tears down, `rm` leaves nothing    |
//! | `exits_by_itself` (phases.rs)    | conmon's cleanup process sends the DEL              |
//! | `full_subnet` (phases.rs)        | academy's error reaches the user; nothing left      |
//! | `invocations` (phases.rs)        | VERSION probe, who sent each DEL, DEL after failure |
//! | `outbound_nat` (masquerade.rs)   | podman's own ipMasq conflist reaches an outside     |
//! | `published_port` (masquerade.rs) | `-p` answers the outside; `rm` leaves no element    |
//!
//! setup.rs makes the podman (its config, the recording shim, the networks' conflists,
//! the image) and the guard that undoes it.

mod masquerade;
mod phases;
mod setup;

use std::fs;
use std::net::Ipv4Addr;
use std::time::Instant;

use crate::common::*;
use setup::{set_up, Guard};

/// A container command that ends at once on SIGTERM (so `podman stop` needs no SIGKILL).
const IDLE: &str = "trap 'exit 0' TERM; sleep 600 & wait";

/// The network's subnet as podman's conflist gets it: the first /29 of the lab's /24, so
/// .2 to .6 are the container addresses.
fn subnet_29(lab: &Lab) -> String {
    format!("{}.0/29", lab.prefix)
}

/// The only address of the full network's range.
fn full_only(full: &Lab) -> String {
    full.ip(2)
}

fn in_subnet(addr: Ipv4Addr, lab: &Lab) -> bool {
    let net: Ipv4Addr = format!("{}.0", lab.prefix).parse().unwrap();
    let mask = u32::MAX << (32 - 29);
    u32::from(addr) & mask == u32::from(net) & mask
}

/// The IPv4 address in `ip -4 -o addr show dev eth0` output, with its prefix length.
fn parse_inet(output: &str) -> (Ipv4Addr, u8) {
    let cidr = output
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .unwrap_or_else(|| panic!("no inet address in:\n{output}"));
    let (addr, prefix) = cidr.split_once('/').expect("address/prefix");
    (
        addr.parse().expect("IPv4 address"),
        prefix.parse().expect("prefix length"),
    )
}

fn assert_pinged(output: &str, gateway: &str) {
    assert!(
        output.contains(&format!("PING {gateway} ")) && output.contains("1 packets received"),
        "the container did not ping its gateway {gateway}:\n{output}"
    );
}

/// The network's reservations as (address, holder): academy's store of the lab.
fn reserved(lab: &Lab) -> Vec<(String, String)> {
    address_files(lab)
        .into_iter()
        .map(|a| {
            let holder = holder_of(lab, &a).unwrap_or_default();
            (a, holder)
        })
        .collect()
}

/// After a container is gone: academy's store, the bridge and the netns are clean.
fn assert_clean(guard: &Guard, lab: &Lab, when: &str) {
    let p = &guard.podman;
    assert_eq!(
        p.containers(),
        Vec::<String>::new(),
        "{when}: podman still lists containers"
    );
    assert_eq!(
        lab.reservations(),
        Vec::<String>::new(),
        "{when}: {}'s store still holds addresses or holder indexes",
        lab.network
    );
    assert!(
        link_exists(&lab.bridge),
        "{when}: bridge {} is gone",
        lab.bridge
    );
    assert_eq!(
        bridge_ports(&lab.bridge),
        Vec::<String>::new(),
        "{when}: bridge {} still has ports",
        lab.bridge
    );
    assert_eq!(
        lab.lab_veths(),
        Vec::<String>::new(),
        "{when}: academy host veths left"
    );
    let left: Vec<_> = podman_netns()
        .difference(&guard.netns_before)
        .cloned()
        .collect();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "{when}: network namespaces left in /run/netns"
    );
}

/// The address podman recorded for a running container on `network`.
fn inspect_address(p: &PrivatePodman, name: &str, network: &str) -> String {
    let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
    p.must(&["inspect", "-f", &format, name]).trim().to_owned()
}

fn step(t0: Instant, what: &str) {
    eprintln!("podman test: [{:6.1}s] {what}", t0.elapsed().as_secs_f64());
}

/// What every phase works with: the guard (the test's podman and its two networks) and
/// the clock of the run.
struct Ctx<'a> {
    guard: &'a Guard,
    t0: Instant,
}

impl Ctx<'_> {
    /// The container command of the rounds: its address, then one ping of the gateway.
    fn probe(&self) -> String {
        format!(
            "ip -4 -o addr show dev eth0 && ping -c1 -W2 {}",
            self.guard.net.gateway()
        )
    }
}

/// Names the phase a failure happened in: dropped while panicking, it says so on stderr
/// after the panic's own message.
struct Phase {
    name: &'static str,
    t0: Instant,
}

impl Drop for Phase {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "podman test: FAILED in phase {} (phases.rs or masquerade.rs), after {:.1}s",
                self.name,
                self.t0.elapsed().as_secs_f64()
            );
        }
    }
}

fn phase<T>(c: &Ctx, name: &'static str, run: impl FnOnce() -> T) -> T {
    let _named = Phase { name, t0: c.t0 };
    step(c.t0, &format!("phase {name}"));
    run()
}

#[test]
fn academy_under_podman() {
    let t0 = Instant::now();
    assert_eq!(
        nix::unistd::geteuid().as_raw(),
        0,
        "the podman test must run as root (it runs rootful podman, makes bridges)"
    );
    let lock = lock_file(PODMAN_LOCK);
    require_podman_packages();
    step(t0, "packages present");

    // Two networks, each on a lab of its own (bridge, /29 of the lab's subnet, store,
    // cleanup): `net` for the rounds, `full` with a range of one address.
    let (net, full) = (Lab::new("podnet"), Lab::new("podfull"));
    let dir = net.root.join("podman");
    fs::create_dir_all(&dir).expect("test folder");
    let guard = Guard {
        podman: PrivatePodman { dir },
        netns_before: podman_netns(),
        _lock: lock,
        net,
        full,
        _chains: FirewallChains::hold(),
    };
    let (p, net, full) = (&guard.podman, &guard.net, &guard.full);
    let bridges = [net.bridge.clone(), full.bridge.clone()];
    set_up(p, net, full);
    p.build_image();
    step(t0, "image imported");

    let c = Ctx { guard: &guard, t0 };
    phase(&c, "discovery", || phases::discovery(&c));
    phase(&c, "rm_rounds", || phases::rm_rounds(&c));
    phase(&c, "fixed_ip_and_mac", || phases::fixed_ip_and_mac(&c));
    phase(&c, "detached_stop_rm", || phases::detached_stop_rm(&c));
    let exits_cid = phase(&c, "exits_by_itself", || phases::exits_by_itself(&c));
    phase(&c, "full_subnet", || phases::full_subnet(&c));
    phase(&c, "invocations", || phases::invocations(&c, &exits_cid));
    let (masq, outside) = phase(&c, "outbound_nat", || masquerade::outbound_nat(&c));
    phase(&c, "published_port", || {
        masquerade::published_port(&c, &masq, &outside)
    });

    drop(guard);
    assert!(
        !bridges.iter().any(|b| link_exists(b)),
        "the guard left a bridge"
    );
    step(t0, "cleaned up");
}
