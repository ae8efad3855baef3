//! The kernel side of a bridge attachment, step by step, each step one or two netlink
//! requests: the node bridge, the veth pair, the container's interface. The verbs
//! (add, check) call these in order; undoing them is removal.rs's.

pub mod capacity;
pub mod dad;
pub mod forwarding;
pub mod mtu;
pub mod port;
pub mod quiet;

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::attachment::Attachment;
use crate::attachment::{self, Ownership};
use crate::cni::{code, Error, Result};
use crate::netlink::{Link, LinkKind, Netlink, RouteAttrs, VethPair};
use crate::netns::Netns;

/// What the node bridge must look like.
pub struct BridgeSpec<'a> {
    pub name: &'a str,
    pub mtu: Option<u32>,
    pub promisc: bool,
    /// Gateway addresses (with the subnet's prefix) to put on it.
    pub gateways: &'a [IpNetwork],
    /// Replace a different address of the same family instead of failing.
    pub force_address: bool,
    /// The bridge filters by VLAN (`vlan`, `vlanTrunk`).
    pub vlan_filtering: bool,
}

/// Step 1 (`ip link add NAME type bridge; ip link set NAME up; ip addr add GW dev NAME`):
/// the node bridge exists, is a bridge, is up, and holds the gateway addresses.
pub fn ensure_bridge(nl: &mut Netlink, spec: &BridgeSpec) -> Result<Link> {
    let name = spec.name;
    let bridge = match nl.link(name)? {
        Some(link) => link,
        None => {
            match nl.create_bridge(
                name,
                random_mac(),
                spec.mtu,
                spec.promisc,
                spec.vlan_filtering,
            ) {
                Err(e) if spec.vlan_filtering && e.is(libc::EOPNOTSUPP) => {
                    return Err(port::no_vlan_filtering(&e.to_string()))
                }
                // Another ADD created it first: fine, it is shared.
                Err(e) if !e.is(libc::EEXIST) => return Err(e.into()),
                Err(_) => {}
                // As the reference plugin: a bridge does not learn routes from what
                // containers advertise on it. Best effort: no IPv6, no such file.
                Ok(()) => {
                    let _ =
                        std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/accept_ra"), "0");
                }
            }
            nl.link(name)?.ok_or_else(|| vanished(name))?
        }
    };
    if bridge.kind != LinkKind::Bridge {
        return Err(Error::new(
            code::HOST_NAME_TAKEN,
            format!(
                "link {name} exists but is not a bridge (it is {})",
                kind_name(&bridge.kind)
            ),
        )
        .details("set \"bridge\" in the network config to a free name, or remove that link"));
    }
    if !bridge.up {
        nl.set_up(bridge.index)?;
    }
    if spec.promisc && !bridge.promisc {
        nl.set_promisc(bridge.index)?;
    }
    if spec.vlan_filtering {
        port::ensure_vlan_filtering(nl, &bridge)?;
    }
    ensure_gateways(nl, &bridge, spec.gateways, spec.force_address)?;
    Ok(bridge)
}

/// The gateway addresses on `link` (the bridge, or a VLAN's gateway interface), and
/// forwarding on for their families.
pub fn ensure_gateways(
    nl: &mut Netlink,
    link: &Link,
    gateways: &[IpNetwork],
    force_address: bool,
) -> Result<()> {
    for gw in gateways {
        match nl.add_address(link.index, *gw) {
            // Already there: the common case for every ADD but the first.
            Err(e) if e.is(libc::EEXIST) => {}
            Err(e) => return Err(e.into()),
            // New on this link: only now can it clash with an older address.
            Ok(()) => resolve_address_clash(nl, link, *gw, force_address)?,
        }
    }
    forwarding::enable(nl, gateways, link.index)
}

