//! `ipam.routes`: each route's destination, gateway and CNI 1.1's attributes. A key
//! academy cannot apply is refused (code 2), never dropped: a route silently missing its
//! table or metric would give the container another routing table than the one asked for.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use super::Ipam;
use crate::cni::{code, version, Error, Result};
use crate::netlink::RouteAttrs;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
    pub attrs: RouteAttrs,
}

impl RouteSpec {
    pub fn to(dst: IpNetwork) -> RouteSpec {
        RouteSpec {
            dst,
            gw: None,
            attrs: RouteAttrs::default(),
        }
    }
}

/// The keys of a route, with the cniVersion from which the result can report each: the
/// route of a 0.3.x/0.4.0 result has only dst and gw (so CHECK could not compare the
/// rest), and `mtu` and `advmss` are CNI 1.1's.
const KEYS: &[(&str, &str)] = &[
    ("dst", "0.3.0"),
    ("gw", "0.3.0"),
    ("priority", "1.0.0"),
    ("table", "1.0.0"),
    ("scope", "1.0.0"),
    ("mtu", "1.1.0"),
    ("advmss", "1.1.0"),
];

pub fn parse_routes(list: &Value, cni_version: &str) -> Result<Vec<RouteSpec>> {
    let list = list
        .as_array()
        .ok_or_else(|| Error::config(format!("ipam.routes must be a list, got {list}")))?;
    list.iter()
        .enumerate()
        .map(|(i, r)| route_spec(r, &format!("ipam.routes[{i}]"), cni_version))
        .collect()
}

fn route_spec(value: &Value, field: &str, cni_version: &str) -> Result<RouteSpec> {
    let obj = value
        .as_object()
        .ok_or_else(|| Error::config(format!("{field} must be an object, got {value}")))?;
    refuse_unappliable(obj, field, cni_version)?;
    let dst = obj
        .get("dst")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::config(format!("{field}.dst is missing")))?;
    let dst: IpNetwork = dst
        .parse()
        .map_err(|_| Error::config(format!("{field}.dst {dst:?} is not an address/prefix")))?;
    let dst = IpNetwork::new(dst.network(), dst.prefix()).expect("same prefix");
    let gw = match obj.get("gw").and_then(Value::as_str) {
        None | Some("") => None,
        Some(g) => Some(
            g.parse::<IpAddr>()
                .map_err(|_| Error::config(format!("{field}.gw {g:?} is not an IP address")))?,
        ),
    };
    if gw.is_some_and(|g| g.is_ipv4() != dst.is_ipv4()) {
        return Err(Error::config(format!(
            "{field}: gw and dst are of different address families"
        )));
    }
    let number = |key: &str, max: u64| -> Result<Option<u32>> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n <= max => Ok(Some(n as u32)),
                _ => Err(Error::config(format!(
                    "{field}.{key} must be a whole number from 0 to {max}, got {v}"
                ))),
            },
        }
    };
    // As the reference (Go's omitempty ints, and `table` 0 is RT_TABLE_UNSPEC, which the
    // kernel reads as main): 0 asks for the kernel's default.
    let nonzero = |n: Option<u32>| n.filter(|&n| n != 0);
    let attrs = RouteAttrs {
        priority: nonzero(number("priority", u64::from(u32::MAX))?),
        table: nonzero(number("table", u64::from(u32::MAX))?),
        scope: number("scope", 255)?.map(|s| s as u8),
        mtu: nonzero(number("mtu", u64::from(u32::MAX))?),
        advmss: nonzero(number("advmss", u64::from(u32::MAX))?),
    };
    // IPv6 routes have no scope: the kernel accepts one and keeps universe (measured on
    // 6.18: `ip -6 route add ... scope link` lists as global), so it cannot be applied.
    if dst.is_ipv6() && attrs.scope.is_some_and(|s| s != 0) {
        return Err(Error::new(
            code::UNSUPPORTED_FIELD,
            format!(
                "field {field}.scope ({}) cannot be applied to an IPv6 route",
                attrs.scope.unwrap_or(0)
            ),
        )
        .details(
            "the kernel keeps every IPv6 route at scope universe (0); remove scope from this route",
        ));
    }
    Ok(RouteSpec { dst, gw, attrs })
}

