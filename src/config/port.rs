//! The container's bridge port: `vlan`, `vlanTrunk`, `preserveDefaultVlan` and
//! `portIsolation`, validated as the reference bridge plugin validates them
//! (plugins/main/bridge/bridge.go, loadNetConf and collectVlanTrunk).

use serde_json::{Map, Value};

use super::Fields;
use crate::cni::{Error, Result};

/// The highest VLAN id a port can carry (4095 is reserved by 802.1Q).
const MAX_VID: i64 = 4094;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// `vlan`: the port is an untagged access port of this VLAN (pvid, egress untagged).
    pub vlan: Option<u16>,
    /// `vlanTrunk`: the port carries these VLANs tagged. Sorted, without duplicates.
    pub trunk: Vec<u16>,
    /// `preserveDefaultVlan` (default true, as the reference): with a VLAN asked for,
    /// the port keeps the entry every new port gets (the bridge's default pvid, vid 1).
    pub preserve_default_vlan: bool,
    /// `portIsolation`: the port talks only to ports that are not isolated.
    pub isolated: bool,
}

impl Default for PortSpec {
    fn default() -> Self {
        PortSpec {
            vlan: None,
            trunk: Vec::new(),
            preserve_default_vlan: true,
            isolated: false,
        }
    }
}

impl PortSpec {
    /// `bridge` and `is_gateway` decide the name of the VLAN's gateway interface
    /// (`<bridge>.<vid>`, the reference's), which must fit an interface name.
    pub fn parse(map: &Map<String, Value>, bridge: &str, is_gateway: bool) -> Result<PortSpec> {
        let f = Fields(map);
        let vlan = match f.get("vlan") {
            None => None,
            Some(v) => match v.as_i64() {
                Some(0) => None,
                Some(id) if (1..=MAX_VID).contains(&id) => Some(id as u16),
                _ => {
                    return Err(Error::config(format!(
                        "invalid VLAN ID {v} (must be between 0 and {MAX_VID})"
                    )))
                }
            },
        };
        let trunk = match f.get("vlanTrunk") {
            None => Vec::new(),
            Some(Value::Array(items)) => collect_trunk(items)?,
            Some(other) => {
                return Err(Error::config(format!(
                "vlanTrunk must be a list of {{\"id\"}} or {{\"minID\", \"maxID\"}}, got {other}"
            )))
            }
        };
        if vlan.is_some() && !trunk.is_empty() {
            return Err(Error::config("cannot set vlan and vlanTrunk at the same time")
                .details("a port is either an access port of one VLAN (vlan) or a trunk of tagged VLANs (vlanTrunk), as in the reference plugin"));
        }
        if let (Some(vid), true) = (vlan, is_gateway) {
            let name = gateway_name(bridge, vid);
            if name.len() > 15 {
                return Err(Error::config(format!(
                    "the gateway interface of VLAN {vid}, {name}, is longer than 15 bytes"
                ))
                .details("with vlan and isGateway the gateway address goes on <bridge>.<vlan>, as in the reference plugin; use a shorter bridge name"));
            }
        }
        Ok(PortSpec {
            vlan,
            trunk,
            preserve_default_vlan: f.boolean("preserveDefaultVlan")?.unwrap_or(true),
            isolated: f.boolean("portIsolation")?.unwrap_or(false),
        })
    }

    /// The bridge must filter by VLAN. An empty `vlanTrunk` asks for no VLAN, so it
    /// does not turn filtering on (the reference would, for nothing).
    pub fn vlan_filtering(&self) -> bool {
        self.vlan.is_some() || !self.trunk.is_empty()
    }
}

/// The reference's name for the host interface that holds a VLAN's gateway address.
pub fn gateway_name(bridge: &str, vid: u16) -> String {
    format!("{bridge}.{vid}")
}

