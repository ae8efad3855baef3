//! DEL of a shaped attachment: the host veth and the ifb go in one request (their removal
//! group), whether the DEL is killed at any request, its pair goes with the container's
//! netns meanwhile, or the kernel refuses the group for a link it cannot delete.

use std::time::Duration;

use super::*;

/// DEL of a shaped attachment under strace in `node`, with an optional injection; its
/// output and the RTM_* names of its rtnetlink requests, in order.
fn traced_del(node: &Node, a: &Attach, config: &Value, inject: Option<&Inject>) -> (Out, String) {
    let file = node.lab.root.join(format!("del-{}.trace", a.cid));
    let _ = std::fs::remove_file(&file);
    let mut args = vec![
        "netns".to_string(),
        "exec".into(),
        node.ns.clone(),
        "strace".into(),
    ];
    args.extend(strace_args(&file, "sendto", inject));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = node
        .lab
        .call_for("DEL", a)
        .config(config)
        .spawn("ip", &args);
    (out, std::fs::read_to_string(&file).unwrap_or_default())
}

/// The rtnetlink requests of a trace, by name (RTM_GETLINK, RTM_DELLINK, ...).
fn route_requests(trace: &str) -> Vec<String> {
    parse_trace(trace)
        .iter()
        .filter(|c| c.name == "sendto" && c.line.contains("NETLINK") && !c.injected())
        .map(|c| c.nlmsg_type())
        .filter(|t| t.starts_with("RTM_"))
        .collect()
}

/// The node's links of one attachment: its host veth and its ifb.
fn attachment_links(node: &Node, result: &Value) -> Vec<String> {
    let veth = result_host_veth(result);
    let ifb = format!("bwp{}", &veth[4..]);
    node.links()
        .into_iter()
        .filter(|l| *l == veth || *l == ifb)
        .collect()
}

/// Puts link argv[1] in link group argv[2] (RTM_NEWLINK with IFLA_GROUP).
const SET_GROUP: &str = r#"
import socket, struct, sys
index = socket.if_nametoindex(sys.argv[1])
body = struct.pack("BxHiII", 0, 0, index, 0, 0) + struct.pack("HHI", 8, 27, int(sys.argv[2]))
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
s.send(struct.pack("IHHII", 16 + len(body), 16, 0x5, 1, 0) + body)
error = struct.unpack_from("i", s.recv(4096), 16)[0]
sys.exit(f"errno {-error}" if error else 0)
"#;

/// The host veth and the ifb go in one request, so the kernel waits out the grace
/// periods of a link's deletion once: a DEL with a limit took 2.78 times one without
/// when each went alone.
#[test]
fn del_deletes_the_host_veth_and_the_ifb_in_one_request() {
    let lab = Lab::new("bwdel1");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    let result = node.call("ADD", &a, &config).expect_result("ADD, shaped");
    assert_eq!(attachment_links(&node, &result).len(), 2, "{result}");
    let (out, trace) = traced_del(&node, &a, &config, None);
    out.expect_silent_success("DEL under strace");
    let deletions = route_requests(&trace)
        .into_iter()
        .filter(|t| t == "RTM_DELLINK")
        .count();
    assert_eq!(
        deletions, 1,
        "DEL deleted its links in {deletions} requests:\n{trace}"
    );
    assert_eq!(attachment_links(&node, &result), Vec::<String>::new());
    assert_eq!(shaping(&node), BTreeSet::new(), "after DEL");
    assert_eq!(lab.reservations(), Vec::<String>::new(), "after DEL");
}

