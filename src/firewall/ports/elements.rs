//! The elements of port mapping's maps: which map, the key and the data as the kernel
//! holds them, read back from a GETSETELEM reply.

use std::net::IpAddr;

use crate::firewall::tables::{suffix, ACADEMY};
use crate::netlink::nftables::attrs::{address_bytes, address_from};
use crate::netlink::nftables::consts::{
    TYPE_BITS, TYPE_INET_PROTOCOL, TYPE_INET_SERVICE, TYPE_IPV4_ADDR, TYPE_IPV6_ADDR,
};
use crate::netlink::nftables::dump::RawElement;
use crate::netlink::nftables::model::Set;
use crate::netlink::Family;

/// Port mapping's set of bridges whose hairpin traffic is marked.
pub const HAIRPIN_SET: &str = "_hairpin";

/// One of the four maps: a family, keyed by the host address or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortMap {
    pub family: Family,
    pub by_host_ip: bool,
}

impl PortMap {
    /// In rule order: the hostIP maps first.
    pub const ALL: [PortMap; 4] = [
        PortMap {
            family: Family::V4,
            by_host_ip: true,
        },
        PortMap {
            family: Family::V4,
            by_host_ip: false,
        },
        PortMap {
            family: Family::V6,
            by_host_ip: true,
        },
        PortMap {
            family: Family::V6,
            by_host_ip: false,
        },
    ];

    pub fn name(self) -> String {
        let hostip = if self.by_host_ip { "-hostip" } else { "" };
        format!("_ports{hostip}-{}", suffix(self.family))
    }

    pub(super) fn address_type(self) -> u32 {
        match self.family {
            Family::V4 => TYPE_IPV4_ADDR,
            Family::V6 => TYPE_IPV6_ADDR,
        }
    }

    pub(super) fn address_len(self) -> u32 {
        self.family.layout().1
    }

    /// Each field of a concatenation takes a multiple of 4 bytes.
    pub(super) fn key(self) -> (u32, u32) {
        let proto_port = (TYPE_INET_PROTOCOL << TYPE_BITS) | TYPE_INET_SERVICE;
        if self.by_host_ip {
            let kind = (self.address_type() << (2 * TYPE_BITS)) | proto_port;
            (kind, self.address_len() + 8)
        } else {
            (proto_port, 8)
        }
    }

    pub(super) fn data(self) -> (u32, u32) {
        let kind = (self.address_type() << TYPE_BITS) | TYPE_INET_SERVICE;
        (kind, self.address_len() + 4)
    }

    /// The map as academy makes it (`id` names it in its creating batch).
    pub(super) fn set(self, id: u32) -> Set {
        Set {
            table: ACADEMY,
            name: self.name(),
            id,
            key: self.key(),
            data: Some(self.data()),
            userdata: None,
            exclusive: false,
        }
    }
}

/// What a published port is looked up by: (host address,) protocol and host port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortKey {
    pub family: Family,
    /// An IP protocol number (6 tcp, 17 udp, 132 sctp).
    pub protocol: u8,
    pub host_ip: Option<IpAddr>,
    pub host_port: u16,
}

impl PortKey {
    pub fn map(&self) -> PortMap {
        PortMap {
            family: self.family,
            by_host_ip: self.host_ip.is_some(),
        }
    }

    pub(super) fn bytes(&self) -> Vec<u8> {
        let mut key = self.host_ip.map(address_bytes).unwrap_or_default();
        key.extend_from_slice(&[self.protocol, 0, 0, 0]);
        key.extend_from_slice(&self.host_port.to_be_bytes());
        key.extend_from_slice(&[0, 0]);
        key
    }

    pub(super) fn from_bytes(map: PortMap, bytes: &[u8]) -> Option<PortKey> {
        let (host_ip, rest) = if map.by_host_ip {
            let len = map.address_len() as usize;
            let ip = address_from(bytes.get(..len)?, map.family)?;
            (Some(ip), &bytes[len..])
        } else {
            (None, bytes)
        };
        if rest.len() != 8 {
            return None;
        }
        Some(PortKey {
            family: map.family,
            protocol: rest[0],
            host_ip,
            host_port: u16::from_be_bytes([rest[4], rest[5]]),
        })
    }
}

/// A published port: its key, the container address and port it goes to, its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortElement {
    pub key: PortKey,
    pub address: IpAddr,
    pub port: u16,
    pub comment: String,
}

impl PortElement {
    pub(super) fn data(&self) -> Vec<u8> {
        let mut data = address_bytes(self.address);
        data.extend_from_slice(&self.port.to_be_bytes());
        data.extend_from_slice(&[0, 0]);
        data
    }
}

pub(super) fn protocol_name(protocol: u8) -> String {
    match protocol {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        other => format!("protocol {other}"),
    }
}

