//! cniVersion and prevResult: versions academy does not speak (1), verbs older than
//! the version that defines them (1), CHECK's prevResult (7); VERSION, which answers
//! whatever else is sent; and the about text for a person running the binary by hand.

use serde_json::json;

use super::*;

#[test]
fn unsupported_versions_are_named() {
    let lab = Lab::new("ver");
    let mut table = Vec::new();
    for bad in [
        "0.1.0",
        "0.2.0",
        "2.0.0",
        "1.0",
        "1.0.0-rc1",
        "0.4.0 ",
        "latest",
    ] {
        let conf = lab.config(bad);
        table.push(refusal(
            format!("ADD cniVersion {bad:?}"),
            lab.call("ADD").config(&conf),
            1,
            &[bad],
        ));
        table.push(refusal(
            format!("DEL cniVersion {bad:?}"),
            lab.call("DEL").config(&conf),
            1,
            &[bad],
        ));
    }
    table.push(refusal(
        "ADD cniVersion \"\"",
        lab.call("ADD").config(&lab.config("")),
        1,
        &["cniVersion"],
    ));
    refuse_all(&lab, table);
}

/// CHECK exists from 0.4.0 on, GC and STATUS from 1.1.0 on.
#[test]
fn verbs_older_than_their_version_are_refused() {
    let lab = Lab::new("ververb");
    let prev = json!({ "cniVersion": "0.3.1", "interfaces": [], "ips": [] });
    let mut table: Vec<Refusal> = ["0.3.0", "0.3.1"]
        .into_iter()
        .map(|v| {
            let conf = lab.config_with(v, "prevResult", prev.clone());
            refusal(
                format!("CHECK in {v}"),
                lab.call("CHECK").config(&conf),
                1,
                &["CHECK", v],
            )
        })
        .collect();
    for (command, v) in [("GC", "1.0.0"), ("STATUS", "0.4.0")] {
        table.push(refusal(
            format!("{command} in {v}"),
            lab.call(command).config(&lab.config(v)),
            1,
            &[command, v],
        ));
    }
    refuse_all(&lab, table);
}

/// CHECK needs a well-formed prevResult that names the attachment.
#[test]
fn check_needs_a_prev_result_naming_the_attachment() {
    let lab = Lab::new("verprev");
    let mut table = vec![refusal(
        "CHECK without prevResult",
        lab.call("CHECK").config(&lab.config("1.0.0")),
        7,
        &["prevResult"],
    )];
    let malformed = [
        json!({ "ips": [{ "address": "nonsense" }] }),
        json!({ "interfaces": 5 }),
        json!({ "interfaces": [{ "mac": "02:00:00:00:00:01" }] }),
        json!({ "routes": [{ "gw": "10.0.0.1" }] }),
        // Well-formed, but about another interface.
        json!({ "interfaces": [{ "name": "net9", "sandbox": lab.netns_path() }] }),
    ];
    for p in malformed {
        let case = format!("CHECK with prevResult {p}");
        let conf = lab.config_with("1.0.0", "prevResult", p);
        table.push(refusal(
            case,
            lab.call("CHECK").config(&conf),
            7,
            &["prevResult"],
        ));
    }
    refuse_all(&lab, table);
}

/// VERSION answers whatever the rest of the environment and stdin hold.
#[test]
fn version_answers_whatever_env_and_stdin() {
    let garbage = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .env("CNI_CONTAINERID", "!! not an id")
        .env("CNI_IFNAME", "a/b/this-is-far-too-long")
        .env("CNI_NETNS", "/nonexistent")
        .env("CNI_ARGS", "garbage;;;")
        .env("CNI_PATH", "");
    let plain = Call::bare().env("CNI_COMMAND", "VERSION");
    let cases: Vec<(&str, Call, &str)> = vec![
        ("garbage env, empty stdin", garbage.clone(), "1.1.0"),
        (
            "garbage env, not JSON",
            garbage.clone().stdin("{{{"),
            "1.1.0",
        ),
        (
            "garbage env, config 0.4.0",
            garbage.stdin(r#"{"cniVersion":"0.4.0"}"#),
            "0.4.0",
        ),
        ("no other env, empty stdin", plain.clone(), "1.1.0"),
        (
            "no other env, config 1.0.0",
            plain.stdin(r#"{"cniVersion":"1.0.0","name":"x"}"#),
            "1.0.0",
        ),
    ];
    for (case, call, version) in cases {
        let out = call.run();
        let v = out.expect_result(case);
        assert_eq!(v["cniVersion"], version, "{case}:\n{out}");
        assert_eq!(v["supportedVersions"], json!(SUPPORTED), "{case}:\n{out}");
        assert_eq!(
            v.as_object().unwrap().len(),
            2,
            "{case}: extra keys:\n{out}"
        );
        assert_eq!(out.stdout.trim().lines().count(), 1, "{case}:\n{out}");
    }
}

/// A person running the binary by hand (no CNI_COMMAND) gets the about text on stderr.
#[test]
fn about_text_without_cni_command() {
    let cases = [
        ("no env at all", Call::bare()),
        ("empty CNI_COMMAND", Call::bare().env("CNI_COMMAND", "")),
        ("stdin ignored", Call::bare().stdin("{not json")),
    ];
    for (case, call) in cases {
        let out = call.run();
        assert_eq!(out.code, 0, "{case}:\n{out}");
        assert!(out.stdout.is_empty(), "{case}: stdout not empty:\n{out}");
        assert!(
            out.stderr.contains("CNI academy plugin v"),
            "{case}:\n{out}"
        );
        assert!(
            out.stderr
                .contains("CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
            "{case}:\n{out}"
        );
    }
}
