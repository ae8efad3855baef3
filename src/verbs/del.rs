//! DEL: remove everything academy made for the attachment (removal.rs): the veth pair
//! through its host end (no netns entry needed), the nf_tables state, the addresses.
//! Nothing left to remove is success.

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
    removal::attachment(conf, target)
}
