//! iptables reloads and flushes in the node, as an admin or a firewall service does
//! them: `iptables-save | iptables-restore` (the rules made again, under a new table
//! handle), then `iptables -F FORWARD` under the dropping policy, and what brings each
//! side's forwarding back: the reference's next ADD (its firewall plugin inserts its
//! FORWARD jump again), academy's `restore` (STATUS names it) and next ADD.

use super::*;

/// What one side did through the reload and the flush.
struct Seen {
    /// After the reload.
    reload_outbound: bool,
    reload_hairpin: bool,
    reload_published: bool,
    /// (own rules, rules listed twice): before the reload, after it, after an ADD.
    counts: [(usize, usize); 3],
    /// Right after `iptables -F FORWARD`.
    flushed_outbound: bool,
    flushed_hairpin: bool,
    /// The flush reported (the reference's CHECK, academy's STATUS naming restore),
    /// and how.
    reported: bool,
    report: String,
    /// After the side's repair command (academy's restore; the reference has none,
    /// so: nothing done).
    repaired_outbound: bool,
    repaired_hairpin: bool,
    /// After a second flush and the next ADD of another container.
    next_add_outbound: bool,
    next_add_hairpin: bool,
    /// (own rules, rules listed twice) after that ADD.
    final_counts: (usize, usize),
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .chars()
        .take(150)
        .collect()
}

fn look(site: &Site) -> Seen {
    let before = site.rule_counts();
    // CHECK of a fresh network, before any reload or flush.
    let check_before = site.cnitool("check", &site.a, Some(HOST_PORT));
    site.iptables_reload();
    let reload_outbound = site.outbound();
    let reload_hairpin = site.published_hairpin(true);
    let reload_published = site.published_from_neighbour(true);
    let reloaded = site.rule_counts();
    let c = site.lab.attachment("c");
    site.add(&c, Some(HOST_PORT + 1));
    let added = site.rule_counts();

    site.flush_forward();
    let flushed_outbound = site.outbound_once();
    let flushed_hairpin = site.published_hairpin(false);
    let (reported, report) = match site.side {
        Side::Reference => {
            let check = site.cnitool("check", &site.a, Some(HOST_PORT));
            (
                check_before.code == 0 && check.code != 0,
                format!(
                    "cnitool check: exit {} on the fresh network ({}), exit {} after the flush ({})",
                    check_before.code,
                    first_line(&check_before.all()),
                    check.code,
                    first_line(&check.all())
                ),
            )
        }
        Side::Academy => {
            let status = site.status();
            let v: Value = serde_json::from_str(status.stdout.trim()).unwrap_or(Value::Null);
            let named = v.to_string().contains("academy restore");
            let check = site.cnitool("check", &site.a, Some(HOST_PORT));
            (
                v["code"] == 50 && named,
                format!(
                    "STATUS: code {}, names `academy restore`: {named}; cnitool check: exit {} on the fresh network, {} after the flush ({})",
                    v["code"], check_before.code, check.code, first_line(&check.all())
                ),
            )
        }
    };
    let (repaired_outbound, repaired_hairpin) = match site.side {
        Side::Reference => (site.outbound(), site.published_hairpin(true)),
        Side::Academy => {
            site.restore();
            let seen = (site.outbound(), site.published_hairpin(true));
            site.flush_forward();
            assert!(
                !site.outbound_once(),
                "the second flush did not stop forwarding"
            );
            seen
        }
    };
    let d = site.lab.attachment("d");
    site.add(&d, None);
    Seen {
        reload_outbound,
        reload_hairpin,
        reload_published,
        counts: [before, reloaded, added],
        flushed_outbound,
        flushed_hairpin,
        reported,
        report,
        repaired_outbound,
        repaired_hairpin,
        next_add_outbound: site.outbound(),
        next_add_hairpin: site.published_hairpin(true),
        final_counts: site.rule_counts(),
    }
}

#[test]
fn iptables_reload_and_flush() {
    let (reference_lab, academy_lab) = labs("swrl");
    let reference = look(&Site::new(&reference_lab, Side::Reference));
    let academy = look(&Site::new(&academy_lab, Side::Academy));
    let test = "reload::iptables_reload_and_flush";
    let works =
        |probe: &str, f: fn(&Seen) -> bool| Row::works(test, probe, f(&reference), f(&academy));
    let counts = |s: &Seen| {
        let [before, reloaded, added] = s.counts;
        format!(
            "{}, {}, {} (listed twice: {}, {}, {})",
            before.0, reloaded.0, added.0, before.1, reloaded.1, added.1
        )
    };
    let twice = Row::new(
        test,
        "iptables-save | iptables-restore, then a new ADD: a rule listed twice",
        ("duplicates", "none"),
        false,
        reference.counts[2].1 > 0,
        academy.counts[2].1 > 0,
    )
    .note(format!(
        "before the reload, after it, after the ADD: reference's CNI-* rules {}; academy's FORWARD accepts {}",
        counts(&reference),
        counts(&academy)
    ));
    let reported = Row::new(
        test,
        "iptables -F FORWARD: the loss reported",
        ("reported", "silent"),
        true,
        reference.reported,
        academy.reported,
    )
    .note(format!(
        "reference {}; academy {}",
        reference.report, academy.report
    ));
    let final_counts = format!(
        "after that ADD: reference {} CNI-* rules ({} listed twice), academy {} FORWARD accepts ({} listed twice)",
        reference.final_counts.0,
        reference.final_counts.1,
        academy.final_counts.0,
        academy.final_counts.1
    );
    let rows = vec![
        works(
            "iptables-save | iptables-restore: container -> outside",
            |s| s.reload_outbound,
        ),
        works(
            "iptables-save | iptables-restore: hairpin to the published port",
            |s| s.reload_hairpin,
        ),
        works(
            "iptables-save | iptables-restore: neighbour -> published port",
            |s| s.reload_published,
        ),
        twice,
        works(
            "iptables -F FORWARD (policy DROP): container -> outside, right after",
            |s| s.flushed_outbound,
        ),
        works(
            "iptables -F FORWARD: hairpin to the published port, right after",
            |s| s.flushed_hairpin,
        ),
        reported,
        works(
            "iptables -F FORWARD, then the side's repair command: container -> outside",
            |s| s.repaired_outbound,
        )
        .note("academy: `academy restore`; the reference has none (nothing run)"),
        works(
            "iptables -F FORWARD, then the side's repair command: hairpin",
            |s| s.repaired_hairpin,
        ),
        works(
            "iptables -F FORWARD, then the next ADD (another container): container -> outside",
            |s| s.next_add_outbound,
        ),
        works(
            "iptables -F FORWARD, then the next ADD: hairpin to the published port",
            |s| s.next_add_hairpin,
        )
        .note(final_counts),
    ];
    report(&rows);
}
