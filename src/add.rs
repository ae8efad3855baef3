//! ADD: reserve an address, wire the container to the bridge, report what was done.
//!
//! Order: reserve, then wire. A failure at any step undoes every earlier step before the
//! error is printed (the bridge stays: it is shared). A kill leaves at most a reservation
//! whose holder index names it and a veth whose alias names it, both of which DEL for
//! the same attachment, or GC, removes (see README, "Failure model").

use ipnetwork::IpNetwork;

use crate::cni::env::Env;
use crate::cni::result::{format_mac, CniResult, Interface, IpConfig, RouteEntry};
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::ipam::{Holder, Pool, Store};
use crate::netlink::{LinkRef, Netlink};
use crate::netns::{Netns, OpenError};
use crate::wire::{self, kernel, Attachment};

pub fn add(env: &Env, conf: &Config) -> Result<CniResult> {
    let netns = match Netns::open(&env.netns) {
        Ok(ns) => ns,
        Err(OpenError::Missing) => {
            return Err(Error::new(
                code::NETNS_UNUSABLE,
                format!("CNI_NETNS {} does not exist", env.netns),
            ))
        }
        Err(OpenError::Unusable(e)) => return Err(e),
    };
    let holder = Holder {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
    };
    let pool = pool(conf)?;
    let store = Store::open(&conf.data_dir, &conf.name)?;
    let ip = match conf.test_address {
        Some(fixed) => store.reserve_requested(&holder, &pool, fixed.ip())?,
        None => store.reserve(&holder, &pool)?,
    };
    let address = IpNetwork::new(ip, conf.subnet.prefix()).expect("address is in the subnet");

    let mut nl = match Netlink::open() {
        Ok(nl) => nl,
        Err(e) => return Err(undo_reservation(&store, &holder, kernel(e))),
    };
    let who = Attachment {
        network: &conf.name,
        container_id: &env.container_id,
        ifname: &env.ifname,
    };
    wire_up(&mut nl, &netns, &who, conf, address).map_err(|e| {
        // The pair may or may not exist; deleting it is the whole of undoing the wiring.
        if let Err(cleanup) = wire::delete_if_present(&mut nl, LinkRef::Name(&who.host_name())) {
            eprintln!("academy: while undoing a failed ADD: {cleanup}");
        }
        undo_reservation(&store, &holder, e)
    })
}

fn wire_up(
    nl: &mut Netlink,
    netns: &Netns,
    who: &Attachment,
    conf: &Config,
    address: IpNetwork,
) -> Result<CniResult> {
    let gateway_on_bridge = conf
        .is_gateway
        .then(|| IpNetwork::new(conf.gateway, conf.subnet.prefix()).expect("gateway in subnet"));
    let bridge = wire::ensure_bridge(nl, &conf.bridge, conf.mtu, gateway_on_bridge)?;
    let host = wire::create_pair(nl, netns, who, &bridge, conf.mtu)?;
    wire::configure_container(netns, who.ifname, address, conf.gateway)?;
    // Read last: an unpinned bridge may change its MAC when a port joins.
    let bridge = nl.link(&conf.bridge).map_err(kernel)?.unwrap_or(bridge);
    let mtu = conf.mtu.or(bridge.mtu);
    let default_route = IpNetwork::new(
        match conf.gateway {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
        },
        0,
    )
    .expect("prefix 0 is valid");
    Ok(CniResult {
        interfaces: vec![
            Interface {
                name: bridge.name.clone(),
                mac: bridge.mac.map(format_mac).unwrap_or_default(),
                mtu: bridge.mtu,
                sandbox: String::new(),
            },
            Interface {
                name: host.name.clone(),
                mac: format_mac(host.mac),
                mtu,
                sandbox: String::new(),
            },
            Interface {
                name: who.ifname.to_string(),
                mac: format_mac(host.container_mac),
                mtu,
                sandbox: netns.path().to_string(),
            },
        ],
        ips: vec![IpConfig {
            address,
            gateway: Some(conf.gateway),
            interface: Some(2),
        }],
        routes: vec![RouteEntry {
            dst: default_route,
            gw: Some(conf.gateway),
        }],
    })
}

pub fn pool(conf: &Config) -> Result<Pool> {
    Pool::new(
        conf.subnet,
        Some(conf.gateway),
        conf.range_start,
        conf.range_end,
    )
}

fn undo_reservation(store: &Store, holder: &Holder, cause: Error) -> Error {
    if let Err(e) = store.release(holder) {
        eprintln!("academy: while undoing a failed ADD: {e}");
    }
    cause
}
