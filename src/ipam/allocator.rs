//! What may be handed out, and in which order. No I/O here, so every rule about excluded
//! addresses and wrap-around can be tested without a disk.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

use crate::cni::{Error, Result};

/// An allocatable range: a subnet, optionally narrowed by rangeStart/rangeEnd, minus the
/// network address, the IPv4 broadcast address and the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    subnet: IpNetwork,
    gateway: Option<IpAddr>,
    v6: bool,
    /// First and last allocatable position (inclusive), already clamped to exclude the
    /// network and broadcast addresses, so only the gateway needs skipping while iterating.
    first: u128,
    last: u128,
    gateway_pos: Option<u128>,
    range_set: usize,
}

fn to_u128(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(v6: bool, pos: u128) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(pos))
    } else {
        IpAddr::V4(Ipv4Addr::from(pos as u32))
    }
}

fn family(addr: IpAddr) -> &'static str {
    if addr.is_ipv6() {
        "IPv6"
    } else {
        "IPv4"
    }
}

impl Pool {
    /// Validates like host-local's `Canonicalize`: every error is code 7 and names the
    /// offending field and value, since it comes straight from the network config.
    pub fn new(
        subnet: IpNetwork,
        gateway: Option<IpAddr>,
        range_start: Option<IpAddr>,
        range_end: Option<IpAddr>,
    ) -> Result<Pool> {
        let v6 = subnet.is_ipv6();
        let prefix = subnet.prefix();
        let (bits, label) = if v6 { (128u32, "IPv6") } else { (32, "IPv4") };
        // With /31 or /32 (/127, /128) nothing is left once network, broadcast and gateway
        // are taken out; host-local refuses them too.
        if u32::from(prefix) >= bits - 1 {
            return Err(Error::config(format!(
                "subnet {subnet} is too small to allocate from: {label} /{} and /{bits} leave no address besides the network{} and gateway",
                bits - 1,
                if v6 { "" } else { ", broadcast" },
            ))
            .details(format!("use a /{} or larger subnet", bits - 2)));
        }
        if subnet.ip() != subnet.network() {
            return Err(Error::config(format!(
                "subnet {subnet} has host bits set; the network address for /{prefix} is {}",
                subnet.network()
            ))
            .details(format!("write the subnet as {}/{prefix}", subnet.network())));
        }

        let net = to_u128(subnet.network());
        let top = to_u128(subnet.broadcast());
        // IPv6 has no broadcast, but its network address is the subnet-router anycast
        // address, which must not go to a container either.
        let usable_first = net + 1;
        let usable_last = if v6 { top } else { top - 1 };

        let check = |field: &str, addr: IpAddr| -> Result<u128> {
            if addr.is_ipv6() != v6 {
                return Err(Error::config(format!(
                    "{field} {addr} is {} but subnet {subnet} is {label}",
                    family(addr)
                )));
            }
            if !subnet.contains(addr) {
                return Err(
                    Error::config(format!("{field} {addr} is not inside subnet {subnet}")).details(
                        format!(
                            "pick a {field} between {} and {}",
                            subnet.network(),
                            subnet.broadcast()
                        ),
                    ),
                );
            }
            Ok(to_u128(addr))
        };

        let gateway_pos = gateway.map(|g| check("gateway", g)).transpose()?;
        // Both config forms and runtimeConfig.ipRanges come through here, so this is the
        // one place that keeps a gateway off the network and broadcast addresses (the
        // kernel would refuse it, or the container would route via the network address).
        if let Some(g) = gateway_pos {
            let what = if g == net {
                Some("network address")
            } else if !v6 && g == top {
                Some("broadcast address")
            } else {
                None
            };
            if let Some(what) = what {
                return Err(Error::config(format!(
                    "gateway {} is the {what} of subnet {subnet}",
                    from_u128(v6, g)
                ))
                .details("a gateway must be a host address of the subnet, e.g. its first"));
            }
        }
        let start = range_start.map(|a| check("rangeStart", a)).transpose()?;
        let end = range_end.map(|a| check("rangeEnd", a)).transpose()?;
        if let (Some(s), Some(e)) = (start, end) {
            if s > e {
                return Err(Error::config(format!(
                    "rangeStart {} is after rangeEnd {}",
                    from_u128(v6, s),
                    from_u128(v6, e)
                ))
                .details("swap them, or drop one to use the subnet's edge"));
            }
        }

        let first = start.unwrap_or(usable_first).max(usable_first);
        let last = end.unwrap_or(usable_last).min(usable_last);
        let pool = Pool {
            subnet,
            gateway,
            v6,
            first,
            last,
            gateway_pos,
            range_set: 0,
        };
        if first > last || pool.size() == 0 {
            return Err(Error::config(format!(
                "range {} of subnet {subnet} holds no allocatable address",
                pool.range_text()
            ))
            .details(
                "the network address, the IPv4 broadcast address and the gateway are never handed out; widen rangeStart/rangeEnd",
            ));
        }
        Ok(pool)
    }

