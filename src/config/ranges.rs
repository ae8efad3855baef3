//! The address ranges a network hands out, in host-local's form: range sets (one address
//! per set, so a v4 set and a v6 set make a dual-stack network), each a list of ranges.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::Value;

use crate::cni::{Error, Result};
use crate::ipam::Pool;

/// host-local's range object: `{subnet, rangeStart?, rangeEnd?, gateway?}`.
pub fn parse_range(value: &Value, field: &str, set: usize) -> Result<Pool> {
    let obj = value
        .as_object()
        .ok_or_else(|| Error::config(format!("{field} must be an object, got {value}")))?;
    let text = |key: &str| -> Result<Option<String>> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::config(format!(
                "{field}.{key} must be a string, got {other}"
            ))),
        }
    };
    let ip = |key: &str| -> Result<Option<IpAddr>> {
        text(key)?
            .map(|s| {
                s.parse()
                    .map_err(|_| Error::config(format!("{field}.{key} {s:?} is not an IP address")))
            })
            .transpose()
    };
    let subnet_text =
        text("subnet")?.ok_or_else(|| Error::config(format!("{field}.subnet is missing")))?;
    let subnet = parse_subnet(&subnet_text, &format!("{field}.subnet"))?;
    let gateway = ip("gateway")?.unwrap_or_else(|| first_host(subnet));
    Pool::new(subnet, Some(gateway), ip("rangeStart")?, ip("rangeEnd")?)
        .map(|p| p.with_range_set(set))
        .map_err(|e| e.context(field))
}

/// host-local's `ranges`: a list of range sets, each a non-empty list of ranges of one
/// address family.
pub fn parse_range_sets(value: &Value, field: &str, first_set: usize) -> Result<Vec<Vec<Pool>>> {
    let sets = value.as_array().ok_or_else(|| {
        Error::config(format!("{field} must be a list of range sets, got {value}"))
    })?;
    let mut out = Vec::new();
    for (i, set) in sets.iter().enumerate() {
        let here = format!("{field}[{i}]");
        let ranges = set
            .as_array()
            .ok_or_else(|| Error::config(format!("{here} must be a list of ranges, got {set}")))?;
        if ranges.is_empty() {
            return Err(Error::config(format!("{here} is an empty range set")));
        }
        let pools = ranges
            .iter()
            .enumerate()
            .map(|(j, r)| parse_range(r, &format!("{here}[{j}]"), first_set + i))
            .collect::<Result<Vec<_>>>()?;
        if pools
            .iter()
            .any(|p| p.subnet().is_ipv4() != pools[0].subnet().is_ipv4())
        {
            return Err(Error::config(format!(
                "{here} mixes IPv4 and IPv6 ranges; put each family in its own range set"
            )));
        }
        out.push(pools);
    }
    Ok(out)
}

/// Overlapping ranges would let two sets hand out the same address.
pub fn check_overlaps(sets: &[Vec<Pool>]) -> Result<()> {
    let all: Vec<&Pool> = sets.iter().flatten().collect();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            if a.contains(b.first()) || a.contains(b.last()) || b.contains(a.first()) {
                return Err(Error::config(format!(
                    "ranges {} and {} overlap",
                    a.range_text(),
                    b.range_text()
                )));
            }
        }
    }
    Ok(())
}

pub fn parse_subnet(text: &str, field: &str) -> Result<IpNetwork> {
    let subnet: IpNetwork = text
        .parse()
        .map_err(|_| Error::config(format!("{field} {text:?} is not an address/prefix")))?;
    if subnet.network() != subnet.ip() {
        return Err(Error::config(format!(
            "{field} {text:?} has host bits set; did you mean {}/{}?",
            subnet.network(),
            subnet.prefix()
        )));
    }
    Ok(subnet)
}

pub fn first_host(subnet: IpNetwork) -> IpAddr {
    match subnet {
        IpNetwork::V4(n) => IpAddr::V4((u32::from(n.network()).wrapping_add(1)).into()),
        IpNetwork::V6(n) => IpAddr::V6((u128::from(n.network()).wrapping_add(1)).into()),
    }
}
