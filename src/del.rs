//! DEL: remove the veth pair through its host end (no netns entry needed) and free the
//! attachment's addresses by holder. Nothing left to remove is success.

use crate::addressing;
use crate::cni::env::Env;
use crate::cni::{code, Result};
use crate::config::Config;
use crate::netlink::Netlink;
use crate::wire::{self, kernel, Attachment};

pub fn del(env: &Env, conf: &Config) -> Result<()> {
    let who = Attachment {
        network: &conf.name,
        container_id: &env.container_id,
        ifname: &env.ifname,
    };
    // The veth first: its address must not be handed out while the old pair still exists.
    let mut nl = Netlink::open().map_err(kernel)?;
    match wire::remove_pair(&mut nl, &who) {
        // A foreign link under academy's derived name is not ours to delete, and must
        // not wedge the container in a DEL that can never succeed.
        Err(e) if e.code == code::NAME_IN_USE => eprintln!("academy: DEL: {e}"),
        other => {
            other?;
        }
    }
    addressing::release(env, conf)
}
