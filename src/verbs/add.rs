//! ADD: reserve addresses, wire the container to the bridge, report what was done.
//!
//! Order: reserve, then the table of kinds' phases around the wiring (firewall/mod.rs:
//! before the pair, once the pair exists, once the container is wired, and ADD's one
//! nf_tables batch), then check nothing was taken away. A failure at any step runs the attachment's
//! removal (removal.rs, the same as DEL's) before the error is printed (the bridge stays:
//! it is shared). A kill leaves at most a reservation whose holder index names it, a
//! veth whose alias (or name and bridge) names it, and masquerade, port and MAC filter
//! elements whose comment names it, all of which DEL for the same attachment, or GC,
//! removes (README, "Failure model").

use ipnetwork::IpNetwork;

use std::net::IpAddr;

use crate::addressing::{self, Acquired, Assigned, Refusal};
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::result::{format_mac, CniResult, Interface};
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::firewall::{self, network, Adding, Phase};
use crate::leaks;
use crate::netlink::{Netlink, NftablesOnDemand};
use crate::netns::{Netns, OpenError};
use crate::removal::{self, Reservations, Target};
use crate::verbs::LeftOpen;
use crate::wire::mtu::Chosen;
use crate::wire::port;
use crate::wire::{self, BridgeSpec, ContainerRoute, ContainerSetup, Created};

/// ADD; what it still has open when it succeeds goes to `open` (verbs::LeftOpen).
pub fn add(env: &Env, conf: &Config, open: &mut LeftOpen) -> Result<CniResult> {
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
    let mut nl = Netlink::open()?;
    // Chosen before the reservation: an MTU the network's IPv6 cannot run on is refused
    // with nothing done.
    let mtu = Chosen::for_add(&mut nl, conf.mtu)?;
    if let Some(range) = conf.ipv6_range() {
        mtu.refuse_below_ipv6_minimum(&format!("the IPv6 range {range}"))?;
    }

    // From before the reservation until the last nf_tables step: the network is in use,
    // so a DEL of its last other attachment leaves its rules and sets alone.
    let in_use = network::in_use(conf);
    let assigned = acquire(env, conf, &requests.ips)?;
    let who = Attachment::of(env, conf);
    let addresses: Vec<IpNetwork> = assigned.ips.iter().map(|ip| ip.address).collect();
    let mut nft = NftablesOnDemand::default();
    let wiring = Wiring {
        kinds: Adding {
            conf,
            who: &who,
            nl: &mut nl,
            nft: &mut nft,
            addresses: &addresses,
            host: None,
            interfaces: Vec::new(),
            batch: Default::default(),
        },
        mtu,
        netns: &netns,
    };
    let made = make(wiring, &assigned, requests.mac).inspect_err(|_| {
        let target = Target {
            who,
            reservations: Reservations::Assigned(env, &assigned),
        };
        if let Err(e) = removal::attachment(conf, target) {
            eprintln!("academy: while undoing a failed ADD: {e}");
        }
    });
    // Given back before a failed ADD's last step: the network may have no attachment
    // left, and then a failed first ADD leaves none of its objects either.
    drop(in_use);
    let (interfaces, still_open) = made.inspect_err(|_| {
        if let Err(e) = removal::network_if_unused(conf) {
            eprintln!("academy: while undoing a failed ADD: {e}");
        }
    })?;
    let mut assigned = assigned;
    open.keep((netns, nl, nft, still_open, assigned.take_store()));

    let mut result = base;
    let container_index = result.interfaces.len() + 2;
    result.interfaces.extend(interfaces);
    let mut result = addressing::into_result(result, assigned, container_index);
    // The reference's rule: the network config's dns replaces IPAM's (resolvConf, a
    // delegated plugin's) only when it sets something.
    if conf
        .dns
        .as_ref()
        .is_some_and(|d| d.as_object().is_none_or(|o| o.values().any(is_set)))
    {
        result.dns = conf.dns.clone();
    }
    Ok(result)
}

/// The addresses, healing once where the allocator could not serve: a full pool may hold
/// leaks, and a requested address may be held by a provably dead attachment (after a
/// crash or a reboot). The allocator only allocates; freeing is decided here.
fn acquire(env: &Env, conf: &Config, requested: &[IpAddr]) -> Result<Assigned> {
    let healed = match addressing::acquire(env, conf, requested)? {
        Acquired::Got(assigned) => return Ok(assigned),
        Acquired::Refused(Refusal::Full(e)) => (leaks::heal(conf) > 0).then_some(()).ok_or(e),
        Acquired::Refused(Refusal::Occupied(address, e)) => leaks::free_dead_holder(conf, address)
            .then_some(())
            .ok_or(e),
    };
    healed?;
    match addressing::acquire(env, conf, requested)? {
        Acquired::Got(assigned) => Ok(assigned),
        Acquired::Refused(Refusal::Full(e) | Refusal::Occupied(_, e)) => Err(e),
    }
}

/// What ADD wires, and with what: the table of kinds' context (the attachment, its
/// config, the sockets), the netns, and the MTU chosen before the reservation.
struct Wiring<'a> {
    kinds: Adding<'a>,
    mtu: Chosen,
    netns: &'a Netns,
}

/// What the kernel steps leave open for a successful ADD's exit to close: the socket
/// used in the netns, and the host veth's `disable_ipv6` (wire/quiet.rs).
type StillOpen = (Netlink, Option<std::fs::File>);

