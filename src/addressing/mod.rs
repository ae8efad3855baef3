//! Where a container's addresses and routes come from: academy's own allocator (the flat
//! form or `ipam.type` host-local) or a delegated IPAM plugin. The verbs call these and
//! never look at which one it is.

mod delegate;

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::Value;

use crate::attachment::Attachment;
use crate::cni::env::{Command, Env};
use crate::cni::result::{CniResult, IpConfig, RouteEntry};
use crate::cni::{code, Error, Result};
use crate::config::{unspecified, Builtin, Config, Ipam};
use crate::ipam::store::StoreDir;
use crate::ipam::{Holder, Pool, Store};

/// What the container is given.
#[derive(Debug, Default)]
pub struct Assigned {
    /// Each with its gateway; `interface` is left for the caller.
    pub ips: Vec<IpConfig>,
    /// Every route with its gateway filled in.
    pub routes: Vec<RouteEntry>,
    pub dns: Option<Value>,
    /// The store the addresses came from, kept open for ADD's last check.
    store: Option<Box<Store>>,
}

impl Assigned {
    pub fn addresses(&self) -> Vec<IpAddr> {
        self.ips.iter().map(|ip| ip.address.ip()).collect()
    }

    /// The store the addresses came from, out of the assignment (ADD's, once it is done
    /// with it: verbs::LeftOpen).
    pub fn take_store(&mut self) -> Option<Box<Store>> {
        self.store.take()
    }
}

/// What the allocator could do. It only allocates: what to do about a full pool or an
/// address someone else holds is ADD's decision.
#[derive(Debug)]
pub enum Acquired {
    Got(Assigned),
    Refused(Refusal),
}

/// Why the allocator could not serve a range set.
#[derive(Debug)]
pub enum Refusal {
    /// Every range of the set is full; the error says so.
    Full(Error),
    /// A requested address is held by another attachment; the error names it.
    Occupied(IpAddr, Error),
}

/// ADD's first step. Unless it got everything, nothing is left reserved.
pub fn acquire(env: &Env, conf: &Config, requested: &[IpAddr]) -> Result<Acquired> {
    let mut assigned = match &conf.ipam {
        Ipam::Builtin(b) => match reserve(env, conf, b, requested)? {
            Acquired::Got(a) => a,
            other => return Ok(other),
        },
        // A layer-2 network: an interface on the bridge, no address (config refused
        // every key that needs one).
        Ipam::None if requested.is_empty() => return Ok(Acquired::Got(Assigned::default())),
        Ipam::None => {
            return Err(crate::config::layer2::refused(
                "a requested address (CNI_ARGS IP=)",
            ))
        }
        Ipam::Delegated(plugin) => {
            let result = delegate::exec(plugin, Command::Add, env, &conf.raw)?
                .ok_or_else(|| {
                    Error::new(
                        code::DECODE_FAILURE,
                        format!("IPAM plugin {plugin} printed no result"),
                    )
                })
                .and_then(|v| CniResult::from_json(&v).map(|r| (r, v)));
            match result {
                Ok((r, raw)) if !r.ips.is_empty() => Assigned {
                    ips: r.ips,
                    routes: r.routes,
                    dns: raw.get("dns").cloned(),
                    store: None,
                },
                Ok(_) => {
                    let _ = delegate::exec(plugin, Command::Del, env, &conf.raw);
                    return Err(Error::new(
                        code::DECODE_FAILURE,
                        format!("IPAM plugin {plugin} returned no addresses"),
                    ));
                }
                Err(e) => {
                    let _ = delegate::exec(plugin, Command::Del, env, &conf.raw);
                    return Err(e);
                }
            }
        }
    };
    if let Err(e) = complete_routes(conf, &mut assigned) {
        let _ = release(env, conf);
        return Err(e);
    }
    Ok(Acquired::Got(assigned))
}

