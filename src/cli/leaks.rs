//! `academy list` and `academy reclaim`: the operator's view of a network's reservations,
//! and freeing the leaked ones (see src/leaks/mod.rs for what "leaked" means).

use std::collections::HashSet;
use std::io::Write;
use std::time::Duration;

use serde_json::json;

use super::{load_network, CliError, Parsed};
use crate::addressing::open_store;
use crate::attachment::Caller;
use crate::cni::Error;
use crate::config::{Config, DEFAULT_RECLAIM_LEAKED_AFTER};
use crate::ipam::store::StoreDir;
use crate::leaks::{self, format_age, Entry, Freed, Selection, State};
use crate::netlink::Netlink;

fn failed(e: impl std::fmt::Display) -> CliError {
    CliError::Failed(e.to_string())
}

/// The network's open store and a netlink socket; None when nothing was ever reserved.
fn open(conf: &Config) -> Result<(Option<StoreDir>, Netlink), CliError> {
    let store = open_store(conf).map_err(failed)?;
    let nl = Netlink::open()
        .map_err(Error::from)
        .map_err(|e| failed(format!("{e} (academy list and reclaim run as root)")))?;
    Ok((store, nl))
}

fn store_path(conf: &Config) -> String {
    conf.builtin()
        .map(|b| b.data_dir.join(&conf.name).display().to_string())
        .unwrap_or_default()
}

