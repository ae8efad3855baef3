//! The node's IPv6 router advertisements, as `academy status` shows them below its
//! networks: the interfaces whose `accept_ra` academy raised before it turned IPv6
//! forwarding on (from its record), and any interface that learned from advertisements
//! and ignores them now (src/wire/forwarding.rs says why and when).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::leaks::format_age;
use crate::netlink::Netlink;
use crate::wire::forwarding::{self, Raised};

pub struct NodeAdvertisements {
    pub raised: Vec<Raised>,
    /// Interfaces that lost their advertisements: forwarding on, `accept_ra` 1.
    pub ignored_on: Result<Vec<String>, String>,
}

impl NodeAdvertisements {
    pub fn look() -> NodeAdvertisements {
        let ignored_on = Netlink::open()
            .map_err(crate::cni::Error::from)
            .and_then(|mut nl| forwarding::ignoring_advertisements(&mut nl))
            .map_err(|e| e.to_string());
        NodeAdvertisements {
            raised: forwarding::recorded(),
            ignored_on,
        }
    }

    /// `ipv6RouterAdvertisements` of `academy status --json`.
    pub fn to_json(&self) -> Value {
        let (ignored_on, error) = match &self.ignored_on {
            Ok(names) => (json!(names), Value::Null),
            Err(e) => (Value::Null, json!(e)),
        };
        json!({
            "acceptRaRaised": self.raised.iter().map(|r| json!({
                "interface": r.interface, "from": r.from, "to": r.to, "at": r.at,
            })).collect::<Vec<_>>(),
            "ignoredOn": ignored_on,
            "ignoredOnError": error,
        })
    }

    /// The text form's lines, none when there is nothing to say.
    pub fn lines(&self, now: SystemTime) -> String {
        let mut out = String::new();
        for r in &self.raised {
            let ago = now
                .duration_since(UNIX_EPOCH + Duration::from_secs(r.at))
                .unwrap_or_default();
            out.push_str(&format!(
                "node: accept_ra of {} raised {} -> {} by academy {} ago, before it turned IPv6 forwarding on, so that {} keeps its router advertisements\n",
                r.interface, r.from, r.to, format_age(ago), r.interface
            ));
        }
        match &self.ignored_on {
            Ok(names) => {
                for name in names {
                    out.push_str(&format!(
                        "node: {name} ignores router advertisements (IPv6 forwarding on, accept_ra 1): the default route it learned is gone, its prefixes and addresses go when their lifetimes run out; `sysctl -w net.ipv6.conf.{name}.accept_ra=2` makes it listen again\n"
                    ));
                }
            }
            Err(e) => out.push_str(&format!(
                "node: cannot tell which interfaces ignore router advertisements: {e}\n"
            )),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_lines_name_what_was_raised_and_what_ignores() {
        let look = NodeAdvertisements {
            raised: vec![Raised {
                interface: "eth0".into(),
                index: 2,
                from: 1,
                to: 2,
                at: 1000,
            }],
            ignored_on: Ok(vec!["eth1".into()]),
        };
        let text = look.lines(UNIX_EPOCH + Duration::from_secs(1090));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("node: accept_ra of eth0 raised 1 -> 2 by academy 1m30s ago"),
            "{text}"
        );
        assert!(lines[1].starts_with("node: eth1 ignores router advertisements"));
        assert_eq!(
            look.to_json(),
            json!({
                "acceptRaRaised": [{"interface": "eth0", "from": 1, "to": 2, "at": 1000}],
                "ignoredOn": ["eth1"],
                "ignoredOnError": null,
            })
        );
        let quiet = NodeAdvertisements {
            raised: Vec::new(),
            ignored_on: Ok(Vec::new()),
        };
        assert_eq!(quiet.lines(UNIX_EPOCH), "");
    }
}
