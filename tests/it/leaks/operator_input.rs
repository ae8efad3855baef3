//! The operator's bad input to `academy list` and `academy reclaim`: refused, naming
//! what is wrong, and nothing changed.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::json;

#[test]
fn bad_operator_input_is_refused_and_changes_nothing() {
    let lab = Lab::new("lkbad");
    let conf = config(&lab, json!({}));
    let list = conflist(&lab, json!({}));
    let w = attach(&lab, "w");
    let k = attach(&lab, "k");
    wire(&lab, &w, &conf);
    let leaked = leak(&lab, &k, &conf);
    make_old(&lab, &leaked, Duration::from_secs(3600));

    let file = |name: &str, content: &str| {
        let p = lab.root.join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    };
    let missing = lab
        .root
        .join("missing.conflist")
        .to_string_lossy()
        .into_owned();
    let malformed = file(
        "malformed.conflist",
        r#"{"cniVersion": "1.0.0", "plugins": ["#,
    );
    let bridge_only = file(
        "bridge.conflist",
        &json!({"cniVersion": "1.0.0", "name": lab.network,
                "plugins": [{"type": "bridge", "bridge": lab.bridge}, {"type": "portmap"}]})
        .to_string(),
    );
    let bad_subnet = file(
        "badsubnet.conflist",
        &json!({"cniVersion": "1.0.0", "name": lab.network,
                "plugins": [{"type": "academy", "bridge": lab.bridge, "subnet": "10.1.2.3/33",
                             "dataDir": lab.data_dir}]})
        .to_string(),
    );
    let delegated = file(
        "delegated.conflist",
        &json!({"cniVersion": "1.0.0", "name": lab.network,
                "plugins": [{"type": "academy", "bridge": lab.bridge,
                             "ipam": {"type": "dhcp"}}]})
        .to_string(),
    );
    let empty_ids = file("empty-ids", "\n# nothing running\n");
    let no_ids = lab.root.join("no-ids").to_string_lossy().into_owned();

    let before = settled_snapshot(&lab);
    // (arguments, exit status, what stderr must say)
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["frobnicate", &list],
            2,
            "unknown subcommand \"frobnicate\"",
        ),
        (vec!["--reclaim", &list], 2, "unknown option \"--reclaim\""),
        (vec!["list"], 2, "CONFLIST is missing"),
        (vec!["reclaim"], 2, "CONFLIST is missing"),
        (vec!["list", &list, &list], 2, "unexpected argument"),
        (vec!["list", &missing], 1, "cannot read conflist"),
        (
            vec!["reclaim", &missing, "--dry-run"],
            1,
            "cannot read conflist",
        ),
        (vec!["list", &malformed], 1, "is not valid JSON"),
        (vec!["reclaim", &malformed], 1, "is not valid JSON"),
        (
            vec!["list", &bridge_only],
            1,
            "has no plugin of type academy (its plugins: bridge, portmap)",
        ),
        (
            vec!["reclaim", &bridge_only],
            1,
            "has no plugin of type academy",
        ),
        (vec!["reclaim", &bad_subnet], 1, "subnet"),
        (vec!["list", &delegated], 1, "delegates its addresses"),
        (
            vec!["list", &list, "--verbose"],
            2,
            "unknown flag \"--verbose\"",
        ),
        (
            vec!["reclaim", &list, "--force"],
            2,
            "unknown flag \"--force\"",
        ),
        (
            vec!["reclaim", &list, "--older-than"],
            2,
            "--older-than needs a value",
        ),
        (
            vec!["reclaim", &list, "--older-than", "soon"],
            2,
            "is not a duration",
        ),
        (
            vec!["reclaim", &list, "--older-than", "-5m"],
            2,
            "is not a duration",
        ),
        (
            vec!["reclaim", &list, "--dry-run=yes"],
            2,
            "--dry-run takes no value",
        ),
        (
            vec!["reclaim", &list, "--keep-ids", &no_ids],
            1,
            "cannot read --keep-ids file",
        ),
        (
            vec!["reclaim", &list, "--keep-ids", &empty_ids],
            1,
            "lists no container id",
        ),
    ];
    for (args, status, needle) in &cases {
        let out = academy(args);
        let what = format!("academy {}", args.join(" "));
        assert_eq!(out.code, *status, "{what}:\n{out}");
        assert!(
            out.stderr.contains(needle),
            "{what}: stderr lacks {needle:?}:\n{out}"
        );
        assert!(out.stdout.is_empty(), "{what} printed on stdout:\n{out}");
        if *status == 2 {
            assert!(
                out.stderr.contains("usage: academy"),
                "{what}: no usage line:\n{out}"
            );
        }
        assert_eq!(
            settled_snapshot(&lab).diff(&before),
            "",
            "{what} changed something"
        );
    }

    // No arguments and no CNI_COMMAND: the about text, as before.
    let out = academy(&[]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("CNI academy plugin v"), "{out}");
    // A runtime's invocation is never taken for a subcommand, whatever argv holds.
    let out = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .stdin(r#"{"cniVersion":"1.0.0"}"#)
        .spawn(plugin(), &["reclaim", &list, "--older-than", "0"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.json()["supportedVersions"].is_array(), "{out}");
    let out = lab
        .call_for("DEL", &k)
        .config(&conf)
        .spawn(plugin(), &["list", &list]);
    out.expect_silent_success("DEL with argv that looks like a subcommand");
    assert_eq!(
        holder_of(&lab, &leaked),
        None,
        "the DEL was not run as a DEL"
    );
    assert_reaches_gateway(&lab, &w);
}
