//! `runtimeConfig.portMappings` (CONVENTIONS.md, capability `portMappings`): the host
//! ports a runtime publishes for the container. Taken only when academy's own plugin
//! entry declares the capability, as libcni passes it only then; without it, a
//! reference `portmap` later in the chain does the job as before.

use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::cni::{Error, Result};

/// One published port, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    /// The IP protocol number: 6 tcp, 17 udp, 132 sctp.
    pub protocol: u8,
    /// None: every host address of the container's families. An unspecified address
    /// (0.0.0.0, ::) keeps its family only, as the reference portmap reads it.
    pub host_ip: Option<IpAddr>,
}

/// Whether the plugin entry declares `"capabilities": {"portMappings": true}`.
pub fn declared(map: &Map<String, Value>) -> bool {
    map.get("capabilities")
        .and_then(|c| c.get("portMappings"))
        .and_then(Value::as_bool)
        == Some(true)
}

/// The mappings of runtimeConfig (None when the capability is not declared or the
/// runtime sent none), validated as the reference portmap does (ports above 0), and
/// more: ports within 65535, a protocol it knows, a hostIP that is an address, no key
/// asked for twice.
pub fn from_config(map: &Map<String, Value>) -> Result<Option<Vec<PortMapping>>> {
    if !declared(map) {
        return Ok(None);
    }
    let Some(list) = map
        .get("runtimeConfig")
        .and_then(|r| r.get("portMappings"))
        .filter(|v| !v.is_null())
    else {
        return Ok(None);
    };
    let items = list.as_array().ok_or_else(|| {
        Error::config(format!(
            "runtimeConfig.portMappings must be a list, got {list}"
        ))
    })?;
    let mut seen = HashSet::new();
    let mut mappings = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let field = format!("runtimeConfig.portMappings[{i}]");
        let mapping = parse(item, &field)?;
        // Where it answers: a host address, or any address of one family or of both.
        let places: Vec<(Option<IpAddr>, bool)> = match mapping.host_ip {
            Some(ip) if !ip.is_unspecified() => vec![(Some(ip), ip.is_ipv4())],
            Some(ip) => vec![(None, ip.is_ipv4())],
            None => vec![(None, true), (None, false)],
        };
        let fresh = places.into_iter().fold(true, |fresh, (ip, v4)| {
            seen.insert((mapping.protocol, ip, v4, mapping.host_port)) && fresh
        });
        if !fresh {
            return Err(Error::config(format!(
                "{field} asks for host port {} again",
                mapping.host_port
            ))
            .details("each (protocol, hostIP, hostPort) can be published once"));
        }
        mappings.push(mapping);
    }
    Ok(Some(mappings))
}

/// DEL's reading: whatever mappings are readable, the others skipped (DEL never refuses
/// over configuration).
pub fn lenient(map: &Map<String, Value>) -> Option<Vec<PortMapping>> {
    let items = map
        .get("runtimeConfig")
        .and_then(|r| r.get("portMappings"))
        .and_then(Value::as_array)?;
    Some(
        items
            .iter()
            .filter_map(|item| parse(item, "").ok())
            .collect(),
    )
}

/// The value of `key` in `item`, matched case-insensitively as Go's encoding/json does
/// for the reference portmap: containerd's go-cni sends `HostPort`, `ContainerPort`,
/// `Protocol`, `HostIP` (its struct has no JSON tags), podman and cnitool `hostPort`.
fn field<'a>(item: &'a Value, key: &str) -> Option<&'a Value> {
    let map = item.as_object()?;
    map.get(key).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

