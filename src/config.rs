//! The network configuration from stdin: decoded once, defaults applied, and every
//! field validated before the kernel or the store is touched.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::cni::env::interface_name_problem;
use crate::cni::{code, version, Error, Result};

pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/academy";
pub const DEFAULT_BRIDGE: &str = "cni0";

/// Keys of the reference bridge plugin that academy does not implement. Silently ignoring
/// one would give a network other than the one the user asked for, so each is refused.
const UNSUPPORTED_KEYS: &[&str] = &[
    "ipam",
    "ipMasq",
    "ipMasqBackend",
    "isDefaultGateway",
    "forceAddress",
    "hairpinMode",
    "promiscMode",
    "vlan",
    "vlanTrunk",
    "preserveDefaultVlan",
    "macspoofchk",
    "enabledad",
    "disableContainerInterface",
    "portIsolation",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub cni_version: String,
    pub name: String,
    pub bridge: String,
    pub subnet: IpNetwork,
    pub gateway: IpAddr,
    /// A fixed address for the container instead of the next free one.
    pub test_address: Option<IpNetwork>,
    pub mtu: Option<u32>,
    /// Put the gateway address on the bridge.
    pub is_gateway: bool,
    pub data_dir: PathBuf,
    pub range_start: Option<IpAddr>,
    pub range_end: Option<IpAddr>,
    pub prev_result: Option<Value>,
    /// GC's list of live attachments, (container id, ifname); None when absent.
    pub valid_attachments: Option<HashSet<(String, String)>>,
}

/// The cniVersion of a config, if it has a readable one: used to print errors in the
/// version the runtime speaks even when the rest of the config is bad.
pub fn peek_version(stdin: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(stdin).ok()?;
    v.get("cniVersion")?.as_str().map(str::to_string)
}

