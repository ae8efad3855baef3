//! The network configuration from stdin: decoded once, defaults applied, and every
//! field validated before the kernel or the store is touched.
//!
//! Two forms are accepted. The seed's flat form (`subnet`, `gateway`, `testAddress`,
//! `rangeStart`, `rangeEnd`, `dataDir` beside `bridge`) and the reference bridge plugin's
//! form with an `ipam` block, so that a bridge + host-local conflist works with only its
//! `type` changed.

mod addresses;
mod bandwidth;
mod fields;
pub mod layer2;
mod mtu;
mod non_masquerade;
mod port;
mod port_mappings;
mod ranges;
mod recorded;
mod requests;
pub mod resolv;
mod routes;

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::cni::env::interface_name_problem;
use crate::cni::{code, version, Error, Result};
use crate::ipam::Pool;

use addresses::{flat_form, ipam_block};
pub use bandwidth::{Bandwidth, Shape};
use fields::Fields;
pub use mtu::{below_ipv6_minimum, Mtu, IPV6_MINIMUM};
pub use port::{gateway_name as vlan_gateway_name, PortSpec};
pub use port_mappings::PortMapping;
pub use recorded::Recorded;
pub use requests::Requests;
pub use routes::RouteSpec;

pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/academy";
/// host-local's own default: with `ipam.type` host-local and no dataDir, academy and the
/// reference share one store, so switching `type` on a live network never hands out an
/// address the reference already gave.
pub const HOST_LOCAL_DATA_DIR: &str = "/var/lib/cni/networks";
pub const DEFAULT_BRIDGE: &str = "cni0";
/// `reclaimLeakedAfter` when absent: a reservation must have lost its host veth for at
/// least this long before a starved ADD frees it (README, "Failure model").
pub const DEFAULT_RECLAIM_LEAKED_AFTER: u64 = 60;
/// `releaseUnusedAfter` when absent: a network's own nf_tables objects stay this long
/// after its last attachment is gone (firewall/network/), so a network's only container
/// restarted meanwhile pays what a steady one does.
pub const DEFAULT_RELEASE_UNUSED_AFTER: u64 = 60;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub cni_version: String,
    pub name: String,
    pub bridge: String,
    pub mtu: Mtu,
    /// Put each range's gateway address on the bridge.
    pub is_gateway: bool,
    /// Route the container by default through the gateway (implies is_gateway).
    pub is_default_gateway: bool,
    /// Replace another address of the same subnet already on the bridge.
    pub force_address: bool,
    pub hairpin_mode: bool,
    pub promisc_mode: bool,
    /// Masquerade the containers' traffic to anything outside the network's subnets.
    pub ip_masq: bool,
    /// `nonMasqueradeCIDRs`: destinations the masquerade also leaves alone (only with
    /// ip_masq; never with ip_masq false).
    pub non_masquerade_cidrs: Vec<IpNetwork>,
    /// `enabledad`: the container's IPv6 addresses go through duplicate address
    /// detection, and ADD waits for it.
    pub enable_dad: bool,
    /// `disableContainerInterface`: the container's interface is left down.
    pub disable_container_interface: bool,
    /// `macspoofchk`: drop frames from the container's port whose source MAC is not the
    /// one its interface was given.
    pub mac_spoof_check: bool,
    /// `"ingressPolicy": "same-bridge"` (the reference firewall plugin's key): traffic
    /// forwarded between this network's bridge and another network's that sets it too
    /// is dropped, either way (firewall/isolation.rs).
    pub same_bridge_ingress: bool,
    /// The container's bridge port: VLANs and isolation.
    pub port: PortSpec,
    /// Capability `portMappings` declared: academy publishes ports itself (src/firewall/ports/).
    pub publishes_ports: bool,
    /// runtimeConfig.portMappings; None when the runtime sent none at all.
    pub port_mappings: Option<Vec<PortMapping>>,
    /// The shaping of the reference bandwidth plugin's keys or the `bandwidth`
    /// capability; None when nothing is limited.
    pub bandwidth: Option<Bandwidth>,
    /// The entry declares the `bandwidth` capability or sets one of its keys: an
    /// attachment may have an ifb, which DEL looks for.
    pub shapes: bool,
    pub ipam: Ipam,
    /// `dns` of the network config, copied into the result as the reference plugin does.
    pub dns: Option<Value>,
    /// Addresses and MAC asked for through runtimeConfig and args (CNI_ARGS is added by
    /// the verbs, which have the environment).
    pub requests: Requests,
    pub prev_result: Option<Value>,
    /// Seconds after which an exhausted ADD may free a reservation with no host veth
    /// (`reclaimLeakedAfter`); 0 never does.
    pub reclaim_leaked_after: u64,
    /// Seconds a network's own nf_tables objects outlive its last attachment
    /// (`releaseUnusedAfter`); 0 releases them with it.
    pub release_unused_after: u64,
    /// GC's list of live attachments, (container id, ifname); None when absent.
    pub valid_attachments: Option<HashSet<(String, String)>>,
    /// The config exactly as received: a delegated IPAM plugin gets the same bytes.
    pub raw: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ipam {
    /// academy's own allocator (the flat form, or `ipam.type` "host-local").
    Builtin(Builtin),
    /// Another IPAM plugin, run from CNI_PATH.
    Delegated(String),
    /// None: a layer-2 network (no `ipam`, or one without a type, as the reference reads
    /// it): the container gets its interface on the bridge and no address.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Builtin {
    /// One address is taken from each set; each set is one or more ranges of one family.
    pub range_sets: Vec<Vec<Pool>>,
    /// Routes for the container; a missing gw means the gateway of the route's family.
    pub routes: Vec<RouteSpec>,
    pub data_dir: PathBuf,
    /// `ipam.resolvConf`: read at ADD into the result's dns.
    pub resolv_conf: Option<PathBuf>,
}