/// The reference plugin's rule: one IPv4 address on the bridge, and IPv6 addresses only
/// in subnets that do not overlap. An older address that breaks it is replaced with
/// forceAddress, else the new one is taken back and ADD fails.
fn resolve_address_clash(
    nl: &mut Netlink,
    bridge: &Link,
    new: IpNetwork,
    force: bool,
) -> Result<()> {
    let clashing: Vec<IpNetwork> = nl
        .addresses(bridge.index)?
        .into_iter()
        .filter(|a| *a != new && a.is_ipv4() == new.is_ipv4())
        .filter(|a| a.is_ipv4() || a.contains(new.ip()) || new.contains(a.ip()))
        .collect();
    let replaced = force && !clashing.is_empty();
    for old in clashing {
        if force {
            nl.delete_address(bridge.index, old)?;
        } else {
            let _ = nl.delete_address(bridge.index, new);
            return Err(Error::config(format!(
                "bridge {} already has address {old}, different from the gateway {new}",
                bridge.name
            ))
            .details("set \"forceAddress\": true to replace it, or use another bridge"));
        }
    }
    // The kernel deletes an address's secondaries with it, and the new gateway was a
    // secondary of an old address in the same subnet: put it back.
    if replaced {
        match nl.add_address(bridge.index, new) {
            Err(e) if !e.is(libc::EEXIST) => return Err(e.into()),
            _ => {}
        }
    }
    Ok(())
}

/// What `create_pair` found.
pub enum Created {
    Pair(HostVeth),
    /// A pair of this same attachment is in the way (a killed or repeated ADD): ADD
    /// removes it through the one removal and asks again.
    Stale,
}

/// What `create_pair` made.
pub struct HostVeth {
    pub name: String,
    pub mac: [u8; 6],
    pub container_mac: [u8; 6],
    /// The port's `disable_ipv6`, written (quiet.rs) and still open.
    pub ipv6_off: Option<std::fs::File>,
}

/// Step 2 (`ip link add HOST type veth peer name IFNAME netns NS; ip link set HOST master
/// BRIDGE up`): one request creates both ends, the container's already inside its netns.
/// A stale pair of this same attachment is reported, for ADD to remove; any other link
/// in the way is an error, never deleted. A pair whose alias could not be set is left
/// unlabelled for the failed ADD's removal, which knows it by its derived name. The host
/// end is left down when `host_up` is false (the bandwidth step adds its qdiscs first).
/// Labelled, the host end loses its own IPv6 before the container's end is up (quiet.rs).
pub fn create_pair(
    nl: &mut Netlink,
    netns: &Netns,
    who: &Attachment,
    bridge: &Link,
    mtu: Option<u32>,
    container_mac: Option<[u8; 6]>,
    host_up: bool,
) -> Result<Created> {
    let [host_mac, random_container_mac] = random_macs();
    let host = HostVeth {
        name: who.host_name(),
        mac: host_mac,
        container_mac: container_mac.unwrap_or(random_container_mac),
        ipv6_off: None,
    };
    let pair = VethPair {
        host_name: &host.name,
        host_mac: host.mac,
        controller: bridge.index,
        peer_name: who.ifname,
        peer_mac: host.container_mac,
        peer_netns: netns.fd(),
        mtu,
        host_up,
    };
    match nl.create_veth(&pair) {
        Ok(()) => {}
        Err(e) if e.is(libc::EEXIST) => {
            // EEXIST names no side: look at the host side to tell which.
            match nl.link(&host.name)? {
                None => {
                    return Err(Error::new(
                        code::NAME_IN_USE,
                        format!(
                            "an interface named {} already exists in {}",
                            who.ifname,
                            netns.path()
                        ),
                    )
                    .details("CNI_IFNAME must name an interface the container does not have yet"))
                }
                Some(link) => match attachment::ownership(&link, &who.alias()) {
                    Ownership::Ours | Ownership::OursUnlabelled => return Ok(Created::Stale),
                    Ownership::Foreign(why) => return Err(foreign_host_link(&host.name, &why)),
                },
            }
        }
        Err(e) => return Err(capacity::refused(nl, bridge, e)),
    }
    // The debug build's test hook: the pair made and not yet labelled
    // (tests/it/shared_bridge.rs: a bridge-mate's GC meeting it there).
    crate::firewall::hold_for_test("ACADEMY_TEST_HOLD_UNLABELLED");
    nl.set_alias(&host.name, &who.alias())?;
    let host = HostVeth {
        ipv6_off: quiet::ipv6_off(&host.name),
        ..host
    };
    Ok(Created::Pair(host))
}

