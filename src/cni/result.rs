//! The ADD result: built from what was actually configured, printed in the config's
//! cniVersion, and read back from prevResult for CHECK.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::{json, Map, Value};

use crate::cni::error::cut_short;
use crate::cni::{version, Error, Result};
use crate::netlink::RouteAttrs;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    pub mtu: Option<u32>,
    /// The netns path for the container's interface; empty for host interfaces.
    pub sandbox: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteEntry {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
    /// CNI 1.1's `priority`, `table`, `scope`, `mtu` and `advmss`.
    pub attrs: RouteAttrs,
}

impl RouteEntry {
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> RouteEntry {
        RouteEntry {
            dst,
            gw,
            attrs: RouteAttrs::default(),
        }
    }
}

/// The route keys of the 1.x result (Go's types/100 serves 1.0.0 and 1.1.0 alike, so a
/// 1.0.0 result carries them too; 0.3.x and 0.4.0 have no place for them).
const ROUTE_ATTRS: [&str; 5] = ["priority", "table", "scope", "mtu", "advmss"];

fn attr_values(a: &RouteAttrs) -> [Option<u32>; 5] {
    [a.priority, a.table, a.scope.map(u32::from), a.mtu, a.advmss]
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<RouteEntry>,
    /// Passed through as given (network config `dns` or the IPAM plugin's).
    pub dns: Option<Value>,
}

impl CniResult {
    /// The result as the given spec version prints it: 0.3.x and 0.4.0 carry
    /// ips[].version, interface mtu exists from 1.1.0 on.
    pub fn to_json(&self, cni_version: &str) -> Value {
        let pre_1_0 = !version::at_least(cni_version, "1.0.0");
        let with_mtu = version::at_least(cni_version, "1.1.0");
        let interfaces: Vec<Value> = self
            .interfaces
            .iter()
            .map(|i| {
                let mut o = Map::new();
                o.insert("name".into(), json!(i.name));
                o.insert("mac".into(), json!(i.mac));
                if let (true, Some(mtu)) = (with_mtu, i.mtu) {
                    o.insert("mtu".into(), json!(mtu));
                }
                if !i.sandbox.is_empty() {
                    o.insert("sandbox".into(), json!(i.sandbox));
                }
                Value::Object(o)
            })
            .collect();
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut o = Map::new();
                if pre_1_0 {
                    let v = if ip.address.is_ipv4() { "4" } else { "6" };
                    o.insert("version".into(), json!(v));
                }
                o.insert("address".into(), json!(ip.address.to_string()));
                if let Some(gw) = ip.gateway {
                    o.insert("gateway".into(), json!(gw.to_string()));
                }
                if let Some(i) = ip.interface {
                    o.insert("interface".into(), json!(i));
                }
                Value::Object(o)
            })
            .collect();
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|r| {
                let mut o = Map::new();
                o.insert("dst".into(), json!(r.dst.to_string()));
                if let Some(gw) = r.gw {
                    o.insert("gw".into(), json!(gw.to_string()));
                }
                if !pre_1_0 {
                    for (key, value) in ROUTE_ATTRS.iter().zip(attr_values(&r.attrs)) {
                        if let Some(v) = value {
                            o.insert((*key).into(), json!(v));
                        }
                    }
                }
                Value::Object(o)
            })
            .collect();
        json!({
            "cniVersion": cni_version,
            "interfaces": interfaces,
            "ips": ips,
            "routes": routes,
            "dns": self.dns.clone().unwrap_or_else(|| json!({})),
        })
    }

    /// Reads a prevResult of any supported version. Fields academy never writes are
    /// ignored; the ones it reads must be well-formed.
    pub fn from_json(value: &Value) -> Result<CniResult> {
        let bad = |what: String| Error::config(format!("prevResult: {what}"));
        if !value.is_object() {
            return Err(bad(format!("must be a JSON object, got {}", brief(value))));
        }
        let list = |key: &str| -> Result<Vec<Value>> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => Ok(a.clone()),
                Some(other) => Err(bad(format!("{key} must be a list, got {}", brief(other)))),
            }
        };
        let text = |v: &Value, key: &str| -> Option<String> {
            v.get(key).and_then(Value::as_str).map(str::to_string)
        };
        let mut result = CniResult::default();
        for i in list("interfaces")? {
            result.interfaces.push(Interface {
                name: text(&i, "name").ok_or_else(|| bad("an interface has no name".into()))?,
                mac: text(&i, "mac").unwrap_or_default(),
                mtu: i.get("mtu").and_then(Value::as_u64).map(|m| m as u32),
                sandbox: text(&i, "sandbox").unwrap_or_default(),
            });
        }
        for ip in list("ips")? {
            let address =
                text(&ip, "address").ok_or_else(|| bad("an ips entry has no address".into()))?;
            let address: IpNetwork = address
                .parse()
                .map_err(|_| bad(format!("address {address:?} is not an address/prefix")))?;
            let gateway = match text(&ip, "gateway") {
                Some(g) => Some(
                    g.parse()
                        .map_err(|_| bad(format!("gateway {g:?} is not an address")))?,
                ),
                None => None,
            };
            let interface = match ip.get("interface") {
                None | Some(Value::Null) => None,
                Some(i) => match i.as_u64().and_then(|i| usize::try_from(i).ok()) {
                    Some(i) if i < result.interfaces.len() => Some(i),
                    _ => {
                        return Err(bad(format!(
                            "ips entry {address} names interface {}, but there are {} interfaces",
                            brief(i),
                            result.interfaces.len()
                        )))
                    }
                },
            };
            result.ips.push(IpConfig {
                address,
                gateway,
                interface,
            });
        }
        for r in list("routes")? {
            let dst = text(&r, "dst").ok_or_else(|| bad("a route has no dst".into()))?;
            let dst: IpNetwork = dst
                .parse()
                .map_err(|_| bad(format!("route dst {dst:?} is not an address/prefix")))?;
            let gw = match text(&r, "gw") {
                Some(g) => Some(
                    g.parse()
                        .map_err(|_| bad(format!("route gw {g:?} is not an address")))?,
                ),
                None => None,
            };
            let mut numbers = [None; 5];
            for (slot, key) in numbers.iter_mut().zip(ROUTE_ATTRS) {
                *slot = match r.get(key) {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                        || {
                            bad(format!(
                                "route {dst} {key} {} is not a whole number",
                                brief(v)
                            ))
                        },
                    )?),
                };
            }
            let [priority, table, scope, mtu, advmss] = numbers;
            let scope = scope
                .map(|s| {
                    u8::try_from(s).map_err(|_| bad(format!("route {dst} scope {s} is over 255")))
                })
                .transpose()?;
            result.routes.push(RouteEntry {
                dst,
                gw,
                attrs: RouteAttrs {
                    priority,
                    table,
                    scope,
                    mtu,
                    advmss,
                },
            });
        }
        result.dns = value
            .get("dns")
            .filter(|d| d.as_object().is_some_and(|o| !o.is_empty()))
            .cloned();
        Ok(result)
    }
}

