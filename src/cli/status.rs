//! `academy status [--conf-dir DIR] [--json]`: one line per academy network of the conf
//! dir (found as `restore` and `watch` find them), from network_view.rs. It only reads
//! and takes no lock. The `--json` shape is documented in docs/operations.md and kept
//! stable: fields may be added, none renamed or removed.

use std::io::Write as _;
use std::path::Path;
use std::time::SystemTime;

use serde_json::{json, Value};

use super::advertisements::NodeAdvertisements;
use super::nat::{networks_in, DEFAULT_CONF_DIR};
use super::network_view::{kind_slug, NetworkView};
use super::node_look::{NodeLook, StoreCache};
use super::repairs::RUN_DIR;
use super::{CliError, Parsed};
use crate::leaks::format_age;
use crate::wire::capacity::PORT_LIMIT;

pub fn run(p: &Parsed) -> Result<(), CliError> {
    let dir = p.value("--conf-dir").unwrap_or(DEFAULT_CONF_DIR);
    let mut stores = StoreCache::default();
    let mut look = NodeLook::now(&mut stores);
    let views: Vec<NetworkView> = networks_in(Path::new(dir))?
        .iter()
        .map(|conf| NetworkView::read(conf, Path::new(RUN_DIR), &mut look))
        .collect();
    let node = NodeAdvertisements::look();
    let text = if p.has("--json") {
        let mut text = json!({
            "confDir": dir,
            "networks": views.iter().map(to_json).collect::<Vec<_>>(),
            "ipv6RouterAdvertisements": node.to_json(),
        })
        .to_string();
        text.push('\n');
        text
    } else {
        table(&views, SystemTime::now()) + &node.lines(SystemTime::now())
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Failed(format!("cannot write the status: {e}")))
}

