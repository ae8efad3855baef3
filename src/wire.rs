//! The kernel side of a bridge attachment, step by step, each step one or two netlink
//! requests: the node bridge, the veth pair, the container's interface. The verbs
//! (add, del, check) call these in order; rollback lives in add.rs beside the steps.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::cni::{code, Error, Result};
use crate::hostveth::{self, Ownership};
use crate::netlink::{Link, LinkKind, LinkRef, Netlink, NlError, VethPair};
use crate::netns::Netns;

/// Turns a refused netlink request into the error the user sees.
pub fn kernel(e: NlError) -> Error {
    let hint = match e.errno {
        libc::EPERM | libc::EACCES => "academy must run as root (CAP_NET_ADMIN)",
        libc::ENOMEM | libc::ENOBUFS => "the node is short of memory; try again later",
        _ => "",
    };
    Error::new(code::KERNEL_REFUSED, format!("kernel refused to {e}")).details(hint)
}

/// Step 1 (`ip link add NAME type bridge; ip link set NAME up; ip addr add GW dev NAME`):
/// the node bridge exists, is a bridge, is up, and holds the gateway address.
pub fn ensure_bridge(
    nl: &mut Netlink,
    name: &str,
    mtu: Option<u32>,
    gateway: Option<IpNetwork>,
) -> Result<Link> {
    let bridge = match nl.link(name).map_err(kernel)? {
        Some(link) => link,
        None => {
            match nl.create_bridge(name, random_mac(), mtu) {
                // Another ADD created it first: fine, it is shared.
                Err(e) if !e.is(libc::EEXIST) => return Err(kernel(e)),
                _ => {}
            }
            nl.link(name).map_err(kernel)?.ok_or_else(|| {
                Error::new(
                    code::KERNEL_REFUSED,
                    format!("bridge {name} vanished right after it was created"),
                )
                .details("something else on the node is deleting it; try again")
            })?
        }
    };
    if bridge.kind != LinkKind::Bridge {
        return Err(Error::new(
            code::NAME_IN_USE,
            format!(
                "link {name} exists but is not a bridge (it is {})",
                kind_name(&bridge.kind)
            ),
        )
        .details("set \"bridge\" in the network config to a free name, or remove that link"));
    }
    if !bridge.up {
        nl.set_up(bridge.index).map_err(kernel)?;
    }
    if let Some(gw) = gateway {
        match nl.add_address(bridge.index, gw) {
            Err(e) if !e.is(libc::EEXIST) => return Err(kernel(e)),
            _ => {}
        }
    }
    Ok(bridge)
}

pub struct Attachment<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
}

impl Attachment<'_> {
    pub fn host_name(&self) -> String {
        hostveth::name(self.container_id, self.ifname)
    }

    pub fn alias(&self) -> String {
        hostveth::alias(self.network, self.container_id, self.ifname)
    }
}

/// What `create_pair` made.
pub struct HostVeth {
    pub name: String,
    pub mac: [u8; 6],
    pub container_mac: [u8; 6],
}

/// Step 2 (`ip link add HOST type veth peer name IFNAME netns NS; ip link set HOST master
/// BRIDGE up`): one request creates both ends, the container's already inside its netns.
/// A stale pair of this same attachment (a killed or repeated ADD) is replaced; any
/// other link in the way is an error, never deleted.
pub fn create_pair(
    nl: &mut Netlink,
    netns: &Netns,
    who: &Attachment,
    bridge: &Link,
    mtu: Option<u32>,
) -> Result<HostVeth> {
    let host = HostVeth {
        name: who.host_name(),
        mac: random_mac(),
        container_mac: random_mac(),
    };
    let pair = VethPair {
        host_name: &host.name,
        host_mac: host.mac,
        controller: bridge.index,
        peer_name: who.ifname,
        peer_mac: host.container_mac,
        peer_netns: netns.fd(),
        mtu,
    };
    let mut replaced_stale = false;
    loop {
        match nl.create_veth(&pair) {
            Ok(()) => break,
            Err(e) if e.is(libc::EEXIST) && !replaced_stale => {
                // EEXIST names no side: look at the host side to tell which.
                match nl.link(&host.name).map_err(kernel)? {
                    None => {
                        return Err(Error::new(
                            code::NAME_IN_USE,
                            format!(
                                "an interface named {} already exists in {}",
                                who.ifname,
                                netns.path()
                            ),
                        )
                        .details(
                            "CNI_IFNAME must name an interface the container does not have yet",
                        ))
                    }
                    Some(link) => match hostveth::ownership(&link, &who.alias()) {
                        Ownership::Ours | Ownership::OursUnlabelled => {
                            delete_if_present(nl, LinkRef::Index(link.index))?;
                            replaced_stale = true;
                        }
                        Ownership::Foreign(why) => return Err(foreign_host_link(&host.name, &why)),
                    },
                }
            }
            Err(e) => return Err(kernel(e)),
        }
    }
    if let Err(e) = nl.set_alias(&host.name, &who.alias()) {
        let _ = nl.delete_link(LinkRef::Name(&host.name));
        return Err(kernel(e));
    }
    Ok(host)
}

