//! `macspoofchk`: frames entering the bridge from a container's host veth whose source
//! MAC is not the one academy gave the container's interface are dropped. What academy
//! creates in nf_tables (table `bridge academy`) is described in
//! nft.rs, names.rs and create.rs; this module decides what goes in and names the owners.
//!
//! A guarded port's elements carry its attachment's owner comment, the identity GC's
//! valid list is matched against. ADD adds them right after the veth pair exists,
//! before the container's interface has an address; the one removal (removal.rs) takes
//! them by that identity before the veth goes. The network's rule, map and sets go with
//! its last attachment (network/).

use std::collections::HashMap;

use super::engine::{self, AttachmentSet, Keys, Want, Wanted};
use super::{Adding, Checking, Diff, Looking, Releasing, Removing, Repair};
use crate::cni::result::format_mac;
use crate::cni::Result;
use crate::config::Config;
use crate::netlink::nftables::attrs::ifname_bytes;
use crate::netlink::{Netlink, Nftables, Object};

mod create;
mod names;
mod nft;
mod unmapped;
mod wants;

use names::ports_map;
use nft::{guarded_port, guarded_ports};
pub use wants::network_wants;
use wants::port_wants;

/// Guards the attachment's host veth: only the container's MAC may be a source on it.
/// Its three elements in one batch; the network's map, sets and rule made first only
/// when the kernel refuses them for want of those. Elements of an earlier pair under
/// the veth's name (a killed ADD of this attachment, whose pair create_pair just
/// replaced) are replaced.
pub fn add(a: &mut Adding) -> Result<()> {
    let (Some((_, mac)), true) = (&a.host, a.conf.mac_spoof_check) else {
        return Ok(());
    };
    let network = network_wants(a.conf, Keys::AsConfigured);
    let own = port_wants(&a.conf.name, a.who, Some(*mac));
    let done = engine::add(a.nft.get()?, &network, &own)?;
    for stale in &done.replaced {
        eprintln!(
            "academy: replaced the stale MAC filter element {} of network {}",
            stale.put_back_words(),
            a.conf.name
        );
    }
    Ok(())
}

/// Removes the attachment's elements if they name it, and only then: a port name whose
/// elements name another attachment is not this removal's to take. Whatever the config
/// says (macspoofchk taken out since ADD): one lookup, answered at once without the map.
pub fn remove(r: &mut Removing) -> Result<()> {
    let conf = r.conf;
    let veth = ifname_bytes(&r.who.host_name());
    let sets: Vec<AttachmentSet> = attachment_sets(conf)
        .into_iter()
        .map(|map| map.only(vec![veth.clone()]))
        .collect();
    let nft = r.nft.get()?;
    let taken = super::said(conf, engine::take(nft, &sets, |c| r.who.owns(c)), true)?;
    let in_map = !(taken.removed.is_empty() && taken.left.is_empty() && taken.foreign.is_empty());
    match in_map || !conf.mac_spoof_check {
        true => Ok(()),
        // Not in the map: its set elements may still be there, the map lost (only
        // looked for where the key is set: an extra lookup on every other DEL).
        false => Ok(unmapped::remove_unmapped(nft, &conf.name, &r.who)?),
    }
}

/// CHECK: the network's map, sets and rule are there, and the host veth is guarded for
/// this attachment, with the MAC the map records (the record a removal reads) in both
/// sets; that MAC is the container's as ADD reported it (`mac`). What a flush took the
/// restore command puts back; another owner's elements or another MAC only DEL and
/// ADD mend.
pub fn check(c: &mut Checking) -> Result<Vec<Diff>> {
    if !c.conf.mac_spoof_check {
        return Ok(Vec::new());
    }
    let (nft, conf, who) = (c.nft.get()?, c.conf, c.who);
    let name = who.host_name();
    // The MAC ADD reported; without one (a result that lost it), the map's.
    let mac = match parse_mac(c.mac) {
        Some(mac) => Some(mac),
        None => guarded_port(nft, &conf.name, &name)?.map(|p| p.mac),
    };
    let mut wants = network_wants(conf, Keys::AsConfigured);
    wants.extend(port_wants(&conf.name, who, mac));
    let found = engine::look(nft, &wants)?;
    let mut diffs = Vec::new();
    let mut other_mac = false;
    for (want, there) in &found.differing {
        if !want.owner.owns(&there.comment) {
            diffs.push(Diff {
                text: format!(
                    "the MAC filter of host veth {name} names {:?}, not {} ({})",
                    there.comment,
                    who.owner(),
                    want.place()
                ),
                restorable: false,
            });
        }
        if let Some(recorded) = there.data.as_deref() {
            let recorded: [u8; 6] = recorded.try_into().unwrap_or_default();
            other_mac = true;
            diffs.push(Diff {
                text: format!(
                    "host veth {name} lets MAC {} through, but ADD gave {} MAC {}",
                    format_mac(recorded),
                    who.ifname,
                    c.mac
                ),
                restorable: false,
            });
        }
    }
    // With another MAC in the map, the reported MAC's pair is missing because of it:
    // said once, above, as what only DEL and ADD mend.
    let pairs = names::allowed_set(&conf.name);
    let missing = found.missing.iter().filter(|w| {
        !(other_mac && matches!(&w.wanted, Wanted::Element { set, .. } if *set == pairs))
    });
    diffs.extend(missing.map(|w| Diff {
        text: w.missing_words(),
        restorable: true,
    }));
    Ok(diffs)
}

