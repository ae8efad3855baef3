//! The CNI_* variables: each missing, empty or malformed one is refused (code 4) naming
//! the variable, before anything is made.

use super::*;

#[test]
fn missing_or_empty_variables_are_named() {
    let lab = Lab::new("env");
    let mut table = Vec::new();
    for var in ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS"] {
        table.push(refusal(
            format!("ADD without {var}"),
            lab.call("ADD").without(var),
            4,
            &[var],
        ));
        table.push(refusal(
            format!("ADD with empty {var}"),
            lab.call("ADD").env(var, ""),
            4,
            &[var],
        ));
    }
    for var in ["CNI_CONTAINERID", "CNI_NETNS"] {
        table.push(refusal(
            format!("CHECK without {var}"),
            lab.call("CHECK").without(var),
            4,
            &[var],
        ));
    }
    for var in ["CNI_CONTAINERID", "CNI_IFNAME"] {
        table.push(refusal(
            format!("DEL without {var}"),
            lab.call("DEL").without(var),
            4,
            &[var],
        ));
    }
    refuse_all(&lab, table);
}

#[test]
fn malformed_container_ids_are_named() {
    let lab = Lab::new("envcid");
    let long_id = "a".repeat(201);
    let mut table: Vec<Refusal> = [
        "-lead", ".lead", "_lead", "a b", "a/b", "../x", "a:b", "é", "a;b", "a\nb", &long_id,
    ]
    .into_iter()
    .map(|cid| {
        refusal(
            format!("ADD with CNI_CONTAINERID {cid:?}"),
            lab.call("ADD").env("CNI_CONTAINERID", cid),
            4,
            &["CNI_CONTAINERID"],
        )
    })
    .collect();
    table.push(refusal(
        "DEL with CNI_CONTAINERID a/b",
        lab.call("DEL").env("CNI_CONTAINERID", "a/b"),
        4,
        &["CNI_CONTAINERID"],
    ));
    refuse_all(&lab, table);
}

#[test]
fn malformed_ifnames_are_named() {
    let lab = Lab::new("envif");
    let long_if = "x".repeat(16);
    let mut table: Vec<Refusal> = [
        long_if.as_str(),
        "a/b",
        "a:b",
        "a b",
        "a\tb",
        ".",
        "..",
        " eth0",
    ]
    .into_iter()
    .map(|ifname| {
        refusal(
            format!("ADD with CNI_IFNAME {ifname:?}"),
            lab.call("ADD").env("CNI_IFNAME", ifname),
            4,
            &["CNI_IFNAME"],
        )
    })
    .collect();
    table.push(refusal(
        "DEL with CNI_IFNAME of 16 bytes",
        lab.call("DEL").env("CNI_IFNAME", &long_if),
        4,
        &["CNI_IFNAME"],
    ));
    refuse_all(&lab, table);
}

/// CNI_ARGS: malformed items and unusable IP=/MAC= values (other keys are ignored).
#[test]
fn malformed_cni_args_are_named() {
    let lab = Lab::new("envargs");
    let mut table: Vec<Refusal> = [
        "garbage",
        "IP=nonsense",
        "IP=10.0.0.1/99",
        "MAC=zz:zz",
        "K8S_POD_NAME=x;junk",
    ]
    .into_iter()
    .map(|args| {
        refusal(
            format!("ADD with CNI_ARGS {args:?}"),
            lab.call("ADD").env("CNI_ARGS", args),
            4,
            &["CNI_ARGS"],
        )
    })
    .collect();
    // A well-formed IP= outside the network: refused at reservation (111), naming it.
    let outside = "IP=10.250.250.5";
    table.push(refusal(
        outside,
        lab.call("ADD").env("CNI_ARGS", outside),
        111,
        &["10.250.250.5"],
    ));
    refuse_all(&lab, table);
}

#[test]
fn unknown_commands_are_named() {
    let lab = Lab::new("envcmd");
    let table = ["ATTACH", "add", "DELETE", "ADD "]
        .into_iter()
        .map(|command| {
            refusal(
                format!("CNI_COMMAND {command:?}"),
                lab.call("ADD").env("CNI_COMMAND", command),
                4,
                &["CNI_COMMAND"],
            )
        })
        .collect();
    refuse_all(&lab, table);
}

/// A bug (a panic) still reaches the runtime as one CNI error object, code 999, exit 1:
/// academy replaces std's start-up with its own (src/main.rs), which must keep this.
#[test]
fn a_panic_is_answered_with_cni_json() {
    let lab = Lab::new("panic");
    let out = lab.call("ADD").env("ACADEMY_TEST_PANIC", "1").run();
    assert_eq!(out.code, 1, "a panic's exit status:\n{out}");
    let reply = out.json();
    assert_eq!(reply["code"], 999, "a panic's error code:\n{out}");
    assert_eq!(reply["cniVersion"], "1.1.0", "{out}");
    assert!(
        reply["msg"]
            .as_str()
            .unwrap_or("")
            .contains("internal error"),
        "{out}"
    );
    assert!(
        out.stderr.contains("ACADEMY_TEST_PANIC is set"),
        "the panic's message on stderr:\n{out}"
    );
}