/// A link academy just made is gone.
pub fn vanished(name: &str) -> Error {
    Error::new(
        code::KERNEL_REFUSED,
        format!("{name} vanished right after it was created"),
    )
    .details("something else on the node is deleting it; try again")
}

fn foreign_host_link(name: &str, why: &str) -> Error {
    Error::new(
        code::HOST_NAME_TAKEN,
        format!("host interface {name}, which academy derives from this container id and ifname, already exists and is not academy's: {why}"),
    )
    .details("academy will not delete a link it did not make; remove it by hand if it is stale")
}

/// Hairpin mode: the bridge may send a frame back out of the port it came in on. Over
/// netlink, never /sys/class/net: a runtime that entered the netns with `nsenter --net`
/// keeps a /sys mounted for another netns, which has no such port. (/proc/sys/net, as
/// the sysctls above and below use it, has no such trap: it is the netns of the thread
/// that opens it, whatever /proc is mounted for.)
pub fn set_hairpin(nl: &mut Netlink, host_name: &str) -> Result<()> {
    let link = nl.link(host_name)?.ok_or_else(|| vanished(host_name))?;
    Ok(nl.set_port_hairpin(link.index)?)
}

/// A route for the container, its gateway known.
pub struct ContainerRoute {
    pub dst: IpNetwork,
    pub gw: IpAddr,
    pub attrs: RouteAttrs,
}

/// What the container's interface gets.
pub struct ContainerSetup<'a> {
    pub ifname: &'a str,
    pub addresses: &'a [IpNetwork],
    pub routes: &'a [ContainerRoute],
    /// `enabledad`: IPv6 duplicate address detection, waited for.
    pub dad: bool,
    /// False with `disableContainerInterface`: the interface stays down.
    pub up: bool,
}

/// Step 3, inside the netns (`ip -n NS link set IFNAME up; ip -n NS addr add ADDR dev
/// IFNAME; ip -n NS route add default via GW`). Runs on one scoped thread, the only
/// time ADD enters the netns. Returns the socket it used there, for the caller to
/// close or leave open to its exit (verbs::LeftOpen).
pub fn configure_container(netns: &Netns, setup: &ContainerSetup) -> Result<Netlink> {
    let ifname = setup.ifname;
    if !setup.up && !setup.routes.is_empty() {
        return Err(Error::config(format!(
            "disableContainerInterface leaves {ifname} down, and the kernel adds no route through a down interface, but IPAM returned {} route(s)",
            setup.routes.len()
        ))
        .details("configure the IPAM plugin without routes, or drop disableContainerInterface"));
    }
    netns.run(|| {
        // Its one dump (DAD's) is matched by link again: no strict checking needed.
        let mut nl = Netlink::open_unfiltered()?;
        let link = nl.link(ifname)?.ok_or_else(|| {
            Error::new(
                code::KERNEL_REFUSED,
                format!(
                    "{ifname} is missing from {} right after it was created",
                    netns.path()
                ),
            )
        })?;
        tune_sysctls(ifname, setup.addresses, setup.dad);
        // The reference's gratuitous ARP when the interface comes up: arp_notify, set in
        // the request that brings it up. The kernel sets it just after the flags there,
        // but no IPv4 address is on the interface yet, so there was nothing to announce
        // at that moment either way.
        let arp_notify = setup.addresses.iter().any(|a| a.is_ipv4());
        if setup.up {
            nl.set_container_link(link.index, true, arp_notify)?;
        } else {
            // Down (disableContainerInterface): best effort, as the setting always was.
            let _ = nl.set_container_link(link.index, false, arp_notify);
        }
        for address in setup.addresses {
            nl.add_container_address(link.index, *address)?;
        }
        // As the reference: routes once the addresses have settled.
        if setup.dad && setup.up && setup.addresses.iter().any(|a| a.is_ipv6()) {
            dad::wait(&mut nl, link.index, ifname)?;
        }
        for route in setup.routes {
            match nl.add_route(route.dst, route.gw, link.index, &route.attrs) {
                // This very route (same next hop) is already there: as the reference
                // plugin of the host-local era did, it is kept ("the first one wins").
                Err(e) if e.is(libc::EEXIST) => {}
                other => other?,
            }
        }
        Ok(nl)
    })
}