/// A MAC as a result gives it ("8a:d4:be:a4:73:82"); None when empty or malformed.
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> = text
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<std::result::Result<_, _>>()
        .ok()?;
    bytes.try_into().ok()
}

/// Where GC finds the network's attachments' elements: its map of guarded ports,
/// each with the two set elements derived from it.
pub fn attachment_sets(conf: &Config) -> Vec<AttachmentSet> {
    let network = conf.name.clone();
    let map = AttachmentSet::new(create::map_of(&ports_map(&conf.name)), |e| {
        let port = nft::port_of(e)?;
        Some(format!("MAC filter of {}", port.port))
    });
    vec![map.along(move |e| match nft::port_of(e) {
        Some(port) => nft::elements_of(&network, &port)
            .into_iter()
            .skip(1)
            .map(|(set, key, _)| (set, key))
            .collect(),
        None => Vec::new(),
    })]
}

/// What the network's wired attachments want: the network's filter and each one's
/// guard, with the MAC its map element records, or, for a port the map lost, the MAC
/// of the container's interface read over netlink through the veth's peer (no netns
/// is entered; `nl` None: unknown, as STATUS looks).
fn wired_wants(l: &mut Looking, mut nl: Option<&mut Netlink>) -> Result<Vec<Want>> {
    let (conf, wired) = (l.conf, l.wired);
    if !conf.mac_spoof_check || wired.attachments.is_empty() {
        return Ok(Vec::new());
    }
    let nft = l.nft.get()?;
    let mut wants = network_wants(conf, Keys::AsConfigured);
    // The map read once (its elements are this network's ports), not looked up per port.
    let recorded: HashMap<String, [u8; 6]> = guarded_ports(nft, &conf.name)?
        .into_iter()
        .map(|p| (p.port, p.mac))
        .collect();
    for a in &wired.attachments {
        let who = a.who(conf);
        let veth = who.host_name();
        let mac = match (recorded.get(&veth), nl.as_deref_mut()) {
            (Some(mac), _) => Some(*mac),
            (None, Some(nl)) => {
                let mac = nl.peer_mac(&veth)?;
                if mac.is_none() {
                    eprintln!(
                        "academy: cannot read the MAC of {}'s interface {}: its MAC filter is not restored",
                        a.container_id, a.ifname
                    );
                    continue;
                }
                mac
            }
            (None, None) => None,
        };
        wants.extend(port_wants(&conf.name, &who, mac));
    }
    Ok(wants)
}

/// STATUS: what a flush took of the filter of the network's wired attachments: the
/// network's objects one by one, the ports' guards counted.
pub fn missing(l: &mut Looking) -> Result<Vec<String>> {
    let wants = wired_wants(l, None)?;
    if wants.is_empty() {
        return Ok(Vec::new());
    }
    let found = engine::look(l.nft.get()?, &wants)?;
    Ok(engine::summary(&found.missing, "MAC filter"))
}

/// Puts back what `missing` names: whatever of the network's map, sets and rule is
/// missing is made again in place (the elements still there stay, so an ADD running
/// beside the restore keeps its guard), then each wired port's guard.
pub fn restore(l: &mut Looking) -> Result<Repair> {
    if !l.conf.mac_spoof_check || l.wired.attachments.is_empty() {
        return Ok(Repair::default());
    }
    let mut nl = Netlink::open()?;
    let wants = wired_wants(l, Some(&mut nl))?;
    if wants.is_empty() {
        return Ok(Repair::default());
    }
    let completed = engine::complete(l.nft.get()?, &wants)?;
    Ok(Repair {
        put_back: completed.words("MAC filter"),
        not_put_back: completed.left,
        unrecorded: Vec::new(),
    })
}

/// The network's rule, map and sets in `bridge academy`, once no port is guarded;
/// looked for whether or not macspoofchk is still set (it may have been taken out since
/// ADD). Only those there: a network that never had the key has none to report deleted.
pub fn objects(r: &mut Releasing) -> Result<Option<Vec<Object>>> {
    let nft: &mut Nftables = r.nft.get()?;
    if !guarded_ports(nft, &r.conf.name)?.is_empty() {
        return Ok(None);
    }
    let wants = network_wants(r.conf, Keys::All);
    Ok(Some(engine::present(nft, &wants)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_s_mac_is_read_back() {
        assert_eq!(
            parse_mac("8a:d4:be:a4:73:82"),
            Some([0x8a, 0xd4, 0xbe, 0xa4, 0x73, 0x82])
        );
        assert_eq!(parse_mac(""), None);
        assert_eq!(parse_mac("8a:d4:be"), None);
    }
}
