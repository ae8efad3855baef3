//! `nft flush ruleset` in the node (what `systemctl reload nftables` or a firewalld
//! restart does): it takes every table, iptables-nft's too, so the outbound NAT, the
//! published ports, the loopback guard and the dropping FORWARD policy all go. What
//! works right after, and after the remedy each side offers: for the reference, the
//! next ADD (of another container); for academy, `academy restore` (STATUS names
//! it), the next ADD, and `academy watch` (within a second, without anyone asking).
//! Then the admin's dropping policy back and an iptables reload, the watch running.

use std::time::Instant;

use super::*;
use crate::portmap::localnet::{loopback_probe, Container, NodeService};
use crate::watch::Watcher;

const LOOPBACK_SERVICE: u16 = 7001;
const CONTROL_SERVICE: u16 = 7002;

#[derive(Default)]
struct Seen {
    /// Right after the flush.
    outbound: bool,
    hairpin: bool,
    loopback: bool,
    unpublished: bool,
    /// academy's STATUS right after (code, names restore).
    status: String,
    /// After the side's repair command (academy's restore; the reference has none).
    repaired_outbound: bool,
    repaired_loopback: bool,
    repaired_hairpin: bool,
    /// After another flush and the next ADD of another container: container a's, and
    /// the new container's own, outbound.
    next_add_outbound: bool,
    next_add_own: bool,
    /// After another flush with the watch running (the reference: nothing running):
    /// a's outbound, and how long the watch took.
    watched_outbound: bool,
    watched_loopback: bool,
    watched: String,
    /// The admin's DROP policy back, then iptables-save | iptables-restore, the watch
    /// still running: a's outbound, and (own rules, rules listed twice).
    policy_outbound: bool,
    policy_counts: (usize, usize),
}

fn flush(site: &Site) {
    site.node.nft(&["flush", "ruleset"]);
}

fn look(site: &Site) -> Seen {
    let _service = NodeService::start(&site.node, "127.0.0.1", LOOPBACK_SERVICE);
    let _control = NodeService::start(&site.node, &site.lab.gateway(), CONTROL_SERVICE);
    let container = Container {
        netns: site.a.netns.clone(),
        v4: site.a_v4.clone(),
        v6: String::new(),
    };
    let loopback = || {
        loopback_probe(
            &site.node,
            &container,
            false,
            LOOPBACK_SERVICE,
            CONTROL_SERVICE,
        ) == "SYNACK"
    };
    assert!(
        site.outbound(),
        "{:?}: no outbound before the flush",
        site.side
    );
    let academy = site.side == Side::Academy;
    let mut seen = Seen::default();

    flush(site);
    seen.outbound = site.outbound_once();
    seen.hairpin = site.published_hairpin(false);
    seen.loopback = loopback();
    seen.unpublished = site.unpublished_from_neighbour();
    if academy {
        let status = site.status();
        let v: Value = serde_json::from_str(status.stdout.trim()).unwrap_or(Value::Null);
        seen.status = format!(
            "academy STATUS: code {}, names `academy restore`: {}",
            v["code"],
            v.to_string().contains("academy restore")
        );
        site.restore();
        seen.repaired_outbound = site.outbound();
    } else {
        seen.repaired_outbound = site.outbound();
    }
    seen.repaired_loopback = loopback();
    seen.repaired_hairpin = site.published_hairpin(false);

    flush(site);
    let c = site.lab.attachment("c");
    site.add(&c, Some(HOST_PORT + 1));
    seen.next_add_outbound = site.outbound();
    seen.next_add_own = answers(&c.netns, &site.outside.far_v4, OUTSIDE_PORT, SETTLE);

    let conf_dir = site.conf_dir.to_str().unwrap().to_string();
    let watch = academy.then(|| Watcher::start(&site.node, &conf_dir));
    flush(site);
    let start = Instant::now();
    let masquerade_back = || {
        site.node.rules("v4").len() == 1
            && site
                .node
                .elements()
                .iter()
                .any(|e| e.starts_with(&format!("{} ", site.a_v4)))
    };
    seen.watched = match &watch {
        Some(w) => match wait_until(Duration::from_secs(3), masquerade_back) {
            true => format!(
                "the watch put the masquerade back within {} ms (nft polled)",
                start.elapsed().as_millis()
            ),
            false => format!("the watch put nothing back within 3 s:\n{}", w.text()),
        },
        None => "the reference has no watch: nothing runs".into(),
    };
    // The same look on both sides: one connection, a second after the flush.
    std::thread::sleep(Duration::from_secs(1).saturating_sub(start.elapsed()));
    seen.watched_outbound = site.outbound_once();
    seen.watched_loopback = loopback();

    // The admin's policy back (iptables' table made again), then a reload.
    for family in ["4", "6"] {
        let out = iptables(&site.node, family, &["-P", "FORWARD", "DROP"]);
        assert_eq!(out.code, 0, "{out}");
    }
    if academy {
        assert!(
            wait_until(Duration::from_secs(3), || site.rule_counts().0 == 6),
            "the watch did not put the FORWARD accepts back under the new policy"
        );
    }
    site.iptables_reload();
    std::thread::sleep(Duration::from_millis(1000));
    seen.policy_outbound = site.outbound();
    seen.policy_counts = site.rule_counts();
    if let Some(w) = watch {
        println!("watch log ({:?}):\n{}", site.side, w.text());
    }
    seen
}

