//! `academy restore` (once `restore-nat`, still accepted): puts back the state of every
//! academy network of a conf dir, every kind of firewall::KINDS (masquerade, published
//! ports, the MAC filter, FORWARD accepts, bandwidth's redirects, isolation), from the
//! address store and the host's links: after `nft flush ruleset`, a firewalld reload, an
//! iptables reload, `nft -f` of a ruleset or `nft delete table inet academy`, running
//! containers get it back without a restart (deploy/systemd/academy-restore.service runs
//! it after such reloads). Idempotent: with nothing missing it changes nothing.
//!
//! Published ports and rates come from each attachment's runtime record
//! (src/ipam/store/runtime.rs). Its report, per network on stderr, tells what it
//! repaired from what it could not: `put back: KIND: what, ...; KIND: ...`, then one
//! `could not put back: WHAT, because WHY` line each (a kind the kernel refused, the
//! only case that fails the command; a port taken since; an attachment an older academy
//! added), `not recorded: ...` for an older academy's ports still in place, or
//! `complete, nothing to do`. It also drops the release records of node netns that
//! are gone, as GC does (src/firewall/network/).

use std::collections::HashSet;
use std::path::Path;

use super::{load_network, CliError, Parsed};
use crate::addressing::open_store;
use crate::cni::Error;
use crate::config::Config;
use crate::firewall::{self, Restoration};

pub(super) const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";

pub fn restore(p: &Parsed) -> Result<(), CliError> {
    let confs = if p.operands().is_empty() {
        let dir = p.value("--conf-dir").unwrap_or(DEFAULT_CONF_DIR);
        networks_in(Path::new(dir))?
    } else {
        if p.has("--conf-dir") {
            return Err(CliError::Usage(
                "give either --conf-dir or conflist files, not both".into(),
            ));
        }
        let mut confs = Vec::new();
        for path in p.operands() {
            confs.push(load_network(path)?);
        }
        confs
    };
    // The release records' upkeep, which no invocation of another node does: the files
    // of nodes that are gone dropped, this node's due records released.
    firewall::network::look_at_every_record();
    if confs.is_empty() {
        eprintln!("academy restore: no academy network found; nothing to do");
        return Ok(());
    }
    for conf in &confs {
        not_academys(conf);
    }
    let mut failed = Vec::new();
    for network in restore_each(&confs) {
        match network.outcome {
            Ok(done) if done.is_empty() => {
                eprintln!("network {}: complete, nothing to do", network.name)
            }
            Ok(done) => {
                for line in lines(&done) {
                    eprintln!("network {}: {line}", network.name);
                }
                if !done.errors.is_empty() {
                    failed.push(network.name);
                }
            }
            Err(e) => {
                eprintln!(
                    "network {}: could not put back: its state, because {e}",
                    network.name
                );
                failed.push(network.name);
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "the state of {} network(s) could not all be put back: {}",
            failed.len(),
            failed.join(", ")
        )))
    }
}

/// What one network's restore did, or why it could not look.
pub(super) struct Restored {
    pub name: String,
    pub outcome: Result<Restoration, Error>,
}

/// The restore of every network, in order; one network's failure does not stop the
/// others' (restore, and `academy watch` after each change).
pub(super) fn restore_each(confs: &[Config]) -> Vec<Restored> {
    confs
        .iter()
        .map(|conf| Restored {
            name: conf.name.clone(),
            outcome: firewall::restore(conf),
        })
        .collect()
}

/// Says which of the network's reservations academy did not make (the reference's
/// host-local, before `academy convert`): their containers' NAT and ports are the
/// reference's rules, which academy neither knows nor restores.
fn not_academys(conf: &Config) {
    let Ok(Some(store)) = open_store(conf) else {
        return;
    };
    let Ok(all) = store.reservations() else {
        return;
    };
    let foreign: Vec<String> = all
        .iter()
        .filter(|r| matches!(store.index_of(r), Ok(None)))
        .map(|r| format!("{} ({})", r.address, r.container_id))
        .collect();
    if !foreign.is_empty() {
        eprintln!(
            "network {}: could not put back: the state of {} reservation(s) academy did not make ({}), because academy never had it; DEL and ADD those containers through academy to give them academy's state",
            conf.name,
            foreign.len(),
            foreign.join(", ")
        );
    }
}

/// "outbound NAT: a, b; published ports: c": what a network's restore put back (empty
/// when nothing).
pub(super) fn words(done: &Restoration) -> String {
    done.put_back_words()
}

/// What could not be put back, and what is intact but unrecorded, one line each:
/// "could not put back: WHAT, because WHY", "not recorded: ...".
pub(super) fn could_not(done: &Restoration) -> Vec<String> {
    let mut lines = Vec::new();
    for (kind, e) in &done.errors {
        lines.push(format!("could not put back: {kind}, because {e}"));
    }
    for (_, r) in &done.kinds {
        for (what, why) in &r.not_put_back {
            lines.push(format!("could not put back: {what}, because {why}"));
        }
        for what in &r.unrecorded {
            lines.push(format!("not recorded: {what}"));
        }
    }
    lines
}

/// The restore command's lines for one network: "put back: ..." first, if anything was.
fn lines(done: &Restoration) -> Vec<String> {
    let put_back = words(done);
    let mut lines = Vec::new();
    if !put_back.is_empty() {
        lines.push(format!("put back: {put_back}"));
    }
    lines.extend(could_not(done));
    lines
}

/// The academy networks of a conf dir, as libcni reads it: *.conf, *.conflist and
/// *.json in name order, the first file of a network name winning. Files that are not
/// academy's are passed over.
pub(super) fn networks_in(dir: &Path) -> Result<Vec<Config>, CliError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| CliError::Failed(format!("cannot read conf dir {}: {e}", dir.display())))?;
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            matches!(ext, "conf" | "conflist" | "json") && p.is_file()
        })
        .collect();
    paths.sort();
    let mut seen = HashSet::new();
    let mut confs = Vec::new();
    for path in paths {
        let Some(text) = path.to_str() else { continue };
        match load_network(text) {
            Ok(conf) if seen.insert(conf.name.clone()) => confs.push(conf),
            Ok(_) => {}
            Err(_) => {} // not an academy network
        }
    }
    Ok(confs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped unit runs this subcommand with flags it accepts.
    #[test]
    fn the_systemd_unit_runs_restore_with_valid_flags() {
        let unit = include_str!("../../deploy/systemd/academy-restore.service");
        for key in ["ExecStart=", "ExecReload="] {
            let line = unit
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("no {key}"));
            let words: Vec<String> = line[key.len()..]
                .split_whitespace()
                .map(String::from)
                .collect();
            assert!(words[0].ends_with("/academy"), "{line}");
            assert_eq!(words[1], "restore", "{line}");
            let restore = crate::cli::definitions::find("restore").unwrap();
            let parsed = Parsed::new(&words[2..], restore).ok();
            assert!(
                parsed.is_some_and(|p| p.value("--conf-dir").is_some()),
                "{line}"
            );
        }
        assert!(unit.contains("PartOf=nftables.service firewalld.service"));
        assert!(unit.contains("After=nftables.service firewalld.service"));
    }
}
