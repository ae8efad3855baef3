//! DEL: remove everything academy made for the attachment (teardown.rs): the veth pair
//! through its host end (no netns entry needed), the masquerade, the addresses. Nothing
//! left to remove is success.

use crate::cni::env::Env;
use crate::cni::Result;
use crate::config::Config;
use crate::teardown::{self, Removing};

pub fn del(env: &Env, conf: &Config) -> Result<()> {
    teardown::attachment(env, conf, Removing::Del)
}