fn seconds(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// One network of `--json`.
pub fn to_json(v: &NetworkView) -> Value {
    let (missing, missing_error) = match &v.missing {
        Ok(kinds) => (
            json!(kinds.iter().map(|k| kind_slug(*k)).collect::<Vec<_>>()),
            Value::Null,
        ),
        Err(e) => (Value::Null, json!(e)),
    };
    json!({
        "name": v.name,
        "bridge": v.bridge,
        "bridgePorts": v.bridge_ports.map(|n| json!({"ports": n, "limit": PORT_LIMIT})),
        "ranges": v.ranges.iter().map(|r| json!({
            "subnet": r.subnet, "first": r.first.to_string(), "last": r.last.to_string(),
        })).collect::<Vec<_>>(),
        "addresses": {"size": count(v.size), "used": v.used, "free": count(v.free), "leaked": v.leaked},
        "attachments": v.attachments,
        "missing": missing,
        "missingError": missing_error,
        "unused": v.unused,
        "unusedSince": v.unused_since.map(seconds),
        "lastRepair": v.last_repair.as_ref().map(|r| json!({
            "at": r.unix_seconds(), "kinds": r.kinds, "trigger": r.trigger,
        })),
        "errors": v.errors,
    })
}

/// The text form: a header and one aligned row per network, then any errors.
/// An address count as a JSON number. An IPv6 range can hold more than a u64 (a /48
/// has 2^80), which serde_json cannot write as an integer: those become a float,
/// as most JSON readers (jq, JavaScript) would read any large integer anyway.
fn count(n: u128) -> Value {
    match u64::try_from(n) {
        Ok(n) => json!(n),
        Err(_) => json!(n as f64),
    }
}

fn table(views: &[NetworkView], now: SystemTime) -> String {
    if views.is_empty() {
        return "no academy network found\n".into();
    }
    let header = [
        "NETWORK",
        "BRIDGE",
        "PORTS",
        "RANGES",
        "SIZE",
        "USED",
        "FREE",
        "LEAKED",
        "WIRED",
        "MISSING",
        "UNUSED SINCE",
        "LAST REPAIR",
    ]
    .map(String::from);
    let rows: Vec<[String; 12]> = views.iter().map(|v| row(v, now)).collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(widths) {
            line.push_str(&format!("{cell:<w$}  "));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    for v in views {
        if let Err(e) = &v.missing {
            out.push_str(&format!("network {}: missing state unknown: {e}\n", v.name));
        }
        for e in &v.errors {
            out.push_str(&format!("network {}: {e}\n", v.name));
        }
    }
    out
}

fn row(v: &NetworkView, now: SystemTime) -> [String; 12] {
    let dash = || "-".to_string();
    let ago = |t: SystemTime| {
        format!(
            "{} ago",
            format_age(now.duration_since(t).unwrap_or_default())
        )
    };
    let ranges: Vec<String> = v
        .ranges
        .iter()
        .map(|r| format!("{}-{}", r.first, r.last))
        .collect();
    let missing = match &v.missing {
        Ok(kinds) if kinds.is_empty() => dash(),
        Ok(kinds) => kinds
            .iter()
            .map(|k| kind_slug(*k))
            .collect::<Vec<_>>()
            .join(","),
        Err(_) => "?".into(),
    };
    let unused = match (v.unused, v.unused_since) {
        (false, _) => dash(),
        (true, Some(t)) => ago(t),
        // Unused, but no release has recorded since when.
        (true, None) => "unused".into(),
    };
    let last_repair = match &v.last_repair {
        Some(r) => format!("{} ({})", ago(r.at), r.kinds.join(",")),
        None => dash(),
    };
    [
        v.name.clone(),
        v.bridge.clone(),
        v.bridge_ports
            .map_or_else(dash, |n| format!("{n}/{PORT_LIMIT}")),
        if ranges.is_empty() {
            dash()
        } else {
            ranges.join(",")
        },
        v.size.to_string(),
        v.used.to_string(),
        v.free.to_string(),
        v.leaked.map_or("?".into(), |n| n.to_string()),
        v.attachments.to_string(),
        missing,
        unused,
        last_repair,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::repairs::LastRepair;
    use crate::firewall::Kind;
    use std::time::Duration;

    fn view() -> NetworkView {
        NetworkView {
            last_repair: Some(LastRepair {
                at: SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
                kinds: vec!["outbound_nat".into()],
                trigger: "start".into(),
            }),
            ..NetworkView::sample("n1", "br1", vec![Kind::Masquerade, Kind::MacFilter])
        }
    }

    /// The documented shape (docs/operations.md, "academy status --json").
    #[test]
    fn the_json_form_has_the_documented_fields() {
        let j = to_json(&view());
        assert_eq!(
            j["addresses"],
            json!({"size": 253, "used": 3, "free": 250, "leaked": 1})
        );
        assert_eq!(j["missing"], json!(["outbound_nat", "mac_filter"]));
        assert_eq!(j["bridgePorts"], json!({"ports": 2, "limit": 1023}));
        assert_eq!(j["ranges"][0]["first"], "10.1.0.2");
        assert_eq!(j["lastRepair"]["at"], 1000);
        assert_eq!(j["unusedSince"], Value::Null);
        let mut keys: Vec<&String> = j.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "addresses",
                "attachments",
                "bridge",
                "bridgePorts",
                "errors",
                "lastRepair",
                "missing",
                "missingError",
                "name",
                "ranges",
                "unused",
                "unusedSince"
            ]
        );
    }

    /// A /48 of IPv6 holds 2^80 addresses: more than serde_json writes as an integer.
    #[test]
    fn an_ipv6_range_larger_than_a_u64_is_a_number_not_a_panic() {
        let big = NetworkView {
            size: 1 << 80,
            free: (1 << 80) - 3,
            ..view()
        };
        let j = to_json(&big);
        assert_eq!(j["addresses"]["size"].as_f64(), Some((1u128 << 80) as f64));
        assert_eq!(j["addresses"]["used"], 3);
    }

    #[test]
    fn the_table_has_one_aligned_row_per_network() {
        let mut unused = view();
        unused.name = "second".into();
        unused.unused = true;
        unused.used = 0;
        unused.missing = Err("no nf_tables".into());
        unused.last_repair = None;
        // Its bridge is not on this node yet.
        unused.bridge_ports = None;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1090);
        let text = table(&[view(), unused], now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("NETWORK") && lines[0].contains("LAST REPAIR"));
        let col = lines[0].find("USED").unwrap();
        assert_eq!(&lines[1][col..col + 1], "3", "{text}");
        assert!(lines[1].contains("outbound_nat,mac_filter"), "{text}");
        assert!(lines[1].contains(" 2/1023 "), "{text}");
        assert!(lines[1].ends_with("1m30s ago (outbound_nat)"), "{text}");
        assert!(
            lines[2].contains(" unused ")
                && lines[2].contains(" ? ")
                && !lines[2].contains("/1023"),
            "{text}"
        );
        assert_eq!(
            lines[3],
            "network second: missing state unknown: no nf_tables"
        );
        assert_eq!(table(&[], now), "no academy network found\n");
    }
}
