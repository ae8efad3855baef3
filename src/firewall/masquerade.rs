//! `ipMasq`: the container's addresses in its network's nf_tables sets, so that its
//! traffic to anything outside the network's subnets (multicast aside) leaves with the
//! host's address. What academy creates in nf_tables is described in
//! netlink/nftables.rs; this module decides what goes in and names the owners.
//!
//! An element's comment is its attachment's holder key (`<container id>:<ifname>`), the
//! same identity the address store and GC's valid list use, stored as
//! `stored_comment` makes it fit the kernel's cap. Every removal compares that identity
//! before it removes (never by address alone: an address can have passed to another
//! attachment). An element never outlives its reservation: ADD adds it after reserving,
//! the one removal (removal.rs) takes it before releasing.
//!
//! ADD also repairs the network's NAT (see `add`); nat_repair.rs rebuilds it from the
//! store for an operator and for STATUS.

use std::fs::File;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use nix::fcntl::Flock;

use ipnetwork::IpNetwork;

use crate::cni::{code, Error, Result};
use crate::config::{Config, Ipam};
use crate::firewall::nat;
use crate::ipam::store::files;
use crate::ipam::Holder;
use crate::netlink::{
    nftables_set_name, stored_comment, Family, MasqElement, MasqNetwork, MasqRule, NatChange,
    Nftables, NlError, PortElement, SetElement, SetShape, Step,
};

