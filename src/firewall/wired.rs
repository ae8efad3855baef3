//! A network's wired attachments, as its store and the host's links say: what an admin's
//! flush or an iptables reload cannot take, so what academy rebuilds its nf_tables state
//! from. Only links are read; no netns is entered.

use std::net::IpAddr;

use crate::addressing::open_store;
use crate::attachment::{Attachment, Caller, HostLinks};
use crate::cni::Result;
use crate::config::Config;
use crate::ipam::store::Reservation;
use crate::netlink::{Link, LinkKind, Netlink};

/// One wired attachment: its identity and the addresses the store gives it.
#[derive(Debug, Clone)]
pub struct WiredAttachment {
    pub container_id: String,
    pub ifname: String,
    pub addresses: Vec<IpAddr>,
}

impl WiredAttachment {
    pub fn who<'a>(&'a self, conf: &'a Config) -> Attachment<'a> {
        Attachment::new(&conf.name, &self.container_id, &self.ifname)
    }
}

pub struct Wired {
    pub attachments: Vec<WiredAttachment>,
    /// The network's bridge is in this netns and has ports.
    pub bridge_in_use: bool,
}

impl Wired {
    /// The network's attachments whose host veth is in the calling netns: with
    /// academy's store, its reservations whose veth exists; with a delegated IPAM, the
    /// veths labelled for the network (their addresses unknown). A bridge that is not
    /// here (not made yet after a reboot, or another netns) has none.
    pub fn read(conf: &Config) -> Result<Wired> {
        let all = Netlink::open()?.links()?;
        // A delegated IPAM keeps no store here (open_store refuses it).
        let store = match conf.builtin() {
            Some(_) => open_store(conf)?,
            None => None,
        };
        let reservations = match store {
            Some(store) => store.reservations()?,
            None => Vec::new(),
        };
        Wired::of(conf, &all, &reservations)
    }

    /// As `read`, from the host's links and the store's reservations read once for
    /// several looks (a scrape reads each only when it changed).
    pub fn of(conf: &Config, all: &[Link], reservations: &[Reservation]) -> Result<Wired> {
        let bridge = all
            .iter()
            .find(|l| l.name == conf.bridge && l.kind == LinkKind::Bridge)
            .map(|b| b.index);
        let bridge_in_use = bridge.is_some_and(|b| all.iter().any(|l| l.controller == Some(b)));
        let links = HostLinks::of(all, conf, Caller::Add)?;
        let mut attachments: Vec<WiredAttachment> = Vec::new();
        if conf.builtin().is_some() {
            for r in reservations {
                let Some(holder) = r.holder() else { continue };
                if !links.wired(&holder.container_id, &holder.ifname) {
                    continue;
                }
                match attachments
                    .iter_mut()
                    .find(|a| a.container_id == holder.container_id && a.ifname == holder.ifname)
                {
                    Some(a) => a.addresses.push(r.address),
                    None => attachments.push(WiredAttachment {
                        container_id: holder.container_id,
                        ifname: holder.ifname,
                        addresses: vec![r.address],
                    }),
                }
            }
        } else {
            for (_, cid, ifname) in &links.owned {
                attachments.push(WiredAttachment {
                    container_id: cid.clone(),
                    ifname: ifname.clone(),
                    addresses: Vec::new(),
                });
            }
        }
        Ok(Wired {
            attachments,
            bridge_in_use,
        })
    }
}
