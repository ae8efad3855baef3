//! NAT state rebuilt from the address store: after an admin's `nft flush`, a firewalld
//! reload or `nft -f` of a ruleset, the masquerade of running containers is gone while
//! their reservations and veths stay. The store says who is wired (a reservation whose
//! host veth exists), so academy can put their elements back without a restart:
//! `academy restore-nat` for every network of a conf dir in one batch, ADD for its own
//! network when it had to re-create the set, and STATUS reports what is missing.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::firewall::masquerade::{add_repair, repair_lock, repair_of};
use crate::addressing::open_store;
use crate::attachment::{Caller, HostLinks};
use crate::netlink::{
    nftables_set_name, stored_comment, Family, MasqElement, MasqNetwork, MasqRule, NatChange,
    Netlink, Nftables, SetElement,
};

/// The elements the network's wired attachments of `family` should have, except those of
/// `except` (the caller's own). Best effort: a store or survey that cannot be read gives
/// none (said on stderr), since ADD calls this only to help other containers.
pub fn wired_elements(conf: &Config, family: Family, except: &[IpAddr]) -> Vec<SetElement> {
    match wired(conf) {
        Ok(all) => all
            .into_iter()
            .filter(|e| Family::of(e.element.address) == family)
            .filter(|e| !except.contains(&e.element.address))
            .collect(),
        Err(e) => {
            eprintln!(
                "academy: cannot restore the masquerade of network {}'s other containers: {e}",
                conf.name
            );
            Vec::new()
        }
    }
}

/// Every wired attachment's element: a reservation of the store whose host veth is in
/// the calling netns. Only the links are read (no netns is entered). A network whose
/// bridge is not here (not made yet after a reboot, or another netns) has none, and
/// nothing is restored for it but its rule.
fn wired(conf: &Config) -> Result<Vec<SetElement>> {
    let Some(store) = open_store(conf)? else {
        return Ok(Vec::new());
    };
    let mut nl = Netlink::open()?;
    let links = HostLinks::read(&mut nl, conf, Caller::Add)?;
    Ok(store
        .reservations()?
        .into_iter()
        .filter_map(|r| {
            let holder = r.holder()?;
            if !links.wired(&holder.container_id, &holder.ifname) {
                return None;
            }
            Some(SetElement {
                set: nftables_set_name(&conf.name, Family::of(r.address)),
                element: MasqElement {
                    address: r.address,
                    comment: stored_comment(&holder.key()),
                },
            })
        })
        .collect())
}

/// The network's masquerade per family of its ranges (academy's own IPAM only).
fn range_networks(conf: &Config) -> Vec<MasqNetwork> {
    let Some(b) = conf.builtin() else {
        return Vec::new();
    };
    let subnets: Vec<IpNetwork> = b.range_sets.iter().flatten().map(|p| p.subnet()).collect();
    let mut networks: Vec<MasqNetwork> = Vec::new();
    for family in [Family::V4, Family::V6] {
        let mine: Vec<IpNetwork> = subnets
            .iter()
            .filter(|s| Family::of(s.ip()) == family)
            .copied()
            .collect();
        if !mine.is_empty() {
            networks.push(MasqNetwork {
                network: conf.name.clone(),
                family,
                subnets: mine,
            });
        }
    }
    networks
}

/// What one network's NAT lacks, as a change, and what that is in words.
pub struct Repair {
    pub change: NatChange,
    pub missing: Vec<String>,
}

