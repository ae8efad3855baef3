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

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::fcntl::Flock;
use serde_json::json;

use crate::common::*;

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

/// The podman of this test (own config and stores, see [`PrivatePodman`]) and its own
/// CNI config folder.
impl PrivatePodman {
    fn plugin_dir(&self) -> PathBuf {
        self.dir.join("cni-bin")
    }
    fn conf_dir(&self) -> PathBuf {
        self.dir.join("net.d")
    }
    fn call_log(&self) -> PathBuf {
        self.dir.join("calls.log")
    }

    /// The calls the shim recorded, each a map of its fields.
    fn calls(&self) -> Vec<RecordedCall> {
        fs::read_to_string(self.call_log())
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let (fields, parent) = line.split_once(" parent=").unwrap_or((line, ""));
                let field = |k: &str| {
                    fields
                        .split(' ')
                        .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                        .unwrap_or("")
                        .to_owned()
                };
                RecordedCall {
                    command: field("cmd"),
                    container: field("cid"),
                    netns: field("netns"),
                    path: field("path"),
                    prev_result: field("prev") == "yes",
                    status: field("rc"),
                    parent: parent.trim().to_owned(),
                }
            })
            .collect()
    }

    fn containers(&self) -> Vec<String> {
        self.must(&["ps", "-a", "-q", "--no-trunc"])
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// One invocation of academy by podman, as the shim recorded it.
#[derive(Debug)]
struct RecordedCall {
    command: String,
    container: String,
    netns: String,
    path: String,
    prev_result: bool,
    status: String,
    parent: String,
}

/// Undoes everything the test made, whatever state it stopped in: podman's containers,
/// image, network namespaces and folder here, then the two labs' own guards.
struct Guard {
    podman: PrivatePodman,
    netns_before: BTreeSet<String>,
    _lock: Flock<fs::File>,
    net: Lab,
    full: Lab,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.podman.remove_all();
        for ns in podman_netns().difference(&self.netns_before) {
            let _ = run_quiet("ip", &["netns", "delete", ns]);
        }
    }
}

