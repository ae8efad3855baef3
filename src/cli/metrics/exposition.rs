//! The Prometheus text exposition format 0.0.4 of one scrape: every metric family with
//! its HELP and TYPE lines, then its samples. Pure: the scrape is given, nothing read.
//! The names and their meaning are documented in docs/operations.md, which the alert
//! rules of deploy/prometheus/ rely on: a name changes only with both.

use std::fmt::Write as _;
use std::time::Duration;

use super::Snapshot;
use crate::cli::network_view::{kind_slug, NetworkView};
use crate::firewall::KINDS;
use crate::wire::capacity::PORT_LIMIT;

/// The exposition's media type, for the Content-Type header.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub struct Scrape<'a> {
    pub views: &'a [NetworkView],
    pub counters: &'a Snapshot,
    pub conf_dir_unreadable: bool,
    /// How long reading the networks took.
    pub duration: Duration,
}

/// A label value as the format escapes it: backslash, double quote and newline.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Writes families one at a time, each with its HELP and TYPE before its samples.
struct Text(String);

impl Text {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                let _ = write!(self.0, "{comma}{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}

pub fn render(s: &Scrape) -> String {
    let mut t = Text(String::with_capacity(256 + s.views.len() * 2048));
    let c = s.counters;
    t.family(
        "academy_build_info",
        "gauge",
        "The academy binary serving these metrics: its version and git commit (always 1).",
    );
    t.sample(
        "academy_build_info",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("commit", env!("ACADEMY_GIT_COMMIT")),
        ],
        1,
    );
    t.family(
        "academy_watch_start_time_seconds",
        "gauge",
        "When this academy watch started, in seconds since the Unix epoch.",
    );
    t.sample("academy_watch_start_time_seconds", &[], c.started);
    t.family("academy_conf_dir_readable", "gauge", "1 when the watch's conf dir could be read at this scrape, 0 when it could not (no network is then listed).");
    t.sample(
        "academy_conf_dir_readable",
        &[],
        u8::from(!s.conf_dir_unreadable),
    );
    t.family(
        "academy_networks",
        "gauge",
        "Academy networks found in the conf dir.",
    );
    t.sample("academy_networks", &[], s.views.len());

    t.family(
        "academy_pool_size",
        "gauge",
        "Addresses the network's pools can hand out.",
    );
    for v in s.views {
        t.sample("academy_pool_size", &[("network", &v.name)], v.size);
    }
    t.family("academy_pool_addresses", "gauge", "The network's pool by state: used (reserved, leaked included), free (in the pools and unreserved), leaked (reserved for an attachment that is gone; absent when academy cannot judge it here).");
    for v in s.views {
        let n = v.name.as_str();
        t.sample(
            "academy_pool_addresses",
            &[("network", n), ("state", "used")],
            v.used,
        );
        t.sample(
            "academy_pool_addresses",
            &[("network", n), ("state", "free")],
            v.free,
        );
        if let Some(leaked) = v.leaked {
            t.sample(
                "academy_pool_addresses",
                &[("network", n), ("state", "leaked")],
                leaked,
            );
        }
    }
    t.family(
        "academy_attachments",
        "gauge",
        "The network's attachments whose host veth exists.",
    );
    for v in s.views {
        t.sample(
            "academy_attachments",
            &[("network", &v.name)],
            v.attachments,
        );
    }
    // By bridge, not network: networks may share one, and its ports are counted once.
    let mut bridges: Vec<(&str, usize)> = s
        .views
        .iter()
        .filter_map(|v| Some((v.bridge.as_str(), v.bridge_ports?)))
        .collect();
    bridges.sort_unstable();
    bridges.dedup_by_key(|(name, _)| *name);
    t.family("academy_bridge_ports", "gauge", "Ports of the bridge (academy's veths and any other link enslaved to it); absent when the bridge is not on this node.");
    for (bridge, ports) in &bridges {
        t.sample("academy_bridge_ports", &[("bridge", bridge)], ports);
    }
    t.family(
        "academy_bridge_port_limit",
        "gauge",
        "The most ports the bridge takes (a Linux bridge's 1023): the ADD beyond it fails.",
    );
    for (bridge, _) in &bridges {
        t.sample(
            "academy_bridge_port_limit",
            &[("bridge", bridge)],
            PORT_LIMIT,
        );
    }
    t.family(
        "academy_network_unused",
        "gauge",
        "1 when the network has nothing wired and nothing reserved.",
    );
    for v in s.views {
        t.sample(
            "academy_network_unused",
            &[("network", &v.name)],
            u8::from(v.unused),
        );
    }
    t.family(
        "academy_network_unused_since_seconds",
        "gauge",
        "When the unused network's last attachment went (Unix time); its objects are released releaseUnusedAfter later. Absent for a network in use.",
    );
    for v in s.views {
        let Some(since) = v.unused_since else {
            continue;
        };
        let at = since
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        t.sample(
            "academy_network_unused_since_seconds",
            &[("network", &v.name)],
            at,
        );
    }
    t.family("academy_state_missing", "gauge", "1 when the network misses some of this kind of nf_tables state now (what STATUS and CHECK look for), else 0; absent when the look failed.");
    for v in s.views {
        let Ok(missing) = &v.missing else { continue };
        for &kind in KINDS {
            let slug = kind_slug(kind);
            let labels = [("network", v.name.as_str()), ("kind", slug.as_str())];
            t.sample(
                "academy_state_missing",
                &labels,
                u8::from(missing.contains(&kind)),
            );
        }
    }
    t.family("academy_network_read_errors", "gauge", "What could not be read of the network at this scrape (its store, its links, its nf_tables state).");
    for v in s.views {
        let errors = v.errors.len() + usize::from(v.missing.is_err());
        t.sample(
            "academy_network_read_errors",
            &[("network", &v.name)],
            errors,
        );
    }
    t.family("academy_last_repair_timestamp_seconds", "gauge", "When the watch last put back some of the network's state, in seconds since the Unix epoch (absent: never since boot).");
    for v in s.views {
        if let Some(r) = &v.last_repair {
            t.sample(
                "academy_last_repair_timestamp_seconds",
                &[("network", &v.name)],
                r.unix_seconds(),
            );
        }
    }

    t.family(
        "academy_repairs_total",
        "counter",
        "Repairs by this watch that put back some of the kind's state of the network.",
    );
    // Every network of the dir starts at 0, so that increase() sees its first repair.
    let mut repairs = c.repairs.clone();
    for v in s.views {
        for &kind in KINDS {
            repairs
                .entry((v.name.clone(), kind_slug(kind)))
                .or_insert(0);
        }
    }
    for ((network, kind), n) in &repairs {
        t.sample(
            "academy_repairs_total",
            &[("network", network), ("kind", kind)],
            n,
        );
    }
    t.family(
        "academy_restore_failures_total",
        "counter",
        "Restores of the network by this watch that failed (each is retried).",
    );
    let mut failures = c.failures.clone();
    for v in s.views {
        failures.entry(v.name.clone()).or_insert(0);
    }
    for (network, n) in &failures {
        t.sample("academy_restore_failures_total", &[("network", network)], n);
    }
    t.family("academy_nftables_events_total", "counter", "nf_tables transactions this watch was notified of, by origin: academy (its own restores, the plugin's verbs, passed over) or other (another program: each burst may set off a repair).");
    t.sample(
        "academy_nftables_events_total",
        &[("origin", "academy")],
        c.events_own,
    );
    t.sample(
        "academy_nftables_events_total",
        &[("origin", "other")],
        c.events_other,
    );
    t.family("academy_notification_overflows_total", "counter", "Times the watch's notification socket overflowed (ENOBUFS): changes were lost, and a full restore followed.");
    t.sample("academy_notification_overflows_total", &[], c.overflows);
    t.family(
        "academy_scrape_duration_seconds",
        "gauge",
        "How long this scrape took to read every network from the store and the kernel.",
    );
    t.sample(
        "academy_scrape_duration_seconds",
        &[],
        format_args!("{:.6}", s.duration.as_secs_f64()),
    );
    t.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::Kind;

    fn view(name: &str) -> NetworkView {
        NetworkView::sample(name, "br", vec![Kind::Ports])
    }

    fn page(views: &[NetworkView], counters: &Snapshot) -> String {
        render(&Scrape {
            views,
            counters,
            conf_dir_unreadable: false,
            duration: Duration::from_millis(3),
        })
    }

    /// Every family has its HELP and TYPE once, before its samples, and every sample
    /// line is `name{labels} value` with a number.
    #[test]
    fn every_family_is_announced_before_its_samples() {
        let mut counters = Snapshot::default();
        counters
            .repairs
            .insert(("gone".into(), "outbound_nat".into()), 4);
        let text = page(&[view("a"), view("b\"q")], &counters);
        let mut announced: Vec<String> = Vec::new();
        let mut typed: Vec<String> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_string();
                assert!(!announced.contains(&name), "{name} twice");
                announced.push(name);
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(Some(name), announced.last().map(String::as_str));
                assert!(["gauge", "counter"].contains(&kind), "{line}");
                typed.push(name.into());
            } else {
                let name = line.split(['{', ' ']).next().unwrap();
                assert_eq!(Some(name), typed.last().map(String::as_str), "{line}");
                let value = line.rsplit(' ').next().unwrap();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert_eq!(announced, typed);
        for want in [
            "academy_pool_addresses{network=\"a\",state=\"used\"} 3",
            "academy_pool_addresses{network=\"a\",state=\"free\"} 250",
            "academy_pool_addresses{network=\"a\",state=\"leaked\"} 1",
            "academy_state_missing{network=\"a\",kind=\"published_ports\"} 1",
            "academy_state_missing{network=\"a\",kind=\"outbound_nat\"} 0",
            "academy_attachments{network=\"b\\\"q\"} 2",
            // Two networks on one bridge: its ports once.
            "academy_bridge_ports{bridge=\"br\"} 2",
            "academy_bridge_port_limit{bridge=\"br\"} 1023",
            // A network gone from the dir keeps its count; those present start at 0.
            "academy_repairs_total{network=\"gone\",kind=\"outbound_nat\"} 4",
            "academy_repairs_total{network=\"a\",kind=\"mac_filter\"} 0",
            "academy_nftables_events_total{origin=\"other\"} 0",
            "academy_scrape_duration_seconds 0.003000",
        ] {
            assert!(text.lines().any(|l| l == want), "no {want} in\n{text}");
        }
    }

    #[test]
    fn what_cannot_be_judged_is_left_out_not_zero() {
        let mut v = view("a");
        v.leaked = None;
        v.missing = Err("no nf_tables".into());
        let text = page(&[v], &Snapshot::default());
        assert!(!text.contains("state=\"leaked\""), "{text}");
        assert!(!text.contains("academy_state_missing{"), "{text}");
        assert!(
            text.contains("academy_network_read_errors{network=\"a\"} 1"),
            "{text}"
        );
        // A bridge not on this node has no port count, and no limit either.
        let mut v = view("a");
        v.bridge_ports = None;
        let text = page(&[v], &Snapshot::default());
        assert!(!text.contains("academy_bridge_ports{"), "{text}");
        assert!(!text.contains("academy_bridge_port_limit{"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
