//! The host veth without IPv6 of its own. It is a bridge port: frames cross it, and
//! the gateway addresses live on the bridge, so no address of the port's is ever used.
//! Left on, the port gets a link-local address once the container's end comes up: DAD
//! for it in a kernel worker that holds the RTNL lock, multicast groups, and three
//! routes in the node's IPv6 tables (fe80::/64, its local address, ff00::/8), which the
//! kernel walks whole on every later link event of the node. Beside 1,000 pods that is
//! 3,000 routes per walk, and an ADD's own requests slowed 2.9x against an empty
//! bridge; with the ports quiet, 1.9x (the rest is the bridge's own per-port loops).
//! libvirt's hooks do the same to VM switch ports, for the same noise.
//!
//! Off right after the pair is made, before the container's end is up: the port has
//! no carrier yet, so none of it has started. /proc/sys/net is the calling thread's
//! netns (the node's: the main thread never leaves it), and no netlink attribute sets
//! `disable_ipv6`. Best effort: a kernel without IPv6 has no such file, a read-only
//! /proc/sys refuses, and the port then works as before.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};

/// Turns IPv6 off on the node's link `host`. The file comes back open: a successful
/// ADD leaves it to the exit to close (verbs::LeftOpen), one syscall less.
pub fn ipv6_off(host: &str) -> Option<File> {
    let path = format!("/proc/sys/net/ipv6/conf/{host}/disable_ipv6");
    let written = OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| f.write_all(b"1").map(|()| f));
    match written {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            crate::log::debug(format_args!(
                "{path}: {e}; the port keeps its IPv6 (a link-local address and its routes)"
            ));
            None
        }
    }
}