impl Builtin {
    /// Every range of every set: the addresses the network hands out.
    pub fn pools(&self) -> impl Iterator<Item = &Pool> {
        self.range_sets.iter().flatten()
    }

    /// The subnets of its ranges, in the config's order (one per range).
    pub fn subnets(&self) -> Vec<IpNetwork> {
        self.pools().map(|p| p.subnet()).collect()
    }
}

/// The cniVersion of a config, if it has a readable one: used to print errors in the
/// version the runtime speaks even when the rest of the config is bad.
pub fn peek_version(stdin: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(stdin).ok()?;
    v.get("cniVersion")?.as_str().map(str::to_string)
}

impl Config {
    /// The host interface the network's routed traffic goes through: its bridge, or
    /// with `vlan` and `isGateway` the VLAN's gateway interface `<bridge>.<vid>`, which
    /// holds the gateway addresses (wire/port.rs). The loopback guard names it.
    pub fn routed_interface(&self) -> String {
        match (self.port.vlan, self.is_gateway) {
            (Some(vid), true) => vlan_gateway_name(&self.bridge, vid),
            _ => self.bridge.clone(),
        }
    }

    /// The interfaces the FORWARD accepts and the isolation name: the bridge (what
    /// br_netfilter shows for the frames it switches) and, with a VLAN gateway, the
    /// interface routed traffic goes through.
    pub fn forwarded_interfaces(&self) -> Vec<String> {
        let mut names = vec![self.bridge.clone()];
        let routed = self.routed_interface();
        if routed != self.bridge {
            names.push(routed);
        }
        names
    }

