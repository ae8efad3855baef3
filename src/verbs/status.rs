//! STATUS (CNI 1.1): can ADD be served? The IPAM must be able to give an address (for
//! academy's store: writable, with a free address in every range set), the bridge name
//! must not be taken by something that is not a bridge, the bridge must have a free port
//! (wire/capacity.rs), and the nf_tables state of the network's wired attachments must be
//! complete (firewall::missing).

use crate::addressing;
use crate::cni::env::Env;
use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::firewall;
use crate::leaks;
use crate::netlink::{LinkKind, Netlink};
use crate::wire::{self, kind_name};

pub fn status(env: &Env, conf: &Config) -> Result<()> {
    let unavailable = |msg: String| Error::new(code::NOT_AVAILABLE, msg);
    let mut nl = Netlink::open()
        .map_err(|e| unavailable(format!("cannot talk to the kernel over rtnetlink: {e}")))?;
    match nl.link(&conf.bridge) {
        Ok(Some(link)) if link.kind != LinkKind::Bridge => {
            return Err(unavailable(format!(
                "bridge name {} is taken by {}",
                conf.bridge,
                kind_name(&link.kind)
            ))
            .details("remove that link or set another \"bridge\" in the network config"))
        }
        // A full bridge refuses the next port whatever else is ready.
        Ok(Some(link)) => wire::capacity::status(&mut nl, &link)?,
        Ok(None) => {}
        Err(e) => {
            return Err(unavailable(format!(
                "cannot look up bridge {}: {e}",
                conf.bridge
            )))
        }
    }
    // A full pool holding old leaks is served: the next ADD reclaims them.
    addressing::status(env, conf)
        .or_else(|e| leaks::status_despite_leaks(conf, e))
        .and_then(|()| firewall_complete(conf))
        .map_err(as_status_error)
}

/// Every kind of nf_tables state the network's wired attachments should have is there:
/// what an admin's flush or an iptables reload took is reported with the command that
/// puts it back.
fn firewall_complete(conf: &Config) -> Result<()> {
    let missing = firewall::missing(conf)
        .map_err(|e| Error::new(code::NOT_AVAILABLE, e.msg).details(e.details))?;
    if missing.is_empty() {
        return Ok(());
    }
    let what: Vec<String> = missing
        .iter()
        .map(|(kind, what)| format!("{kind}: {}", what.join(", ")))
        .collect();
    Err(Error::new(
        code::NOT_AVAILABLE,
        format!(
            "network {}'s packet-path state (nf_tables, traffic control) is incomplete: missing {}",
            conf.name,
            what.join("; ")
        ),
    )
    .details(firewall::RESTORE_HINT))
}

/// STATUS's one code: any reason ADD cannot be served (an unwritable store, a full pool,
/// a NAT rule missing) is 50, so the runtime holds off ADDs instead of failing each one;
/// a config that cannot work (code 7) says so as itself.
fn as_status_error(mut e: Error) -> Error {
    if e.code != code::INVALID_CONFIG {
        e.code = code::NOT_AVAILABLE;
    }
    e
}
