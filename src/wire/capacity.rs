//! A bridge's port limit. The kernel numbers a bridge's ports 1 to 1023 (BR_MAX_PORTS is
//! 1024 and port 0 is never given) and refuses the 1,024th with EXFULL, which says
//! nothing of the bridge. ADD learns of it from that very refusal rather than counting
//! first: a count is a dump of every port (about as costly as the ADD's own requests on
//! a bridge of 1,000) that every ADD would pay for the rare one that fails, and two ADDs
//! racing for the last port would both pass it. The kernel unregisters the pair it could
//! not enslave within the refused request, and ADD's one removal gives the reservation
//! back, so the refusal leaves nothing; only then are the ports counted, for the message.
//! STATUS, `academy status` and the metrics count them when asked.

use crate::cni::{code, Error, Result};
use crate::netlink::{Link, Netlink, NlError};

/// The most ports a Linux bridge takes.
pub const PORT_LIMIT: usize = 1023;

/// What to do when a bridge is full, for ADD's and STATUS's messages.
const WHAT_TO_DO: &str = "put more containers on another network (another \"bridge\" with its own subnet), or split this one over a second bridge; a port is freed when a container on this bridge is deleted";

/// The ports of bridge `bridge` (its IFLA_MASTER), one dump the kernel filters.
pub fn ports(nl: &mut Netlink, bridge: &Link) -> Result<usize> {
    Ok(nl.port_count(bridge.index)?)
}

/// Whether `ports` fill a bridge.
pub fn is_full(ports: usize) -> bool {
    ports >= PORT_LIMIT
}

/// The error of a veth pair the kernel would not enslave to `bridge` (EXFULL). Any other
/// refusal is the kernel's own error.
pub fn refused(nl: &mut Netlink, bridge: &Link, e: NlError) -> Error {
    if !e.is(libc::EXFULL) {
        return e.into();
    }
    let count = match ports(nl, bridge) {
        Ok(n) => format!("has {n} ports"),
        Err(_) => "is full".into(),
    };
    Error::new(
        code::TRY_AGAIN_LATER,
        format!(
            "bridge {} {count}, and a Linux bridge takes at most {PORT_LIMIT}: the container's veth cannot join it",
            bridge.name
        ),
    )
    .details(WHAT_TO_DO)
}

/// STATUS: ADD cannot be served while `bridge` is full (code 50).
pub fn status(nl: &mut Netlink, bridge: &Link) -> Result<()> {
    let n = ports(nl, bridge).map_err(|e| {
        Error::new(
            code::NOT_AVAILABLE,
            format!("cannot count the ports of bridge {}: {e}", bridge.name),
        )
    })?;
    if !is_full(n) {
        return Ok(());
    }
    Err(Error::new(
        code::NOT_AVAILABLE,
        format!(
            "bridge {} is full: it has {n} ports, the most a Linux bridge takes ({PORT_LIMIT}), so the next ADD would fail",
            bridge.name
        ),
    )
    .details(WHAT_TO_DO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bridge_is_full_at_1023_ports() {
        assert!(!is_full(0));
        assert!(!is_full(1022));
        assert!(is_full(1023));
    }
}