    /// Which range set of the network this pool is, as in host-local. Only the hint file
    /// name depends on it (`last_reserved_ip.<n>`), so that a dual-stack network's IPv4 and
    /// IPv6 pools do not overwrite each other's round-robin position.
    pub fn with_range_set(mut self, index: usize) -> Pool {
        self.range_set = index;
        self
    }

    pub fn range_set(&self) -> usize {
        self.range_set
    }

    pub fn subnet(&self) -> IpNetwork {
        self.subnet
    }

    pub fn gateway(&self) -> Option<IpAddr> {
        self.gateway
    }

    /// First allocatable address (rangeStart, or the one after the network address).
    pub fn first(&self) -> IpAddr {
        from_u128(self.v6, self.first)
    }

    /// Last allocatable address (rangeEnd, or the one before the IPv4 broadcast address).
    pub fn last(&self) -> IpAddr {
        from_u128(self.v6, self.last)
    }

    /// Number of addresses this pool can hand out.
    pub fn size(&self) -> u128 {
        // Cannot overflow: `first` is at least the network address + 1.
        let span = self.last - self.first + 1;
        match self.gateway_pos {
            Some(g) if (self.first..=self.last).contains(&g) => span - 1,
            _ => span,
        }
    }

    /// Whether `addr` is one this pool may hand out.
    pub fn contains(&self, addr: IpAddr) -> bool {
        self.check(addr).is_ok()
    }

    /// Why `addr` cannot be handed out from this pool, for a requested-address error.
    pub fn check(&self, addr: IpAddr) -> std::result::Result<(), String> {
        let subnet = self.subnet;
        if addr.is_ipv6() != self.v6 || !subnet.contains(addr) {
            return Err(format!("it is outside subnet {subnet}"));
        }
        let pos = to_u128(addr);
        if pos == to_u128(subnet.network()) {
            return Err(format!("it is the network address of {subnet}"));
        }
        if !self.v6 && pos == to_u128(subnet.broadcast()) {
            return Err(format!("it is the broadcast address of {subnet}"));
        }
        if Some(pos) == self.gateway_pos {
            return Err(format!("it is the gateway of {subnet}"));
        }
        if pos < self.first || pos > self.last {
            return Err(format!(
                "it is outside the allocatable range {} of {subnet}",
                self.range_text()
            ));
        }
        Ok(())
    }

    /// `first-last`, for messages.
    pub fn range_text(&self) -> String {
        format!(
            "{}-{}",
            from_u128(self.v6, self.first),
            from_u128(self.v6, self.last)
        )
    }

    /// Every allocatable address once, starting right after `hint` and wrapping at the
    /// range end. A hint of the wrong family or outside the range is ignored (the search
    /// starts at the range start): the hint file is only advisory.
    pub fn candidates(&self, hint: Option<IpAddr>) -> Candidates<'_> {
        let next = match hint {
            Some(h) if h.is_ipv6() == self.v6 => {
                let pos = to_u128(h);
                if pos >= self.first && pos < self.last {
                    pos + 1
                } else {
                    // Outside the range, or exactly the last address: wrap to the start.
                    self.first
                }
            }
            _ => self.first,
        };
        Candidates {
            pool: self,
            next,
            left: self.last - self.first + 1,
        }
    }
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (range {}", self.subnet, self.range_text())?;
        if let Some(g) = self.gateway {
            write!(f, ", gateway {g}")?;
        }
        write!(f, ")")
    }
}

