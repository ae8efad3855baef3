//! Traffic shaping, as the reference `bandwidth` plugin reads it: its four keys in
//! academy's own entry (`ingressRate`, `ingressBurst`, `egressRate`, `egressBurst`), or
//! the `bandwidth` capability's `runtimeConfig.bandwidth` object with the same four keys.
//! Rates are in bits per second, bursts in bits; ingress is traffic to the container,
//! egress traffic from it. 0 (or absent) means no limit in that direction.
//!
//! As the reference (plugins/meta/bandwidth/main.go, getBandwidth): the entry's keys win
//! when any of the four is there, else runtimeConfig's. runtimeConfig.bandwidth is taken
//! only when the entry declares `"capabilities": {"bandwidth": true}`, as libcni passes
//! it only then (the same rule as portMappings). The reference's validation
//! (validateRateAndBurst), with its texts: a rate needs a burst and a burst a rate, and
//! a burst of 4 GB (2^32 - 1 bytes) or more is refused. academy also refuses a rate below
//! 8 bit/s, which the reference turns into a zero byte rate and a division by zero.

use serde_json::{Map, Value};

use crate::cni::{Error, Result};

const KEYS: [&str; 4] = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"];

/// One direction's limit: a token bucket of `burst` bits filled at `rate` bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub rate: u64,
    pub burst: u64,
}

/// The shaping an attachment gets; at least one direction is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bandwidth {
    /// To the container: a TBF on its host veth's egress.
    pub ingress: Option<Shape>,
    /// From the container: redirected from its host veth's ingress to an ifb, shaped there.
    pub egress: Option<Shape>,
}

/// Whether the entry may shape its attachments at all (the capability is declared or one
/// of the keys is set): then DEL, GC and reclaim look for an attachment's ifb.
pub fn declared(map: &Map<String, Value>) -> bool {
    let capability = map
        .get("capabilities")
        .and_then(|c| c.get("bandwidth"))
        .and_then(Value::as_bool)
        == Some(true);
    capability
        || KEYS
            .iter()
            .any(|k| map.get(*k).is_some_and(|v| !v.is_null()))
}