/// The reference plugin's IPv6 settings, for the same behaviour: duplicate address
/// detection only with `enabledad` (else the address is ours; DAD would hold it
/// tentative for a second). Best effort, like the reference: a kernel without IPv6 has
/// no such file. /proc/sys/net is the calling thread's netns. (IPv4's arp_notify goes
/// in the link-up request.)
fn tune_sysctls(ifname: &str, addresses: &[IpNetwork], dad: bool) {
    if addresses.iter().any(|a| a.is_ipv6()) {
        dad::set_sysctls(ifname, dad);
    }
}

/// The pair ADD made is still there and still this attachment's.
pub fn verify_pair(nl: &mut Netlink, who: &Attachment) -> Result<()> {
    let name = who.host_name();
    match nl.link(&name)? {
        Some(link) if attachment::ownership(&link, &who.alias()) == Ownership::Ours => Ok(()),
        _ => Err(Error::new(
            code::TRY_AGAIN_LATER,
            format!("host veth {name} was deleted while ADD ran, most likely by a concurrent GC that did not list this container"),
        )
        .details("ADD was undone; retry it")),
    }
}

/// What removing an attachment's veth pair found.
#[derive(Debug, PartialEq, Eq)]
pub enum PairRemoval {
    Deleted,
    /// Nothing under the attachment's host veth name.
    Absent,
    /// A link under that name that academy did not make for this attachment: kept. The
    /// text says whose it is.
    NotOurs(String),
}

