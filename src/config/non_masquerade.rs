//! `nonMasqueradeCIDRs`: academy's own key beside `ipMasq`, the destinations a
//! masqueraded container's traffic keeps its own source address to (beside the
//! network's own subnets and multicast): other nodes' pod CIDRs, the cluster CIDR, as
//! kubenet's `--non-masquerade-cidr` and ip-masq-agent's `nonMasqueradeCIDRs` say it.

use ipnetwork::IpNetwork;
use serde_json::Value;

use super::ranges::parse_subnet;
use super::Fields;
use crate::cni::{Error, Result};

pub const KEY: &str = "nonMasqueradeCIDRs";

/// At most this many prefixes per family. Each is two expressions of the masquerade
/// rule (a bitwise and a cmp, about 115 bytes on the wire), and the kernel takes at most
/// 128 expressions in a rule (NFT_RULE_MAXEXPRS; 60 prefixes were refused with EINVAL
/// here). 32 leaves room for the network's own subnets. A rule this long is larger than
/// a page, which a socket's first dump would silently leave out: academy's dumps never
/// come first on a socket (`NlSocket::has_received`; 40 prefixes with a 128-character
/// network name read back here).
pub const MAX_PER_FAMILY: usize = 32;

/// The list, each entry a prefix with its length and without host bits, in the order
/// given, exact repeats dropped. An empty list (or none) asks for nothing; a non-empty
/// one needs `ipMasq`: without a masquerade there is nothing to leave alone, and a
/// config saying so is a mistake worth naming.
pub(super) fn parse(f: &Fields, ip_masq: bool) -> Result<Vec<IpNetwork>> {
    let Some(value) = f.get(KEY) else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = value else {
        return Err(Error::config(format!(
            "{KEY} must be a list of CIDRs (e.g. [\"10.244.0.0/16\"]), got {value}"
        )));
    };
    let mut out: Vec<IpNetwork> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let field = format!("{KEY}[{i}]");
        let Value::String(text) = item else {
            return Err(Error::config(format!(
                "{field} must be a string CIDR, got {item}"
            )));
        };
        if !text.contains('/') {
            return Err(Error::config(format!(
                "{field} {text:?} is not a CIDR: it needs a prefix length (e.g. \"{text}/32\")"
            )));
        }
        let prefix = parse_subnet(text, &field)?;
        if !out.contains(&prefix) {
            out.push(prefix);
        }
    }
    for (family, v4) in [("IPv4", true), ("IPv6", false)] {
        let n = out.iter().filter(|p| p.is_ipv4() == v4).count();
        if n > MAX_PER_FAMILY {
            return Err(Error::config(format!(
                "{KEY} has {n} {family} prefixes; at most {MAX_PER_FAMILY} per family"
            ))
            .details("each is one comparison in the masquerade rule, whose length the kernel limits; merge them into shorter prefixes (the cluster CIDR rather than each node's pod CIDR)"));
        }
    }
    if !out.is_empty() && !ip_masq {
        return Err(Error::config(format!("{KEY} needs ipMasq")).details(
            "the list names destinations the masquerade leaves alone; add \"ipMasq\": true, or remove the list",
        ));
    }
    Ok(out)
}