    pub fn parse(stdin: &[u8]) -> Result<Config> {
        let value: Value = serde_json::from_slice(stdin).map_err(|e| {
            Error::new(
                code::DECODE_FAILURE,
                format!("the network config on stdin is not valid JSON: {e}"),
            )
        })?;
        let Value::Object(map) = value else {
            return Err(Error::new(
                code::DECODE_FAILURE,
                "the network config on stdin must be a JSON object",
            ));
        };
        let f = Fields(&map);

        let cni_version = f
            .string("cniVersion")?
            .ok_or_else(|| Error::config("cniVersion is missing"))?;
        if !version::is_supported(&cni_version) {
            return Err(Error::new(
                code::INCOMPATIBLE_VERSION,
                format!("cniVersion {cni_version:?} is not supported"),
            )
            .details(format!(
                "academy supports {}",
                version::SUPPORTED.join(", ")
            )));
        }

        let name = f
            .string("name")?
            .ok_or_else(|| Error::config("name is missing"))?;
        validate_network_name(&name)?;

        let bridge = f
            .string("bridge")?
            .unwrap_or_else(|| DEFAULT_BRIDGE.to_string());
        if let Some(why) = interface_name_problem(&bridge) {
            return Err(Error::config(format!("bridge {bridge:?} {why}")));
        }
        let mtu = Mtu::parse(&f)?;
        let hairpin_mode = f.boolean("hairpinMode")?.unwrap_or(false);
        let promisc_mode = f.boolean("promiscMode")?.unwrap_or(false);
        if hairpin_mode && promisc_mode {
            return Err(Error::config(
                "hairpinMode and promiscMode cannot both be true",
            )
            .details("hairpin sends a port's frames back to it; promiscuous mode on the bridge already does, and both together duplicate every frame"));
        }
        let ip_masq = f.boolean("ipMasq")?.unwrap_or(false);
        let non_masquerade_cidrs = non_masquerade::parse(&f, ip_masq)?;
        // academy always programs nf_tables itself, over netlink; both values mean that.
        match f.string("ipMasqBackend")?.as_deref() {
            None | Some("") | Some("iptables") | Some("nftables") => {}
            Some(other) => {
                return Err(Error::config(format!(
                    "ipMasqBackend {other:?} is not \"iptables\" or \"nftables\""
                ))
                .details("academy masquerades through nf_tables with either value"))
            }
        }
        let is_default_gateway = f.boolean("isDefaultGateway")?.unwrap_or(false);
        let flat = map.contains_key("subnet");
        let mut requests = Requests::from_config(&map)?;
        let ipam = if flat {
            if map.contains_key("ipam") {
                return Err(
                    Error::config("the config has both subnet and an ipam block").details(
                        "use the flat form (subnet, gateway, ...) or an ipam block, not both",
                    ),
                );
            }
            let (builtin, test_address) = flat_form(&f)?;
            requests.ips.extend(test_address);
            Ipam::Builtin(builtin)
        } else {
            ipam_block(&map, &requests, &cni_version)?
        };
        if ipam == Ipam::None {
            layer2::refuse_layer3_keys(&f, &requests)?;
        }
        mtu.refuse_below_ipv6_minimum(ipv6_range(&ipam))?;
        // The flat form is the seed's plugin: its gateway is on the bridge unless told not.
        let is_gateway = is_default_gateway || f.boolean("isGateway")?.unwrap_or(flat);
        let disable_container_interface = f.boolean("disableContainerInterface")?.unwrap_or(false);
        if disable_container_interface {
            routes::refuse_on_a_down_interface(&ipam, is_default_gateway)?;
        }
        let port = PortSpec::parse(&map, &bridge, is_gateway)?;

        Ok(Config {
            cni_version,
            name,
            bridge,
            mtu,
            is_gateway,
            is_default_gateway,
            force_address: f.boolean("forceAddress")?.unwrap_or(false),
            hairpin_mode,
            promisc_mode,
            ip_masq,
            non_masquerade_cidrs,
            enable_dad: f.boolean("enabledad")?.unwrap_or(false),
            disable_container_interface,
            mac_spoof_check: f.boolean("macspoofchk")?.unwrap_or(false),
            same_bridge_ingress: ingress_policy(&f)?,
            port,
            publishes_ports: port_mappings::declared(&map),
            port_mappings: port_mappings::from_config(&map)?,
            bandwidth: bandwidth::from_config(&map)?,
            shapes: bandwidth::declared(&map),
            ipam,
            dns: f.get("dns").cloned(),
            requests,
            prev_result: f.get("prevResult").cloned(),
            reclaim_leaked_after: f
                .number("reclaimLeakedAfter")?
                .unwrap_or(DEFAULT_RECLAIM_LEAKED_AFTER),
            release_unused_after: f
                .number("releaseUnusedAfter")?
                .unwrap_or(DEFAULT_RELEASE_UNUSED_AFTER),
            valid_attachments: valid_attachments(&map)?,
            raw: stdin.to_vec(),
        })
    }