/// Compares the network's NAT with what its store says should be there.
pub fn plan(conf: &Config, nft: &mut Nftables, rules: &[MasqRule]) -> Result<Repair> {
    let mut repair = Repair {
        change: NatChange::default(),
        missing: Vec::new(),
    };
    if !conf.ip_masq {
        return Ok(repair);
    }
    if conf.builtin().is_none() {
        return Err(Error::config(format!(
            "network {} delegates its addresses to another IPAM plugin: academy has no store to restore its masquerade from",
            conf.name
        ))
        .details("its containers get their masquerade back at their next ADD"));
    }
    let wired = wired(conf)?;
    for network in range_networks(conf) {
        let set = network.set_name();
        let want: Vec<&SetElement> = wired.iter().filter(|e| e.set == set).collect();
        let needs_rule = repair_of(nft, conf, &network, rules)?;
        let set_missing = needs_rule == Some(true);
        if needs_rule.is_some() {
            // A set never used and never made is not missing anything.
            if set_missing && want.is_empty() && !rules.iter().any(|r| r.set == set) {
                continue;
            }
            add_repair(&mut repair.change, &network, rules);
            repair.missing.push(if rules.iter().any(|r| r.set == set) {
                format!("the rule of set {set} was made for other ranges")
            } else {
                format!("the masquerade rule of set {set}")
            });
        }
        let present: Vec<IpAddr> = if set_missing {
            Vec::new()
        } else {
            nft.elements(&conf.name, network.family)?
                .into_iter()
                .map(|e| e.address)
                .collect()
        };
        let lacking: Vec<SetElement> = want
            .into_iter()
            .filter(|e| !present.contains(&e.element.address))
            .cloned()
            .collect();
        if !lacking.is_empty() {
            repair.missing.push(format!(
                "{} element(s) of wired containers in set {set}",
                lacking.len()
            ));
            repair.change.if_missing.extend(lacking);
        }
    }
    Ok(repair)
}

/// STATUS: a network whose masquerade lacks its rule or its wired containers' elements
/// is not as ADD would leave it (code 50, naming the command that repairs it).
pub fn status(conf: &Config) -> Result<()> {
    if !conf.ip_masq || conf.builtin().is_none() {
        return Ok(());
    }
    let unavailable = |e: Error| Error::new(code::NOT_AVAILABLE, e.msg).details(e.details);
    let mut nft = Nftables::open().map_err(|e| unavailable(e.into()))?;
    let rules = nft.masquerade_rules().map_err(|e| unavailable(e.into()))?;
    let repair = plan(conf, &mut nft, &rules).map_err(unavailable)?;
    if repair.missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        code::NOT_AVAILABLE,
        format!(
            "network {}'s outbound NAT is incomplete: missing {}",
            conf.name,
            repair.missing.join("; ")
        ),
    )
    .details(RESTORE_HINT))
}

pub const RESTORE_HINT: &str = "run `academy restore-nat` (or `academy restore-nat --conf-dir DIR`) to rebuild it from the store; the next ADD on the network also repairs its rule";

/// Rebuilds the NAT of every network in `confs`, in one batch (split only past a
/// sendmsg's size). Returns, per network, what was missing, or why it was left alone.
pub type Restored = Vec<(String, Result<Vec<String>>)>;

/// Port mapping's rules put back after a flush, which keeps the maps and their elements
/// (after a deletion of the table, each container's ports come back with its next ADD:
/// the store does not know them). None when no port is published on the host; else
/// whether anything had to be written.
pub fn restore_ports() -> Result<Option<bool>> {
    let _lock = repair_lock();
    let mut nft = Nftables::open()?;
    if nft.port_elements()?.is_empty() {
        return Ok(None);
    }
    Ok(Some(nft.ensure_portmap()?))
}

pub fn restore(confs: &[Config]) -> Result<Restored> {
    // As ADD's repairs: one repairer at a time, or each would add the rules it found missing.
    let _lock = repair_lock();
    let mut nft = Nftables::open()?;
    let rules = nft.masquerade_rules()?;
    let mut all = NatChange::default();
    let mut report = Vec::new();
    for conf in confs {
        let repair = match plan(conf, &mut nft, &rules) {
            Ok(r) => r,
            Err(e) => {
                report.push((conf.name.clone(), Err(e)));
                continue;
            }
        };
        let c = repair.change;
        all.ensure.extend(c.ensure);
        all.drop_rules.extend(c.drop_rules);
        all.rules.extend(c.rules);
        all.if_missing.extend(c.if_missing);
        report.push((conf.name.clone(), Ok(repair.missing)));
    }
    if !all.is_empty() {
        nft.apply(&all)?;
    }
    Ok(report)
}