/// A DEL killed at any of its netlink requests (the links marked for their one
/// deletion, or not yet, or gone) leaves what a second DEL removes entirely.
#[test]
fn a_del_killed_at_any_request_leaves_what_a_second_del_removes() {
    let lab = Lab::new("bwdelk");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    node.call("ADD", &a, &config).expect_result("ADD, shaped");
    let (out, clean) = traced_del(&node, &a, &config, None);
    out.expect_silent_success("a clean DEL under strace");
    let sends: Vec<Syscall> = parse_trace(&clean)
        .into_iter()
        .filter(|c| c.name == "sendto")
        .collect();
    let marks = route_requests(&clean)
        .iter()
        .filter(|t| *t == "RTM_NEWLINK")
        .count();
    assert_eq!(marks, 2, "the clean DEL marked no veth and ifb:\n{clean}");
    let mut problems = Vec::new();
    for i in 0..sends.len() {
        if !strace_reaches(&sends, i) {
            continue;
        }
        let result = node.call("ADD", &a, &config).expect_result("ADD again");
        let inject = Inject {
            syscall: "sendto".into(),
            when: rank_in_thread(&sends, i),
            action: Action::Kill,
        };
        let (_, trace) = traced_del(&node, &a, &config, Some(&inject));
        if !killed_by_strace(&trace) {
            problems.push(format!("DEL not killed at request {}:\n{trace}", i + 1));
            continue;
        }
        let out = node.call("DEL", &a, &config);
        if out.code != 0 || !out.stdout.trim().is_empty() {
            problems.push(format!("the DEL after a kill at request {}: {out}", i + 1));
        }
        let links = attachment_links(&node, &result);
        let left = shaping(&node);
        let held = lab.reservations();
        if !links.is_empty() || !left.is_empty() || !held.is_empty() {
            problems.push(format!(
                "killed at request {} ({}), then DEL: left {links:?} {left:?} {held:?}",
                i + 1,
                sends[i].nlmsg_type()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A container's netns torn down while its DEL runs takes the pair with it, in the
/// kernel's own time, after the DEL put the veth and the ifb in their removal group (the
/// soak, seed 38, with the netns deleted before the DEL): the DEL still deletes the ifb.
#[test]
fn a_pair_gone_with_its_netns_during_del_leaves_no_ifb() {
    let lab = Lab::new("bwdelns");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    let result = node.call("ADD", &a, &config).expect_result("ADD, shaped");
    let veth = result_host_veth(&result);
    assert_eq!(attachment_links(&node, &result).len(), 2, "{result}");
    // Held between its kinds' step (the marks) and its veth's.
    let hold = TestHold::new(&lab.data_dir, "hold-removal");
    let del = lab
        .call_for("DEL", &a)
        .config(&config)
        .env("ACADEMY_TEST_HOLD_REMOVAL", hold.path());
    let out = std::thread::scope(|s| {
        let del = s.spawn(|| node.run(&del));
        assert!(
            hold.reached(Duration::from_secs(20)),
            "the DEL never reached its hold"
        );
        run("ip", &["netns", "del", &a.netns], &[]);
        assert!(
            wait_until(Duration::from_secs(10), || !node.links().contains(&veth)),
            "the netns's teardown never took the pair"
        );
        drop(hold);
        del.join().unwrap()
    });
    out.expect_silent_success("DEL with its pair gone meanwhile");
    assert_eq!(attachment_links(&node, &result), Vec::<String>::new());
    assert_eq!(shaping(&node), BTreeSet::new(), "after DEL");
    assert_eq!(lab.reservations(), Vec::<String>::new(), "after DEL");
}

/// A link academy did not mark that shares the attachment's removal group and that the
/// kernel cannot delete (the node's loopback) makes the kernel refuse the one deletion:
/// the veth goes alone, DEL says so, and its retry deletes the ifb.
#[test]
fn a_foreign_link_in_the_removal_group_is_not_deleted_and_a_retry_finishes() {
    let lab = Lab::new("bwdelg");
    let node = Node::new(&lab);
    let config = shaped_config(&lab);
    let a = lab.attachment("a");
    let result = node.call("ADD", &a, &config).expect_result("ADD, shaped");
    let veth = result_host_veth(&result);
    // wire::removal_group: the top bit and 31 bits of the name's first 8 hex digits.
    let group = 0x8000_0000 | (u32::from_str_radix(&veth[4..12], 16).unwrap() & 0x7fff_ffff);
    // `ip link set group` takes 0 to 2^31-1 only: a raw request sets academy's range.
    let set_lo = |g: u32| {
        let out = in_node(
            &node,
            &["/usr/bin/python3", "-c", SET_GROUP, "lo", &g.to_string()],
        );
        assert_eq!(out.code, 0, "{out}");
    };
    set_lo(group);
    let error = assert_cni_error(
        &node.call("DEL", &a, &config),
        // KERNEL_REFUSED: the kernel's refusal of the one deletion.
        100,
        &[&format!("link group {group}"), &veth],
    );
    assert!(
        error["details"].as_str().unwrap_or("").contains("retry"),
        "{error}"
    );
    assert!(node.links().iter().any(|l| l == "lo"), "lo was deleted");
    let ifb = format!("bwp{}", &veth[4..]);
    assert_eq!(
        attachment_links(&node, &result),
        vec![ifb],
        "the veth went alone"
    );
    set_lo(0);
    node.call("DEL", &a, &config)
        .expect_silent_success("the retried DEL");
    assert_eq!(attachment_links(&node, &result), Vec::<String>::new());
    assert_eq!(shaping(&node), BTreeSet::new(), "after the retry");
    assert_eq!(lab.reservations(), Vec::<String>::new(), "after the retry");
}
