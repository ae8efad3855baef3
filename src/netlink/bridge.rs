//! Bridge VLAN filtering and bridge port flags, over rtnetlink: what `bridge vlan` and
//! `ip link set ... type bridge_slave isolated on|hairpin on` do, without their binaries. Beside
//! route/ because it speaks netlink-packet-route too; the rest of academy sees only
//! `VlanEntry`, `PortState` and plain numbers.
//!
//! A port's VLAN entries live in the AF_BRIDGE family: RTM_SETLINK/RTM_DELLINK with
//! IFLA_AF_SPEC holding IFLA_BRIDGE_VLAN_INFO, and a dump with RTEXT_FILTER_BRVLAN to
//! read them (the kernel has no per-link GET in that family, and refuses a dump filtered
//! by index under strict checking).

use netlink_packet_core::DefaultNla;
use netlink_packet_route::link::{
    AfSpecBridge, BridgeVlanInfo, BridgeVlanInfoFlags, InfoBridge, InfoBridgePort, InfoData,
    InfoKind, InfoPortData, InfoPortKind, LinkAttribute, LinkExtentMask, LinkInfo, LinkMessage,
    LinkProtoInfoBridge,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::route::Netlink;
use super::socket::{Await, NlResult};

/// IFLA_BRPORT_MODE (uapi linux/if_link.h): the port's hairpin flag. netlink-packet-route
/// 0.34 names it only inside IFLA_INFO_SLAVE_DATA, not in IFLA_PROTINFO.
const IFLA_BRPORT_MODE: u16 = 4;

/// One VLAN of a bridge port, as `bridge vlan show` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct VlanEntry {
    pub vid: u16,
    /// Untagged frames arriving on the port join this VLAN.
    pub pvid: bool,
    /// Frames of this VLAN leave the port untagged.
    pub untagged: bool,
}

impl VlanEntry {
    pub fn tagged(vid: u16) -> Self {
        VlanEntry {
            vid,
            pvid: false,
            untagged: false,
        }
    }

    pub fn access(vid: u16) -> Self {
        VlanEntry {
            vid,
            pvid: true,
            untagged: true,
        }
    }
}

/// What the kernel has for one bridge port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortState {
    /// Sorted by vid.
    pub vlans: Vec<VlanEntry>,
    pub isolated: bool,
}

