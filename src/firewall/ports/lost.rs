//! The published ports a flush took: `nft flush ruleset` or `nft delete table inet
//! academy` takes the maps with their elements, and the kernel keeps no other trace of
//! them. Each wired attachment's runtime record (src/ipam/store/runtime.rs) says which
//! mappings its runtime asked for; the elements they make that no map holds are lost,
//! and put back as ADD made them (same keys, same data, same owner comment).
//!
//! What cannot be put back is said, never skipped: a key another container has taken
//! since (under the same key, or in the other map: a hostIP mapping against a wildcard
//! one), a key two lost records both ask for, a record that does not read, and an attachment added by an academy older than
//! records (its mappings are unknown; whether its ports are in place is told apart).
//!
//! A DEL cannot remove its ports between the restore's look at the wired attachments and
//! its batch (which would publish them again): the restore holds the network's removal
//! lock whole from its look to its batch (firewall::network::removal).

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::elements::describe;
use super::holders::cross_held;
use super::wants::wanted_by_other;
use super::{describe_holder, elements_of, held, key_text, same_container, PortElement, LOGGED};
use crate::cni::Result;
use crate::config::Config;
use crate::firewall::{Asked, Wired};
use crate::netlink::Nftables;

/// What the records ask for that the maps lack, and what cannot be put back.
#[derive(Default)]
pub(super) struct Lost {
    /// Per attachment ("cid/ifname"), the elements no map holds.
    pub ports: Vec<(String, Vec<PortElement>)>,
    /// (what, because).
    pub not: Vec<(String, String)>,
    /// Attachments of an older academy whose ports are in place, unrecorded.
    pub unrecorded: Vec<String>,
}

impl Lost {
    pub fn elements(&self) -> Vec<PortElement> {
        self.ports
            .iter()
            .flat_map(|(_, p)| p.iter().cloned())
            .collect()
    }

    /// "the host ports of c1/eth0: tcp/8080 (v4) -> 10.98.0.2:80, ...", one per attachment.
    pub fn words(&self, with_targets: bool) -> Vec<String> {
        self.ports
            .iter()
            .map(|(name, ports)| {
                let mut shown: Vec<String> = ports
                    .iter()
                    .take(LOGGED)
                    .map(|p| match with_targets {
                        true => describe(p),
                        false => key_text(&p.key),
                    })
                    .collect();
                if ports.len() > LOGGED {
                    shown.push(format!("{} more", ports.len() - LOGGED));
                }
                format!("the host ports of {name}: {}", shown.join(", "))
            })
            .collect()
    }
}

const OLDER: &str = "it was added by an academy older than this one, which did not record them; its next ADD records them";

/// The network's lost ports: one lookup per recorded key (or a dump of its map when it
/// has many), one dump of the maps only when an older attachment is to be told about.
pub(super) fn lost(nft: &mut Nftables, conf: &Config, wired: &Wired) -> Result<Lost> {
    let mut found = Lost::default();
    let mut wanted: Vec<(usize, Vec<PortElement>)> = Vec::new();
    let mut older = Vec::new();
    for (i, a) in wired.attachments.iter().enumerate() {
        let name = format!("{}/{}", a.container_id, a.ifname);
        match &a.asked {
            Asked::Known(r) if r.port_mappings.is_empty() => {}
            Asked::Known(r) => {
                let nets: Vec<IpNetwork> = a.addresses.iter().map(|ip| host(*ip)).collect();
                match elements_of(&r.port_mappings, &a.who(conf), &nets) {
                    Ok(elements) => wanted.push((i, elements)),
                    Err(e) => found
                        .not
                        .push((format!("the published ports of {name}"), e.msg)),
                }
            }
            Asked::Unrecorded if conf.publishes_ports => older.push(i),
            Asked::Unrecorded => {}
            Asked::Unreadable(why) if conf.publishes_ports => found
                .not
                .push((format!("the published ports of {name}"), why.clone())),
            Asked::Unreadable(_) => {}
        }
    }
    let now = held(
        nft,
        wanted.iter().flat_map(|(_, e)| e.iter().map(|p| &p.key)),
    )?;
    let mut gones: Vec<(usize, Vec<PortElement>)> = Vec::new();
    for (i, elements) in wanted {
        let a = &wired.attachments[i];
        let who = a.who(conf);
        let name = format!("{}/{}", a.container_id, a.ifname);
        let mut gone = Vec::new();
        for want in elements {
            match now.get(&want.key) {
                None => gone.push(want),
                // The same container's on another of its networks: that one serves it.
                Some(h) if same_container(&who, &h.comment) => {}
                Some(h)
                    if (h.address, h.port) == (want.address, want.port) && who.owns(&h.comment) => {
                }
                Some(h) => found.not.push((
                    format!("host port {} of {name}", key_text(&want.key)),
                    match who.owns(&h.comment) {
                        true => format!("its element goes to {} instead", describe(h)),
                        false => holds_it(&want, h),
                    },
                )),
            }
        }
        if !gone.is_empty() {
            gones.push((i, gone));
        }
    }
    // A key no map holds is not free for that: another container may hold it in the
    // other map (a hostIP mapping against a wildcard), or want it too. The maps cannot
    // tell which came first after a flush, so neither of two lost wants is put back.
    let everyone: Vec<PortElement> = gones.iter().flat_map(|(_, g)| g.clone()).collect();
    for (i, gone) in gones {
        let a = &wired.attachments[i];
        let who = a.who(conf);
        let name = format!("{}/{}", a.container_id, a.ifname);
        let taken = cross_held(nft, &who, &gone)?;
        let mut put = Vec::new();
        for want in gone {
            let why = match taken.iter().find(|(p, _)| p.key == want.key) {
                Some((_, h)) => Some(holds_it(&want, h)),
                None => wanted_by_other(&who, std::slice::from_ref(&want), &everyone).map(
                    |(_, h)| {
                        format!(
                            "{} asks for it too as {}, and both were lost to the same flush; DEL one of the two containers",
                            describe_holder(&h.comment),
                            key_text(&h.key)
                        )
                    },
                ),
            };
            match why {
                Some(why) => found
                    .not
                    .push((format!("host port {} of {name}", key_text(&want.key)), why)),
                None => put.push(want),
            }
        }
        if !put.is_empty() {
            found.ports.push((name, put));
        }
    }
    if !older.is_empty() {
        let elements = nft.port_elements()?;
        for i in older {
            let a = &wired.attachments[i];
            let who = a.who(conf);
            let name = format!("{}/{}", a.container_id, a.ifname);
            if elements.iter().any(|e| who.owns(&e.comment)) {
                found.unrecorded.push(format!(
                    "the published ports of {name} are in place, but {OLDER}; until then a flush loses them"
                ));
            } else {
                found.not.push((
                    format!("the published ports of {name} (if it had any)"),
                    OLDER.to_string(),
                ));
            }
        }
    }
    Ok(found)
}

/// Why `want` is not put back: "container C (interface I, network N) holds it", with
/// the holder's key when it is the other map's.
fn holds_it(want: &PortElement, holder: &PortElement) -> String {
    let mut why = format!("{} holds it", describe_holder(&holder.comment));
    if holder.key != want.key {
        why.push_str(&format!(" as {}", key_text(&holder.key)));
    }
    why
}

/// An address as elements_of takes it: only its address and family are read.
fn host(ip: IpAddr) -> IpNetwork {
    IpNetwork::from(ip)
}
