//! ADD: reserve addresses, wire the container to the bridge, report what was done.
//!
//! Order: reserve, wire, masquerade (ipMasq) and published ports (portMappings) in one
//! nf_tables batch, then check nothing was taken away. A failure at any step runs the
//! attachment's teardown (teardown.rs, the same as DEL's) before the error is printed
//! (the bridge stays: it is shared). A kill leaves at most a reservation whose holder
//! index names it, a veth whose alias (or name and bridge) names it, and masquerade and
//! port elements whose comment names it, all of which DEL for the same attachment, or
//! GC, removes (README, "Failure model").

use ipnetwork::IpNetwork;

use crate::addressing::{self, Assigned};
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::result::{format_mac, CniResult, Interface};
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::netlink::Netlink;
use crate::netns::{Netns, OpenError};
use crate::portmap;
use crate::teardown::{self, Removing};
use crate::wire::{self, BridgeSpec, ContainerRoute};

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

    let assigned = addressing::acquire(env, conf, &requests.ips)?;
    let who = Attachment::of(env, conf);
    let interfaces = make(&netns, &who, conf, &assigned, requests.mac).inspect_err(|_| {
        if let Err(e) = teardown::attachment(env, conf, Removing::FailedAdd(&assigned)) {
            eprintln!("academy: while undoing a failed ADD: {e}");
        }
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

/// Everything ADD makes after the reservation, then its last check; returns [bridge,
/// host veth, container interface].
fn make(
    netns: &Netns,
    who: &Attachment,
    conf: &Config,
    assigned: &Assigned,
    mac: Option<[u8; 6]>,
) -> Result<Vec<Interface>> {
    let mut nl = Netlink::open()?;
    let interfaces = wire_up(&mut nl, netns, who, conf, assigned, mac)?;
    // The masquerade (ipMasq) and the published ports, in one nf_tables batch.
    if conf.ip_masq || conf.port_mappings.as_ref().is_some_and(|m| !m.is_empty()) {
        let addresses: Vec<IpNetwork> = assigned.ips.iter().map(|ip| ip.address).collect();
        portmap::add(conf, who, &addresses)?;
    }
    // Last, after everything is made: a concurrent GC that does not list this attachment
    // (another runtime sharing the network) may have removed part of it. Checking both
    // halves here catches any such removal that happened before this point.
    wire::verify_pair(&mut nl, who)?;
    addressing::verify_still_held(who, assigned)?;
    Ok(interfaces)
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
    let bridge = nl.link(&conf.bridge)?.unwrap_or(bridge);
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
