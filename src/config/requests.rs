//! What the runtime asks for beyond the network config: fixed addresses and a MAC, by the
//! conventions runtimes use (CONVENTIONS.md): `runtimeConfig` (capabilities `ips`, `mac`,
//! `ipRanges`), `args.cni` (`ips`, `mac`) and CNI_ARGS (`IP=`, `MAC=`, which podman's
//! --ip and --mac-address use).

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::cni::{code, Error, Result};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requests {
    /// Fixed addresses, at most one per range set.
    pub ips: Vec<IpAddr>,
    pub mac: Option<[u8; 6]>,
    /// runtimeConfig.ipRanges, in host-local's range-set form.
    pub ip_ranges: Option<Value>,
}

impl Requests {
    pub fn from_config(map: &Map<String, Value>) -> Result<Requests> {
        let mut req = Requests::default();
        let args = map.get("args").and_then(|a| a.get("cni"));
        let runtime = map.get("runtimeConfig");
        // host-local appends in this order; duplicates are dropped.
        for (source, value) in [
            ("args.cni.ips", args.and_then(|a| a.get("ips"))),
            ("runtimeConfig.ips", runtime.and_then(|r| r.get("ips"))),
        ] {
            let Some(value) = value.filter(|v| !v.is_null()) else {
                continue;
            };
            let list = value
                .as_array()
                .ok_or_else(|| Error::config(format!("{source} must be a list, got {value}")))?;
            for item in list {
                let text = item.as_str().ok_or_else(|| {
                    Error::config(format!("{source} entries must be strings, got {item}"))
                })?;
                req.add_ip(parse_ip(text, source, code::INVALID_CONFIG)?);
            }
        }
        // The bridge plugin's precedence: runtimeConfig over args (over CNI_ARGS).
        for (source, value) in [
            ("runtimeConfig.mac", runtime.and_then(|r| r.get("mac"))),
            ("args.cni.mac", args.and_then(|a| a.get("mac"))),
        ] {
            if let Some(text) = value.and_then(Value::as_str).filter(|s| !s.is_empty()) {
                req.mac = Some(
                    parse_mac(text)
                        .map_err(|why| Error::config(format!("{source} {text:?} {why}")))?,
                );
                break;
            }
        }
        req.ip_ranges = runtime
            .and_then(|r| r.get("ipRanges"))
            .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            .cloned();
        Ok(req)
    }

    /// Adds CNI_ARGS's `IP=` (comma-separated) and `MAC=`. Other keys are the runtime's
    /// business (K8S_POD_NAME, IgnoreUnknown, ...) and are ignored, whatever bytes they
    /// hold: CNI_ARGS is read as bytes, so a non-UTF-8 pod name cannot make academy drop
    /// the IP= beside it. An IP= or MAC= that is not UTF-8 is code 4, never skipped.
    pub fn with_cni_args(mut self, cni_args: impl AsRef<[u8]>) -> Result<Requests> {
        let mut from_env = Vec::new();
        for pair in cni_args
            .as_ref()
            .split(|&b| b == b';')
            .filter(|p| !p.is_empty())
        {
            let Some(eq) = pair.iter().position(|&b| b == b'=') else {
                return Err(Error::env(format!(
                    "CNI_ARGS item {:?} is not KEY=VALUE",
                    String::from_utf8_lossy(pair)
                )));
            };
            let (key, value) = (&pair[..eq], &pair[eq + 1..]);
            let text = || {
                std::str::from_utf8(value).map_err(|_| {
                    Error::env(format!(
                        "CNI_ARGS {} {:?} is not valid UTF-8",
                        String::from_utf8_lossy(key),
                        String::from_utf8_lossy(value)
                    ))
                    .details("academy honours IP= and MAC= or fails; it never drops them")
                })
            };
            match key {
                b"IP" => {
                    for item in text()?.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        from_env.push(parse_ip(item, "CNI_ARGS IP", code::INVALID_ENVIRONMENT)?);
                    }
                }
                b"MAC" if self.mac.is_none() => {
                    let value = text()?;
                    self.mac = Some(
                        parse_mac(value)
                            .map_err(|why| Error::env(format!("CNI_ARGS MAC {value:?} {why}")))?,
                    );
                }
                _ => {}
            }
        }
        // CNI_ARGS come first in host-local's order.
        let later = std::mem::take(&mut self.ips);
        for ip in from_env.into_iter().chain(later) {
            self.add_ip(ip);
        }
        Ok(self)
    }

    fn add_ip(&mut self, ip: IpAddr) {
        if !self.ips.contains(&ip) {
            self.ips.push(ip);
        }
    }
}

