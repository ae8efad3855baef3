//! One attachment: a container's interface on a network, (network, container id,
//! ifname). Everything academy keeps about it is named from this one value: the holder
//! of its reservations (the store's index), its host veth's name and owner alias, and
//! its masquerade elements' comment; GC's valid list is matched against the same parts.

use crate::cni::env::Env;
use crate::config::Config;
use crate::hostveth;
use crate::ipam::Holder;

#[derive(Debug, Clone, Copy)]
pub struct Attachment<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
}

impl<'a> Attachment<'a> {
    pub fn new(network: &'a str, container_id: &'a str, ifname: &'a str) -> Attachment<'a> {
        Attachment {
            network,
            container_id,
            ifname,
        }
    }

    /// The attachment a verb is invoked for.
    pub fn of(env: &'a Env, conf: &'a Config) -> Attachment<'a> {
        Attachment::new(&conf.name, &env.container_id, &env.ifname)
    }

    pub fn host_name(&self) -> String {
        hostveth::name(self.container_id, self.ifname)
    }

    pub fn alias(&self) -> String {
        hostveth::alias(self.network, self.container_id, self.ifname)
    }

    /// Who holds its addresses in the network's store.
    pub fn holder(&self) -> Holder {
        Holder::new(self.container_id, self.ifname)
    }
}