/// Adds the container's addresses to its network's sets, in the batch that also makes
/// sure of the network's table, chain, set and rule when its rule is missing or outdated
/// (made for other ranges): an admin's `nft flush` is repaired by the next ADD, and when
/// the set itself had to be re-created, the elements of the network's other wired
/// attachments are put back from the store in the same batch. Costs one small dump of
/// academy's chain before the batch.
///
/// `publish` rides in the same batch (portMappings, decided by portmap.rs), so ADD's
/// nf_tables state is one sendmsg and all or nothing; without ipMasq only it is sent.
pub fn add(
    nft: &mut Nftables,
    conf: &Config,
    holder: &Holder,
    addresses: &[IpNetwork],
    publish: &Publish,
) -> Result<()> {
    let (networks, own): (Vec<MasqNetwork>, Vec<IpAddr>) = if conf.ip_masq {
        let own = addresses.iter().map(|a| a.ip()).collect();
        (networks(conf, addresses), own)
    } else {
        (Vec::new(), Vec::new())
    };
    let key = stored_comment(&holder.key());
    if !publish.ports.is_empty() {
        // Port mapping's rules as an admin's flush may have left them (one small dump);
        // a concurrent repair's deletions make one attempt fail with ENOENT.
        if let Err(e) = nft.ensure_portmap() {
            if !e.is(libc::ENOENT) {
                return Err(e.into());
            }
            nft.ensure_portmap()?;
        }
    }
    // Elements found already there: this attachment's (a retried ADD), or a stale one of
    // a holder whose reservation is gone (the address is this attachment's now).
    let mut present: Vec<IpAddr> = Vec::new();
    let mut retake: Vec<IpAddr> = Vec::new();
    // Taken only to repair: concurrent first ADDs of a network would otherwise each
    // add a rule. Held until the end of ADD's batch.
    let mut lock = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let rules = match conf.ip_masq {
            true => nft.masquerade_rules()?,
            false => Vec::new(),
        };
        let mut change = NatChange {
            ports: publish.ports.to_vec(),
            hairpin_bridge: publish.bridge.to_string(),
            ..NatChange::default()
        };
        for network in &networks {
            let repair = repair_of(nft, conf, network, &rules)?;
            if let Some(set_was_missing) = repair {
                add_repair(&mut change, network, &rules);
                if set_was_missing {
                    change
                        .if_missing
                        .extend(nat::wired_elements(conf, network.family, &own));
                }
            }
        }
        if !change.rules.is_empty() && lock.is_none() {
            lock = Some(repair_lock());
            attempt -= 1;
            continue; // look again under the lock: another ADD may have repaired it
        }
        for address in &own {
            let element = SetElement {
                set: nftables_set_name(&conf.name, Family::of(*address)),
                element: MasqElement {
                    address: *address,
                    comment: key.clone(),
                },
            };
            if retake.contains(address) {
                change.retake.push(element.clone());
            }
            // A retaken element is removed and added back in the same batch.
            if !present.contains(address) {
                change.exclusive.push(element);
            }
        }
        match nft.apply(&change) {
            Ok(()) => {
                if !change.rules.is_empty() {
                    eprintln!(
                        "academy: network {}: re-created its masquerade rule{} ({} element(s) of wired attachments restored)",
                        conf.name,
                        if change.rules.len() > 1 { "s" } else { "" },
                        change.if_missing.len()
                    );
                }
                return Ok(());
            }
            // A host port someone holds: the other's is a conflict (an error naming it),
            // this attachment's own stale one is removed and the batch sent again.
            Err(e) if attempt < 3 && e.is(libc::EEXIST) && e.refused_in(&[Step::Publish]) => {
                (publish.resolve)(nft, e)?;
            }
            Err(e)
                if attempt < 3
                    && e.is(libc::EEXIST)
                    && e.refused_in(&[Step::AddElement, Step::AddRule]) =>
            {
                (present, retake) = existing(nft, conf, holder, &own, &key)?;
            }
            // A concurrent ADD repaired the rule first (the handle is gone) or removed
            // a set, or port mapping's maps are not there yet: look again.
            Err(e) if attempt < 3 && e.is(libc::ENOENT) => {
                if !publish.ports.is_empty() {
                    nft.ensure_portmap()?;
                }
            }
            Err(e)
                if e.refused.is_some_and(Step::creates)
                    && (e.is(libc::EEXIST) || e.is(libc::EOPNOTSUPP) || e.is(libc::EBUSY)) =>
            {
                return Err(foreign(&e))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Published ports for ADD's batch, and what to do when the kernel refuses one.
pub struct Publish<'a> {
    pub ports: &'a [PortElement],
    /// The bridge whose hairpin traffic gets the masquerade mark.
    pub bridge: &'a str,
    /// A key is already in a map with other data: Ok after removing this attachment's
    /// own stale element (the batch is sent again), or the error naming the holder.
    pub resolve: &'a dyn Fn(&mut Nftables, NlError) -> Result<()>,
}

/// The host's lock on repairs of academy's NAT (any network): a repair is rare and takes
/// a millisecond. Best effort: without /run, or after 5 s, ADD goes on unlocked (at
/// worst a network gets two identical rules, which the next repair makes one).
pub(crate) fn repair_lock() -> Option<Flock<File>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(REPAIR_LOCK)
        .ok()?;
    files::lock_exclusive(file, Duration::from_secs(5)).ok()
}

const REPAIR_LOCK: &str = "/run/academy-nat.lock";

/// Whether the network's rule needs (re-)making: None when academy's one rule for the
/// set is there and current; Some(whether the set is missing too) otherwise. A set of
/// another shape under academy's name refuses ADD before anything is made.
pub(crate) fn repair_of(
    nft: &mut Nftables,
    conf: &Config,
    network: &MasqNetwork,
    rules: &[MasqRule],
) -> Result<Option<bool>> {
    let set = network.set_name();
    let ours: Vec<&MasqRule> = rules.iter().filter(|r| r.set == set).collect();
    if ours.len() == 1 && is_current(conf, ours[0], network) {
        return Ok(None);
    }
    match nft.set_shape(&conf.name, network.family)? {
        SetShape::Foreign(why) => Err(foreign_set(&set, &why)),
        SetShape::Missing => Ok(Some(true)),
        SetShape::Ours => Ok(Some(false)),
    }
}

/// Whether a rule of academy's for the network's set excludes what it should. With
/// academy's own IPAM, exactly the network's current ranges; a delegated IPAM's
/// subnets are only known from the addresses of each ADD, which would make every ADD
/// from another subnet rewrite the rule, so there any rule of academy's will do.
fn is_current(conf: &Config, rule: &MasqRule, network: &MasqNetwork) -> bool {
    conf.builtin().is_none() || rule.comment == network.rule_comment()
}

/// Adds to `change` what makes `network`'s table, chain, set and one current rule.
pub(crate) fn add_repair(change: &mut NatChange, network: &MasqNetwork, rules: &[MasqRule]) {
    let set = network.set_name();
    change.ensure.push(network.clone());
    change
        .drop_rules
        .extend(rules.iter().filter(|r| r.set == set).map(|r| r.handle));
    change.rules.push(network.clone());
}

/// Which of `own` already have an element: (this attachment's, a stale one to take
/// over). An element named for another attachment is taken over only when the store
/// gives its address to this one (the other's reservation is gone, so its element is a
/// leftover). Otherwise the address has passed to that attachment while this ADD was
/// stalled (a healing ADD, a reclaim): its element is left alone and ADD fails with 11,
/// its undo removing nothing but its own.
fn existing(
    nft: &mut Nftables,
    conf: &Config,
    holder: &Holder,
    own: &[IpAddr],
    key: &str,
) -> Result<(Vec<IpAddr>, Vec<IpAddr>)> {
    let (mut present, mut retake) = (Vec::new(), Vec::new());
    for address in own {
        match nft.element(&conf.name, *address)? {
            Some(e) if e.comment == key => present.push(*address),
            Some(e) => {
                if !reserved_to(conf, holder, *address)? {
                    return Err(Error::new(
                        code::TRY_AGAIN_LATER,
                        format!(
                            "address {address} is in the masquerade as {:?}'s, and the store does not give it to this attachment: it passed to another while this ADD ran",
                            e.comment
                        ),
                    )
                    .details("the runtime may retry the ADD; the other attachment's masquerade is left as it is"));
                }
                eprintln!(
                    "academy: masquerade element {address} still named {:?}, whose reservation is gone: it is this attachment's now",
                    e.comment
                );
                retake.push(*address);
            }
            None => {}
        }
    }
    Ok((present, retake))
}

/// Whether academy's store holds `address` for `holder` (never, for a delegated IPAM:
/// academy cannot tell who its addresses are given to).
fn reserved_to(conf: &Config, holder: &Holder, address: IpAddr) -> Result<bool> {
    if conf.builtin().is_none() {
        return Ok(false);
    }
    let Some(store) = crate::addressing::open_store(conf)? else {
        return Ok(false);
    };
    Ok(store
        .reservations()?
        .iter()
        .any(|r| r.address == address && r.holder().as_ref() == Some(holder)))
}

pub(crate) fn foreign_set(set: &str, why: &str) -> Error {
    Error::new(
        code::HOST_NAME_TAKEN,
        format!("nf_tables set inet academy {set} is not academy's: it has {why}"),
    )
    .details(format!(
        "academy makes that set for this network's ipMasq; remove the other one (nft delete set inet academy {set}) or rename the network"
    ))
}

/// The kernel refused to make academy's table, chain or set: something else has its name.
fn foreign(e: &NlError) -> Error {
    Error::new(
        code::HOST_NAME_TAKEN,
        format!("kernel refused to {e}: an object of that name in table inet academy is not academy's"),
    )
    .details("academy owns table inet academy; remove the conflicting chain or set (nft list table inet academy shows it)")
}

/// For a legacy reservation that names its container only: the elements whose comment
/// names that container.
pub fn remove_of_container(conf: &Config, container_id: &str, addresses: &[IpAddr]) -> Result<()> {
    let prefix = format!("{container_id}:");
    remove_if(&mut Nftables::open()?, conf, addresses, |c| {
        c.starts_with(&prefix)
    })
}

/// Removes those of `addresses` whose element is `holder`'s: each element is looked up
/// and its comment compared, so an element that is now another attachment's (its address
/// reclaimed and given again) stays. One lookup per address, then one batch.
///
/// The kernel frees removed elements only after an RCU grace period, and closing the
/// socket that removed them waits for that (measured here: 6 to 22 ms on the close): the
/// one removal keeps `nft` open across its slow step, the veth deletion, by which time
/// the wait is over.
pub fn remove_owned(
    nft: &mut Nftables,
    conf: &Config,
    holder: &Holder,
    addresses: &[IpAddr],
) -> Result<()> {
    let key = stored_comment(&holder.key());
    remove_if(nft, conf, addresses, |c| c == key)
}

fn remove_if(
    nft: &mut Nftables,
    conf: &Config,
    addresses: &[IpAddr],
    owned: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut mine = Vec::new();
    for address in addresses {
        match nft.element(&conf.name, *address) {
            Ok(Some(e)) if owned(&e.comment) => mine.push(*address),
            Ok(Some(e)) => eprintln!(
                "academy: left {address} in the masquerade: its element is {:?}'s, not this attachment's",
                e.comment
            ),
            Ok(None) => {}
            Err(e) => match nft.set_shape(&conf.name, Family::of(*address)) {
                Ok(SetShape::Foreign(why)) => eprintln!(
                    "academy: nf_tables set inet academy {} is not academy's ({why}): nothing of this attachment's is in it, left alone",
                    nftables_set_name(&conf.name, Family::of(*address))
                ),
                _ => return Err(e.into()),
            },
        }
    }
    if mine.is_empty() {
        return Ok(());
    }
    Ok(nft.delete_elements(&conf.name, &mine)?)
}

/// The addresses in this network's sets whose comment names `holder`: for a DEL that
/// knows no addresses (a delegated IPAM without prevResult). O(set size), so never on
/// the usual paths.
pub fn owned_by(conf: &Config, holder: &Holder) -> Result<Vec<IpAddr>> {
    let key = stored_comment(&holder.key());
    let mut nft = Nftables::open()?;
    let mut found = Vec::new();
    for family in [Family::V4, Family::V6] {
        if let SetShape::Foreign(_) = nft.set_shape(&conf.name, family)? {
            continue;
        }
        let elements = nft.elements(&conf.name, family)?;
        found.extend(
            elements
                .into_iter()
                .filter(|e| e.comment == key)
                .map(|e| e.address),
        );
    }
    Ok(found)
}

/// CHECK: each address is in its set as this attachment's, and the network's rule is
/// in the chain, made for the network's current ranges.
pub fn check(
    conf: &Config,
    holder: &Holder,
    addresses: &[IpNetwork],
    diffs: &mut Vec<String>,
) -> Result<()> {
    let mut nft = Nftables::open()?;
    let rules = nft.masquerade_rules()?;
    for network in networks(conf, addresses) {
        let set = network.set_name();
        if let SetShape::Foreign(why) = nft.set_shape(&conf.name, network.family)? {
            diffs.push(format!(
                "nf_tables set inet academy {set} is not academy's: it has {why}"
            ));
            continue;
        }
        let ours: Vec<&MasqRule> = rules.iter().filter(|r| r.set == set).collect();
        if ours.is_empty() {
            diffs.push(format!(
                "the masquerade rule of nf_tables set inet academy {set} is missing from chain postrouting"
            ));
        } else if !ours.iter().any(|r| is_current(conf, r, &network)) {
            diffs.push(format!(
                "the masquerade rule of nf_tables set inet academy {set} was made for other ranges ({:?}, not {:?})",
                ours[0].comment,
                network.rule_comment()
            ));
        }
    }
    let key = stored_comment(&holder.key());
    for address in addresses {
        let set = nftables_set_name(&conf.name, Family::of(address.ip()));
        match nft.element(&conf.name, address.ip()) {
            Ok(Some(e)) if e.comment == key => {}
            Ok(Some(e)) => diffs.push(format!(
                "address {}'s element in nf_tables set inet academy {set} is {:?}'s, not this attachment's",
                address.ip(),
                e.comment
            )),
            Ok(None) => diffs.push(format!(
                "address {} is not in nf_tables set inet academy {set}: its traffic leaves unmasqueraded",
                address.ip()
            )),
            Err(_) => {} // a foreign set: reported above
        }
    }
    Ok(())
}

/// GC: removes every element of the network's sets whose attachment is not in `valid`,
/// judged by the comments of a dump taken just before the removal (a lookup per element
/// would compare the same comments again, at one round trip each: a GC of 5,000 stale
/// elements is one dump and one batch). Errors are collected; the sweep goes on.
pub fn gc(
    nft: &mut Nftables,
    conf: &Config,
    live: &crate::verbs::gc::Live,
    errors: &mut Vec<Error>,
) {
    for family in [Family::V4, Family::V6] {
        match nft.set_shape(&conf.name, family) {
            Ok(SetShape::Foreign(why)) => {
                eprintln!(
                    "academy: GC left nf_tables set inet academy {} alone: it is not academy's ({why})",
                    nftables_set_name(&conf.name, family)
                );
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                errors.push(e.into());
                continue;
            }
        }
        crate::verbs::gc::sweep(
            nft.elements(&conf.name, family),
            &live.holders,
            |e: &MasqElement| &e.comment,
            |stale| {
                let addresses: Vec<IpAddr> = stale.iter().map(|e| e.address).collect();
                nft.delete_elements(&conf.name, &addresses)
            },
            |e| {
                format!(
                    "removed {} from the masquerade (held by {})",
                    e.address, e.comment
                )
            },
            errors,
        );
    }
}

/// Per family of `addresses`, the network's subnets in that family: all of academy's
/// own ranges (the rule's exclusions follow the network's current ranges), or the
/// addresses' own subnets for a delegated IPAM.
pub(crate) fn networks(conf: &Config, addresses: &[IpNetwork]) -> Vec<MasqNetwork> {
    let own: Vec<IpNetwork> = match &conf.ipam {
        Ipam::Builtin(b) => b.range_sets.iter().flatten().map(|p| p.subnet()).collect(),
        Ipam::Delegated(_) | Ipam::None => Vec::new(),
    };
    let mut networks: Vec<MasqNetwork> = Vec::new();
    for address in addresses {
        let family = Family::of(address.ip());
        let network = match networks.iter().position(|n| n.family == family) {
            Some(i) => &mut networks[i],
            None => {
                let subnets = own.iter().filter(|s| Family::of(s.ip()) == family);
                networks.push(MasqNetwork {
                    network: conf.name.clone(),
                    family,
                    subnets: subnets.copied().collect(),
                });
                networks.last_mut().expect("just pushed")
            }
        };
        if !network.subnets.iter().any(|s| s.contains(address.ip())) {
            let subnet = IpNetwork::new(address.network(), address.prefix()).expect("same prefix");
            network.subnets.push(subnet);
        }
    }
    networks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(json: &str) -> Config {
        Config::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn each_family_is_kept_inside_all_of_its_network_s_subnets() {
        let c = conf(
            r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipMasq":true,"ipam":{"type":"host-local",
            "ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"10.2.0.0/24"}],[{"subnet":"fd00::/64"}]]}}"#,
        );
        let got = networks(
            &c,
            &[
                "10.1.0.5/24".parse().unwrap(),
                "fd00::5/64".parse().unwrap(),
            ],
        );
        let want = |family, subnets: &[&str]| MasqNetwork {
            network: "n".into(),
            family,
            subnets: subnets.iter().map(|s| s.parse().unwrap()).collect(),
        };
        assert_eq!(
            got,
            vec![
                want(Family::V4, &["10.1.0.0/24", "10.2.0.0/24"]),
                want(Family::V6, &["fd00::/64"]),
            ]
        );
        // A delegated IPAM: the subnets of the addresses it gave.
        let d =
            conf(r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipam":{"type":"dhcp"}}"#);
        let got = networks(&d, &["192.168.5.7/16".parse().unwrap()]);
        assert_eq!(got, vec![want(Family::V4, &["192.168.0.0/16"])]);
    }
}
