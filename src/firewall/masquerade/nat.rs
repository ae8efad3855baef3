//! ADD's one batch in `inet academy`: the attachment's masquerade elements and published
//! ports, with the network's rule completed by the engine when it is missing (a first
//! ADD, an admin's flush) or was made for other ranges.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::wants::rule_wants;
use super::{apply, element, set_shape};
use super::{networks, set_name, MasqElement, MasqNetwork, NatChange, SetElement, SetShape};
use crate::addressing::open_store;
use crate::attachment::Attachment;
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::firewall::network::repair_lock;
use crate::firewall::ports::{self, key_text, PortElement, PortKey};
use crate::firewall::{engine, Adding, Wired};
use crate::ipam::store::files::FileLock;
use crate::ipam::Holder;
use crate::netlink::{Family, Nftables, NlError, Step};

/// What the kinds of ADD's one batch put in it (their `add`, in the table's phase
/// `OneBatch`) before `send_staged` sends it.
#[derive(Default)]
pub struct Staged {
    /// The masquerade's: the attachment's addresses go in its network's sets.
    pub masquerade: bool,
    /// Port mapping's: the ports to publish, and the host's publish lock, held until the
    /// batch is in.
    pub ports: Vec<PortElement>,
    pub publish_lock: Option<FileLock>,
}

/// ADD: the attachment's masquerade elements (ipMasq) and published ports
/// (portMappings) in one batch, so ADD's nf_tables state is one sendmsg and all or
/// nothing. The batch also makes sure of the network's table, chain, set and rule when
/// its rule is missing or outdated (made for other ranges): an admin's `nft flush` is
/// repaired by the next ADD, and when the set itself had to be re-created, the elements
/// of the network's other wired attachments are put back from the store in the same
/// batch. Costs one small dump of academy's chain before the batch.
///
/// Published ports are first looked at in the map the kernel does not compare (a
/// hostIP mapping against the ports published on every address, and the reverse:
/// `ports::cross_conflict`), under the host's publish lock held until the batch is in.
///
/// Any number of ports: a batch past BATCH_BYTES (about 1,400 ports) is sent as several
/// (batch.rs), in order, each all or nothing, since one nfnetlink batch is one
/// sendmsg and the socket's send buffer caps it. ADD stays all or nothing all the same:
/// the masquerade's elements and the first ports go in the first batch, and when a
/// later batch is refused ADD fails, and its undo (the one removal, removal.rs) removes
/// the earlier batches' ports by their holder's comment, as it removes everything else
/// the failed ADD made (tests/it/portmap/limits.rs: a refusal in the last batch leaves
/// none of the earlier ones' ports).
pub fn send_staged(a: &mut Adding) -> Result<()> {
    let staged = std::mem::take(&mut a.batch);
    let mut published = staged.ports;
    if !staged.masquerade && published.is_empty() {
        return Ok(());
    }
    let nft = a.nft.get()?;
    send(
        nft,
        a.conf,
        a.who,
        a.addresses,
        staged.masquerade,
        &mut published,
    )?;
    drop(staged.publish_lock);
    ports::flush_stale_udp(&published);
    Ok(())
}

