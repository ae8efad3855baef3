//! The loopback guard of a bridge that publishes IPv4 ports (route_localnet on): what
//! ADD turns on, what STATUS and CHECK miss, and route_localnet off again with the
//! network's last attachment.

use crate::cni::{Error, Result};

/// Traffic to 127.0.0.1:hostPort is sent on to the container with its source kept; the
/// kernel drops a packet from 127.0.0.0/8 leaving by an interface without
/// route_localnet (the reference portmap sets it on the same interface). The bridge's
/// loopback guard comes first: with route_localnet, a container's frame to 127.0.0.1
/// would otherwise reach the host's services bound there (guard.rs): the caller makes
/// sure of it first.
pub(crate) fn allow_localhost(bridge: &str) -> Result<()> {
    let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
    if std::fs::read(&path).is_ok_and(|v| v.starts_with(b"1")) {
        return Ok(());
    }
    std::fs::write(&path, "1").map_err(|e| Error::io(format!("cannot write 1 to {path}"), &e))
}

/// Whether `bridge` routes 127.0.0.0/8 (route_localnet), and so needs its loopback guard.
pub(crate) fn localnet_on(bridge: &str) -> bool {
    let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
    std::fs::read(path).is_ok_and(|v| v.starts_with(b"1"))
}

/// route_localnet back to 0 on `bridge`; whether it is off (or the bridge gone). A
/// failure is said on stderr, and the guard stays.
pub(crate) fn localhost_off(bridge: &str) -> bool {
    if !localnet_on(bridge) {
        return true;
    }
    let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
    match std::fs::write(&path, "0") {
        Ok(()) => true,
        Err(e) => {
            eprintln!("academy: warning: cannot write 0 to {path}, so bridge {bridge} keeps its loopback guard: {e}");
            false
        }
    }
}
