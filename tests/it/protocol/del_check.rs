//! DEL and CHECK at their corners: DEL with nothing (left) to delete succeeds silently;
//! DEL and CHECK carry prevResult as runtimes send them, and CHECK notices when the
//! attachment is gone (120).

use super::*;

/// DEL succeeds, silently, whenever there is nothing (left) to delete.
#[test]
fn del_is_silent_when_there_is_nothing_to_delete() {
    let lab = Lab::new("delnone");
    let missing = format!("/var/run/netns/ac-nonexistent-{}", std::process::id());
    let never_added = [
        ("never added", lab.call("DEL")),
        (
            "never added, no CNI_NETNS",
            lab.call("DEL").without("CNI_NETNS"),
        ),
        (
            "never added, netns path missing",
            lab.call("DEL").env("CNI_NETNS", &missing),
        ),
    ];
    for (case, call) in never_added {
        let out = call.run();
        out.expect_silent_success(case);
        assert!(lab.lab_links().is_empty(), "{case}: links appeared");
        assert!(lab.reservations().is_empty(), "{case}: store not empty");
    }

    // The host veth deleted behind the plugin's back: DEL still frees the address.
    let result = lab.call("ADD").run().expect_result("ADD");
    assert_result_valid(&lab, &result, &lab.attach(), "1.1.0", None);
    ip(&[
        "link",
        "del",
        result["interfaces"][1]["name"].as_str().unwrap(),
    ]);
    lab.call("DEL")
        .run()
        .expect_silent_success("DEL, veth already gone");
    assert_unwired(&lab, &lab.attach());
    lab.call("DEL").run().expect_silent_success("second DEL");
}

/// DEL and CHECK with the config carrying prevResult, as runtimes send them; CHECK
/// notices when the attachment is gone.
#[test]
fn del_and_check_with_prev_result_on_stdin() {
    let lab = Lab::new("prev");
    let v = "1.0.0";
    let result = lab
        .call("ADD")
        .config(&lab.config(v))
        .run()
        .expect_result("ADD");
    assert_result_valid(&lab, &result, &lab.attach(), v, None);
    let with_prev = lab.config_with(v, "prevResult", result);

    lab.call("CHECK")
        .config(&with_prev)
        .run()
        .expect_silent_success("CHECK");
    lab.call("DEL")
        .config(&with_prev)
        .run()
        .expect_silent_success("DEL with prevResult");
    assert_unwired(&lab, &lab.attach());

    // After DEL, the same CHECK must report the attachment missing (120), not pass.
    let out = lab.call("CHECK").config(&with_prev).run();
    assert_cni_error(&out, 120, &["missing"]);
    ip(&["netns", "del", &lab.netns]);
    let out = lab.call("CHECK").config(&with_prev).run();
    assert_cni_error(&out, 120, &[&lab.netns_path()]);
    lab.call("DEL")
        .config(&with_prev)
        .run()
        .expect_silent_success("DEL, netns gone");
}