/// Deletes the pair through its host end, if that is academy's for this attachment;
/// with whatever else the removal put in the attachment's link group (its ifb), in one
/// request.
pub fn remove_pair(nl: &mut Netlink, who: &Attachment) -> Result<PairRemoval> {
    let name = who.host_name();
    let Some(link) = nl.link(&name)? else {
        // The pair can go on its own after the removal marked it: a container's netns
        // torn down before or during its DEL takes the pair with it, in the kernel's
        // own time. What the removal marked beside it (its ifb) goes now. ENODEV:
        // nothing was marked. EOPNOTSUPP: a link the kernel cannot delete shares the
        // group, so nothing went, and GC sweeps an ifb whose attachment is gone.
        match nl.delete_group(removal_group(who)) {
            Ok(()) => {}
            Err(e) if e.is(libc::ENODEV) || e.is(libc::EOPNOTSUPP) => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(PairRemoval::Absent);
    };
    match attachment::ownership(&link, &who.alias()) {
        Ownership::Ours | Ownership::OursUnlabelled => {
            let group = removal_group(who);
            let deleted = match link.group == group {
                true => match nl.delete_group(group) {
                    Ok(()) => true,
                    Err(e) if e.is(libc::ENODEV) => false,
                    Err(e) if e.is(libc::EOPNOTSUPP) => {
                        // Someone's link the kernel cannot delete shares the group, and
                        // nothing was deleted: the veth goes alone, and the retry this
                        // error asks for finds the ifb alone and deletes it.
                        delete_if_present(nl, link.index)?;
                        return Err(Error::from(e)
                            .context(format!(
                                "link group {group} also holds a link that is not {}'s; its host veth {name} was deleted alone",
                                who.owner()
                            ))
                            .details("retry the removal (DEL, GC or academy reclaim) to delete the rest; and move the other link out of the group (ip link set dev LINK group default)"));
                    }
                    Err(e) => return Err(e.into()),
                },
                false => delete_if_present(nl, link.index)?,
            };
            match deleted {
                true => Ok(PairRemoval::Deleted),
                false => Ok(PairRemoval::Absent),
            }
        }
        Ownership::Foreign(why) => Ok(PairRemoval::NotOurs(format!(
            "host interface {name} is not academy's ({why}); it was left alone"
        ))),
    }
}

/// The link group in which the removal gathers an attachment's links that go together
/// (its host veth and its ifb), so that one request deletes them and the kernel waits
/// out its grace periods once (a DEL with a bandwidth limit took 2.78 times one without
/// when each went alone). A mark set only by the removal, just before the deletion:
/// no live attachment's link is ever in such a group, so two attachments whose groups
/// collide can at worst delete each other's links that are being deleted anyway.
/// Derived from the host veth's name (31 of its 44 hash bits) with the top bit set:
/// operators number groups from 0 up (`ip link set group`, /etc/iproute2/group), and
/// the kernel refuses the whole deletion, deleting nothing, if a physical link is in it.
pub fn removal_group(who: &Attachment) -> u32 {
    let name = who.host_name();
    let bits = u32::from_str_radix(&name[4..12], 16).unwrap_or(0);
    0x8000_0000 | (bits & 0x7fff_ffff)
}

/// Whether `link`, found under the attachment's host veth name, is its.
pub fn is_own_pair(link: &Link, who: &Attachment) -> bool {
    matches!(
        attachment::ownership(link, &who.alias()),
        Ownership::Ours | Ownership::OursUnlabelled
    )
}

/// Deletes a link; one that is already gone is not an error (DEL is idempotent).
pub fn delete_if_present(nl: &mut Netlink, index: u32) -> Result<bool> {
    match nl.delete_link(index) {
        Ok(()) => Ok(true),
        Err(e) if e.is(libc::ENODEV) => Ok(false),
        Err(e) => Err(e.into()),
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
    let [mac] = random_macs();
    mac
}

/// `N` random MACs from one getrandom (a pair's two ends: a syscall fewer per ADD).
pub fn random_macs<const N: usize>() -> [[u8; 6]; N] {
    let mut macs = [[0u8; 6]; N];
    if !crate::random::fill(macs.as_flattened_mut()) {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ u128::from(std::process::id()) << 64;
        for (i, mac) in macs.iter_mut().enumerate() {
            let varied = nanos.wrapping_add(i as u128).to_le_bytes();
            mac.copy_from_slice(&varied[..6]);
        }
    }
    for mac in &mut macs {
        mac[0] = (mac[0] & 0xfe) | 0x02;
    }
    macs
}

/// DEL of a container the reference bridge made (before its network was converted):
/// its interface `who.ifname` in `netns`, when that is a veth whose peer is a port of
/// `bridge` in this (the host's) netns and not academy's. The reference names its host
/// ends at random, so the pair is found from the container's side: IFLA_LINK of the
/// container end is the peer's index here, and the peer's own IFLA_LINK must point back.
/// The netns is entered once, to read; the pair is deleted through its host end. None
/// when there is nothing of the reference's (no netns, no such interface, academy's own
/// pair, which the veth step removes). Returns "IFNAME (peer HOST)".
pub fn remove_reference_interface(
    nl: &mut Netlink,
    bridge: &str,
    who: &Attachment,
    netns: &str,
) -> Result<Option<String>> {
    if netns.is_empty() {
        return Ok(None);
    }
    // academy's pair of this attachment: the common DEL, without entering the netns.
    if let Some(link) = nl.link(&who.host_name())? {
        if !matches!(
            attachment::ownership(&link, &who.alias()),
            Ownership::Foreign(_)
        ) {
            return Ok(None);
        }
    }
    let netns = match Netns::open(netns) {
        Ok(n) => n,
        Err(crate::netns::OpenError::Missing) => return Ok(None),
        // Not a netns at all: no interface of the container's can be there.
        Err(crate::netns::OpenError::Unusable(_)) => return Ok(None),
    };
    let ifname = who.ifname;
    let container_end = netns.run(|| {
        let mut inside = Netlink::open()?;
        let Some(link) = inside.link(ifname)? else {
            return Ok(None);
        };
        if link.kind != LinkKind::Veth {
            return Ok(None);
        }
        Ok(inside.veth_peer(link.index)?.map(|peer| (link.index, peer)))
    })?;
    let Some((index, peer)) = container_end else {
        return Ok(None);
    };
    let Some(bridge) = nl.link(bridge)? else {
        return Ok(None);
    };
    let Some(host) = nl.links()?.into_iter().find(|l| l.index == peer) else {
        return Ok(None);
    };
    let academy_s = host
        .alias
        .as_deref()
        .is_some_and(|a| attachment::owner(a).is_some());
    if host.kind != LinkKind::Veth
        || host.controller != Some(bridge.index)
        || academy_s
        || nl.veth_peer(host.index)? != Some(index)
    {
        return Ok(None);
    }
    match delete_if_present(nl, host.index)? {
        true => Ok(Some(format!("{ifname} (peer {})", host.name))),
        false => Ok(None),
    }
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