impl Netlink {
    /// Whether bridge `index` filters by VLAN (None: the kernel does not say, i.e. it
    /// has no VLAN filtering at all).
    pub fn vlan_filtering(&mut self, index: u32) -> NlResult<Option<bool>> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        let replies = self.request(
            RouteNetlinkMessage::GetLink(msg),
            Await::One,
            &format!("look up bridge #{index}"),
        )?;
        Ok(replies.iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(link) => bridge_info(link).find_map(|i| match i {
                InfoBridge::VlanFiltering(on) => Some(*on),
                _ => None,
            }),
            _ => None,
        }))
    }

    /// Turns VLAN filtering on for an existing bridge. EOPNOTSUPP on a kernel built
    /// without CONFIG_BRIDGE_VLAN_FILTERING.
    pub fn set_vlan_filtering(&mut self, index: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Bridge),
            LinkInfo::Data(InfoData::Bridge(vec![InfoBridge::VlanFiltering(true)])),
        ]));
        self.change_link(msg, &format!("turn on VLAN filtering of bridge #{index}"))
    }

    /// Adds VLANs to bridge port `port` in one request (`bridge vlan add dev PORT vid
    /// ...`). Runs of tagged vids go as ranges, so a trunk of 4094 ids is a few bytes.
    pub fn add_port_vlans(&mut self, port: u32, entries: &[VlanEntry]) -> NlResult<()> {
        let msg = port_vlan_message(port, &vlan_infos(entries));
        let vids: Vec<String> = entries.iter().map(|e| e.vid.to_string()).collect();
        self.request(
            RouteNetlinkMessage::SetLink(msg),
            Await::Ack,
            &format!("add VLANs {} to bridge port #{port}", vids.join(",")),
        )
        .map(drop)
    }

    /// Removes VLANs from bridge port `port` (`bridge vlan del dev PORT vid ...`).
    pub fn delete_port_vlans(&mut self, port: u32, vids: &[u16]) -> NlResult<()> {
        let entries: Vec<VlanEntry> = vids.iter().map(|v| VlanEntry::tagged(*v)).collect();
        let msg = port_vlan_message(port, &vlan_infos(&entries));
        let vids: Vec<String> = vids.iter().map(u16::to_string).collect();
        self.request(
            RouteNetlinkMessage::DelLink(msg),
            Await::Ack,
            &format!("remove VLANs {} from bridge port #{port}", vids.join(",")),
        )
        .map(drop)
    }

    /// Sets the port's isolated flag (IFLA_BRPORT_ISOLATED): an isolated port
    /// exchanges frames only with ports that are not isolated (the bridge itself, an
    /// uplink).
    pub fn set_port_isolated(&mut self, port: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = port;
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::PortKind(InfoPortKind::Bridge),
            LinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::Isolated(
                true,
            )])),
        ]));
        self.change_link(msg, &format!("isolate bridge port #{port}"))
    }

    /// Turns on the port's hairpin mode: the bridge may send a frame back out of the
    /// port it came in on. As the reference plugin (netlink's LinkSetHairpin) does it:
    /// RTM_SETLINK in the AF_BRIDGE family, which the kernel hands to the port's bridge
    /// (br_setlink), with IFLA_BRPORT_MODE in a nested IFLA_PROTINFO.
    pub fn set_port_hairpin(&mut self, port: u32) -> NlResult<()> {
        let mut msg = LinkMessage::default();
        msg.header.interface_family = AddressFamily::Bridge;
        msg.header.index = port;
        // The crate sets NLA_F_NESTED on it, which the kernel's policy requires.
        msg.attributes.push(LinkAttribute::ProtoInfoBridge(vec![
            LinkProtoInfoBridge::Other(DefaultNla::new(IFLA_BRPORT_MODE, vec![1])),
        ]));
        self.request(
            RouteNetlinkMessage::SetLink(msg),
            Await::Ack,
            &format!("turn on hairpin mode of bridge port #{port}"),
        )
        .map(drop)
    }

    /// The port's VLAN entries and isolated flag; None when `port` is no bridge port.
    pub fn port_state(&mut self, port: u32) -> NlResult<Option<PortState>> {
        let mut msg = LinkMessage::default();
        msg.header.interface_family = AddressFamily::Bridge;
        msg.attributes
            .push(LinkAttribute::ExtMask(vec![LinkExtentMask::Brvlan]));
        let replies = self.request(
            RouteNetlinkMessage::GetLink(msg),
            Await::Dump,
            "list bridge ports and their VLANs",
        )?;
        let Some(link) = replies.iter().find_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) if l.header.index == port => Some(l),
            _ => None,
        }) else {
            return Ok(None);
        };
        let mut state = PortState::default();
        for attr in &link.attributes {
            if let LinkAttribute::AfSpecBridge(specs) = attr {
                for spec in specs {
                    if let AfSpecBridge::VlanInfo(info) = spec {
                        state.vlans.push(VlanEntry {
                            vid: info.vid,
                            pvid: info.flags.contains(BridgeVlanInfoFlags::Pvid),
                            untagged: info.flags.contains(BridgeVlanInfoFlags::Untagged),
                        });
                    }
                }
            }
        }
        state.vlans.sort();
        state.isolated = self.isolated(port)?;
        Ok(Some(state))
    }

    /// The isolated flag, from the link's bridge port data.
    fn isolated(&mut self, port: u32) -> NlResult<bool> {
        let mut msg = LinkMessage::default();
        msg.header.index = port;
        let replies = self.request(
            RouteNetlinkMessage::GetLink(msg),
            Await::One,
            &format!("look up bridge port #{port}"),
        )?;
        Ok(replies.iter().any(|m| match m {
            RouteNetlinkMessage::NewLink(link) => link.attributes.iter().any(|a| match a {
                LinkAttribute::LinkInfo(infos) => infos.iter().any(|i| match i {
                    LinkInfo::PortData(InfoPortData::BridgePort(attrs)) => attrs
                        .iter()
                        .any(|p| matches!(p, InfoBridgePort::Isolated(true))),
                    _ => false,
                }),
                _ => false,
            }),
            _ => false,
        }))
    }
}

