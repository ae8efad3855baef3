//! The container's bridge port beyond membership, as the reference bridge plugin sets
//! it: VLANs (`vlan`: an untagged access port; `vlanTrunk`: tagged VLANs), the default
//! VLAN entry kept or removed (`preserveDefaultVlan`), isolation (`portIsolation`);
//! and, for `vlan` with `isGateway`, the VLAN's gateway interface `<bridge>.<vid>`.
//! ADD sets these after the pair exists; CHECK compares them; DEL has nothing to do
//! (a port's VLAN entries and flags go with the port).

use std::fs::File;
use std::os::fd::AsFd;

use ipnetwork::IpNetwork;

use crate::cni::{code, Error, Result};
use crate::config::{vlan_gateway_name, PortSpec};
use crate::netlink::{Link, Netlink, VethPair, VlanEntry};
use crate::wire::{self, random_mac, vanished};

/// The refusal on a kernel built without bridge VLAN filtering.
pub fn no_vlan_filtering(kernel_said: &str) -> Error {
    Error::new(
        code::UNSUPPORTED_FIELD,
        "fields vlan and vlanTrunk need bridge VLAN filtering, which this kernel lacks (CONFIG_BRIDGE_VLAN_FILTERING is not set)",
    )
    .details(format!(
        "the kernel answered: {kernel_said}; run a kernel with CONFIG_BRIDGE_VLAN_FILTERING=y (Debian's stock kernels have it), or remove vlan and vlanTrunk from the network config"
    ))
}

/// The existing bridge filters by VLAN: switched on if it does not yet (its ports so
/// far stay in the default VLAN, which every port joins when it is added).
pub fn ensure_vlan_filtering(nl: &mut Netlink, bridge: &Link) -> Result<()> {
    match nl.vlan_filtering(bridge.index)? {
        Some(true) => Ok(()),
        // The kernel reports IFLA_BR_VLAN_FILTERING only when built with it.
        None => Err(no_vlan_filtering(&format!(
            "bridge {} reports no VLAN filtering attribute",
            bridge.name
        ))),
        Some(false) => match nl.set_vlan_filtering(bridge.index) {
            Err(e) if e.is(libc::EOPNOTSUPP) => Err(no_vlan_filtering(&e.to_string())),
            other => other.map_err(Error::from),
        },
    }
}

/// The entries `spec` asks for on the container's port.
pub fn wanted_vlans(spec: &PortSpec) -> Vec<VlanEntry> {
    match spec.vlan {
        Some(vid) => vec![VlanEntry::access(vid)],
        None => spec.trunk.iter().map(|v| VlanEntry::tagged(*v)).collect(),
    }
}

/// Isolation and VLANs on bridge port `port` (`bridge link set dev PORT isolated on;
/// bridge vlan del dev PORT vid 1; bridge vlan add dev PORT vid N pvid untagged`).
pub fn configure(nl: &mut Netlink, port: u32, spec: &PortSpec) -> Result<()> {
    if spec.isolated {
        nl.set_port_isolated(port)?;
    }
    if !spec.vlan_filtering() {
        return Ok(());
    }
    if !spec.preserve_default_vlan {
        let present: Vec<u16> = nl
            .port_state(port)?
            .unwrap_or_default()
            .vlans
            .iter()
            .map(|v| v.vid)
            .collect();
        if !present.is_empty() {
            nl.delete_port_vlans(port, &present)?;
        }
    }
    nl.add_port_vlans(port, &wanted_vlans(spec))?;
    Ok(())
}

