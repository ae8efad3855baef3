//! `academy install`'s sweep of what a rollback left: the nf_tables elements (published
//! ports, masquerade, MAC filter) and ifbs of a network whose owner attachment has no
//! reservation in the network's store and no host veth. A release that cannot read this
//! one's owner comments (v0.4.0 reads no `name#digest:cid:ifname`) frees a container's
//! address at DEL and leaves those behind: the next holder of the address would receive
//! the dead container's host-port traffic. containerd and podman send no CNI GC, so
//! nothing else would remove them; installing the newer release again does.
//!
//! It is GC's own sweep (verbs/gc.rs: nf_tables, ifbs; then the store's runtime records
//! and holder indexes), with the valid list read from the node instead of given by the
//! runtime: every reservation's holder, and every attachment whose host
//! veth is labelled for the network. It runs under the network's lock held whole, so no
//! ADD is between its reservation and its last nf_tables step meanwhile. A network is
//! left alone when academy cannot judge it: a delegated IPAM (no store of academy's), a
//! missing store, a reservation from before interfaces were recorded (its attachment's
//! interface is unknown), or a store or link dump that cannot be read.

use std::collections::{BTreeSet, HashSet};

use crate::addressing::open_store;
use crate::attachment;
use crate::config::Config;
use crate::firewall::network;
use crate::ipam::Store;
use crate::netlink::{LinkKind, Netlink};
use crate::removal;
use crate::verbs::gc::sweep_nftables;

/// What the sweep did for one network.
#[derive(Debug)]
pub enum Swept {
    /// Removed these (in words); `errors` are the kinds that failed.
    Removed {
        removed: Vec<String>,
        errors: Vec<String>,
    },
    /// Not judged, and why (None: nothing academy keeps there, not worth a word).
    LeftAlone(Option<String>),
}

/// Sweeps one network of the elements no reservation or labelled veth owns.
pub fn sweep(conf: &Config) -> Swept {
    let Some(_whole) = network::without_adds_in_flight(conf) else {
        return Swept::LeftAlone(Some(
            "its lock stayed taken by ADDs in flight for 5 s".into(),
        ));
    };
    let valid = match owners(conf) {
        Ok(valid) => valid,
        Err(why) => return Swept::LeftAlone(why),
    };
    let mut errors = Vec::new();
    let mut removed = sweep_nftables(conf, &valid, &mut errors);
    // The store's part of GC with the same list: it frees no reservation (every one is
    // listed), and removes the runtime records (published ports, bandwidth) and holder
    // indexes the older release's DEL did not know of.
    if let Some(b) = conf.builtin() {
        match Store::open(&b.data_dir, &conf.name) {
            Ok(store) => {
                let before = records(&store);
                errors.extend(store.gc(&valid).errors);
                let after = records(&store);
                removed.extend(
                    before
                        .difference(&after)
                        .map(|r| format!("runtime record {r}")),
                );
            }
            Err(e) => errors.push(e),
        }
    }
    let mut errors: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    drop(_whole);
    if !removed.is_empty() {
        // As GC: a network left with no attachment loses its own objects too (its last
        // DEL, by the older release, could not release them past these elements).
        if let Err(e) = removal::network_if_unused(conf) {
            errors.push(e.to_string());
        }
    }
    Swept::Removed { removed, errors }
}

/// The names in the store's runtime/ folder (records are named `<container id>:<ifname>`).
fn records(store: &Store) -> BTreeSet<String> {
    std::fs::read_dir(store.dir().join("runtime"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect()
}

/// The attachments of the network that are live as far as the node shows: each
/// reservation's holder, each host veth whose alias names the network.
fn owners(conf: &Config) -> Result<HashSet<(String, String)>, Option<String>> {
    let store = match open_store(conf) {
        // A delegated IPAM: its plugin's store is not academy's to read.
        Err(_) => return Err(None),
        Ok(None) => return Err(None),
        Ok(Some(store)) => store,
    };
    let reservations = store
        .reservations()
        .map_err(|e| Some(format!("its store could not be read: {e}")))?;
    let mut valid = HashSet::new();
    for r in reservations {
        let Some(ifname) = r.ifname else {
            return Err(Some(format!(
                "reservation {} names container {} but no interface (written before interfaces were recorded): run CNI GC with the valid attachments instead",
                r.address, r.container_id
            )));
        };
        valid.insert((r.container_id, ifname));
    }
    let links = Netlink::open()
        .and_then(|mut nl| nl.links())
        .map_err(|e| Some(format!("the host's links could not be read: {e}")))?;
    for link in links.iter().filter(|l| l.kind == LinkKind::Veth) {
        if let Some((network, cid, ifname)) = link.alias.as_deref().and_then(attachment::owner) {
            if network == conf.name {
                valid.insert((cid.to_string(), ifname.to_string()));
            }
        }
    }
    Ok(valid)
}