fn write(path: &Path, content: &str) {
    fs::write(path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn set_up(podman: &PrivatePodman, net: &Lab, full: &Lab) {
    for d in [
        podman.plugin_dir(),
        podman.conf_dir(),
        podman.dir.join("tmp"),
    ] {
        fs::create_dir_all(&d).expect("create test folder");
    }
    // academy itself sits outside the plugin folder; what podman finds there under the
    // name "academy" is a shim that records each call (command, container, netns,
    // whether stdin had a prevResult, who called, exit status) and runs academy with the
    // same arguments, environment and stdin.
    let real = podman.dir.join("academy-real");
    fs::copy(env!("CARGO_BIN_EXE_academy"), &real).expect("copy academy");
    let shim = podman.plugin_dir().join("academy");
    write(
        &shim,
        &format!(
            r#"#!/bin/sh
input=$(cat)
case $input in *'"prevResult"'*) prev=yes ;; *) prev=no ;; esac
printf '%s' "$input" | '{real}' "$@"
rc=$?
printf 'cmd=%s cid=%s netns=%s path=%s prev=%s rc=%s parent=%s\n' "$CNI_COMMAND" "$CNI_CONTAINERID" \
  "$CNI_NETNS" "$CNI_PATH" "$prev" "$rc" "$(tr '\0' ' ' </proc/$PPID/cmdline)" >>'{log}'
exit $rc
"#,
            real = real.display(),
            log = podman.call_log().display(),
        ),
    );
    fs::set_permissions(&shim, fs::Permissions::from_mode(0o755)).expect("chmod shim");

    podman.write_conf(&podman.plugin_dir(), &podman.conf_dir());

    for (lab, range) in [
        (net, json!({})),
        (
            full,
            json!({"rangeStart": full_only(full), "rangeEnd": full_only(full)}),
        ),
    ] {
        let mut plugin = json!({
            "type": "academy",
            "bridge": lab.bridge,
            "subnet": subnet_29(lab),
            "gateway": lab.gateway(),
            "dataDir": lab.data_dir,
        });
        for (k, v) in range.as_object().unwrap() {
            plugin[k] = v.clone();
        }
        let list = json!({ "cniVersion": "1.0.0", "name": lab.network, "plugins": [plugin] });
        write(
            &podman.conf_dir().join(format!("{}.conflist", lab.network)),
            &serde_json::to_string_pretty(&list).unwrap(),
        );
    }
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
    };
    let (p, net, full) = (&guard.podman, &guard.net, &guard.full);
    let (subnet, gateway, full_only) = (subnet_29(net), net.gateway(), full_only(full));
    let bridges = [net.bridge.clone(), full.bridge.clone()];
    set_up(p, net, full);
    p.build_image();
    step(t0, "image imported");

    // Discovery: podman reads the conflists and names academy as the networks' driver.
    let networks = p.must(&["network", "ls", "--format", "{{.Name}} {{.Driver}}"]);
    for network in [&net.network, &full.network] {
        assert!(
            networks.lines().any(|l| l == format!("{network} academy")),
            "podman network ls does not show {network} with driver academy:\n{networks}"
        );
    }

    // Rounds of `podman run --rm`: address in the subnet, gateway answers, all undone.
    let probe = format!("ip -4 -o addr show dev eth0 && ping -c1 -W2 {gateway}");
    for round in 1..=3 {
        let out = p.must(&[
            "run",
            "--rm",
            "--network",
            &net.network,
            "--cap-add",
            "NET_RAW",
            IMAGE,
            "sh",
            "-c",
            &probe,
        ]);
        let (addr, prefix) = parse_inet(&out);
        assert!(
            in_subnet(addr, net),
            "round {round}: {addr} is outside {subnet}"
        );
        assert_eq!(prefix, 29, "round {round}: prefix length of {addr}");
        assert_pinged(&out, &gateway);
        assert_clean(&guard, net, &format!("after --rm round {round}"));
        step(
            t0,
            &format!("--rm round {round}: {addr}/{prefix}, gateway answered, all undone"),
        );
    }

    // podman's --ip and --mac-address arrive as CNI_ARGS IP= and MAC=: academy must
    // give exactly that address and MAC, through the same store.
    let fixed_ip = net.ip(5);
    let out = p.must(&[
        "run",
        "--rm",
        "--network",
        &net.network,
        "--ip",
        &fixed_ip,
        "--mac-address",
        "02:00:00:00:ac:05",
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        &format!("ip -o link show dev eth0 && {probe}"),
    ]);
    let (addr, _) = parse_inet(&out);
    assert_eq!(addr.to_string(), fixed_ip, "--ip was not honoured:\n{out}");
    assert!(
        out.contains("02:00:00:00:ac:05"),
        "--mac-address was not honoured:\n{out}"
    );
    assert_pinged(&out, &gateway);
    assert_clean(&guard, net, "after the --ip/--mac-address round");
    step(
        t0,
        &format!("--ip {fixed_ip} --mac-address round: honoured, all undone"),
    );

    // `podman run -d`, then `podman stop`, then `podman rm`.
    let cid = p.must(&[
        "run",
        "-d",
        "--name",
        "academy-detached",
        "--network",
        &net.network,
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        IDLE,
    ]);
    let cid = cid.trim();
    let inside = p.must(&[
        "exec",
        "academy-detached",
        "ip",
        "-4",
        "-o",
        "addr",
        "show",
        "dev",
        "eth0",
    ]);
    let (addr, _) = parse_inet(&inside);
    assert!(in_subnet(addr, net), "detached: {addr} is outside {subnet}");
    assert_eq!(
        inspect_address(p, "academy-detached", &net.network),
        addr.to_string(),
        "podman inspect vs eth0"
    );
    assert_pinged(
        &p.must(&["exec", "academy-detached", "ping", "-c1", "-W2", &gateway]),
        &gateway,
    );
    let held = reserved(net);
    assert_eq!(held.len(), 1, "detached: store {held:?}");
    assert_eq!(held[0].0, addr.to_string(), "detached: reserved address");
    assert_eq!(
        held[0].1.split("\r\n").collect::<Vec<_>>(),
        vec![cid, "eth0"],
        "detached: reservation content"
    );
    assert_eq!(
        bridge_ports(&net.bridge).len(),
        1,
        "detached: one port on {}",
        net.bridge
    );
    p.must(&["stop", "-t", "10", "academy-detached"]);
    assert_eq!(
        reserved(net),
        Vec::new(),
        "after podman stop: store still holds an address"
    );
    assert_eq!(
        bridge_ports(&net.bridge),
        Vec::<String>::new(),
        "after podman stop: ports left"
    );
    p.must(&["rm", "academy-detached"]);
    assert_clean(&guard, net, "after podman run -d / stop / rm");
    step(t0, &format!("detached round: {addr}, stop and rm undid it"));

    // A detached container that exits by itself: the DEL comes from the
    // `podman container cleanup` process conmon starts, not from the podman we ran.
    let exits_cid = p.must(&[
        "run",
        "-d",
        "--name",
        "academy-exits",
        "--network",
        &net.network,
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        &probe,
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = p.must(&["inspect", "-f", "{{.State.Status}}", "academy-exits"]);
        if state.trim() == "exited"
            && reserved(net).is_empty()
            && bridge_ports(&net.bridge).is_empty()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the exited container's network was not torn down by podman's cleanup process: state {}, store {:?}, ports {:?}",
            state.trim(),
            reserved(net),
            bridge_ports(&net.bridge)
        );
        sleep(Duration::from_millis(200));
    }
    let logs = p.must(&["logs", "academy-exits"]);
    let (addr, _) = parse_inet(&logs);
    assert!(
        in_subnet(addr, net),
        "exits-by-itself: {addr} is outside {subnet}"
    );
    assert_pinged(&logs, &gateway);
    assert_eq!(
        p.must(&["inspect", "-f", "{{.State.ExitCode}}", "academy-exits"])
            .trim(),
        "0",
        "exits-by-itself: exit code"
    );
    p.must(&["rm", "academy-exits"]);
    assert_clean(&guard, net, "after a container exited by itself");
    step(
        t0,
        &format!("exits-by-itself round: {addr}, cleanup process undid it"),
    );

    // A full subnet: the range holds one address, a running container takes it, and the
    // next `podman run` must fail with academy's own words in podman's output.
    p.must(&[
        "run",
        "-d",
        "--name",
        "academy-holder",
        "--network",
        &full.network,
        IMAGE,
        "sh",
        "-c",
        IDLE,
    ]);
    assert_eq!(
        inspect_address(p, "academy-holder", &full.network),
        full_only,
        "the holder's address"
    );
    let netns_with_holder = podman_netns();
    let failed = p.run(&[
        "run",
        "--rm",
        "--name",
        "academy-no-room",
        "--network",
        &full.network,
        IMAGE,
        "true",
    ]);
    let shown = failed.to_string();
    assert!(
        failed.code != 0,
        "podman run on a full subnet succeeded:\n{shown}"
    );
    let expected = format!(
        "network {}: no free address in {}",
        full.network,
        subnet_29(full)
    );
    assert!(
        shown.contains(&expected),
        "podman's output does not carry academy's error text {expected:?}:\n{shown}"
    );
    eprintln!(
        "podman test: what the user saw on a full subnet:\n{}",
        failed.stderr
    );
    // The failed ADD (and podman's DEL after it, without prevResult) left nothing behind.
    let held = reserved(full);
    assert_eq!(held.len(), 1, "after the failed run: store {held:?}");
    assert_eq!(
        held[0].0, full_only,
        "after the failed run: the holder's address"
    );
    assert_eq!(
        bridge_ports(&full.bridge).len(),
        1,
        "after the failed run: ports on {}",
        full.bridge
    );
    assert_eq!(
        podman_netns(),
        netns_with_holder,
        "after the failed run: network namespaces"
    );
    let after_fail = p.containers();
    assert_eq!(
        after_fail.len(),
        1,
        "after the failed run --rm: containers {after_fail:?}"
    );
    p.must(&["stop", "-t", "10", "academy-holder"]);
    p.must(&["rm", "academy-holder"]);
    assert_clean(&guard, full, "after the full-subnet case");
    step(
        t0,
        "full subnet: academy's error reached the user, nothing left",
    );

    // How podman invoked academy, from the shim's record.
    let calls = p.calls();
    let mut counts = BTreeMap::new();
    for c in &calls {
        *counts
            .entry(format!("{} rc={}", c.command, c.status))
            .or_insert(0) += 1;
    }
    eprintln!("podman test: academy's calls: {counts:?}");
    // Discovery: podman probes each plugin with VERSION and dummy CNI_* values.
    assert!(
        calls.iter().any(|c| c.command == "VERSION"
            && c.netns == "dummy"
            && c.path == "dummy"
            && c.status == "0"),
        "no VERSION probe with dummy values answered: {calls:#?}"
    );
    // The self-exiting container's DEL came from `podman container cleanup`.
    let exits_cid = exits_cid.trim();
    let cleanup_del = calls
        .iter()
        .find(|c| c.command == "DEL" && c.container == exits_cid)
        .unwrap_or_else(|| panic!("no DEL for {exits_cid}: {calls:#?}"));
    assert!(
        cleanup_del.parent.contains("container cleanup") && cleanup_del.status == "0",
        "the DEL of the container that exited by itself: {cleanup_del:#?}"
    );
    // The failed ADD: podman then sent DEL without prevResult, and academy accepted it.
    let failed_adds: Vec<&RecordedCall> = calls
        .iter()
        .filter(|c| c.command == "ADD" && c.status != "0")
        .collect();
    assert_eq!(failed_adds.len(), 1, "failed ADDs: {failed_adds:#?}");
    let del_after_fail = calls
        .iter()
        .find(|c| c.command == "DEL" && c.container == failed_adds[0].container)
        .unwrap_or_else(|| panic!("no DEL after the failed ADD: {calls:#?}"));
    assert!(
        !del_after_fail.prev_result && del_after_fail.status == "0",
        "the DEL after the failed ADD: {del_after_fail:#?}"
    );
    // Every other call succeeded.
    let other_failures: Vec<&RecordedCall> = calls
        .iter()
        .filter(|c| c.status != "0" && c.container != failed_adds[0].container)
        .collect();
    assert!(
        other_failures.is_empty(),
        "academy failed: {other_failures:#?}"
    );

    // Outbound NAT as a podman user gets it: `podman network create` writes its own
    // conflist (bridge with ipMasq, then portmap, firewall, tuning); only `type` is
    // changed (and podman's shared bridge name, to the lab's). A container reaches an
    // outside that has no route back, which sees the host's address, and `-p` answers it.
    let masq = Lab::new("podmasq");
    let outside = Outside::new(&masq);
    for chained in ["portmap", "firewall", "tuning"] {
        let _ = std::os::unix::fs::symlink(
            format!("/usr/lib/cni/{chained}"),
            p.plugin_dir().join(chained),
        );
    }
    let v6 = format!("{}::/64", masq.slot.v6_prefix());
    let create = [
        "network",
        "create",
        "--subnet",
        &masq.subnet(),
        "--ipv6",
        "--subnet",
        &v6,
        &masq.network,
    ];
    let created = retried_while_links_vanish(|| p.run(&create));
    assert_eq!(created.code, 0, "podman network create:\n{created}");
    let file = p.conf_dir().join(format!("{}.conflist", masq.network));
    let mut list: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&file).expect("podman's conflist")).unwrap();
    assert_eq!(list["plugins"][0]["type"], "bridge");
    assert_eq!(
        list["plugins"][0]["ipMasq"], true,
        "podman's network sets ipMasq"
    );
    list["plugins"][0]["type"] = json!("academy");
    list["plugins"][0]["bridge"] = json!(masq.bridge);
    write(&file, &serde_json::to_string_pretty(&list).unwrap());
    let reach = format!(
        "ping -c1 -W2 {} && ping -c1 -W2 {} && echo | nc -w 5 {} 8081",
        outside.far_v4, outside.far_v6, outside.far_v4
    );
    let listener = listen(&outside.netns, &outside.far_v4, 8081);
    let out = p.must(&[
        "run",
        "--rm",
        "--network",
        &masq.network,
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        &reach,
    ]);
    let seen = listener.wait_with_output().expect("listener");
    let peer = String::from_utf8_lossy(&seen.stdout).trim().to_string();
    assert!(out.contains("hello"), "the outside did not answer:\n{out}");
    assert_eq!(
        peer, outside.host_v4,
        "the outside saw the container's own address"
    );
    assert!(
        nft::elements(&masq.network).is_empty(),
        "elements after run --rm"
    );
    step(t0, "ipMasq: podman run reached the outside as the host");

    let host_port = (20000 + std::process::id() % 20000 + u32::from(masq.slot.n)).to_string();
    p.must(&[
        "run",
        "-d",
        "--name",
        "academy-published",
        "--network",
        &masq.network,
        "-p",
        &format!("{host_port}:8080"),
        IMAGE,
        "sh",
        "-c",
        "while true; do echo hello | nc -l -p 8080; done",
    ]);
    let got = connect(&outside.netns, &outside.host_v4, host_port.parse().unwrap());
    assert_eq!(got, "hello", "-p {host_port}:8080 from the outside");
    assert_eq!(
        nft::elements(&masq.network).len(),
        2,
        "a v4 and a v6 element while it runs"
    );
    p.must(&["rm", "-f", "-t", "0", "academy-published"]);
    assert!(nft::elements(&masq.network).is_empty(), "elements after rm");
    assert!(masq.lab_veths().is_empty(), "veths after rm");
    p.must(&["network", "rm", &masq.network]);
    step(t0, "ipMasq: -p answered the outside; rm left no element");

    drop(guard);
    assert!(
        !bridges.iter().any(|b| link_exists(b)),
        "the guard left a bridge"
    );
    step(t0, "cleaned up");
}