/// One address from every range set: a requested one where a request falls in the set,
/// else the next free one of its ranges in order.
fn reserve(env: &Env, conf: &Config, b: &Builtin, requested: &[IpAddr]) -> Result<Acquired> {
    // Before anything is reserved: an unreadable file leaves nothing to undo.
    let dns = b
        .resolv_conf
        .as_deref()
        .map(crate::config::resolv::read)
        .transpose()?;
    // What the kernel cannot give back after a flush (ipam/store/runtime.rs).
    let record = crate::config::Recorded::of(conf).map(|r| r.to_bytes());
    let store = Store::open(&b.data_dir, &conf.name)?
        .in_netns(&env.netns)
        .recording(record);
    let holder = Attachment::of(env, conf).holder();
    let mut wanted: Vec<Option<(IpAddr, &Pool)>> = vec![None; b.range_sets.len()];
    for ip in requested {
        // The range that may hand it out, else one whose subnet holds it, so that the
        // gateway, network or broadcast address is refused for what it is (by
        // reserve_requested) and not as "in no range".
        let in_set = |pick: &dyn Fn(&Pool) -> bool| {
            b.range_sets
                .iter()
                .enumerate()
                .find_map(|(i, set)| set.iter().find(|p| pick(p)).map(|p| (i, p)))
        };
        let found = in_set(&|p| p.contains(*ip)).or_else(|| in_set(&|p| p.subnet().contains(*ip)));
        let Some((set, pool)) = found else {
            return Err(Error::new(
                code::ADDRESS_UNAVAILABLE,
                format!(
                    "requested address {ip} is in no range of network {}",
                    conf.name
                ),
            )
            .details(format!("the ranges are {}", ranges_text(b))));
        };
        if let Some((other, _)) = wanted[set] {
            return Err(Error::new(
                code::ADDRESS_UNAVAILABLE,
                format!("requested addresses {other} and {ip} fall in the same range set; one address is given per range set"),
            ));
        }
        wanted[set] = Some((*ip, pool));
    }
    let mut assigned = Assigned::default();
    for (set, want) in b.range_sets.iter().zip(wanted) {
        let got = match want {
            Some((ip, pool)) => match store.reserve_requested(&holder, pool, ip) {
                Ok(ip) => Ok(Ok((ip, pool))),
                Err(e) if e.code == code::ADDRESS_UNAVAILABLE && store.is_reserved(ip)? => {
                    Ok(Err(Refusal::Occupied(ip, e)))
                }
                Err(e) => Err(e),
            },
            None => reserve_in_set(&store, &holder, set).map(|r| r.map_err(Refusal::Full)),
        };
        let failed = match got {
            Ok(Ok((ip, pool))) => {
                assigned.ips.push(IpConfig {
                    address: IpNetwork::new(ip, pool.subnet().prefix()).expect("ip is in the pool"),
                    gateway: pool.gateway(),
                    interface: None,
                });
                continue;
            }
            Ok(Err(refusal)) => Ok(Acquired::Refused(refusal)),
            Err(e) => Err(e),
        };
        if let Err(undo) = store.release(&holder) {
            eprintln!("academy: while undoing a failed reservation: {undo}");
        }
        return failed;
    }
    // Before the nf_tables batch publishes anything: no port without its record.
    if let Err(e) = store.write_record(&holder) {
        if let Err(undo) = store.release(&holder) {
            eprintln!("academy: while undoing a failed reservation: {undo}");
        }
        return Err(e);
    }
    assigned.routes = b
        .routes
        .iter()
        .map(|r| RouteEntry {
            dst: r.dst,
            gw: r.gw,
            attrs: r.attrs,
        })
        .collect();
    assigned.dns = dns;
    assigned.store = Some(Box::new(store));
    Ok(Acquired::Got(assigned))
}

/// `Ok(Err(e))` when every range of the set is full (`e` says so for the last).
fn reserve_in_set<'p>(
    store: &Store,
    holder: &Holder,
    set: &'p [Pool],
) -> Result<std::result::Result<(IpAddr, &'p Pool), Error>> {
    let mut full = None;
    for pool in set {
        match store.reserve_free(holder, pool)? {
            Ok(ip) => return Ok(Ok((ip, pool))),
            Err(e) => full = Some(e),
        }
    }
    Ok(Err(full.expect("a range set is never empty")))
}

/// Fills every route's gateway (a route without one goes through its family's gateway)
/// and adds the default routes isDefaultGateway asks for.
fn complete_routes(conf: &Config, a: &mut Assigned) -> Result<()> {
    let gateway_of = |v4: bool| {
        a.ips
            .iter()
            .filter(|ip| ip.address.is_ipv4() == v4)
            .find_map(|ip| ip.gateway)
    };
    for route in &mut a.routes {
        if route.gw.is_none() {
            route.gw = gateway_of(route.dst.is_ipv4());
        }
    }
    if conf.is_default_gateway {
        for v4 in [true, false] {
            let Some(gw) = gateway_of(v4) else { continue };
            let default = IpNetwork::new(unspecified(gw), 0).expect("prefix 0");
            match a.routes.iter().find(|r| r.dst == default) {
                Some(r) if r.gw != Some(gw) => {
                    return Err(Error::config(format!(
                    "isDefaultGateway is ineffective because the IPAM routes send {default} via {}",
                    r.gw.map(|g| g.to_string()).unwrap_or_default()
                )))
                }
                Some(_) => {}
                None => a.routes.push(RouteEntry::new(default, Some(gw))),
            }
        }
    }
    Ok(())
}

/// ADD's last step: the addresses are still reserved for this attachment. A GC of another
/// runtime sharing the network may have freed them while ADD ran (its list cannot name an
/// attachment that did not exist yet); succeeding anyway would hand the container an
/// address the store considers free.
/// A delegated IPAM keeps its own books: nothing to check here then.
pub fn verify_still_held(who: &Attachment, assigned: &Assigned) -> Result<()> {
    let Some(store) = &assigned.store else {
        return Ok(());
    };
    let holder = who.holder();
    // With each reservation locked as a reclaimer locks it (src/ipam/store/survey.rs).
    let addresses: Vec<IpAddr> = assigned.ips.iter().map(|ip| ip.address.ip()).collect();
    match store.confirm_held(&holder, &addresses)? {
        // Every reservation is still this container's, but without its index no DEL
        // could find them: as good as lost.
        None if !store.has_index(&holder)? => Err(Error::new(
            code::TRY_AGAIN_LATER,
            "the holder index of this container was removed while ADD ran, most likely by a concurrent GC that did not list this container (or a DEL of it)",
        )
        .details("ADD was undone, including the reservations it had made; retry it")),
        None => Ok(()),
        Some(lost) => Err(Error::new(
            code::TRY_AGAIN_LATER,
            format!(
                "address {lost} was released while ADD ran, most likely by a concurrent GC that did not list this container",
            ),
        )
        .details("ADD was undone; retry it")),
    }
}

