//! ADD: reserve addresses, wire the container to the bridge, report what was done.
//!
//! Order: reserve, then wire. A failure at any step undoes every earlier step before the
//! error is printed (the bridge stays: it is shared). A kill leaves at most a reservation
//! whose holder index names it and a veth whose alias (or name and bridge) names it, both
//! of which DEL for the same attachment, or GC, removes (README, "Failure model").

use ipnetwork::IpNetwork;

use crate::addressing::{self, Assigned};
use crate::cni::env::Env;
use crate::cni::result::{format_mac, CniResult, Interface};
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::netlink::Netlink;
use crate::netns::{Netns, OpenError};
use crate::reclaim;
use crate::wire::{self, kernel, Attachment, BridgeSpec, ContainerRoute};

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
    // academy is normally first in a chain; if not, it adds to what came before.
    let base = match &conf.prev_result {
        Some(prev) => CniResult::from_json(prev)?,
        None => CniResult::default(),
    };
    let requests = conf.requests.clone().with_cni_args(&env.args)?;

    let assigned = match addressing::acquire(env, conf, &requests.ips) {
        // A pool emptied by leaks (no DEL came) heals itself: free what has had no host
        // veth for reclaimLeakedAfter, then try once more.
        Err(e) if e.code == code::ADDRESS_EXHAUSTED && reclaim::heal(conf) > 0 => {
            addressing::acquire(env, conf, &requests.ips)?
        }
        other => other?,
    };
    let undo_addresses = |cause: Error| {
        if let Err(e) = addressing::release(env, conf) {
            eprintln!("academy: while undoing a failed ADD: {e}");
        }
        cause
    };
    let mut nl = Netlink::open().map_err(|e| undo_addresses(kernel(e)))?;
    let who = Attachment {
        network: &conf.name,
        container_id: &env.container_id,
        ifname: &env.ifname,
    };
    // Last, after everything is made: a concurrent GC that does not list this attachment
    // (another runtime sharing the network) may have removed part of it. Checking both
    // halves here catches any such removal that happened before this point.
    let wired =
        wire_up(&mut nl, &netns, &who, conf, &assigned, requests.mac).and_then(|interfaces| {
            wire::verify_pair(&mut nl, &who)?;
            addressing::verify_still_held(env, &assigned)?;
            Ok(interfaces)
        });
    let interfaces = wired.map_err(|e| {
        // The pair may or may not exist; deleting it is the whole of undoing the wiring.
        // Only if it is this attachment's: the failure may be a foreign link in the way.
        if let Err(cleanup) = wire::remove_pair(&mut nl, &who) {
            eprintln!("academy: while undoing a failed ADD: {cleanup}");
        }
        undo_addresses(e)
    })?;

    let mut result = base;
    let container_index = result.interfaces.len() + 2;
    result.interfaces.extend(interfaces);
    let mut result = addressing::into_result(result, assigned, container_index);
    if conf.dns.is_some() {
        result.dns = conf.dns.clone();
    }
    Ok(result)
}

/// The kernel steps, in order; returns [bridge, host veth, container interface].
fn wire_up(
    nl: &mut Netlink,
    netns: &Netns,
    who: &Attachment,
    conf: &Config,
    assigned: &Assigned,
    mac: Option<[u8; 6]>,
) -> Result<Vec<Interface>> {
    let gateways: Vec<IpNetwork> = if conf.is_gateway {
        assigned
            .ips
            .iter()
            .filter_map(|ip| IpNetwork::new(ip.gateway?, ip.address.prefix()).ok())
            .collect()
    } else {
        Vec::new()
    };
    let bridge = wire::ensure_bridge(
        nl,
        &BridgeSpec {
            name: &conf.bridge,
            mtu: conf.mtu,
            promisc: conf.promisc_mode,
            gateways: &gateways,
            force_address: conf.force_address,
        },
    )?;
    let host = wire::create_pair(nl, netns, who, &bridge, conf.mtu, mac)?;
    if conf.hairpin_mode {
        wire::set_hairpin(&host.name)?;
    }
    let addresses: Vec<IpNetwork> = assigned.ips.iter().map(|ip| ip.address).collect();
    let routes: Vec<ContainerRoute> = assigned
        .routes
        .iter()
        .filter_map(|r| {
            Some(ContainerRoute {
                dst: r.dst,
                gw: r.gw?,
            })
        })
        .collect();
    wire::configure_container(netns, who.ifname, &addresses, &routes)?;
    // Read last: an unpinned bridge may change its MAC when a port joins.
    let bridge = nl.link(&conf.bridge).map_err(kernel)?.unwrap_or(bridge);
    let mtu = conf.mtu.or(bridge.mtu);
    Ok(vec![
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
    ])
}
