//! deploy/prometheus/: the alert rules load in Debian's promtool, and each fires on the
//! input series of its unit tests (academy-rules.test.yml) and only on those.

use crate::common::*;

fn promtool(args: &[&str]) -> Out {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus");
    let mut all = vec!["-C", dir, "promtool"];
    all.extend_from_slice(args);
    // env -C: promtool resolves the tests' rule_files from the working directory.
    run("env", &all, &[])
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", "academy-rules.yml"]);
    assert_eq!(
        checked.code, 0,
        "promtool check rules (make setup installs prometheus):\n{checked}"
    );
    assert!(
        checked.stdout.contains("SUCCESS: 7 rules found"),
        "{checked}"
    );
    let tested = promtool(&["test", "rules", "academy-rules.test.yml"]);
    assert_eq!(tested.code, 0, "promtool test rules:\n{tested}");
}