fn foreign_host_link(name: &str, why: &str) -> Error {
    Error::new(
        code::NAME_IN_USE,
        format!("host interface {name}, which academy derives from this container id and ifname, already exists and is not academy's: {why}"),
    )
    .details("academy will not delete a link it did not make; remove it by hand if it is stale")
}

/// Step 3, inside the netns (`ip -n NS link set IFNAME up; ip -n NS addr add ADDR dev
/// IFNAME; ip -n NS route add default via GW`). Runs on one scoped thread, the only
/// time ADD enters the netns.
pub fn configure_container(
    netns: &Netns,
    ifname: &str,
    address: IpNetwork,
    gateway: IpAddr,
) -> Result<()> {
    netns.run(|| {
        let mut nl = Netlink::open().map_err(kernel)?;
        let link = nl.link(ifname).map_err(kernel)?.ok_or_else(|| {
            Error::new(
                code::KERNEL_REFUSED,
                format!(
                    "{ifname} is missing from {} right after it was created",
                    netns.path()
                ),
            )
        })?;
        nl.set_up(link.index).map_err(kernel)?;
        nl.add_address(link.index, address).map_err(kernel)?;
        let default = IpNetwork::new(unspecified(gateway), 0).expect("prefix 0 is valid");
        nl.add_route(default, gateway, link.index).map_err(|e| {
            if e.is(libc::EEXIST) {
                Error::new(
                    code::NAME_IN_USE,
                    format!(
                        "the container in {} already has a default route",
                        netns.path()
                    ),
                )
                .details("another network already routes this container by default")
            } else {
                kernel(e)
            }
        })
    })
}

/// Deletes the host end of an attachment if it is academy's for that attachment.
/// Returns false when there was nothing to delete.
pub fn remove_pair(nl: &mut Netlink, who: &Attachment) -> Result<bool> {
    let name = who.host_name();
    let Some(link) = nl.link(&name).map_err(kernel)? else {
        return Ok(false);
    };
    match hostveth::ownership(&link, &who.alias()) {
        Ownership::Ours | Ownership::OursUnlabelled => {
            delete_if_present(nl, LinkRef::Index(link.index))
        }
        Ownership::Foreign(why) => Err(foreign_host_link(&name, &why)),
    }
}

/// Deletes a link; one that is already gone is not an error (DEL is idempotent).
pub fn delete_if_present(nl: &mut Netlink, link: LinkRef) -> Result<bool> {
    match nl.delete_link(link) {
        Ok(()) => Ok(true),
        Err(e) if e.is(libc::ENODEV) => Ok(false),
        Err(e) => Err(kernel(e)),
    }
}

fn unspecified(like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}

pub fn kind_name(kind: &LinkKind) -> String {
    match kind {
        LinkKind::Bridge => "a bridge".into(),
        LinkKind::Veth => "a veth".into(),
        LinkKind::Other(k) => format!("a {k} link"),
        LinkKind::None => "a device without a kind (physical or loopback)".into(),
    }
}

/// A random locally administered unicast MAC. Chosen here rather than by the kernel so
/// the result can report it without reading it back.
pub fn random_mac() -> [u8; 6] {
    let mut mac = [0u8; 6];
    // getrandom(2) on 6 bytes cannot be interrupted and never blocks after boot.
    let n = unsafe { libc::getrandom(mac.as_mut_ptr().cast(), mac.len(), 0) };
    if n != mac.len() as isize {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ u128::from(std::process::id()) << 64;
        mac.copy_from_slice(&nanos.to_le_bytes()[..6]);
    }
    mac[0] = (mac[0] & 0xfe) | 0x02;
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_macs_are_local_unicast() {
        for _ in 0..100 {
            let m = random_mac();
            assert_eq!(m[0] & 0x01, 0, "multicast bit set");
            assert_eq!(m[0] & 0x02, 0x02, "not locally administered");
        }
        assert_ne!(random_mac(), random_mac());
    }
}
