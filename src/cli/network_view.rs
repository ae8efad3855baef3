//! One academy network as an operator sees it at a glance: its pool's addresses by
//! state, its wired attachments, its bridge's ports, the kinds of nf_tables state it
//! misses now, whether it is unused and the last repair `academy watch` made. `academy status` prints it and
//! `academy watch --metrics` exposes it; both read it fresh each time.
//!
//! It only reads: reservations are judged as `academy list` judges them (no lock taken,
//! so no ADD waits on it), against the host's links dumped once per look at the node
//! (node_look.rs), and what is missing is STATUS's and CHECK's own walk
//! (`firewall::missing_in`).

use std::net::IpAddr;
use std::path::Path;
use std::time::SystemTime;

use crate::addressing::open_store;
use crate::attachment::{Caller, HostLinks};
use crate::config::Config;
use crate::firewall::{self, Kind, Wired};
use crate::ipam::store::{Reservation, StoreDir};
use crate::leaks::{self, State};

use super::node_look::NodeLook;
use super::repairs::{self, LastRepair};

#[derive(Debug, Clone)]
pub struct NetworkView {
    pub name: String,
    pub bridge: String,
    /// The bridge's ports (a bridge takes at most wire::capacity::PORT_LIMIT); None when
    /// the bridge is not here (no ADD yet, or another netns) or the links are unreadable.
    pub bridge_ports: Option<usize>,
    /// Each pool, in the config's order.
    pub ranges: Vec<Range>,
    /// Addresses the pools can hand out.
    pub size: u128,
    /// Reservations in the store, leaked ones included.
    pub used: usize,
    /// Addresses of the pools no reservation holds.
    pub free: u128,
    /// Reservations whose attachment is gone (`academy list`'s "leaked"); None when
    /// academy cannot judge them here (the bridge is not in this netns).
    pub leaked: Option<usize>,
    /// Attachments whose host veth exists.
    pub attachments: usize,
    /// The kinds of state that miss something now; Err when the walk failed.
    pub missing: Result<Vec<Kind>, String>,
    /// Nothing wired and nothing reserved.
    pub unused: bool,
    /// When the network became unused, from its release record (firewall/network/);
    /// None for a network in use or one with no record (released, or never used).
    pub unused_since: Option<SystemTime>,
    pub last_repair: Option<LastRepair>,
    /// Why part of the view could not be read (the store, the links).
    pub errors: Vec<String>,
}

/// One pool: a subnet and the addresses of it that may be handed out.
#[derive(Debug, Clone)]
pub struct Range {
    pub subnet: String,
    pub first: IpAddr,
    pub last: IpAddr,
}

impl NetworkView {
    /// The view of one network, read now through `look` (links dumped once for every
    /// network); `run_dir` is where the watch records repairs.
    pub fn read(conf: &Config, run_dir: &Path, look: &mut NodeLook) -> NetworkView {
        let pools: Vec<_> = conf
            .builtin()
            .map(|b| b.pools().collect())
            .unwrap_or_default();
        let size = pools.iter().map(|p| p.size()).sum();
        let mut errors = Vec::new();
        let (reserved, missing) = reservations(conf, look, &mut errors);
        let in_pools = reserved
            .addresses
            .iter()
            .filter(|a| pools.iter().any(|p| p.contains(**a)))
            .count() as u128;
        let last_repair = match repairs::last(run_dir, &conf.name) {
            Ok(last) => last,
            Err(e) => {
                errors.push(e);
                None
            }
        };
        let unused = reserved.addresses.is_empty() && reserved.attachments == 0;
        NetworkView {
            name: conf.name.clone(),
            bridge: conf.bridge.clone(),
            bridge_ports: look.bridge_ports(&conf.bridge),
            ranges: pools
                .iter()
                .map(|p| Range {
                    subnet: p.subnet().to_string(),
                    first: p.first(),
                    last: p.last(),
                })
                .collect(),
            size,
            used: reserved.addresses.len(),
            free: size.saturating_sub(in_pools),
            leaked: reserved.leaked,
            attachments: reserved.attachments,
            unused,
            unused_since: if unused {
                firewall::network::unused_since(&conf.name)
            } else {
                None
            },
            missing,
            last_repair,
            errors,
        }
    }
}

/// What the store and the host's links say of the network's reservations.
#[derive(Default)]
struct Reserved {
    addresses: Vec<IpAddr>,
    leaked: Option<usize>,
    attachments: usize,
}