/// A JSON value for a message, cut short: a prevResult may be large, or hostile.
fn brief(v: &Value) -> String {
    cut_short(&v.to_string(), 80)
}

pub fn format_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CniResult {
        CniResult {
            interfaces: vec![
                Interface {
                    name: "br0".into(),
                    mac: "02:00:00:00:00:01".into(),
                    mtu: Some(1500),
                    sandbox: String::new(),
                },
                Interface {
                    name: "veth0".into(),
                    mac: "02:00:00:00:00:02".into(),
                    mtu: Some(1500),
                    sandbox: String::new(),
                },
                Interface {
                    name: "eth0".into(),
                    mac: "02:00:00:00:00:03".into(),
                    mtu: Some(1500),
                    sandbox: "/var/run/netns/a".into(),
                },
            ],
            ips: vec![IpConfig {
                address: "10.0.0.2/24".parse().unwrap(),
                gateway: Some("10.0.0.1".parse().unwrap()),
                interface: Some(2),
            }],
            routes: vec![
                RouteEntry::new(
                    "0.0.0.0/0".parse().unwrap(),
                    Some("10.0.0.1".parse().unwrap()),
                ),
                RouteEntry {
                    dst: "10.9.0.0/16".parse().unwrap(),
                    gw: Some("10.0.0.1".parse().unwrap()),
                    attrs: RouteAttrs {
                        priority: Some(50),
                        table: Some(100),
                        scope: Some(0),
                        mtu: Some(1400),
                        advmss: Some(1360),
                    },
                },
            ],
            dns: None,
        }
    }

    #[test]
    fn version_field_only_before_1_0() {
        for v in ["0.3.0", "0.3.1", "0.4.0"] {
            assert_eq!(sample().to_json(v)["ips"][0]["version"], "4", "{v}");
        }
        for v in ["1.0.0", "1.1.0"] {
            assert!(
                sample().to_json(v)["ips"][0].get("version").is_none(),
                "{v}"
            );
        }
    }

    #[test]
    fn mtu_only_from_1_1() {
        assert!(sample().to_json("1.0.0")["interfaces"][0]
            .get("mtu")
            .is_none());
        assert_eq!(sample().to_json("1.1.0")["interfaces"][0]["mtu"], 1500);
    }

    #[test]
    fn round_trips_through_prev_result() {
        for v in version::SUPPORTED {
            let mut back = CniResult::from_json(&sample().to_json(v)).unwrap();
            if !version::at_least(v, "1.1.0") {
                back.interfaces.iter_mut().for_each(|i| i.mtu = Some(1500));
            }
            let mut want = sample();
            if !version::at_least(v, "1.0.0") {
                assert!(sample().to_json(v)["routes"][1].get("table").is_none());
                want.routes[1].attrs = RouteAttrs::default();
            }
            assert_eq!(back, want, "{v}");
        }
    }

    #[test]
    fn malformed_prev_result_is_an_error() {
        let v = serde_json::json!({"ips": [{"address": "nonsense"}]});
        assert_eq!(CniResult::from_json(&v).unwrap_err().code, 7);
        for v in [
            serde_json::json!(5),
            serde_json::json!(["x"]),
            serde_json::json!("x".repeat(5000)),
            serde_json::json!({"interfaces": [{"name": "a"}],
                               "ips": [{"address": "10.0.0.2/24", "interface": 1}]}),
            serde_json::json!({"ips": [{"address": "10.0.0.2/24", "interface": -1}]}),
            serde_json::json!({"ips": [{"address": "10.0.0.2/24", "interface": "0"}]}),
            serde_json::json!({"routes": [{"dst": "0.0.0.0/0", "table": "main"}]}),
            serde_json::json!({"routes": [{"dst": "0.0.0.0/0", "scope": 300}]}),
        ] {
            let e = CniResult::from_json(&v).unwrap_err();
            assert_eq!(e.code, 7, "{v}");
            assert!(
                e.msg.starts_with("prevResult") && e.msg.len() < 200,
                "{}",
                e.msg
            );
        }
    }
}