/// See [`Pool::candidates`].
#[derive(Debug, Clone)]
pub struct Candidates<'a> {
    pool: &'a Pool,
    next: u128,
    /// Positions (not addresses) still to visit; the gateway is one of them when in range.
    left: u128,
}

impl Iterator for Candidates<'_> {
    type Item = IpAddr;

    fn next(&mut self) -> Option<IpAddr> {
        while self.left > 0 {
            let pos = self.next;
            self.left -= 1;
            self.next = if pos == self.pool.last {
                self.pool.first
            } else {
                pos + 1
            };
            if Some(pos) != self.pool.gateway_pos {
                return Some(from_u128(self.pool.v6, pos));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::code;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pool(subnet: &str, gw: Option<&str>, start: Option<&str>, end: Option<&str>) -> Pool {
        Pool::new(
            subnet.parse().unwrap(),
            gw.map(ip),
            start.map(ip),
            end.map(ip),
        )
        .unwrap()
    }

    fn all(p: &Pool, hint: Option<&str>) -> Vec<String> {
        p.candidates(hint.map(ip)).map(|a| a.to_string()).collect()
    }

    #[test]
    fn excludes_network_broadcast_gateway() {
        let p = pool("10.98.1.0/29", Some("10.98.1.1"), None, None);
        assert_eq!(
            all(&p, None),
            [
                "10.98.1.2",
                "10.98.1.3",
                "10.98.1.4",
                "10.98.1.5",
                "10.98.1.6"
            ]
        );
        assert_eq!(p.size(), 5);
        for bad in [
            "10.98.1.0",
            "10.98.1.1",
            "10.98.1.7",
            "10.98.2.2",
            "fd00::2",
        ] {
            assert!(!p.contains(ip(bad)), "{bad}");
        }
    }

    #[test]
    fn slash30_has_one_address_with_gateway() {
        let p = pool("10.0.0.0/30", Some("10.0.0.1"), None, None);
        assert_eq!(all(&p, None), ["10.0.0.2"]);
        assert_eq!(p.size(), 1);
    }

    #[test]
    fn gateway_in_the_middle_is_skipped() {
        let p = pool("10.0.0.0/29", Some("10.0.0.4"), None, None);
        assert_eq!(
            all(&p, None),
            ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5", "10.0.0.6"]
        );
    }

    #[test]
    fn range_edges_are_inclusive() {
        let p = pool(
            "10.0.0.0/24",
            Some("10.0.0.1"),
            Some("10.0.0.10"),
            Some("10.0.0.12"),
        );
        assert_eq!(all(&p, None), ["10.0.0.10", "10.0.0.11", "10.0.0.12"]);
        assert!(p.contains(ip("10.0.0.10")) && p.contains(ip("10.0.0.12")));
        assert!(!p.contains(ip("10.0.0.9")) && !p.contains(ip("10.0.0.13")));
        assert_eq!(p.size(), 3);
    }

    #[test]
    fn range_touching_network_and_broadcast_is_clamped() {
        let p = pool("10.0.0.0/29", None, Some("10.0.0.0"), Some("10.0.0.7"));
        assert_eq!(p.first(), ip("10.0.0.1"));
        assert_eq!(p.last(), ip("10.0.0.6"));
        assert_eq!(p.size(), 6);
    }

    #[test]
    fn round_robin_starts_after_hint_and_wraps() {
        let p = pool("10.98.1.0/29", Some("10.98.1.1"), None, None);
        assert_eq!(
            all(&p, Some("10.98.1.4")),
            [
                "10.98.1.5",
                "10.98.1.6",
                "10.98.1.2",
                "10.98.1.3",
                "10.98.1.4"
            ]
        );
        // Hint on the last address wraps to the start at once.
        assert_eq!(all(&p, Some("10.98.1.6"))[0], "10.98.1.2");
        // Hint outside the range, on the gateway, or of the other family.
        assert_eq!(all(&p, Some("10.98.9.9"))[0], "10.98.1.2");
        assert_eq!(all(&p, Some("10.98.1.7"))[0], "10.98.1.2");
        assert_eq!(all(&p, Some("10.98.1.1"))[0], "10.98.1.2");
        assert_eq!(all(&p, Some("fd00::3"))[0], "10.98.1.2");
        assert_eq!(all(&p, Some("10.98.1.4")).len(), 5);
    }

    #[test]
    fn ipv6_skips_anycast_keeps_last() {
        let p = pool("fd00::/126", Some("fd00::1"), None, None);
        assert_eq!(all(&p, None), ["fd00::2", "fd00::3"]);
        let big = pool("fd00:1::/64", Some("fd00:1::1"), None, None);
        assert_eq!(big.size(), (1u128 << 64) - 2);
        let first: Vec<_> = big.candidates(None).take(2).collect();
        assert_eq!(first, [ip("fd00:1::2"), ip("fd00:1::3")]);
        assert!(!big.contains(ip("fd00:1::")));
    }

    #[test]
    fn whole_ipv6_space_does_not_overflow() {
        let p = pool("::/0", None, None, None);
        assert_eq!(p.size(), u128::MAX);
        assert_eq!(
            p.candidates(Some(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")))
                .next(),
            Some(ip("::1"))
        );
    }

    #[test]
    fn config_errors_are_code_7_and_name_the_field() {
        let err = |s: &str, g: Option<&str>, a: Option<&str>, b: Option<&str>| {
            let e = Pool::new(s.parse().unwrap(), g.map(ip), a.map(ip), b.map(ip)).unwrap_err();
            assert_eq!(e.code, code::INVALID_CONFIG, "{e}");
            e.msg
        };
        assert!(err("10.0.0.0/31", None, None, None).contains("10.0.0.0/31"));
        assert!(err("10.0.0.0/32", None, None, None).contains("too small"));
        assert!(err("fd00::/127", None, None, None).contains("too small"));
        assert!(err("fd00::/128", None, None, None).contains("too small"));
        assert!(err("10.0.0.5/24", None, None, None).contains("host bits"));
        assert_eq!(
            err("10.0.0.0/24", None, Some("10.0.1.5"), None),
            "rangeStart 10.0.1.5 is not inside subnet 10.0.0.0/24"
        );
        assert!(err("10.0.0.0/24", None, None, Some("10.0.1.5")).starts_with("rangeEnd 10.0.1.5"));
        assert!(err("10.0.0.0/24", Some("10.9.0.1"), None, None).starts_with("gateway 10.9.0.1"));
        assert!(err("10.0.0.0/24", Some("fd00::1"), None, None).contains("IPv6"));
        assert!(
            err("10.0.0.0/24", None, Some("10.0.0.9"), Some("10.0.0.3")).contains("after rangeEnd")
        );
        assert!(err(
            "10.0.0.0/24",
            Some("10.0.0.5"),
            Some("10.0.0.5"),
            Some("10.0.0.5")
        )
        .contains("no allocatable"));
        // The gateway must be a host address, as in the flat form.
        assert_eq!(
            err("10.0.0.0/24", Some("10.0.0.0"), None, None),
            "gateway 10.0.0.0 is the network address of subnet 10.0.0.0/24"
        );
        assert!(err("10.0.0.0/24", Some("10.0.0.255"), None, None).contains("broadcast address"));
        assert!(err("fd00::/64", Some("fd00::"), None, None).contains("network address"));
    }

    #[test]
    fn check_says_why() {
        let p = pool(
            "10.0.0.0/24",
            Some("10.0.0.1"),
            Some("10.0.0.10"),
            Some("10.0.0.20"),
        );
        assert!(p
            .check(ip("10.0.0.0"))
            .unwrap_err()
            .contains("network address"));
        assert!(p.check(ip("10.0.0.255")).unwrap_err().contains("broadcast"));
        assert!(p.check(ip("10.0.0.1")).unwrap_err().contains("gateway"));
        assert!(p
            .check(ip("10.0.0.21"))
            .unwrap_err()
            .contains("10.0.0.10-10.0.0.20"));
        assert!(p
            .check(ip("10.0.1.1"))
            .unwrap_err()
            .contains("outside subnet"));
        assert!(p.check(ip("10.0.0.15")).is_ok());
    }
}