impl Config {
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
        for key in UNSUPPORTED_KEYS {
            if let Some(v) = map.get(*key) {
                return Err(Error::new(
                    code::UNSUPPORTED_FIELD,
                    format!("field {key} ({v}) is not supported by academy"),
                )
                .details("remove it from the network config"));
            }
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

        let subnet_text = f.string("subnet")?.ok_or_else(|| {
            Error::config("subnet is missing").details("e.g. \"subnet\": \"10.98.0.0/24\"")
        })?;
        let subnet: IpNetwork = subnet_text.parse().map_err(|_| {
            Error::config(format!("subnet {subnet_text:?} is not an address/prefix"))
        })?;
        if subnet.network() != subnet.ip() {
            return Err(Error::config(format!(
                "subnet {subnet_text:?} has host bits set; did you mean {}/{}?",
                subnet.network(),
                subnet.prefix()
            )));
        }
        if !subnet.is_ipv4() {
            return Err(Error::new(
                code::UNSUPPORTED_FIELD,
                format!("subnet {subnet_text}: IPv6 subnets are not supported yet"),
            ));
        }
        if subnet.prefix() > 30 {
            return Err(Error::config(format!(
                "subnet {subnet_text} is too small: it leaves no address for a container besides network, gateway and broadcast"
            )));
        }

        let gateway = match f.ip("gateway")? {
            Some(gw) => gw,
            None => first_host(subnet),
        };
        check_host_address(subnet, gateway, "gateway")?;

        let test_address = match f.string("testAddress")? {
            None => None,
            Some(t) => {
                let parsed: IpNetwork = t.parse().map_err(|_| {
                    Error::config(format!("testAddress {t:?} is not an address/prefix"))
                })?;
                let parsed = if t.contains('/') {
                    parsed
                } else {
                    IpNetwork::new(parsed.ip(), subnet.prefix()).expect("prefix of the subnet")
                };
                if parsed.prefix() != subnet.prefix() {
                    return Err(Error::config(format!(
                        "testAddress {t} has prefix /{} but subnet {subnet} is /{}",
                        parsed.prefix(),
                        subnet.prefix()
                    )));
                }
                check_host_address(subnet, parsed.ip(), "testAddress")?;
                if parsed.ip() == gateway {
                    return Err(Error::config(format!(
                        "testAddress {t} is the gateway address"
                    )));
                }
                Some(parsed)
            }
        };

        let mtu = match f.number("mtu")? {
            None => None,
            Some(m) if (68..=65535).contains(&m) => Some(m as u32),
            Some(m) => {
                return Err(Error::config(format!(
                    "mtu {m} is out of range (68 to 65535)"
                )))
            }
        };
        let is_gateway = f.boolean("isGateway")?.unwrap_or(true);
        let data_dir = match f.string("dataDir")? {
            None => PathBuf::from(DEFAULT_DATA_DIR),
            Some(d) if d.starts_with('/') => PathBuf::from(d),
            Some(d) => {
                return Err(Error::config(format!(
                    "dataDir {d:?} must be an absolute path"
                )))
            }
        };
        let range_start = f.ip("rangeStart")?;
        let range_end = f.ip("rangeEnd")?;
        for (key, addr) in [("rangeStart", range_start), ("rangeEnd", range_end)] {
            if let Some(a) = addr {
                check_host_address(subnet, a, key)?;
            }
        }
        if let (Some(s), Some(e)) = (range_start, range_end) {
            if s > e {
                return Err(Error::config(format!(
                    "rangeStart {s} comes after rangeEnd {e}"
                )));
            }
        }

        Ok(Config {
            cni_version,
            name,
            bridge,
            subnet,
            gateway,
            test_address,
            mtu,
            is_gateway,
            data_dir,
            range_start,
            range_end,
            prev_result: map.get("prevResult").filter(|v| !v.is_null()).cloned(),
            valid_attachments: valid_attachments(&map)?,
        })
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

fn first_host(subnet: IpNetwork) -> IpAddr {
    match subnet {
        IpNetwork::V4(n) => IpAddr::V4((u32::from(n.network()) + 1).into()),
        IpNetwork::V6(n) => IpAddr::V6((u128::from(n.network()) + 1).into()),
    }
}

/// `addr` must be a host address of `subnet`: inside it, and neither its network nor its
/// broadcast address.
fn check_host_address(subnet: IpNetwork, addr: IpAddr, field: &str) -> Result<()> {
    if !subnet.contains(addr) {
        return Err(Error::config(format!(
            "{field} {addr} is not inside subnet {subnet}"
        )));
    }
    if addr == subnet.network() {
        return Err(Error::config(format!(
            "{field} {addr} is the network address of {subnet}"
        )));
    }
    if let IpNetwork::V4(n) = subnet {
        if addr == IpAddr::V4(n.broadcast()) {
            return Err(Error::config(format!(
                "{field} {addr} is the broadcast address of {subnet}"
            )));
        }
    }
    Ok(())
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

/// Typed access to the config's fields, with errors that name the field and its value.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Error::config(format!(
                "{key} must be a string, got {other}"
            ))),
        }
    }

    fn number(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| Error::config(format!("{key} must be a whole number, got {v}"))),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(Error::config(format!(
                "{key} must be true or false, got {other}"
            ))),
        }
    }

    fn ip(&self, key: &str) -> Result<Option<IpAddr>> {
        match self.string(key)? {
            None => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| Error::config(format!("{key} {s:?} is not an IP address"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Config> {
        Config::parse(json.as_bytes())
    }

    const GOOD: &str = r#"{"cniVersion":"1.0.0","name":"harness","type":"academy","bridge":"br-academy","subnet":"10.98.0.0/24","gateway":"10.98.0.1","testAddress":"10.98.0.20/24"}"#;

    #[test]
    fn the_seed_config_parses() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.bridge, "br-academy");
        assert_eq!(c.gateway.to_string(), "10.98.0.1");
        assert_eq!(c.test_address.unwrap().to_string(), "10.98.0.20/24");
        assert!(c.is_gateway);
        assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    }

    fn with(key: &str, value: &str) -> String {
        let mut v: Value = serde_json::from_str(GOOD).unwrap();
        v[key] = serde_json::from_str(value).unwrap();
        v.to_string()
    }

    #[test]
    fn bad_fields_name_the_field_and_value() {
        let cases = [
            ("subnet", r#""10.98.0.0/33""#, 7, "subnet"),
            ("subnet", r#""10.98.0.5/24""#, 7, "host bits"),
            ("subnet", r#""10.98.0.0/31""#, 7, "too small"),
            ("gateway", r#""10.97.0.1""#, 7, "not inside"),
            ("gateway", r#""10.98.0.0""#, 7, "network address"),
            ("gateway", r#""10.98.0.255""#, 7, "broadcast"),
            ("gateway", r#""nope""#, 7, "gateway"),
            ("testAddress", r#""10.99.0.5/24""#, 7, "not inside"),
            ("testAddress", r#""10.98.0.1/24""#, 7, "gateway"),
            ("testAddress", r#""10.98.0.5/16""#, 7, "prefix"),
            ("bridge", r#""this-name-is-too-long""#, 7, "15 bytes"),
            ("bridge", r#""a/b""#, 7, "bridge"),
            ("mtu", r#""1500""#, 7, "mtu"),
            ("mtu", "20", 7, "out of range"),
            ("isGateway", r#""yes""#, 7, "isGateway"),
            ("name", r#""../etc""#, 7, "network name"),
            ("name", r#""""#, 7, "network name"),
            ("cniVersion", r#""0.2.0""#, 1, "0.2.0"),
            ("ipMasq", "true", 2, "ipMasq"),
            ("vlan", "5", 2, "vlan"),
            ("dataDir", r#""relative""#, 7, "absolute"),
        ];
        for (key, value, code, needle) in cases {
            let err = parse(&with(key, value)).unwrap_err();
            assert_eq!(err.code, code, "{key}={value}: {err}");
            assert!(err.msg.contains(needle), "{key}={value}: {}", err.msg);
        }
    }

    #[test]
    fn not_json_is_a_decode_failure() {
        assert_eq!(parse("{").unwrap_err().code, 6);
        assert_eq!(parse("[]").unwrap_err().code, 6);
    }

    #[test]
    fn gateway_defaults_to_first_host() {
        let mut v: Value = serde_json::from_str(GOOD).unwrap();
        v.as_object_mut().unwrap().remove("gateway");
        assert_eq!(
            parse(&v.to_string()).unwrap().gateway.to_string(),
            "10.98.0.1"
        );
    }

    #[test]
    fn valid_attachments_under_either_key() {
        let c = parse(&with(
            "cni.dev/attachments",
            r#"[{"containerID":"a","ifname":"eth0"}]"#,
        ))
        .unwrap();
        assert!(c
            .valid_attachments
            .unwrap()
            .contains(&("a".into(), "eth0".into())));
        let c = parse(&with("cni.dev/valid-attachments", "[]")).unwrap();
        assert!(c.valid_attachments.unwrap().is_empty());
        assert!(parse(&with("cni.dev/valid-attachments", r#"[{"id":"a"}]"#)).is_err());
    }
}