#[test]
fn nft_flush_ruleset() {
    let (reference_lab, academy_lab) = labs("swnf");
    let reference = look(&Site::new(&reference_lab, Side::Reference));
    let academy = look(&Site::new(&academy_lab, Side::Academy));
    let test = "flush::nft_flush_ruleset";
    let works =
        |probe: &str, f: fn(&Seen) -> bool| Row::works(test, probe, f(&reference), f(&academy));
    let closed =
        |probe: &str, f: fn(&Seen) -> bool| Row::closed(test, probe, f(&reference), f(&academy));
    let word = |b: bool| if b { "works" } else { "fails" };
    let own = format!(
        "the new container's own outbound: reference {}, academy {}",
        word(reference.next_add_own),
        word(academy.next_add_own)
    );
    let twice = Row::new(
        test,
        "then the admin's DROP policy back, iptables-save | iptables-restore: a rule listed twice",
        ("duplicates", "none"),
        false,
        reference.policy_counts.1 > 0,
        academy.policy_counts.1 > 0,
    )
    .note(format!(
        "reference {} CNI-* rules (the flush took them); academy {} FORWARD accepts (the watch put them back)",
        reference.policy_counts.0, academy.policy_counts.0
    ));
    let rows = vec![
        works(
            "nft flush ruleset: container -> outside (NAT), right after",
            |s| s.outbound,
        ),
        works(
            "nft flush ruleset: hairpin to the published port, right after",
            |s| s.hairpin,
        ),
        closed(
            "nft flush ruleset: crafted frame to 127.0.0.1, right after",
            |s| s.loopback,
        ),
        closed(
            "nft flush ruleset: neighbour -> unpublished port, right after",
            |s| s.unpublished,
        )
        .note("the flush took iptables' table and its DROP policy too, on both"),
        works(
            "nft flush ruleset, then the side's repair command: container -> outside",
            |s| s.repaired_outbound,
        )
        .note(format!(
            "academy: `academy restore` ({}); the reference has none (nothing run)",
            academy.status
        )),
        closed(
            "nft flush ruleset, then the side's repair command: frame to 127.0.0.1",
            |s| s.repaired_loopback,
        ),
        works(
            "nft flush ruleset, then the side's repair command: hairpin",
            |s| s.repaired_hairpin,
        )
        .note("both: back with that container's own next ADD only"),
        works(
            "nft flush ruleset, then the next ADD (another container): container -> outside",
            |s| s.next_add_outbound,
        )
        .note(own),
        works(
            "nft flush ruleset, `academy watch` running: container -> outside after 1 s",
            |s| s.watched_outbound,
        )
        .note(format!("{}; {}", academy.watched, reference.watched)),
        closed(
            "nft flush ruleset, `academy watch` running: frame to 127.0.0.1 after 1 s",
            |s| s.watched_loopback,
        ),
        works(
            "then the admin's DROP policy back, iptables-save | iptables-restore: outbound",
            |s| s.policy_outbound,
        ),
        twice,
    ];
    report(&rows);
}
