//! How often, and from which thread, the plugin enters the container's netns, as strace
//! sees it. The seed's rule: the netns is entered at most twice and never held; academy's
//! design: once, from a short-lived thread, so the main thread never changes namespace.
//! DEL works from the host side only. Root only.

use crate::common::*;

/// The setns(2) calls of one traced run: (tid, line) of each, and the main thread's tid.
struct Trace {
    main: u32,
    setns: Vec<(u32, String)>,
    text: String,
}

/// Runs `call` under strace (setns and execve) and reads the trace. The main thread is
/// the one whose execve of the plugin succeeded (strace's child, so tid == pid).
fn traced(lab: &Lab, call: &Call, name: &str) -> (Out, Trace) {
    let (out, text) = run_strace(call, &lab.root.join(name), "setns,execve", None);
    let calls = parse_trace(&text);
    let main = calls
        .iter()
        .find(|c| {
            c.name == "execve" && c.line.contains(plugin()) && c.line.trim_end().ends_with("= 0")
        })
        .map(|c| c.tid)
        .unwrap_or_else(|| panic!("no successful execve of the plugin in the trace:\n{text}"));
    // parse_trace counts an interrupted call once ("<unfinished ...>", not its "resumed").
    let setns = calls
        .into_iter()
        .filter(|c| c.name == "setns")
        .map(|c| (c.tid, c.line))
        .collect();
    (out, Trace { main, setns, text })
}

#[test]
fn add_enters_the_netns_at_most_twice_off_main() {
    let lab = Lab::new("strace");
    let (out, t) = traced(&lab, &lab.call("ADD"), "add.strace");
    let result = out.expect_result("ADD under strace");
    assert_result_valid(&lab, &result, &lab.attach(), "1.1.0", None);

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
    let lab = Lab::new("strdel");
    lab.call("ADD").run().expect_result("ADD");

    let (out, t) = traced(&lab, &lab.call("DEL"), "del.strace");
    out.expect_silent_success("DEL under strace");
    assert!(t.setns.is_empty(), "DEL entered the netns:\n{}", t.text);
    assert_unwired(&lab, &lab.attach());
}