/// CHECK: the port has the entries `spec` asks for with their flags, no other entry
/// when the default VLAN was to go, and the isolated flag as configured.
pub fn check(
    nl: &mut Netlink,
    host: &Link,
    spec: &PortSpec,
    diffs: &mut Vec<String>,
) -> Result<()> {
    let Some(state) = nl.port_state(host.index)? else {
        diffs.push(format!("host veth {} is not a bridge port", host.name));
        return Ok(());
    };
    if state.isolated != spec.isolated {
        diffs.push(format!(
            "host veth {} is {} but the config says portIsolation {}",
            host.name,
            if state.isolated {
                "isolated"
            } else {
                "not isolated"
            },
            spec.isolated
        ));
    }
    if !spec.vlan_filtering() {
        return Ok(());
    }
    let wanted = wanted_vlans(spec);
    for want in &wanted {
        match state.vlans.iter().find(|v| v.vid == want.vid) {
            None => diffs.push(format!(
                "VLAN {} is missing from host veth {}",
                want.vid, host.name
            )),
            Some(have) if have != want => diffs.push(format!(
                "VLAN {} on host veth {} is {} but should be {}",
                want.vid,
                host.name,
                describe(have),
                describe(want)
            )),
            Some(_) => {}
        }
    }
    if !spec.preserve_default_vlan {
        let extra: Vec<String> = state
            .vlans
            .iter()
            .filter(|v| !wanted.iter().any(|w| w.vid == v.vid))
            .map(|v| v.vid.to_string())
            .collect();
        if !extra.is_empty() {
            diffs.push(format!(
                "host veth {} has VLANs {} besides the configured ones (preserveDefaultVlan is false)",
                host.name,
                extra.join(",")
            ));
        }
    }
    Ok(())
}

fn describe(v: &VlanEntry) -> &'static str {
    match (v.pvid, v.untagged) {
        (true, true) => "pvid untagged",
        (true, false) => "pvid tagged",
        (false, true) => "untagged",
        (false, false) => "tagged",
    }
}

/// `vlan` with `isGateway`, as the reference does it: the gateway addresses go on
/// `<bridge>.<vid>`, the host end of a veth pair whose other end is an access port of
/// the VLAN on the bridge. Shared by every container of the VLAN and kept, like the
/// bridge. Returns the interface.
pub fn ensure_vlan_gateway(
    nl: &mut Netlink,
    bridge: &Link,
    spec: &PortSpec,
    vid: u16,
    gateways: &[IpNetwork],
    force_address: bool,
) -> Result<Link> {
    let name = vlan_gateway_name(&bridge.name, vid);
    let link = match nl.link(&name)? {
        Some(link) => link,
        None => create_vlan_gateway(nl, bridge, &name)?,
    };
    // Up is the last step of making it, so one found down was left half made (a killed
    // or failed ADD) or is being made by another ADD right now: setting its port again
    // is harmless either way, and repairs the first case.
    if !link.up {
        let port = nl.veth_peer(link.index)?.ok_or_else(|| {
            Error::new(
                code::HOST_NAME_TAKEN,
                format!("{name}, the gateway interface of VLAN {vid}, is not a veth"),
            )
            .details("academy (and the reference plugin) put a VLAN's gateway on a veth of that name; remove the link in the way")
        })?;
        let access = PortSpec {
            trunk: Vec::new(),
            isolated: false,
            ..spec.clone()
        };
        configure(nl, port, &access)?;
        nl.set_up(link.index)?;
    }
    wire::ensure_gateways(nl, &link, gateways, force_address)?;
    Ok(link)
}

/// The pair, down: `name` in the host netns, its peer (a random `veth` name, as the
/// reference's) a port of the bridge.
fn create_vlan_gateway(nl: &mut Netlink, bridge: &Link, name: &str) -> Result<Link> {
    // The main thread never leaves the host netns: this is where both ends go.
    let host_ns = File::open("/proc/thread-self/ns/net")
        .map_err(|e| Error::io("cannot open the host's network namespace", &e))?;
    let port_name = format!("veth{}", hex(&random_mac()[2..]));
    let pair = VethPair {
        host_name: &port_name,
        host_mac: random_mac(),
        controller: bridge.index,
        peer_name: name,
        peer_mac: random_mac(),
        peer_netns: host_ns.as_fd(),
        mtu: bridge.mtu,
        host_up: true,
    };
    match nl.create_veth(&pair) {
        // Another ADD of this VLAN made it first.
        Err(e) if e.is(libc::EEXIST) => {}
        Err(e) => return Err(e.into()),
        Ok(()) => {}
    }
    nl.link(name)?.ok_or_else(|| vanished(name))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