/// Code 2 for a key academy does not know, or one the config's cniVersion cannot report.
fn refuse_unappliable(obj: &Map<String, Value>, field: &str, cni_version: &str) -> Result<()> {
    for (key, value) in obj {
        match KEYS.iter().find(|(k, _)| k == key) {
            None => {
                return Err(Error::new(
                    code::UNSUPPORTED_FIELD,
                    format!("field {field}.{key} ({value}) is not a route attribute academy can apply"),
                )
                .details(format!(
                    "a route may have {}",
                    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
                )))
            }
            Some((_, since)) if !value.is_null() && !version::at_least(cni_version, since) => {
                return Err(Error::new(
                    code::UNSUPPORTED_FIELD,
                    format!("field {field}.{key} ({value}) needs cniVersion {since} or later, the config says {cni_version}"),
                )
                .details("the result of that version has no place for it, so CHECK could not compare it; raise the config's cniVersion"))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The kernel installs no route through an interface that is down ("Nexthop device is
/// not up"), and the reference refuses IPAM altogether with disableContainerInterface:
/// academy keeps the addresses but refuses the routes it could not add.
pub fn refuse_on_a_down_interface(ipam: &Ipam, is_default_gateway: bool) -> Result<()> {
    let routes = match ipam {
        Ipam::Builtin(b) => b.routes.len(),
        // A delegated plugin's routes are known at ADD, which refuses them then.
        Ipam::Delegated(_) => 0,
    };
    if routes > 0 || is_default_gateway {
        return Err(Error::config(
            "disableContainerInterface leaves the container interface down, and the kernel adds no route through a down interface",
        )
        .details("remove the routes (ipam.routes, isDefaultGateway; the flat form always routes by default) or disableContainerInterface"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_attribute_is_read() {
        let routes = parse_routes(
            &json!([{"dst": "10.1.0.0/16", "gw": "10.0.0.9", "priority": 50, "table": 100,
                     "scope": 0, "mtu": 1400, "advmss": 1360},
                    {"dst": "fd01::/64", "priority": 0, "table": 0}]),
            "1.1.0",
        )
        .unwrap();
        assert_eq!(
            routes[0].attrs,
            RouteAttrs {
                priority: Some(50),
                table: Some(100),
                scope: Some(0),
                mtu: Some(1400),
                advmss: Some(1360),
            }
        );
        assert_eq!(routes[0].gw, Some("10.0.0.9".parse().unwrap()));
        assert_eq!(routes[1].attrs, RouteAttrs::default(), "0 is the default");
    }

    #[test]
    fn what_cannot_be_applied_is_refused_never_dropped() {
        let refused = |route: Value, version: &str, needle: &str| {
            let e = parse_routes(&json!([route]), version).unwrap_err();
            assert_eq!(e.code, 2, "{route} {version}: {e}");
            assert!(e.msg.contains(needle), "{}", e.msg);
        };
        refused(
            json!({"dst": "10.1.0.0/16", "metric": 5}),
            "1.1.0",
            "routes[0].metric",
        );
        refused(
            json!({"dst": "10.1.0.0/16", "mtu": 1400}),
            "1.0.0",
            "needs cniVersion 1.1.0",
        );
        refused(
            json!({"dst": "10.1.0.0/16", "advmss": 1400}),
            "1.0.0",
            "advmss",
        );
        refused(
            json!({"dst": "10.1.0.0/16", "table": 100}),
            "0.4.0",
            "needs cniVersion 1.0.0",
        );
        assert!(parse_routes(&json!([{"dst": "10.1.0.0/16", "table": 100}]), "1.0.0").is_ok());
        for bad in [
            json!({"dst": "10.1.0.0/16", "scope": 256}),
            json!({"dst": "10.1.0.0/16", "priority": -1}),
            json!({"dst": "10.1.0.0/16", "table": "main"}),
        ] {
            assert_eq!(
                parse_routes(&json!([bad]), "1.1.0").unwrap_err().code,
                7,
                "{bad}"
            );
        }
    }
}