/// An address, with or without a prefix (runtimes send both; the range decides the prefix).
fn parse_ip(text: &str, source: &str, code: u32) -> Result<IpAddr> {
    text.parse::<IpAddr>()
        .or_else(|_| text.parse::<IpNetwork>().map(|n| n.ip()))
        .map_err(|_| Error::new(code, format!("{source} {text:?} is not an IP address")))
}

/// "aa:bb:cc:dd:ee:ff" (or with '-'); must be a unicast MAC.
pub fn parse_mac(text: &str) -> std::result::Result<[u8; 6], &'static str> {
    let parts: Vec<&str> = text.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err("is not a MAC address (six hex bytes like 02:42:ac:11:00:02)");
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(&parts) {
        if part.len() != 2 {
            return Err("is not a MAC address (six hex bytes like 02:42:ac:11:00:02)");
        }
        *byte = u8::from_str_radix(part, 16)
            .map_err(|_| "is not a MAC address (six hex bytes like 02:42:ac:11:00:02)")?;
    }
    if mac[0] & 1 == 1 {
        return Err("is a multicast MAC address; an interface needs a unicast one");
    }
    if mac == [0; 6] {
        return Err("is the all-zero MAC address");
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn from(json: &str) -> Result<Requests> {
        let v: Value = serde_json::from_str(json).unwrap();
        Requests::from_config(v.as_object().unwrap())
    }

    #[test]
    fn ips_from_every_source_in_host_local_order() {
        let r = from(r#"{"args":{"cni":{"ips":["10.0.0.5"]}},"runtimeConfig":{"ips":["10.0.0.6/24","10.0.0.5"]}}"#)
            .unwrap()
            .with_cni_args("IgnoreUnknown=1;IP=10.0.0.7,fd00::7;K8S_POD_NAME=x")
            .unwrap();
        let want: Vec<IpAddr> = ["10.0.0.7", "fd00::7", "10.0.0.5", "10.0.0.6"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(r.ips, want);
    }

    #[test]
    fn mac_precedence_runtime_config_then_args_then_cni_args() {
        let r = from(r#"{"args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:01"}}"#)
            .unwrap()
            .with_cni_args("MAC=02:00:00:00:00:03")
            .unwrap();
        assert_eq!(r.mac, Some([2, 0, 0, 0, 0, 1]));
        let r = from("{}")
            .unwrap()
            .with_cni_args("MAC=02-00-00-00-00-03")
            .unwrap();
        assert_eq!(r.mac, Some([2, 0, 0, 0, 0, 3]));
    }

    #[test]
    fn bad_requests_are_clear_errors() {
        assert_eq!(
            from(r#"{"runtimeConfig":{"ips":["nope"]}}"#)
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(
            from(r#"{"runtimeConfig":{"mac":"01:00:00:00:00:01"}}"#)
                .unwrap_err()
                .code,
            7
        );
        let e = from("{}")
            .unwrap()
            .with_cni_args("IP=300.1.1.1")
            .unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("CNI_ARGS IP"));
        // Bytes that are not UTF-8: ignored in other keys, refused in IP= and MAC=.
        let r = from("{}")
            .unwrap()
            .with_cni_args(b"POD=\xff;IP=10.0.0.9;MAC=02:00:00:00:00:09")
            .unwrap();
        assert_eq!(r.ips, [ip("10.0.0.9")]);
        assert_eq!(r.mac, Some([2, 0, 0, 0, 0, 9]));
        for bad in [&b"IP=10.0.0.9\xff"[..], b"MAC=\xfe02:00:00:00:00:09"] {
            let e = from("{}").unwrap().with_cni_args(bad).unwrap_err();
            assert_eq!(e.code, 4);
            assert!(e.msg.contains("CNI_ARGS"), "{}", e.msg);
        }
        assert_eq!(
            from("{}")
                .unwrap()
                .with_cni_args("garbage")
                .unwrap_err()
                .code,
            4
        );
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("00:00:00:00:00:00").is_err());
    }
}