/// The undo of a failed ADD: frees what the attachment holds and, from the store ADD
/// reserved with, what that ADD linked itself even if its holder index is gone.
pub fn undo(env: &Env, conf: &Config, assigned: &Assigned) -> Result<Vec<IpAddr>> {
    match &assigned.store {
        Some(store) => store.release(&Attachment::of(env, conf).holder()),
        None => release(env, conf),
    }
}

/// DEL's IPAM half: frees whatever the attachment holds, whoever wrote the reservation
/// (academy, or host-local on a shared store). Nothing held is success. Returns what
/// academy's store freed (nothing is known of a delegated plugin's).
pub fn release(env: &Env, conf: &Config) -> Result<Vec<IpAddr>> {
    match &conf.ipam {
        Ipam::Builtin(b) => {
            Store::open(&b.data_dir, &conf.name)?.release(&Attachment::of(env, conf).holder())
        }
        Ipam::Delegated(plugin) => {
            delegate::exec(plugin, Command::Del, env, &conf.raw).map(|_| Vec::new())
        }
        Ipam::None => Ok(Vec::new()),
    }
}

/// CHECK's IPAM half: every address the result claims is still held for this attachment.
pub fn check(env: &Env, conf: &Config, ips: &[&IpConfig], diffs: &mut Vec<String>) -> Result<()> {
    match &conf.ipam {
        Ipam::Builtin(b) => {
            let store = Store::open(&b.data_dir, &conf.name)?;
            let held = store.held_by(&Attachment::of(env, conf).holder())?;
            for ip in ips {
                if !held.contains(&ip.address.ip()) {
                    diffs.push(format!(
                        "address {} is not reserved for this container in {}",
                        ip.address.ip(),
                        store.dir().display()
                    ));
                }
            }
            Ok(())
        }
        Ipam::Delegated(plugin) => {
            if let Err(e) = delegate::exec(plugin, Command::Check, env, &conf.raw) {
                diffs.push(e.to_string());
            }
            Ok(())
        }
        Ipam::None => Ok(()),
    }
}

/// GC's IPAM half. Errors are collected, never stop the sweep.
pub fn gc(env: &Env, conf: &Config, errors: &mut Vec<Error>) {
    let valid = conf.valid_attachments.as_ref().expect("checked by gc");
    match &conf.ipam {
        Ipam::Builtin(b) => match Store::open(&b.data_dir, &conf.name) {
            Ok(store) => {
                let report = store.gc(valid);
                for (addr, holder) in &report.released {
                    crate::log::debug(format_args!("GC released {addr} (held by {holder})"));
                }
                errors.extend(report.errors);
            }
            Err(e) => errors.push(e),
        },
        Ipam::Delegated(plugin) => {
            if let Err(e) = delegate::exec(plugin, Command::Gc, env, &conf.raw) {
                errors.push(e);
            }
        }
        Ipam::None => {}
    }
}

/// STATUS's IPAM half.
pub fn status(env: &Env, conf: &Config) -> Result<()> {
    match &conf.ipam {
        Ipam::Builtin(b) => {
            let pools: Vec<Pool> = b.pools().cloned().collect();
            crate::ipam::status(&b.data_dir, &conf.name, &pools)
        }
        Ipam::Delegated(plugin) => {
            delegate::exec(plugin, Command::Status, env, &conf.raw).map(drop)
        }
        Ipam::None => Ok(()),
    }
}

fn ranges_text(b: &Builtin) -> String {
    b.pools()
        .map(|p| p.range_text())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The result for the container: `base` (a prevResult when academy is not first in a
/// chain) with academy's three interfaces appended.
pub fn into_result(base: CniResult, assigned: Assigned, container_index: usize) -> CniResult {
    let mut result = base;
    result.ips.extend(assigned.ips.into_iter().map(|mut ip| {
        ip.interface = Some(container_index);
        ip
    }));
    result.routes.extend(assigned.routes);
    if assigned.dns.is_some() {
        result.dns = assigned.dns;
    }
    result
}
/// The network's store, if anything was ever reserved in it (built-in IPAM only).
pub fn open_store(conf: &Config) -> Result<Option<StoreDir>> {
    let Some(b) = conf.builtin() else {
        return Err(Error::config(format!(
            "network {} delegates its addresses to another IPAM plugin; academy keeps no reservations for it",
            conf.name
        ))
        .details("leaks of a delegated IPAM are that plugin's to find"));
    };
    StoreDir::open(&b.data_dir.join(&conf.name))
}