pub(super) fn parse(item: &Value, at: &str) -> Result<PortMapping> {
    let port = |key: &str| -> Result<u16> {
        let value = field(item, key).filter(|v| !v.is_null());
        let Some(value) = value else {
            return Err(Error::config(format!("{at}.{key} is missing")));
        };
        value
            .as_u64()
            .filter(|p| (1..=65535).contains(p))
            .map(|p| p as u16)
            .ok_or_else(|| {
                Error::config(format!(
                    "{at}.{key} {value} is not a port number (1 to 65535)"
                ))
            })
    };
    let host_port = port("hostPort")?;
    let container_port = port("containerPort")?;
    // Kubernetes writes TCP, podman tcp; the reference passes either to iptables.
    let protocol = match field(item, "protocol") {
        None | Some(Value::Null) => 6,
        Some(Value::String(p)) => match p.to_ascii_lowercase().as_str() {
            "" | "tcp" => 6,
            "udp" => 17,
            "sctp" => 132,
            _ => {
                return Err(Error::config(format!(
                    "{at}.protocol {p:?} is not tcp, udp or sctp"
                )))
            }
        },
        Some(other) => {
            return Err(Error::config(format!(
                "{at}.protocol must be a string, got {other}"
            )))
        }
    };
    let host_ip = match field(item, "hostIP") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => {
            let ip = s
                .parse::<IpAddr>()
                .map_err(|_| Error::config(format!("{at}.hostIP {s:?} is not an IP address")))?;
            // No packet is addressed to ::ffff:a.b.c.d (the kernel's IPv4 sockets see
            // a.b.c.d): a key on it would be published and never reached.
            if let IpAddr::V6(v6) = ip {
                if let Some(v4) = v6.to_ipv4_mapped() {
                    return Err(Error::config(format!(
                        "{at}.hostIP {s} is an IPv4-mapped IPv6 address, which no packet is addressed to"
                    ))
                    .details(format!("write it as the IPv4 address {v4}")));
                }
            }
            Some(ip)
        }
        Some(other) => {
            return Err(Error::config(format!(
                "{at}.hostIP must be a string, got {other}"
            )))
        }
    };
    Ok(PortMapping {
        host_port,
        container_port,
        protocol,
        host_ip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mappings(json: &str) -> Result<Vec<PortMapping>> {
        let v: Value = serde_json::from_str(json).unwrap();
        from_config(v.as_object().unwrap()).map(Option::unwrap_or_default)
    }

    fn with_caps(list: &str) -> String {
        format!(
            r#"{{"capabilities":{{"portMappings":true}},"runtimeConfig":{{"portMappings":{list}}}}}"#
        )
    }

    #[test]
    fn taken_only_when_the_capability_is_declared() {
        let list = r#"[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]"#;
        let without = format!(r#"{{"runtimeConfig":{{"portMappings":{list}}}}}"#);
        assert_eq!(mappings(&without).unwrap(), vec![]);
        assert_eq!(
            mappings(&with_caps(list)).unwrap(),
            vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: 6,
                host_ip: None
            }]
        );
    }

    #[test]
    fn every_field_is_validated() {
        let go_cni = mappings(&with_caps(
            r#"[{"HostPort":8080,"ContainerPort":80,"Protocol":"tcp","HostIP":""}]"#,
        ))
        .unwrap();
        assert_eq!((go_cni[0].host_port, go_cni[0].container_port), (8080, 80));
        let good = mappings(&with_caps(
            r#"[{"hostPort":53,"containerPort":53,"protocol":"UDP","hostIP":"fd00::1"},
                {"hostPort":53,"containerPort":53,"protocol":"udp","hostIP":"0.0.0.0"},
                {"hostPort":54,"containerPort":53,"protocol":"udp"},
                {"hostPort":9,"containerPort":9,"protocol":"sctp","hostIP":""}]"#,
        ))
        .unwrap();
        assert_eq!(good[0].protocol, 17);
        assert_eq!(good[0].host_ip, Some("fd00::1".parse().unwrap()));
        assert_eq!(good[3].host_ip, None);
        let cases = [
            (r#"[{"hostPort":0,"containerPort":80}]"#, "hostPort 0"),
            (
                r#"[{"hostPort":70000,"containerPort":80}]"#,
                "hostPort 70000",
            ),
            (
                r#"[{"hostPort":80,"containerPort":-1}]"#,
                "containerPort -1",
            ),
            (r#"[{"containerPort":80}]"#, "hostPort is missing"),
            (
                r#"[{"hostPort":80,"containerPort":80,"protocol":"icmp"}]"#,
                "icmp",
            ),
            (
                r#"[{"hostPort":80,"containerPort":80,"hostIP":"nope"}]"#,
                "hostIP",
            ),
            (
                r#"[{"hostPort":80,"containerPort":80,"hostIP":"::ffff:10.0.0.1"}]"#,
                "IPv4-mapped",
            ),
            (r#"{"hostPort":80}"#, "must be a list"),
            (
                r#"[{"hostPort":80,"containerPort":80},{"hostPort":80,"containerPort":81,"protocol":"TCP"}]"#,
                "again",
            ),
            (
                r#"[{"hostPort":80,"containerPort":80},{"hostPort":80,"containerPort":81,"hostIP":"::"}]"#,
                "again",
            ),
        ];
        for (list, needle) in cases {
            let err = mappings(&with_caps(list)).unwrap_err();
            assert_eq!(err.code, 7, "{list}: {err}");
            assert!(err.msg.contains(needle), "{list}: {err}");
        }
    }
}
