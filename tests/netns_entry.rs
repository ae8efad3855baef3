//! How often, and from which thread, the plugin enters the container's netns, as strace
//! sees it. The seed's rule: the netns is entered at most twice and never held; academy's
//! design: once, from a short-lived thread, so the main thread never changes namespace.
//! DEL works from the host side only. Root only.

mod common;

use common::*;

/// The setns(2) calls of one traced run: (tid, line) of each, and the main thread's tid.
struct Trace {
    main: u32,
    setns: Vec<(u32, String)>,
    text: String,
}

/// Parses `strace -f -e trace=setns,execve -o FILE` output: each line starts with the
/// tid; the main thread is the one whose execve of the plugin succeeded (strace's child,
/// so tid == pid of the traced process).
fn parse_trace(path: &std::path::Path) -> Trace {
    let text = std::fs::read_to_string(path).expect("strace wrote no trace file");
    let tid = |line: &str| -> Option<u32> { line.split_whitespace().next()?.parse().ok() };
    let main = text
        .lines()
        .find(|l| l.contains("execve(") && l.contains(plugin()) && l.trim_end().ends_with("= 0"))
        .and_then(tid)
        .unwrap_or_else(|| panic!("no successful execve of the plugin in the trace:\n{text}"));
    // An interrupted call shows as "setns(... <unfinished ...>" and "<... setns resumed>":
    // counting "setns(" counts each call once.
    let setns = text
        .lines()
        .filter(|l| l.contains("setns("))
        .map(|l| (tid(l).expect("line without a tid"), l.to_string()))
        .collect();
    Trace { main, setns, text }
}

fn trace_file(lab: &Lab, name: &str) -> std::path::PathBuf {
    lab.root.join(name)
}

#[test]
fn add_enters_the_netns_at_most_twice_off_main() {
    let lab = Lab::new("strace", 61);
    let file = trace_file(&lab, "add.strace");
    let out = lab.call("ADD").run_traced(&file);
    let result = out.expect_result("ADD under strace");
    assert_result_valid(&lab, &result, &lab.attach(), "1.1.0", None);

    let t = parse_trace(&file);
    // At least one, or strace saw nothing and the test proves nothing.
    assert!(
        (1..=2).contains(&t.setns.len()),
        "ADD made {} setns calls (want 1 or 2):\n{}",
        t.setns.len(),
        t.text
    );
    let on_main: Vec<_> = t.setns.iter().filter(|(tid, _)| *tid == t.main).collect();
    assert!(
        on_main.is_empty(),
        "setns on the main thread {}: {on_main:?}\n{}",
        t.main,
        t.text
    );
    // Every call entered a network namespace (not some other kind).
    for (_, line) in &t.setns {
        assert!(line.contains("CLONE_NEWNET"), "unexpected setns: {line}");
        assert!(
            line.trim_end().ends_with("= 0") || line.contains("<unfinished"),
            "failed setns: {line}"
        );
    }

    lab.call("DEL").run().expect_silent_success("DEL");
    assert_unwired(&lab, &lab.attach());
}

#[test]
fn del_never_enters_the_netns() {
    let lab = Lab::new("strdel", 62);
    lab.call("ADD").run().expect_result("ADD");

    let file = trace_file(&lab, "del.strace");
    lab.call("DEL")
        .run_traced(&file)
        .expect_silent_success("DEL under strace");
    let t = parse_trace(&file);
    assert!(t.setns.is_empty(), "DEL entered the netns:\n{}", t.text);
    assert_unwired(&lab, &lab.attach());
}
