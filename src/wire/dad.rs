//! IPv6 duplicate address detection on the container's interface, as the reference
//! bridge plugin handles it: off by default (`accept_dad` 0, so the addresses are usable
//! at once), on with `enabledad`, and then ADD waits
//! for it to end before it adds routes, the way the reference's SettleAddresses does
//! (polls every 50 ms, gives up waiting after 10 s).

use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;

use crate::cni::{code, Error, Result};
use crate::netlink::Netlink;

const POLL: Duration = Duration::from_millis(50);
const LIMIT: Duration = Duration::from_secs(10);

/// The interface's DAD sysctls, as the reference writes them (`enhanced_dad` too with
/// DAD on). Best effort, like the reference: a kernel without IPv6 has no such file.
/// /proc/sys/net is the calling thread's netns.
pub fn set_sysctls(ifname: &str, on: bool) {
    let conf = format!("/proc/sys/net/ipv6/conf/{ifname}");
    if on {
        let _ = std::fs::write(format!("{conf}/enhanced_dad"), "1");
    }
    let _ = std::fs::write(format!("{conf}/accept_dad"), if on { "1" } else { "0" });
}

/// Waits until no IPv6 address of the link is tentative. An address another host
/// already has is an error: the reference goes on with an address the kernel will never
/// use, academy says so instead (and ADD is undone). Past the limit ADD goes on, as the
/// reference's does.
pub fn wait(nl: &mut Netlink, index: u32, ifname: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let states = nl.address_states(index)?;
        let failed: Vec<IpNetwork> = states
            .iter()
            .filter(|a| a.address.is_ipv6() && a.dad_failed)
            .map(|a| a.address)
            .collect();
        if let Some(dup) = failed.first() {
            return Err(Error::new(
                code::ADDRESS_UNAVAILABLE,
                format!("address {dup} of {ifname} failed duplicate address detection: another host on the network has it"),
            )
            .details("enabledad is on; find the host that uses the address, or let academy hand out another"));
        }
        let tentative = states.iter().any(|a| a.address.is_ipv6() && a.tentative);
        if !tentative {
            return Ok(());
        }
        if start.elapsed() >= LIMIT {
            eprintln!(
                "academy: {ifname} still has tentative IPv6 addresses after {}s of duplicate address detection; going on",
                LIMIT.as_secs()
            );
            return Ok(());
        }
        std::thread::sleep(POLL);
    }
}
