//! A layer-2 network: no `ipam` (or one without a type), which the reference bridge
//! reads as "attach the container to the bridge, give it no address" (KubeVirt's and
//! Multus' secondary networks, often with `vlan` or `disableContainerInterface`).
//! academy serves it the same way, and refuses the keys that only mean something with
//! addresses rather than ignoring them as the reference does.

use serde_json::{Map, Value};

use super::requests::Requests;
use super::Fields;
use super::Ipam;
use crate::cni::{Error, Result};

/// Keys that need addresses, refused on a network without IPAM.
const LAYER3_KEYS: [&str; 4] = ["isGateway", "isDefaultGateway", "ipMasq", "forceAddress"];

/// The flat form's keys: with any of them, a missing `subnet` is a mistake, not a
/// layer-2 network.
const FLAT_KEYS: [&str; 5] = [
    "gateway",
    "rangeStart",
    "rangeEnd",
    "testAddress",
    "dataDir",
];

pub(super) fn refuse_layer3_keys(f: &Fields, requests: &Requests) -> Result<()> {
    if let Some(key) = FLAT_KEYS.into_iter().find(|k| f.get(k).is_some()) {
        return Err(Error::config(format!(
            "subnet is missing: the flat form's {key} needs it"
        ))
        .details("add \"subnet\": \"10.98.0.0/24\" (flat form), or an ipam block of type host-local; a network with neither is a layer-2 network"));
    }
    for key in LAYER3_KEYS {
        if f.boolean(key)?.unwrap_or(false) {
            return Err(refused(key));
        }
    }
    if !requests.ips.is_empty() {
        return Err(refused(
            "a requested address (runtimeConfig.ips, args.cni.ips)",
        ));
    }
    if requests.ip_ranges.is_some() {
        return Err(refused("runtimeConfig.ipRanges"));
    }
    Ok(())
}

pub fn refused(what: &str) -> Error {
    Error::config(format!(
        "{what} needs addresses, and this network has no ipam block: it is a layer-2 network"
    ))
    .details("add an ipam block (e.g. of type host-local) or remove it; the reference bridge would ignore it, academy will not")
}

/// An `ipam` object without a type: the reference's layer-2 network when it is empty,
/// a mistake when it sets anything else.
pub(super) fn empty_ipam(ipam: &Map<String, Value>) -> Result<Ipam> {
    match ipam.keys().find(|k| ipam.get(*k).is_some_and(|v| !v.is_null())) {
        None => Ok(Ipam::None),
        Some(_) => Err(Error::config("ipam.type is missing")
            .details("set ipam.type (host-local is served by academy itself), or drop the ipam block for a layer-2 network")),
    }
}