/// The kinds of state the network misses now, its wired attachments found among
/// `reservations`.
fn missing(
    conf: &Config,
    look: &mut NodeLook,
    reservations: &[Reservation],
    store: Option<&StoreDir>,
) -> Result<Vec<Kind>, String> {
    let links = look.links.as_ref().map_err(|e| e.clone())?;
    Wired::of(conf, links, reservations, store)
        .and_then(|wired| firewall::missing_in(conf, &wired, &mut look.nft))
        .map(|found| found.into_iter().map(|(kind, _)| kind).collect())
        .map_err(|e| e.to_string())
}

type Missing = Result<Vec<Kind>, String>;

/// The network's reservations judged against the links, and the kinds it misses.
fn reservations(
    conf: &Config,
    look: &mut NodeLook,
    errors: &mut Vec<String>,
) -> (Reserved, Missing) {
    let store = match open_store(conf) {
        Ok(Some(store)) => store,
        // Nothing ever reserved: nothing used, nothing leaked.
        Ok(None) => {
            let none = Reserved {
                leaked: Some(0),
                ..Reserved::default()
            };
            return (none, missing(conf, look, &[], None));
        }
        Err(e) => {
            errors.push(e.to_string());
            return (Reserved::default(), missing(conf, look, &[], None));
        }
    };
    let read = match look.stores.read(&store) {
        Ok(read) => read,
        Err(e) => {
            errors.push(e.to_string());
            return (Reserved::default(), missing(conf, look, &[], None));
        }
    };
    let all = read.reservations.clone();
    let judged = look
        .links
        .as_ref()
        .map_err(|e| e.clone())
        .and_then(|links| HostLinks::of(links, conf, Caller::Operator).map_err(|e| e.to_string()))
        .and_then(|links| {
            leaks::judge(&links, all.clone(), |r| read.index_of(&store, r))
                .map_err(|e| e.to_string())
        });
    let missing = missing(conf, look, &all, Some(&store));
    let reserved = match judged {
        Ok(entries) => {
            let mut wired: Vec<(&str, &str)> = entries
                .iter()
                .filter(|e| e.state == State::Wired)
                .filter_map(|e| {
                    let r = &e.reservation;
                    Some((r.container_id.as_str(), r.ifname.as_deref()?))
                })
                .collect();
            wired.sort_unstable();
            wired.dedup();
            Reserved {
                addresses: entries.iter().map(|e| e.reservation.address).collect(),
                leaked: Some(entries.iter().filter(|e| e.state == State::Leaked).count()),
                attachments: wired.len(),
            }
        }
        // The bridge is not here (or the links cannot be read): the reservations still
        // count as used, but none is judged.
        Err(e) => {
            errors.push(e);
            Reserved {
                addresses: all.iter().map(|r| r.address).collect(),
                ..Reserved::default()
            }
        }
    };
    (reserved, missing)
}

#[cfg(test)]
impl NetworkView {
    /// A view of one /24 pool with 3 of 253 addresses used (1 leaked), 2 attachments,
    /// missing `missing`: what the status's and the exposition's tests vary.
    pub fn sample(name: &str, bridge: &str, missing: Vec<Kind>) -> NetworkView {
        NetworkView {
            name: name.into(),
            bridge: bridge.into(),
            bridge_ports: Some(2),
            ranges: vec![Range {
                subnet: "10.1.0.0/24".into(),
                first: "10.1.0.2".parse().unwrap(),
                last: "10.1.0.254".parse().unwrap(),
            }],
            size: 253,
            used: 3,
            free: 250,
            leaked: Some(1),
            attachments: 2,
            missing: Ok(missing),
            unused: false,
            unused_since: None,
            last_repair: None,
            errors: vec![],
        }
    }
}

/// A kind's name as a metric label or a JSON word: its Display in snake case
/// ("outbound NAT" is outbound_nat), so the words cannot drift from the walks' own.
pub fn kind_slug(kind: Kind) -> String {
    kind.to_string()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join("_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_distinct_snake_case_name() {
        let slugs: Vec<String> = firewall::KINDS.iter().copied().map(kind_slug).collect();
        assert_eq!(slugs[0], "outbound_nat");
        for s in &slugs {
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{s}");
        }
        let mut unique = slugs.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), slugs.len(), "{slugs:?}");
    }
}
