//! DEL: remove everything academy made for the attachment (removal.rs): the veth pair
//! through its host end (no netns entry needed), the nf_tables state, the addresses.
//! Nothing left to remove is success. The last attachment of a network takes the
//! network's own nf_tables objects with it.

use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::Result;
use crate::config::Config;
use crate::removal::{self, Reservations, Target};

pub fn del(env: &Env, conf: &Config) -> Result<()> {
    let target = Target {
        who: Attachment::of(env, conf),
        reservations: Reservations::Held(env),
    };
    removal::attachment(conf, target)?;
    // The attachment is gone whatever happens here: a network whose objects could not
    // be deleted keeps them until a GC finds it empty.
    if let Err(e) = removal::network_if_unused(conf) {
        eprintln!("academy: warning: {e}");
    }
    Ok(())
}