/// The shaping asked for, validated; None when nothing is limited.
pub fn from_config(map: &Map<String, Value>) -> Result<Option<Bandwidth>> {
    let own = KEYS
        .iter()
        .any(|k| map.get(*k).is_some_and(|v| !v.is_null()));
    let capability = map
        .get("capabilities")
        .and_then(|c| c.get("bandwidth"))
        .and_then(Value::as_bool)
        == Some(true);
    let (source, prefix) = if own {
        (map, "")
    } else {
        match map
            .get("runtimeConfig")
            .and_then(|r| r.get("bandwidth"))
            .filter(|v| capability && !v.is_null())
        {
            None => return Ok(None),
            Some(Value::Object(o)) => (o, "runtimeConfig.bandwidth."),
            Some(other) => {
                return Err(Error::config(format!(
                    "runtimeConfig.bandwidth must be an object, got {other}"
                )))
            }
        }
    };
    let number = |key: &str| -> Result<u64> {
        match source.get(key).filter(|v| !v.is_null()) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or_else(|| {
                Error::config(format!(
                    "{prefix}{key} must be a whole number of bits (per second), 0 or more, got {v}"
                ))
            }),
        }
    };
    let mut directions = [None, None];
    for (slot, dir) in directions.iter_mut().zip(["ingress", "egress"]) {
        let (rate_key, burst_key) = (format!("{dir}Rate"), format!("{dir}Burst"));
        let (rate, burst) = (number(&rate_key)?, number(&burst_key)?);
        let field = |k: &str| format!("{prefix}{k}");
        match (rate, burst) {
            (0, 0) => {}
            (r, 0) => {
                return Err(Error::config(format!(
                    "{} is {r} but {} is not set: if rate is set, burst must also be set",
                    field(&rate_key),
                    field(&burst_key)
                )))
            }
            (0, b) => {
                return Err(Error::config(format!(
                    "{} is {b} but {} is not set: if burst is set, rate must also be set",
                    field(&burst_key),
                    field(&rate_key)
                )))
            }
            (_, b) if b / 8 >= u64::from(u32::MAX) => {
                return Err(Error::config(format!(
                    "{} is {b}: burst cannot be more than 4GB",
                    field(&burst_key)
                ))
                .details("the burst is in bits; the kernel holds it in a 32-bit count of bytes"))
            }
            (r, _) if r < 8 => {
                return Err(Error::config(format!(
                    "{} is {r}: the rate is in bits per second and must be at least 8 (one byte)",
                    field(&rate_key)
                )))
            }
            (rate, burst) => *slot = Some(Shape { rate, burst }),
        }
    }
    let [ingress, egress] = directions;
    Ok((ingress.is_some() || egress.is_some()).then_some(Bandwidth { ingress, egress }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Option<Bandwidth>> {
        let v: Value = serde_json::from_str(json).unwrap();
        from_config(v.as_object().unwrap())
    }

    const RUNTIME: &str = r#""capabilities":{"bandwidth":true},"runtimeConfig":{"bandwidth""#;

    #[test]
    fn keys_of_the_entry_and_the_capability() {
        let own = parse(r#"{"ingressRate":8000000,"ingressBurst":80000}"#).unwrap();
        assert_eq!(
            own,
            Some(Bandwidth {
                ingress: Some(Shape {
                    rate: 8_000_000,
                    burst: 80_000
                }),
                egress: None
            })
        );
        let runtime = parse(&format!(
            r#"{{{RUNTIME}:{{"egressRate":1000,"egressBurst":9000}}}}}}"#
        ))
        .unwrap();
        assert_eq!(
            runtime.unwrap().egress,
            Some(Shape {
                rate: 1000,
                burst: 9000
            })
        );
        // The entry's keys win over runtimeConfig, as the reference's getBandwidth.
        let both = parse(&format!(
            r#"{{"egressRate":5000,"egressBurst":6000,{RUNTIME}:{{"egressRate":1000,"egressBurst":9000}}}}}}"#
        ))
        .unwrap();
        assert_eq!(both.unwrap().egress.unwrap().rate, 5000);
        // Without the capability, runtimeConfig.bandwidth is not academy's.
        assert_eq!(
            parse(r#"{"runtimeConfig":{"bandwidth":{"egressRate":1000,"egressBurst":9000}}}"#)
                .unwrap(),
            None
        );
        // All zero: no shaping.
        assert_eq!(
            parse(r#"{"ingressRate":0,"ingressBurst":0}"#).unwrap(),
            None
        );
    }

    #[test]
    fn the_reference_s_refusals_with_its_texts() {
        for (json, text) in [
            (
                r#"{"ingressRate":8000}"#,
                "if rate is set, burst must also be set",
            ),
            (
                r#"{"egressBurst":8000}"#,
                "if burst is set, rate must also be set",
            ),
            (
                r#"{"egressRate":8000,"egressBurst":34359738360}"#,
                "burst cannot be more than 4GB",
            ),
            (r#"{"egressRate":7,"egressBurst":8000}"#, "at least 8"),
            (
                r#"{"egressRate":-1,"egressBurst":8000}"#,
                "must be a whole number",
            ),
            (
                r#"{"egressRate":1.5,"egressBurst":8000}"#,
                "must be a whole number",
            ),
        ] {
            let e = parse(json).unwrap_err();
            assert_eq!(e.code, 7, "{json}");
            assert!(e.msg.contains(text), "{json}: {}", e.msg);
        }
        // Just under the limit passes.
        assert!(parse(r#"{"egressRate":8000,"egressBurst":34359738352}"#).is_ok());
        let e = parse(&format!(r#"{{{RUNTIME}:{{"ingressRate":9}}}}}}"#)).unwrap_err();
        assert!(
            e.msg.contains("runtimeConfig.bandwidth.ingressRate"),
            "{}",
            e.msg
        );
    }
}