fn send(
    nft: &mut Nftables,
    conf: &Config,
    who: &Attachment,
    addresses: &[IpNetwork],
    masquerade: bool,
    published: &mut Vec<PortElement>,
) -> Result<()> {
    let (networks, own): (Vec<MasqNetwork>, Vec<IpAddr>) = if masquerade {
        let own = addresses.iter().map(|a| a.ip()).collect();
        (networks(conf, addresses), own)
    } else {
        (Vec::new(), Vec::new())
    };
    // The network's rule per family, looked at by the engine in one dump of academy's
    // chain: missing (a network's first ADD, an admin's flush) or made for other ranges,
    // it is completed in this batch.
    let rules = rule_wants(conf, &networks);
    let key = who.owner();
    // Whether the ADD publishes at all: its ports may all be left to the same
    // container's other network (resolve_published), its bridge's hairpin mark not.
    let publishes = !published.is_empty();
    // Port mapping's rules and maps were made sure of by its `add` (ports/mod.rs),
    // which judges its ports against the records when a flush took them.
    // Elements found already there: this attachment's (a retried ADD), or a stale one of
    // a holder whose reservation is gone (the address is this attachment's now).
    let mut present: Vec<IpAddr> = Vec::new();
    let mut retake: Vec<IpAddr> = Vec::new();
    // Taken only to repair: concurrent first ADDs of a network would otherwise each
    // add a rule. Held until the end of ADD's batch.
    let mut lock = None;
    // Taken only when a set is re-made with the others' elements, from the look at the
    // wired attachments to the batch: a removal in flight may have looked for its
    // elements while the set was gone, and would leave the ones put back now (seed
    // 2029). While one is, the others' elements are left to the restore.
    let mut no_removals = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let found = engine::look(nft, &rules)?;
        if found.writes_rules() && lock.is_none() {
            lock = Some(repair_lock());
            attempt -= 1;
            continue; // look again under the lock: another ADD may have repaired it
        }
        let mut change = NatChange {
            repair: engine::batch(&found),
            ports: published.to_vec(),
            hairpin_bridge: match publishes {
                true => conf.bridge.clone(),
                false => String::new(),
            },
            ..NatChange::default()
        };
        // A rule put back beside its set (an admin's flush of the chain) is worth a line
        // on stderr; a network's first rule, or one made again for the config's current
        // ranges, is not.
        let mut repaired = false;
        for (want, network) in rules.iter().zip(&networks) {
            if !found.missing.iter().any(|w| std::ptr::eq(*w, want)) {
                continue;
            }
            let outdated = found.outdated.iter().find(|(w, _)| std::ptr::eq(*w, want));
            match set_shape(nft, &conf.name, network.family)? {
                SetShape::Foreign(why) => return Err(foreign_set(&network.set_name(), &why)),
                SetShape::Ours => match outdated {
                    Some((_, was)) => crate::log::debug(format_args!(
                        "network {}: its masquerade rule made again for its current ranges (was {was:?})",
                        conf.name
                    )),
                    None => repaired = true,
                },
                SetShape::Missing => {
                    let others = no_removals.get_or_insert_with(|| {
                        crate::firewall::network::no_removal_now(&conf.name)
                    });
                    if others.is_ok() {
                        change
                            .if_missing
                            .extend(wired_elements(conf, network.family, &own));
                    }
                }
            }
        }
        for address in &own {
            let element = SetElement {
                set: set_name(&conf.name, Family::of(*address)),
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
        match apply(nft, &change) {
            Ok(()) => {
                let left_to_restore = matches!(no_removals, Some(Err(_)));
                if repaired || !change.if_missing.is_empty() || left_to_restore {
                    let left = match left_to_restore {
                        true => "; the other containers' are left to the restore (`academy restore`, `academy watch`): a removal was in flight",
                        false => "",
                    };
                    eprintln!(
                        "academy: network {}: repaired its masquerade rule{} ({} element(s) of wired attachments restored{left})",
                        conf.name,
                        if found.missing.len() > 1 { "s" } else { "" },
                        change.if_missing.len()
                    );
                }
                return Ok(());
            }
            // A host port someone holds: the other's is a conflict (an error naming it),
            // this attachment's own stale one is removed and the batch sent again.
            Err(e) if attempt < 3 && e.is(libc::EEXIST) && e.refused_in(&[Step::Publish]) => {
                resolve_published(nft, who, published, e)?;
            }
            Err(e) if attempt < 3 && e.is(libc::EEXIST) && e.refused_in(&[Step::AddElement]) => {
                (present, retake) = existing(nft, conf, who, &own)?;
            }
            // A concurrent ADD repaired the rule first (the handle is gone) or a release
            // removed a set, or port mapping's maps are not there yet: look again.
            Err(e) if attempt < 3 && e.is(libc::ENOENT) => {
                if !published.is_empty() {
                    let wants = [ports::portmap_rules()];
                    match lock {
                        Some(_) => engine::complete_held(nft, &wants)?,
                        None => engine::complete(nft, &wants)?,
                    };
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

/// A key of `published` is already in a map with other data: Ok after removing this
/// attachment's own stale elements (an ADD whose DEL never came, its address since
/// changed) and leaving out the keys the same container holds on another network
/// (podman passes the same portMappings to every network of a container: the first
/// network's element keeps the port, as the reference's first rule wins); the batch is
/// then sent again. Otherwise the error naming the other holder.
fn resolve_published(
    nft: &mut Nftables,
    who: &Attachment,
    published: &mut Vec<PortElement>,
    refused: NlError,
) -> Result<()> {
    let holders = ports::holders(nft, who, published)?;
    if let Some(conflict) = holders.conflict {
        return Err(conflict);
    }
    if holders.stale.is_empty() && holders.shared.is_empty() {
        return Err(refused.into());
    }
    for held in holders.shared.iter().take(ports::LOGGED) {
        eprintln!(
            "academy: host port {} is already published for this container by {:?}: left to it",
            key_text(&held.key),
            held.comment
        );
    }
    if holders.shared.len() > ports::LOGGED {
        eprintln!(
            "academy: {} more host ports already published for this container on another network: left to it",
            holders.shared.len() - ports::LOGGED
        );
    }
    let shared: HashSet<&PortKey> = holders.shared.iter().map(|h| &h.key).collect();
    published.retain(|p| !shared.contains(&p.key));
    if holders.stale.is_empty() {
        return Ok(());
    }
    Ok(nft.delete_port_elements(&holders.stale)?)
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
    who: &Attachment,
    own: &[IpAddr],
) -> Result<(Vec<IpAddr>, Vec<IpAddr>)> {
    let (mut present, mut retake) = (Vec::new(), Vec::new());
    for address in own {
        match element(nft, &conf.name, *address)? {
            Some(e) if who.owns(&e.comment) => present.push(*address),
            Some(e) => {
                if !reserved_to(conf, &who.holder(), *address)? {
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
    let Some(store) = open_store(conf)? else {
        return Ok(false);
    };
    Ok(store
        .reservations()?
        .iter()
        .any(|r| r.address == address && r.holder().as_ref() == Some(holder)))
}

pub(super) fn foreign_set(set: &str, why: &str) -> Error {
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

/// The elements the network's wired attachments of `family` should have, except those of
/// `except` (the caller's own). Best effort: a store or survey that cannot be read gives
/// none (said on stderr), since ADD calls this only to help other containers.
fn wired_elements(conf: &Config, family: Family, except: &[IpAddr]) -> Vec<SetElement> {
    // Only the store knows the other containers' addresses (a delegated IPAM's are that
    // plugin's), and a store holding nothing but this ADD's has none to restore: a
    // network's first ADD reads no links.
    let others = open_store(conf).and_then(|store| match store {
        Some(store) => Ok(store
            .reservations()?
            .iter()
            .any(|r| !except.contains(&r.address))),
        None => Ok(false),
    });
    if !others.unwrap_or(true) || conf.builtin().is_none() {
        return Vec::new();
    }
    match Wired::read(conf) {
        Ok(wired) => elements_of(conf, &wired)
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

/// Every wired attachment's elements.
fn elements_of(conf: &Config, wired: &Wired) -> Vec<SetElement> {
    let mut elements = Vec::new();
    for a in &wired.attachments {
        let comment = a.who(conf).owner();
        for address in &a.addresses {
            elements.push(SetElement {
                set: set_name(&conf.name, Family::of(*address)),
                element: MasqElement {
                    address: *address,
                    comment: comment.clone(),
                },
            });
        }
    }
    elements
}

/// The network's masquerade per family of its ranges (academy's own IPAM only).
pub(super) fn range_networks(conf: &Config) -> Vec<MasqNetwork> {
    let Some(b) = conf.builtin() else {
        return Vec::new();
    };
    networks(conf, &b.subnets())
}
