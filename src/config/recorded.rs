//! What ADD records of the runtime's arguments, for the restore: the kernel holds a
//! published port only as an element of a map, and a flush or `nft delete table` takes
//! the element with the map, so `runtimeConfig.portMappings` must be kept beside the
//! reservation to be put back. The bandwidth rates likewise exist only in tc once ADD
//! is over. One small JSON object, with the runtime's own keys, so an admin reads it
//! as the runtime wrote it:
//!
//! `{"version":1,"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"10.0.0.1"}],"bandwidth":{"ingressRate":1000000,"ingressBurst":8000}}`
//!
//! The store keeps the bytes (src/ipam/store/runtime.rs); this module only encodes them.

use serde_json::{json, Map, Value};

use super::{bandwidth, port_mappings, Bandwidth, Config, PortMapping};

/// The record's format; a reader refuses a later one rather than misread it.
const VERSION: u64 = 1;

/// One attachment's record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recorded {
    pub port_mappings: Vec<PortMapping>,
    pub bandwidth: Option<Bandwidth>,
}

impl Recorded {
    /// What ADD of `conf` must record; None when there is nothing (no file is written).
    pub fn of(conf: &Config) -> Option<Recorded> {
        let port_mappings = conf.port_mappings.clone().unwrap_or_default();
        if port_mappings.is_empty() && conf.bandwidth.is_none() {
            return None;
        }
        Some(Recorded {
            port_mappings,
            bandwidth: conf.bandwidth,
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut record = Map::new();
        record.insert("version".into(), json!(VERSION));
        if !self.port_mappings.is_empty() {
            let list: Vec<Value> = self.port_mappings.iter().map(mapping_json).collect();
            record.insert("portMappings".into(), Value::Array(list));
        }
        if let Some(b) = &self.bandwidth {
            let mut rates = Map::new();
            for (dir, shape) in [("ingress", b.ingress), ("egress", b.egress)] {
                if let Some(s) = shape {
                    rates.insert(format!("{dir}Rate"), json!(s.rate));
                    rates.insert(format!("{dir}Burst"), json!(s.burst));
                }
            }
            record.insert("bandwidth".into(), Value::Object(rates));
        }
        Value::Object(record).to_string().into_bytes()
    }

    /// The record in `bytes`, validated as ADD validated what it records.
    pub fn parse(bytes: &[u8]) -> Result<Recorded, String> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("it is not JSON: {e}"))?;
        let record = value.as_object().ok_or("it is not a JSON object")?;
        match record.get("version").and_then(Value::as_u64) {
            Some(VERSION) => {}
            Some(v) => return Err(format!("its version {v} is newer than this academy's")),
            None => return Err("it has no version".into()),
        }
        let mut port_mappings = Vec::new();
        if let Some(list) = record.get("portMappings") {
            let items = list.as_array().ok_or("portMappings is not a list")?;
            for (i, item) in items.iter().enumerate() {
                let at = format!("portMappings[{i}]");
                port_mappings.push(port_mappings::parse(item, &at).map_err(|e| e.msg)?);
            }
        }
        let bandwidth = match record.get("bandwidth") {
            None => None,
            Some(Value::Object(rates)) => bandwidth::from_config(rates).map_err(|e| e.msg)?,
            Some(_) => return Err("bandwidth is not an object".into()),
        };
        Ok(Recorded {
            port_mappings,
            bandwidth,
        })
    }
}

fn mapping_json(m: &PortMapping) -> Value {
    let protocol = match m.protocol {
        17 => "udp",
        132 => "sctp",
        _ => "tcp",
    };
    let mut item = json!({
        "hostPort": m.host_port,
        "containerPort": m.container_port,
        "protocol": protocol,
    });
    if let Some(ip) = m.host_ip {
        item["hostIP"] = json!(ip.to_string());
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Shape;

    #[test]
    fn a_record_reads_back_as_written() {
        let record = Recorded {
            port_mappings: vec![
                PortMapping {
                    host_port: 8080,
                    container_port: 80,
                    protocol: 6,
                    host_ip: None,
                },
                PortMapping {
                    host_port: 5353,
                    container_port: 53,
                    protocol: 17,
                    host_ip: Some("fd00::1".parse().unwrap()),
                },
                PortMapping {
                    host_port: 9000,
                    container_port: 9000,
                    protocol: 132,
                    host_ip: Some("0.0.0.0".parse().unwrap()),
                },
            ],
            bandwidth: Some(Bandwidth {
                ingress: Some(Shape {
                    rate: 1_000_000,
                    burst: 8_000,
                }),
                egress: None,
            }),
        };
        let bytes = record.to_bytes();
        assert_eq!(Recorded::parse(&bytes).unwrap(), record);
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains(r#""hostIP":"fd00::1""#), "{text}");
        assert!(!text.contains("egressRate"), "{text}");
    }

    #[test]
    fn a_record_of_another_version_or_garbage_is_refused() {
        assert!(Recorded::parse(br#"{"version":2}"#)
            .unwrap_err()
            .contains("newer"));
        assert!(Recorded::parse(b"not json").is_err());
        assert!(Recorded::parse(br#"{"version":1,"portMappings":[{"hostPort":0}]}"#).is_err());
        assert_eq!(
            Recorded::parse(br#"{"version":1}"#).unwrap(),
            Recorded::default()
        );
    }
}
