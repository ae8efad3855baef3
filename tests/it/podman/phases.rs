//! The phases on the two academy networks, in the order the test runs them; each leaves
//! the host as it found it (checked by `assert_clean`), except for the shim's record,
//! which `invocations` reads at the end.

use std::collections::BTreeMap;
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::setup::RecordedCall;
use super::*;

/// podman reads the conflists and names academy as the networks' driver.
pub(super) fn discovery(c: &Ctx) {
    let p = &c.guard.podman;
    let net = &c.guard.net;
    let full = &c.guard.full;
    let networks = p.must(&["network", "ls", "--format", "{{.Name}} {{.Driver}}"]);
    for network in [&net.network, &full.network] {
        assert!(
            networks.lines().any(|l| l == format!("{network} academy")),
            "podman network ls does not show {network} with driver academy:\n{networks}"
        );
    }
}

/// Rounds of `podman run --rm`: address in the subnet, gateway answers, all undone.
pub(super) fn rm_rounds(c: &Ctx) {
    let p = &c.guard.podman;
    let net = &c.guard.net;
    let guard = c.guard;
    let t0 = c.t0;
    let subnet = subnet_29(net);
    let gateway = net.gateway();
    let probe = c.probe();
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
        assert_clean(guard, net, &format!("after --rm round {round}"));
        step(
            t0,
            &format!("--rm round {round}: {addr}/{prefix}, gateway answered, all undone"),
        );
    }
}

/// podman's --ip and --mac-address arrive as CNI_ARGS IP= and MAC=: academy must
/// give exactly that address and MAC, through the same store.
pub(super) fn fixed_ip_and_mac(c: &Ctx) {
    let p = &c.guard.podman;
    let net = &c.guard.net;
    let guard = c.guard;
    let t0 = c.t0;
    let gateway = net.gateway();
    let probe = c.probe();
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
    assert_clean(guard, net, "after the --ip/--mac-address round");
    step(
        t0,
        &format!("--ip {fixed_ip} --mac-address round: honoured, all undone"),
    );
}

/// `podman run -d`, then `podman stop`, then `podman rm`.
pub(super) fn detached_stop_rm(c: &Ctx) {
    let p = &c.guard.podman;
    let net = &c.guard.net;
    let guard = c.guard;
    let t0 = c.t0;
    let subnet = subnet_29(net);
    let gateway = net.gateway();
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
    assert_clean(guard, net, "after podman run -d / stop / rm");
    step(t0, &format!("detached round: {addr}, stop and rm undid it"));
}

/// A detached container that exits by itself: the DEL comes from the
/// `podman container cleanup` process conmon starts, not from the podman we ran.
/// Returns its container id, for [`invocations`].
pub(super) fn exits_by_itself(c: &Ctx) -> String {
    let p = &c.guard.podman;
    let net = &c.guard.net;
    let guard = c.guard;
    let t0 = c.t0;
    let subnet = subnet_29(net);
    let gateway = net.gateway();
    let probe = c.probe();
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
    assert_clean(guard, net, "after a container exited by itself");
    step(
        t0,
        &format!("exits-by-itself round: {addr}, cleanup process undid it"),
    );

    exits_cid.trim().to_owned()
}

/// A full subnet: the range holds one address, a running container takes it, and the
/// next `podman run` must fail with academy's own words in podman's output.
pub(super) fn full_subnet(c: &Ctx) {
    let p = &c.guard.podman;
    let full = &c.guard.full;
    let guard = c.guard;
    let t0 = c.t0;
    let full_only = full_only(full);
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
    assert_clean(guard, full, "after the full-subnet case");
    step(
        t0,
        "full subnet: academy's error reached the user, nothing left",
    );
}

/// How podman invoked academy over all the phases before, from the shim's record.
pub(super) fn invocations(c: &Ctx, exits_cid: &str) {
    let p = &c.guard.podman;
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
}
