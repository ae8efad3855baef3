//! A network's wired attachments, as its store and the host's links say: what an admin's
//! flush or an iptables reload cannot take, so what academy rebuilds its nf_tables state
//! from. Only links are read; no netns is entered. What the runtime asked for that
//! the kernel loses with a flush (published ports, rates) is read from each
//! attachment's runtime record (src/ipam/store/runtime.rs) when the network may have
//! any: it publishes ports or shapes.

use std::net::IpAddr;

use crate::addressing::open_store;
use crate::attachment::{Attachment, Caller, HostLinks};
use crate::cni::Result;
use crate::config::{Config, Recorded};
use crate::ipam::store::{Reservation, Runtime, StoreDir};
use crate::netlink::{Link, LinkKind, Netlink};

/// One wired attachment: its identity, the addresses the store gives it and what its
/// runtime asked for.
#[derive(Debug, Clone)]
pub struct WiredAttachment {
    pub container_id: String,
    pub ifname: String,
    pub addresses: Vec<IpAddr>,
    pub asked: Asked,
}

/// What an attachment's runtime asked for, as far as the store knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// From its record (nothing, on a network that neither publishes nor shapes, or
    /// with a delegated IPAM, which keeps no store: see docs/ports-and-nat.md).
    Known(Recorded),
    /// Added by an academy older than records: unknown.
    Unrecorded,
    /// Its record cannot be read; why.
    Unreadable(String),
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
        Wired::beside(conf, &Netlink::open()?.links()?)
    }

    /// As `read`, with the host's links already read: the store is read now.
    pub fn beside(conf: &Config, all: &[Link]) -> Result<Wired> {
        // A delegated IPAM keeps no store here (open_store refuses it).
        let store = match conf.builtin() {
            Some(_) => open_store(conf)?,
            None => None,
        };
        let reservations = match &store {
            Some(store) => store.reservations()?,
            None => Vec::new(),
        };
        Wired::of(conf, all, &reservations, store.as_ref())
    }

    /// As `read`, from the host's links and the store's reservations read once for
    /// several looks (a scrape reads each only when it changed); the runtime records
    /// are read from `store`, for the wired attachments only.
    pub fn of(
        conf: &Config,
        all: &[Link],
        reservations: &[Reservation],
        store: Option<&StoreDir>,
    ) -> Result<Wired> {
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
                        asked: Asked::Known(Recorded::default()),
                        container_id: holder.container_id,
                        ifname: holder.ifname,
                        addresses: vec![r.address],
                    }),
                }
            }
            if let Some(store) = store.filter(|_| conf.publishes_ports || conf.shapes) {
                for a in &mut attachments {
                    let holder = crate::ipam::Holder::new(&*a.container_id, &*a.ifname);
                    a.asked = match store.runtime_of(&holder) {
                        Ok(Runtime::Unrecorded) => Asked::Unrecorded,
                        Ok(Runtime::Nothing) => Asked::Known(Recorded::default()),
                        Ok(Runtime::Record(bytes)) => match Recorded::parse(&bytes) {
                            Ok(r) => Asked::Known(r),
                            Err(why) => Asked::Unreadable(format!("its runtime record {why}")),
                        },
                        Err(e) => Asked::Unreadable(e.to_string()),
                    };
                }
            }
        } else {
            for (_, cid, ifname) in &links.owned {
                attachments.push(WiredAttachment {
                    container_id: cid.clone(),
                    ifname: ifname.clone(),
                    addresses: Vec::new(),
                    asked: Asked::Known(Recorded::default()),
                });
            }
        }
        Ok(Wired {
            attachments,
            bridge_in_use,
        })
    }
}