pub fn list(p: &Parsed) -> Result<(), CliError> {
    let conf = load_network(p.operand())?;
    let (store, mut nl) = open(&conf)?;
    let entries = match &store {
        Some(store) => leaks::survey(&conf, store, &mut nl, Caller::Operator).map_err(failed)?,
        None => Vec::new(),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = if p.has("--json") {
        write_json(&mut out, &conf, &entries)
    } else {
        out.write_all(table(&conf, &entries).as_bytes())
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| failed(format!("cannot write the list: {e}")))
}

/// The `--json` form: the network, then one reservation object per line (a full /16 is
/// 65,534 of them; `jq` reads it whole, grep line by line).
fn write_json(out: &mut impl Write, conf: &Config, entries: &[Entry]) -> std::io::Result<()> {
    let head = json!({"network": conf.name, "bridge": conf.bridge, "store": store_path(conf)});
    let head = head.to_string();
    // `{...}` without its closing brace, to append the list.
    write!(out, "{},\n\"reservations\": [", &head[..head.len() - 1])?;
    for (i, e) in entries.iter().enumerate() {
        let r = &e.reservation;
        let row = json!({
            "address": r.address.to_string(),
            "containerID": r.container_id,
            "ifname": r.ifname,
            "ageSeconds": e.age.as_secs(),
            "state": e.state.name(),
            "hostVeth": e.host_veth,
            "why": e.why,
        });
        write!(out, "{}\n  {row}", if i == 0 { "" } else { "," })?;
    }
    writeln!(out, "\n]}}")
}

/// The text form: a summary line, then one aligned row per reservation.
fn table(conf: &Config, entries: &[Entry]) -> String {
    let count = |s: State| entries.iter().filter(|e| e.state == s).count();
    let mut out = format!(
        "network {} (bridge {}, store {}): {} reserved, {} wired, {} leaked{}\n",
        conf.name,
        conf.bridge,
        store_path(conf),
        entries.len(),
        count(State::Wired),
        count(State::Leaked),
        match count(State::Unknown) {
            0 => String::new(),
            n => format!(", {n} unknown (never judged leaked)"),
        }
    );
    let mut reasons: Vec<&str> = entries.iter().filter_map(|e| e.why).collect();
    reasons.sort_unstable();
    reasons.dedup();
    for why in reasons {
        let n = entries.iter().filter(|e| e.why == Some(why)).count();
        out.push_str(&format!("unknown ({n}): {why}\n"));
    }
    if entries.is_empty() {
        return out;
    }
    let rows: Vec<[String; 6]> = entries
        .iter()
        .map(|e| {
            let r = &e.reservation;
            [
                r.address.to_string(),
                e.state.name().to_string(),
                format_age(e.age),
                r.ifname.clone().unwrap_or_else(|| "-".into()),
                e.host_veth.clone().unwrap_or_else(|| "-".into()),
                r.container_id.clone(),
            ]
        })
        .collect();
    let header = [
        "ADDRESS",
        "STATE",
        "AGE",
        "IFNAME",
        "HOST VETH",
        "CONTAINER",
    ]
    .map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn reclaim(p: &Parsed) -> Result<(), CliError> {
    let conf = load_network(p.operand())?;
    let older_than = match p.value("--older-than") {
        Some(text) => Some(leaks::parse_duration(text).ok_or_else(|| {
            CliError::Usage(format!(
                "--older-than {text:?} is not a duration (a whole number with s, m, h or d: 90s, 15m, 2h, 7d)"
            ))
        })?),
        None => None,
    };
    let selection = match p.value("--keep-ids") {
        Some(file) => Selection::NotKept {
            keep: read_keep_ids(file)?,
            min_age: older_than.unwrap_or(Duration::ZERO),
        },
        None => Selection::LeakedFor(older_than.unwrap_or_else(|| {
            // 0 switches ADD's own reclaiming off; it cannot mean "however young" here.
            Duration::from_secs(match conf.reclaim_leaked_after {
                0 => DEFAULT_RECLAIM_LEAKED_AFTER,
                n => n,
            })
        })),
    };
    let (store, mut nl) = open(&conf)?;
    let Some(store) = store else {
        println!(
            "nothing to reclaim: network {} has no store yet ({})",
            conf.name,
            store_path(&conf)
        );
        return Ok(());
    };
    let what = match &selection {
        Selection::LeakedFor(age) => format!(
            "leaked for at least {} or since before this boot",
            format_age(*age)
        ),
        Selection::LeakedAddress(address, _) => format!("leaked address {address}"),
        Selection::NotKept { keep, min_age } => format!(
            "not among the {} kept container ids{}",
            keep.len(),
            match min_age.as_secs() {
                0 => String::new(),
                _ => format!(", at least {} old", format_age(*min_age)),
            }
        ),
    };
    if p.has("--dry-run") {
        let planned =
            leaks::plan(&conf, &store, &mut nl, &selection, Caller::Operator).map_err(failed)?;
        for item in &planned {
            println!("would {} {item}", item.verb(false));
        }
        println!(
            "dry run, nothing changed: {} of network {} {what}",
            summary(&planned),
            conf.name
        );
        return Ok(());
    }
    let report =
        leaks::reclaim(&conf, &store, &mut nl, &selection, Caller::Operator).map_err(failed)?;
    for item in &report.freed {
        println!("{} {item}", item.verb(true));
    }
    println!(
        "reclaimed {} of network {} {what}",
        summary(&report.freed),
        conf.name
    );
    let mut report = report;
    // A network whose last leaks were freed loses its own nf_tables objects too.
    report
        .errors
        .extend(crate::removal::network_if_unused(&conf).err());
    if report.errors.is_empty() {
        return Ok(());
    }
    for e in &report.errors {
        eprintln!("academy reclaim: {e}");
    }
    Err(CliError::Failed(format!(
        "{} could not be freed (above); run it again once the cause is fixed",
        report.errors.len()
    )))
}

fn summary(items: &[Freed]) -> String {
    let addresses = items
        .iter()
        .filter(|f| matches!(f, Freed::Address(_)))
        .count();
    let veths = items.len() - addresses;
    format!(
        "{addresses} address{} and {veths} host veth{}",
        if addresses == 1 { "" } else { "es" },
        if veths == 1 { "" } else { "s" }
    )
}

/// One container id per line (`crictl pods -q`, `podman ps -aq --no-trunc`); blank lines
/// and '#' comments are skipped. An empty list is refused: it would free every
/// attachment, and is what a failed listing command leaves behind.
fn read_keep_ids(file: &str) -> Result<HashSet<String>, CliError> {
    let bytes = super::read_input(file, "--keep-ids file", 64 << 20)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::Failed(format!("--keep-ids file {file} is not UTF-8 text")))?;
    let ids: HashSet<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    if let Some(bad) = ids.iter().find(|id| id.contains(char::is_whitespace)) {
        return Err(CliError::Failed(format!(
            "--keep-ids file {file}: {bad:?} is not a container id (one id per line)"
        )));
    }
    if ids.is_empty() {
        return Err(CliError::Failed(format!(
            "--keep-ids file {file} lists no container id; refusing to free every attachment of the network (a failed `crictl pods -q` leaves such a file). To free everything, send CNI GC with an empty cni.dev/valid-attachments"
        )));
    }
    Ok(ids)
}
