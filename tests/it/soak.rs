//! The soak (soak/, `make soak`) as `make test` runs it: each stand-in (academy with one
//! rule broken, soak/standins/) must be reported by the soak, and a short soak with a
//! fixed seed and one with a random seed (printed, to replay) must report nothing.
//!
//! Here rather than as a Makefile line so it runs beside the other tests instead of
//! after them: it mostly waits (for its invocations, the watch, the 60 s default
//! release at its end), about three minutes of one test thread. Everything it makes is
//! in netns of its own (a node, an outside, its containers), named after its pid, so
//! its subnets never meet the host's or another test's.

use std::path::Path;

use crate::common::*;

#[test]
fn the_soak_reports_each_stand_in_and_nothing_against_academy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let selftest = root.join("soak/selftest.py");
    let report_dir = root.join("target/soak/selftest");
    let out = run(
        "python3",
        &[
            selftest.to_str().unwrap(),
            "--academy",
            plugin(),
            "--report-dir",
            report_dir.to_str().unwrap(),
        ],
        &[],
    );
    println!("{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.code,
        0,
        "the soak's selftest failed (reports in {}):\n{out}",
        report_dir.display()
    );
}