/// `tcp/8080` or `tcp/10.0.0.1:8080`.
pub fn key_text(key: &PortKey) -> String {
    let proto = protocol_name(key.protocol);
    match key.host_ip {
        None => format!("{proto}/{} ({})", key.host_port, suffix(key.family)),
        Some(IpAddr::V6(ip)) => format!("{proto}/[{ip}]:{}", key.host_port),
        Some(ip) => format!("{proto}/{ip}:{}", key.host_port),
    }
}

pub(super) fn describe(p: &PortElement) -> String {
    format!(
        "{} -> {}",
        key_text(&p.key),
        match p.address {
            IpAddr::V6(a) => format!("[{a}]:{}", p.port),
            a => format!("{a}:{}", p.port),
        }
    )
}

/// A map's element as a published port: the key and the data of `map`'s shape.
pub(super) fn port_element(raw: &RawElement, map: PortMap) -> Option<PortElement> {
    let key = PortKey::from_bytes(map, &raw.key)?;
    let len = map.address_len() as usize;
    let data = raw.data.as_ref().filter(|d| d.len() == len + 4)?;
    Some(PortElement {
        key,
        address: address_from(&data[..len], map.family)?,
        port: u16::from_be_bytes([data[len], data[len + 1]]),
        comment: raw.comment.clone(),
    })
}

/// The published ports of a NEWSETELEM message or reply of `map`.
#[cfg(test)]
fn decode_ports(payload: &[u8], map: PortMap) -> Vec<PortElement> {
    let raw = crate::netlink::nftables::dump::decode_elements(payload);
    raw.iter().filter_map(|r| port_element(r, map)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::nft::port_changes;
    use super::*;
    use crate::firewall::tables::bridge_pair_key as hairpin_key;
    use crate::netlink::nftables::encode::element_reply;
    use crate::netlink::nftables::model::Element;

    /// 65,535 mappings of both families: every message's element list fits netlink's
    /// 16-bit attribute length, no element is lost or doubled, and each description
    /// names a few ports and counts the rest (an error quotes it).
    #[test]
    fn any_number_of_ports_is_split_into_messages_with_short_descriptions() {
        let ports: Vec<PortElement> = (1..=65535u16)
            .flat_map(|port| {
                [Family::V4, Family::V6].map(|family| PortElement {
                    key: PortKey {
                        family,
                        protocol: 6,
                        host_ip: None,
                        host_port: port,
                    },
                    address: match family {
                        Family::V4 => "10.1.0.2".parse().unwrap(),
                        Family::V6 => "fd00::2".parse().unwrap(),
                    },
                    port: 80,
                    comment: format!("{}:{}:eth0", "n".repeat(40), "c".repeat(64)),
                })
            })
            .collect();
        let changes = port_changes(&ports, "br0", false);
        let mut decoded = Vec::new();
        for change in &changes[..changes.len() - 1] {
            let attrs = crate::netlink::nftables::encode::op(&change.op).attrs;
            assert!(attrs.0.len() < 60_000, "{}", attrs.0.len());
            assert!(change.description.len() < 600, "{}", change.description);
            let map = if change.description.ends_with("_ports-v4") {
                PortMap::ALL[1]
            } else {
                PortMap::ALL[3]
            };
            decoded.extend(decode_ports(&attrs.0, map));
        }
        assert_eq!(decoded.len(), ports.len());
        assert_eq!(
            decoded,
            ports
                .iter()
                .filter(|p| p.key.family == Family::V4)
                .chain(ports.iter().filter(|p| p.key.family == Family::V6))
                .cloned()
                .collect::<Vec<_>>()
        );
        assert!(
            changes[0]
                .description
                .starts_with("publish tcp/1 (v4) -> 10.1.0.2:80, tcp/2 (v4) -> 10.1.0.2:80, "),
            "{}",
            changes[0].description
        );
        assert!(changes[0]
            .description
            .contains(" more in nf_tables map inet academy _ports-v4"));
    }

    #[test]
    fn elements_round_trip_through_a_reply() {
        let element = PortElement {
            key: PortKey {
                family: Family::V6,
                protocol: 17,
                host_ip: Some("fd00::1".parse().unwrap()),
                host_port: 5353,
            },
            address: "fd00::9".parse().unwrap(),
            port: 53,
            comment: "net:c1:eth0".into(),
        };
        let map = element.key.map();
        assert_eq!(map.name(), "_ports-hostip-v6");
        assert_eq!(map.key(), ((8 << 12) | (12 << 6) | 13, 24));
        let reply = element_reply(
            &map.name(),
            &[Element {
                key: element.key.bytes(),
                data: Some(element.data()),
                comment: element.comment.clone(),
            }],
        );
        assert_eq!(decode_ports(&reply, map), vec![element]);
    }

    #[test]
    fn keys_are_laid_out_as_nft_loads_them() {
        let key = PortKey {
            family: Family::V4,
            protocol: 6,
            host_ip: None,
            host_port: 8080,
        };
        assert_eq!(key.bytes(), [6, 0, 0, 0, 0x1f, 0x90, 0, 0]);
        assert_eq!(hairpin_key("br0").len(), 32);
        assert_eq!(key_text(&key), "tcp/8080 (v4)");
    }
}