    /// DEL's reading of the config: DEL never refuses over configuration. A key academy
    /// does not implement, or a value ADD would refuse, cannot have been ADDed, but the
    /// runtime must still be able to tear the attachment down (an ADD that failed, a
    /// config edited since). What DEL needs is only where things are: the network name,
    /// the store, the IPAM plugin, whether there is a masquerade or a MAC filter.
    pub fn parse_for_del(stdin: &[u8]) -> Result<Config> {
        let strict = match Config::parse(stdin) {
            Ok(conf) => return Ok(conf),
            Err(e) => e,
        };
        match Config::where_things_are(stdin) {
            Some(conf) => {
                eprintln!(
                    "academy: DEL goes ahead although the config is not one ADD accepts: {strict}"
                );
                Ok(conf)
            }
            None => Err(strict),
        }
    }

    /// The parts of a config DEL needs, ignoring everything else; None without a usable
    /// network name (then nothing can be found), and None for what is not a config at
    /// all or speaks a cniVersion academy does not: those are the runtime's to fix.
    pub(crate) fn where_things_are(stdin: &[u8]) -> Option<Config> {
        let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(stdin) else {
            return None;
        };
        let text = |m: &Map<String, Value>, key: &str| m.get(key)?.as_str().map(str::to_string);
        let name = text(&map, "name")?;
        validate_network_name(&name).ok()?;
        let dir = |value: Option<String>, default: &str| match value {
            Some(d) if d.starts_with('/') => PathBuf::from(d),
            _ => PathBuf::from(default),
        };
        let ipam = match map.get("ipam").and_then(Value::as_object) {
            None => Ipam::Builtin(Builtin {
                range_sets: Vec::new(),
                routes: Vec::new(),
                data_dir: dir(text(&map, "dataDir"), DEFAULT_DATA_DIR),
                resolv_conf: None,
            }),
            Some(ipam) => match text(ipam, "type") {
                Some(kind) if kind != "host-local" && !kind.is_empty() && !kind.contains('/') => {
                    Ipam::Delegated(kind)
                }
                _ => Ipam::Builtin(Builtin {
                    range_sets: Vec::new(),
                    routes: Vec::new(),
                    data_dir: dir(text(ipam, "dataDir"), HOST_LOCAL_DATA_DIR),
                    resolv_conf: None,
                }),
            },
        };
        let cni_version = text(&map, "cniVersion").filter(|v| version::is_supported(v))?;
        Some(Config {
            cni_version,
            name,
            bridge: text(&map, "bridge").unwrap_or_else(|| DEFAULT_BRIDGE.to_string()),
            mtu: Mtu::Kernel,
            is_gateway: false,
            is_default_gateway: false,
            force_address: false,
            hairpin_mode: false,
            promisc_mode: false,
            ip_masq: map.get("ipMasq") == Some(&Value::Bool(true)),
            // DEL takes elements by owner and a last DEL the rules by set: it never
            // needs the exclusions.
            non_masquerade_cidrs: Vec::new(),
            enable_dad: false,
            disable_container_interface: false,
            mac_spoof_check: map.get("macspoofchk") == Some(&Value::Bool(true)),
            same_bridge_ingress: map.get("ingressPolicy").and_then(Value::as_str)
                == Some(SAME_BRIDGE),
            port: PortSpec::default(),
            publishes_ports: port_mappings::declared(&map),
            port_mappings: port_mappings::lenient(&map),
            bandwidth: None,
            shapes: bandwidth::declared(&map),
            reclaim_leaked_after: DEFAULT_RECLAIM_LEAKED_AFTER,
            release_unused_after: map
                .get("releaseUnusedAfter")
                .and_then(Value::as_u64)
                .unwrap_or(DEFAULT_RELEASE_UNUSED_AFTER),
            ipam,
            dns: None,
            requests: Requests::default(),
            prev_result: map.get("prevResult").cloned(),
            valid_attachments: None,
            raw: stdin.to_vec(),
        })
    }