fn bridge_info(link: &LinkMessage) -> impl Iterator<Item = &InfoBridge> {
    link.attributes
        .iter()
        .filter_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => Some(infos),
            _ => None,
        })
        .flatten()
        .filter_map(|i| match i {
            LinkInfo::Data(InfoData::Bridge(attrs)) => Some(attrs),
            _ => None,
        })
        .flatten()
}

fn port_vlan_message(port: u32, infos: &[BridgeVlanInfo]) -> LinkMessage {
    let mut msg = LinkMessage::default();
    msg.header.interface_family = AddressFamily::Bridge;
    msg.header.index = port;
    msg.attributes.push(LinkAttribute::AfSpecBridge(
        infos.iter().map(|i| AfSpecBridge::VlanInfo(*i)).collect(),
    ));
    msg
}

/// The IFLA_BRIDGE_VLAN_INFO attributes for `entries`: a run of consecutive vids with
/// the same flags becomes a RANGE_BEGIN/RANGE_END pair (the kernel takes no pvid in a
/// range, so a pvid entry always stands alone).
fn vlan_infos(entries: &[VlanEntry]) -> Vec<BridgeVlanInfo> {
    let mut sorted = entries.to_vec();
    sorted.sort();
    sorted.dedup();
    let flags_of = |e: &VlanEntry| {
        let mut f = BridgeVlanInfoFlags::empty();
        if e.pvid {
            f |= BridgeVlanInfoFlags::Pvid;
        }
        if e.untagged {
            f |= BridgeVlanInfoFlags::Untagged;
        }
        f
    };
    let mut infos = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let first = sorted[i];
        let mut last = i;
        while !first.pvid
            && last + 1 < sorted.len()
            && sorted[last + 1].vid == sorted[last].vid + 1
            && flags_of(&sorted[last + 1]) == flags_of(&first)
        {
            last += 1;
        }
        let flags = flags_of(&first);
        if last == i {
            infos.push(BridgeVlanInfo {
                flags,
                vid: first.vid,
            });
        } else {
            infos.push(BridgeVlanInfo {
                flags: flags | BridgeVlanInfoFlags::RangeBegin,
                vid: first.vid,
            });
            infos.push(BridgeVlanInfo {
                flags: flags | BridgeVlanInfoFlags::RangeEnd,
                vid: sorted[last].vid,
            });
        }
        i = last + 1;
    }
    infos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(infos: &[BridgeVlanInfo]) -> Vec<(u16, u16)> {
        infos.iter().map(|i| (i.vid, i.flags.bits())).collect()
    }

    #[test]
    fn runs_of_tagged_vids_become_ranges() {
        let entries: Vec<VlanEntry> = [5, 6, 7, 9, 100, 101]
            .iter()
            .map(|v| VlanEntry::tagged(*v))
            .collect();
        // RANGE_BEGIN is 1<<3, RANGE_END 1<<4.
        assert_eq!(
            pairs(&vlan_infos(&entries)),
            vec![(5, 8), (7, 16), (9, 0), (100, 8), (101, 16)]
        );
    }

    #[test]
    fn an_access_vlan_stands_alone() {
        let entries = [VlanEntry::access(10), VlanEntry::tagged(11)];
        // PVID 1<<1 | UNTAGGED 1<<2.
        assert_eq!(pairs(&vlan_infos(&entries)), vec![(10, 6), (11, 0)]);
    }
}