/// `vlanTrunk`'s ids and id ranges, as one sorted list without duplicates.
fn collect_trunk(items: &[Value]) -> Result<Vec<u16>> {
    let mut vids = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Value::Object(entry) = item else {
            return Err(Error::config(format!(
                "vlanTrunk[{i}] must be an object, got {item}"
            )));
        };
        let id = |key: &str| -> Result<Option<u16>> {
            match entry.get(key).filter(|v| !v.is_null()) {
                None => Ok(None),
                Some(v) => match v.as_i64() {
                    Some(n) if (1..=MAX_VID).contains(&n) => Ok(Some(n as u16)),
                    _ => Err(Error::config(format!(
                        "incorrect trunk {key} parameter {v} in vlanTrunk[{i}] (must be between 1 and {MAX_VID})"
                    ))),
                },
            }
        };
        match (id("minID")?, id("maxID")?) {
            (Some(min), Some(max)) if max < min => {
                return Err(Error::config(format!(
                    "minID {min} is greater than maxID {max} in vlanTrunk[{i}]"
                )))
            }
            (Some(min), Some(max)) => vids.extend(min..=max),
            (None, Some(_)) => {
                return Err(Error::config(format!(
                    "minID and maxID should be configured simultaneously, minID is missing in vlanTrunk[{i}]"
                )))
            }
            (Some(_), None) => {
                return Err(Error::config(format!(
                    "minID and maxID should be configured simultaneously, maxID is missing in vlanTrunk[{i}]"
                )))
            }
            (None, None) => {}
        }
        vids.extend(id("id")?);
    }
    vids.sort_unstable();
    vids.dedup();
    Ok(vids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> Result<PortSpec> {
        let text = format!("{{{extra}}}");
        let map: Map<String, Value> = serde_json::from_str(&text).unwrap();
        PortSpec::parse(&map, "cni0", false)
    }

    #[test]
    fn defaults_ask_for_nothing() {
        let s = spec("").unwrap();
        assert_eq!(s, PortSpec::default());
        assert!(s.preserve_default_vlan && !s.vlan_filtering() && !s.isolated);
        let s = spec(r#""vlan": 0, "vlanTrunk": [], "portIsolation": false"#).unwrap();
        assert_eq!(s, PortSpec::default());
    }

    #[test]
    fn vlan_is_an_access_port_of_1_to_4094() {
        let s = spec(r#""vlan": 10"#).unwrap();
        assert_eq!(s.vlan, Some(10));
        assert!(s.vlan_filtering());
        assert_eq!(spec(r#""vlan": 4094"#).unwrap().vlan, Some(4094));
        for bad in ["4095", "-1", "1.5", r#""10""#] {
            let err = spec(&format!(r#""vlan": {bad}"#)).unwrap_err();
            assert_eq!(err.code, 7, "{bad}: {err}");
            assert!(err.msg.contains("invalid VLAN ID"), "{bad}: {err}");
        }
    }

    #[test]
    fn trunk_ids_and_ranges_merge_sorted() {
        let s = spec(
            r#""vlanTrunk": [{"id": 42}, {"minID": 100, "maxID": 103}, {"id": 101}, {"id": 7}]"#,
        )
        .unwrap();
        assert_eq!(s.trunk, vec![7, 42, 100, 101, 102, 103]);
        assert!(s.vlan_filtering());
        // One entry may carry both a range and an id, as in the reference.
        let s = spec(r#""vlanTrunk": [{"minID": 5, "maxID": 6, "id": 9}]"#).unwrap();
        assert_eq!(s.trunk, vec![5, 6, 9]);
    }

    #[test]
    fn bad_trunks_are_refused_as_the_reference_refuses_them() {
        for (trunk, needle) in [
            (r#"[{"id": 0}]"#, "incorrect trunk id"),
            (r#"[{"id": 4095}]"#, "incorrect trunk id"),
            (r#"[{"minID": 0, "maxID": 5}]"#, "incorrect trunk minID"),
            (r#"[{"minID": 5, "maxID": 5000}]"#, "incorrect trunk maxID"),
            (r#"[{"minID": 9, "maxID": 5}]"#, "greater than maxID"),
            (r#"[{"maxID": 5}]"#, "minID is missing"),
            (r#"[{"minID": 5}]"#, "maxID is missing"),
            (r#"[5]"#, "must be an object"),
            (r#"{"id": 5}"#, "must be a list"),
        ] {
            let err = spec(&format!(r#""vlanTrunk": {trunk}"#)).unwrap_err();
            assert_eq!(err.code, 7, "{trunk}: {err}");
            assert!(err.msg.contains(needle), "{trunk}: {err}");
        }
    }

    #[test]
    fn vlan_and_trunk_together_are_refused() {
        let err = spec(r#""vlan": 5, "vlanTrunk": [{"id": 6}]"#).unwrap_err();
        assert!(err.msg.contains("vlan and vlanTrunk"), "{err}");
    }

    #[test]
    fn preserve_default_vlan_and_isolation_are_read() {
        let s = spec(r#""vlan": 3, "preserveDefaultVlan": false, "portIsolation": true"#).unwrap();
        assert!(!s.preserve_default_vlan && s.isolated);
        assert_eq!(spec(r#""portIsolation": "yes""#).unwrap_err().code, 7);
    }

    #[test]
    fn the_vlan_gateway_name_must_fit() {
        let map: Map<String, Value> = serde_json::from_str(r#"{"vlan": 4000}"#).unwrap();
        assert!(PortSpec::parse(&map, "cni0", true).is_ok());
        assert!(PortSpec::parse(&map, "a-long-bridge12", false).is_ok());
        let err = PortSpec::parse(&map, "a-long-bridge12", true).unwrap_err();
        assert!(err.msg.contains("a-long-bridge12.4000"), "{err}");
    }
}