/// Everything ADD makes after the reservation, then its last check; returns [bridge,
/// host veth, container interface], and what it still has open.
fn make(
    mut w: Wiring,
    assigned: &Assigned,
    mac: Option<[u8; 6]>,
) -> Result<(Vec<Interface>, StillOpen)> {
    let who = w.kinds.who;
    // A delegated plugin's ranges are known only from what it gave.
    if let Some(v6) = assigned.ips.iter().find(|ip| ip.address.is_ipv6()) {
        w.mtu
            .refuse_below_ipv6_minimum(&format!("the IPv6 address {} from IPAM", v6.address))?;
    }
    firewall::add(Phase::BeforePair, &mut w.kinds)?;
    let wired = wire_up(&mut w, assigned, mac)?;
    firewall::add(Phase::Wired, &mut w.kinds)?;
    firewall::add(Phase::OneBatch, &mut w.kinds)?;
    // Last, after everything is made: a concurrent GC that does not list this attachment
    // (another runtime sharing the network) may have removed part of it. Checking both
    // halves here catches any such removal that happened before this point.
    wire::verify_pair(w.kinds.nl, who)?;
    addressing::verify_still_held(who, assigned)?;
    Ok(wired)
}

/// The kernel steps, in order; returns [bridge, host veth, container interface], and
/// what they still have open.
fn wire_up(
    w: &mut Wiring,
    assigned: &Assigned,
    mac: Option<[u8; 6]>,
) -> Result<(Vec<Interface>, StillOpen)> {
    let (mtu, netns, who, conf) = (&mut w.mtu, w.netns, w.kinds.who, w.kinds.conf);
    let nl = &mut *w.kinds.nl;
    let gateways: Vec<IpNetwork> = if conf.is_gateway {
        assigned
            .ips
            .iter()
            .filter_map(|ip| IpNetwork::new(ip.gateway?, ip.address.prefix()).ok())
            .collect()
    } else {
        Vec::new()
    };
    // With a VLAN, the gateway lives in that VLAN, on its own interface.
    let (bridge_gateways, vlan_gateways) = match conf.port.vlan {
        Some(_) => (&[][..], &gateways[..]),
        None => (&gateways[..], &[][..]),
    };
    let bridge = wire::ensure_bridge(
        nl,
        &BridgeSpec {
            name: &conf.bridge,
            mtu: mtu.mtu,
            promisc: conf.promisc_mode,
            gateways: bridge_gateways,
            force_address: conf.force_address,
            vlan_filtering: conf.port.vlan_filtering(),
        },
    )?;
    let bridge = mtu.fit_bridge(nl, bridge, &who.host_name())?;
    let vlan_gateway = match conf.port.vlan {
        Some(vid) if !vlan_gateways.is_empty() => Some(port::ensure_vlan_gateway(
            nl,
            &bridge,
            &conf.port,
            vid,
            vlan_gateways,
            conf.force_address,
        )?),
        _ => None,
    };
    // A shaped attachment's host veth comes up once its qdiscs are on (bandwidth.rs).
    let up = conf.bandwidth.is_none();
    let mut created = wire::create_pair(nl, netns, who, &bridge, mtu.mtu, mac, up)?;
    if let Created::Stale = created {
        // A killed or repeated ADD of this attachment left its pair: removed the one way
        // (its nf_tables state too; this ADD adds its own), the reservations kept.
        let stale = Target {
            who: *who,
            reservations: Reservations::Kept,
        };
        removal::attachment(conf, stale)?;
        created = wire::create_pair(nl, netns, who, &bridge, mtu.mtu, mac, up)?;
    }
    let Created::Pair(host) = created else {
        return Err(Error::new(
            code::TRY_AGAIN_LATER,
            format!(
                "host veth {} came back while ADD replaced it",
                who.host_name()
            ),
        )
        .details("another ADD of this attachment is running; retry"));
    };
    if conf.hairpin_mode {
        wire::set_hairpin(nl, &host.name)?;
    }
    if conf.port.isolated || conf.port.vlan_filtering() {
        let index = nl
            .link(&host.name)?
            .map(|l| l.index)
            .ok_or_else(|| wire::vanished(&host.name))?;
        port::configure(nl, index, &conf.port)?;
    }
    // Before the container's interface has an address: no frame it sends with another
    // source MAC reaches the bridge, none of its traffic goes unshaped.
    w.kinds.host = Some((host.name.clone(), host.container_mac));
    firewall::add(Phase::PairMade, &mut w.kinds)?;
    let nl = &mut *w.kinds.nl;
    let addresses = w.kinds.addresses;
    let routes: Vec<ContainerRoute> = assigned
        .routes
        .iter()
        .filter_map(|r| {
            Some(ContainerRoute {
                dst: r.dst,
                gw: r.gw?,
                attrs: r.attrs,
            })
        })
        .collect();
    let netns_socket = wire::configure_container(
        netns,
        &ContainerSetup {
            ifname: who.ifname,
            addresses,
            routes: &routes,
            dad: conf.enable_dad,
            up: !conf.disable_container_interface,
        },
    )?;
    // Read last: an unpinned bridge may change its MAC when a port joins.
    let bridge = nl.link(&conf.bridge)?.unwrap_or(bridge);
    let mtu = mtu.mtu.or(bridge.mtu);
    let mut interfaces = vec![
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
    ];
    // After the container's interface, as the reference appends it.
    interfaces.extend(vlan_gateway.map(|link| Interface {
        name: link.name,
        mac: link.mac.map(format_mac).unwrap_or_default(),
        mtu: link.mtu,
        sandbox: String::new(),
    }));
    // Last, as the reference bandwidth plugin appends its ifb.
    interfaces.append(&mut w.kinds.interfaces);
    Ok((interfaces, (netns_socket, host.ipv6_off)))
}

/// A dns field that is set: a non-empty string or list.
fn is_set(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => !s.is_empty(),
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Null => false,
        _ => true,
    }
}