    /// The network's first IPv6 range, when its addresses come from the built-in
    /// allocator (a delegated plugin's ranges are its own).
    pub fn ipv6_range(&self) -> Option<IpNetwork> {
        ipv6_range(&self.ipam)
    }

    /// The built-in allocator's settings, when the network uses it.
    pub fn builtin(&self) -> Option<&Builtin> {
        match &self.ipam {
            Ipam::Builtin(b) => Some(b),
            Ipam::Delegated(_) | Ipam::None => None,
        }
    }
}

fn ipv6_range(ipam: &Ipam) -> Option<IpNetwork> {
    let Ipam::Builtin(builtin) = ipam else {
        return None;
    };
    builtin
        .pools()
        .map(|pool| pool.subnet())
        .find(IpNetwork::is_ipv6)
}

/// `ingressPolicy`'s value that isolates the network.
const SAME_BRIDGE: &str = "same-bridge";

/// `ingressPolicy`, with the reference firewall plugin's values: "open" (or absent, or
/// "") lets every network's containers in, "same-bridge" only the node, the outside and
/// the networks that do not set it. Its third value, "isolated", also drops what is
/// routed from the bridge back to itself, which stops nothing the bridge switches itself
/// (unless br_netfilter hands that to the forward hook): refused, naming the key that
/// does isolate a network's containers from each other.
fn ingress_policy(f: &Fields) -> Result<bool> {
    match f.string("ingressPolicy")?.as_deref() {
        None | Some("") | Some("open") => Ok(false),
        Some(SAME_BRIDGE) => Ok(true),
        Some("isolated") => Err(Error::config(
            "ingressPolicy \"isolated\" is not implemented by academy",
        )
        .details("use \"ingressPolicy\": \"same-bridge\" to isolate the network from the other isolated networks, and \"portIsolation\": true to isolate its containers from each other")),
        Some(other) => Err(Error::config(format!(
            "ingressPolicy {other:?} is not \"open\" or \"same-bridge\""
        ))),
    }
}

/// The spec's network name charset; it also becomes a folder name under dataDir, so it
/// must be one safe path component.
pub fn validate_network_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !first_ok || !rest_ok || name.len() > 128 {
        return Err(Error::config(format!("network name {name:?} is not valid")).details(
            "it must start with a letter or digit, contain only letters, digits, '_', '.' and '-', and be at most 128 characters",
        ));
    }
    Ok(())
}

pub fn unspecified(like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}

/// GC's list, under the spec's key or the pre-rename one libcni still sends.
fn valid_attachments(map: &Map<String, Value>) -> Result<Option<HashSet<(String, String)>>> {
    let Some(list) = map
        .get("cni.dev/valid-attachments")
        .or_else(|| map.get("cni.dev/attachments"))
    else {
        return Ok(None);
    };
    let Value::Array(items) = list else {
        return Err(Error::config(
            "cni.dev/valid-attachments must be a list of {containerID, ifname}",
        ));
    };
    let mut set = HashSet::new();
    for item in items {
        let cid = item.get("containerID").and_then(Value::as_str);
        let ifname = item.get("ifname").and_then(Value::as_str);
        match (cid, ifname) {
            (Some(c), Some(i)) => set.insert((c.to_string(), i.to_string())),
            _ => {
                return Err(Error::config(format!(
                    "cni.dev/valid-attachments entry {item} needs containerID and ifname strings"
                )))
            }
        };
    }
    Ok(Some(set))
}

#[cfg(test)]
mod tests;
