//! GC (CNI 1.1): release everything of this network that the runtime's list of valid
//! attachments does not name (an address freed while its veth lives on, or the reverse,
//! is the half-cleanup seed 004 warns about).
//!
//! Two parts. Every attachment academy finds a trace of (a host veth whose alias names
//! it, a holder index in the store) and the list does not name is removed whole, by the
//! one removal (removal.rs). Then what names no whole attachment is swept by kind:
//!
//! - a veth with academy's derived name but no alias (an ADD killed between creating
//!   the pair and labelling it), on this network's bridge;
//! - every kind's nf_tables elements (firewall::KINDS) whose owner comment is no valid
//!   attachment's, on one socket; comments are capped by the kernel, so they are
//!   compared, never parsed back into an attachment;
//! - reservations no index names (host-local's on a shared store, legacy id-only files,
//!   an ADD killed before its index was written) and abandoned temp files;
//! - for a delegated IPAM, that plugin's own GC;
//! - the network's own nf_tables objects, when it is left with no attachment.
//!
//! GC trusts only the list. It never guesses liveness from other sources (a netns that
//! still exists, a recent file): Antrea freed in-use addresses by doing so. An empty list
//! is meaningful and frees everything; a missing list is refused.

use std::collections::{BTreeSet, HashSet};

use crate::addressing;
use crate::attachment;
use crate::attachment::Attachment;
use crate::cni::env::Env;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::firewall::{network, Live, Sweeping, KINDS};
use crate::ipam::Store;
use crate::netlink::{Link, LinkKind, Netlink, NftablesOnDemand};
use crate::removal::{self, Reservations, Target};
use crate::wire;

pub fn gc(env: &Env, conf: &Config) -> Result<()> {
    let valid = conf.valid_attachments.as_ref().ok_or_else(|| {
        Error::config("GC needs cni.dev/valid-attachments in the network config").details(
            "an empty list frees everything; academy will not guess which attachments are live",
        )
    })?;
    let mut errors = Vec::new();

    // One socket and one dump of the links for what GC reads of them: the stale
    // attachments' aliases, and whether any veth on the bridge is unlabelled.
    let (mut nl, links) = match Netlink::open().and_then(|mut nl| {
        let links = nl.links()?;
        Ok((nl, links))
    }) {
        Ok((nl, links)) => (Some(nl), links),
        Err(e) => {
            errors.push(e.into());
            (None, Vec::new())
        }
    };
    let stale = stale_attachments(conf, valid, &links, &mut errors);
    let targets = stale
        .iter()
        .map(|(cid, ifname)| Target {
            who: Attachment::new(&conf.name, cid, ifname),
            reservations: Reservations::Indexed,
        })
        .collect();
    let report = removal::attachments(conf, targets);
    for veth in &report.veths {
        crate::log::debug(format_args!("GC deleted host veth {veth}"));
    }
    for (address, holder) in &report.freed {
        crate::log::debug(format_args!("GC released {address} (held by {holder})"));
    }
    errors.extend(report.errors);

    if let Some(nl) = nl.as_mut() {
        sweep_unlabelled(nl, conf, valid, &links, &mut errors);
    }
    sweep_nftables(conf, valid, &mut errors);
    addressing::gc(env, conf, &mut errors);
    // Records of nodes that are gone: no invocation of another node lists them.
    network::look_at_every_record();
    // Last: a network GC left with no attachment loses its own objects too.
    errors.extend(removal::network_if_unused(conf).err());

    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        n => {
            let code = errors[0].code;
            let all: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(Error::new(
                code,
                format!("GC finished with {n} errors: {}", all.join("; ")),
            ))
        }
    }
}

/// The attachments of this network that academy has a trace of and the list does not
/// name: host veths (of `links`) by alias, holder indexes in academy's store.
fn stale_attachments(
    conf: &Config,
    valid: &HashSet<(String, String)>,
    links: &[Link],
    errors: &mut Vec<Error>,
) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for link in links {
        if let Stale::Attachment(cid, ifname) = stale(link, conf, None, valid, &HashSet::new()) {
            found.insert((cid, ifname));
        }
    }
    if let Some(b) = conf.builtin() {
        match Store::open(&b.data_dir, &conf.name).and_then(|s| s.indexed_holders()) {
            Ok(holders) => found.extend(holders.into_iter().map(|h| (h.container_id, h.ifname))),
            Err(e) => errors.push(e),
        }
    }
    found.retain(|a| !valid.contains(a));
    found
}

/// Deletes the unlabelled veths of this network (derived name, no alias, on its bridge)
/// whose attachment is not valid. An error on one link is recorded and the sweep goes on.
///
/// An unlabelled veth names no network, and an ADD of any network on the bridge has one
/// between creating its pair and labelling it: the links are judged, and deleted, only
/// under the bridge's lock held whole, so with no ADD on the bridge. While one is, the
/// sweep is left to a later GC (the leftover of a killed ADD harms nothing meanwhile).
/// `first_look` is GC's dump from before its removals: with nothing unlabelled there,
/// the common case, the sweep takes no lock and sends nothing.
fn sweep_unlabelled(
    nl: &mut Netlink,
    conf: &Config,
    valid: &HashSet<(String, String)>,
    first_look: &[Link],
    errors: &mut Vec<Error>,
) {
    let valid_names: HashSet<String> = valid
        .iter()
        .map(|(cid, ifname)| Attachment::new(&conf.name, cid, ifname).host_name())
        .collect();
    let unlabelled = |links: &[Link]| -> Vec<(u32, String)> {
        let bridge = links
            .iter()
            .find(|l| l.name == conf.bridge && l.kind == LinkKind::Bridge)
            .map(|l| l.index);
        links
            .iter()
            .filter(|l| stale(l, conf, bridge, valid, &valid_names) == Stale::Unlabelled)
            .map(|l| (l.index, l.name.clone()))
            .collect()
    };
    if unlabelled(first_look).is_empty() {
        return;
    }
    let _no_add = match network::no_add_on_bridge(conf) {
        Ok(lock) => lock,
        Err(network::AddOnBridge) => {
            let bridge = &conf.bridge;
            crate::log::debug(format_args!(
                "GC left the unlabelled veths on {bridge} to a later GC: an ADD is on it"
            ));
            return;
        }
    };
    let links = match nl.links() {
        Ok(l) => l,
        Err(e) => return errors.push(e.into()),
    };
    for (index, name) in unlabelled(&links) {
        match wire::delete_if_present(nl, index) {
            Ok(_) => crate::log::debug(format_args!("GC deleted host veth {name} (unlabelled)")),
            Err(e) => errors.push(e.context(format!("GC could not delete {name}"))),
        }
    }
}

/// The by-kind sweeps of nf_tables, on one socket: every kind's elements whose owner is
/// no valid attachment. Returns what they removed, in words. Also `academy install`'s
/// sweep after a rollback (cli/install.rs), with the store's holders as the valid list.
pub fn sweep_nftables(
    conf: &Config,
    valid: &HashSet<(String, String)>,
    errors: &mut Vec<Error>,
) -> Vec<String> {
    let mut nft = NftablesOnDemand::default();
    let live = Live::of(conf, valid);
    let mut removed = Vec::new();
    let mut sweeping = Sweeping {
        conf,
        nft: &mut nft,
        live: &live,
        errors,
        removed: &mut removed,
    };
    for kind in KINDS {
        kind.sweep(&mut sweeping);
    }
    removed
}

/// What GC makes of a host link.
#[derive(Debug, PartialEq, Eq)]
enum Stale {
    Keep,
    /// A veth whose alias names an attachment of this network the list does not name.
    Attachment(String, String),
    /// A veth with no alias: an ADD was killed between creating the pair and labelling
    /// it. The pair was born attached to this network's bridge under a derived name,
    /// which is how it is recognised.
    Unlabelled,
}

fn stale(
    link: &Link,
    conf: &Config,
    bridge: Option<u32>,
    valid: &HashSet<(String, String)>,
    valid_names: &HashSet<String>,
) -> Stale {
    if link.kind != LinkKind::Veth {
        return Stale::Keep;
    }
    match link.alias.as_deref().map(attachment::owner) {
        Some(Some((network, cid, ifname))) => {
            let key = (cid.to_string(), ifname.to_string());
            if network == conf.name && !valid.contains(&key) {
                Stale::Attachment(key.0, key.1)
            } else {
                Stale::Keep
            }
        }
        // Someone else's alias: not academy's.
        Some(None) => Stale::Keep,
        None if attachment::is_derived_name(&link.name)
            && bridge.is_some()
            && link.controller == bridge
            && !valid_names.contains(&link.name) =>
        {
            Stale::Unlabelled
        }
        None => Stale::Keep,
    }
}

#[cfg(test)]
mod tests {
    //! GC's staleness test decides which host veths it deletes: every way a link can look,
    //! without root (no kernel, only the decision).

    use std::collections::HashSet;

    use super::{stale as verdict, Stale};
    use crate::attachment;
    use crate::config::Config;
    use crate::netlink::{Link, LinkKind};

    /// The index of this network's bridge in the cases below.
    const BRIDGE: Option<u32> = Some(7);

    fn conf() -> Config {
        Config::parse(
            br#"{"cniVersion":"1.1.0","name":"net-a","type":"academy","bridge":"br-a",
                 "subnet":"10.98.0.0/24"}"#,
        )
        .expect("the test config parses")
    }

    fn veth(name: &str, alias: Option<&str>, controller: Option<u32>) -> Link {
        Link {
            index: 42,
            name: name.into(),
            kind: LinkKind::Veth,
            mac: None,
            mtu: None,
            up: true,
            promisc: false,
            controller,
            alias: alias.map(str::to_string),
            group: 0,
        }
    }

    /// Whether GC would delete `link` with "live"/eth0 the only valid attachment.
    fn stale(link: &Link, bridge: Option<u32>) -> bool {
        let valid: HashSet<(String, String)> = [("live".to_string(), "eth0".to_string())].into();
        let valid_names: HashSet<String> = [attachment::host_name("live", "eth0")].into();
        verdict(link, &conf(), bridge, &valid, &valid_names) != Stale::Keep
    }

    #[test]
    fn a_labelled_veth_is_stale_only_when_its_network_is_ours_and_it_is_not_listed() {
        let named = |cid: &str, ifname: &str| attachment::host_name(cid, ifname);
        let listed = veth(
            &named("live", "eth0"),
            Some("academy:net-a:live:eth0"),
            BRIDGE,
        );
        assert!(!stale(&listed, BRIDGE), "a listed attachment's veth");

        let dead = veth(
            &named("dead", "eth0"),
            Some("academy:net-a:dead:eth0"),
            BRIDGE,
        );
        assert!(
            stale(&dead, BRIDGE),
            "an unlisted attachment of this network"
        );

        // Listed is (container id, ifname), not the container alone.
        let other_if = veth(
            &named("live", "net1"),
            Some("academy:net-a:live:net1"),
            BRIDGE,
        );
        assert!(
            stale(&other_if, BRIDGE),
            "the listed container's other ifname"
        );

        // The alias, not the bridge, says whose it is: a moved veth is still judged by it,
        // and a veth on this bridge labelled for another network is that network's to judge.
        let elsewhere = veth(
            &named("dead", "eth0"),
            Some("academy:net-a:dead:eth0"),
            Some(9),
        );
        assert!(
            stale(&elsewhere, BRIDGE),
            "an unlisted attachment off the bridge"
        );
        for network in ["net-b", "net-a-2", "net", "NET-A"] {
            let alias = format!("academy:{network}:dead:eth0");
            let theirs = veth(&named("dead", "eth0"), Some(&alias), BRIDGE);
            assert!(!stale(&theirs, BRIDGE), "a veth of network {network}");
        }
    }

    #[test]
    fn a_veth_with_somebody_elses_alias_is_never_stale() {
        let name = attachment::host_name("dead", "eth0");
        for alias in [
            "",
            "uplink",
            "academy",
            "academy:",
            "academy:net-a",
            "academy:net-a:dead",
            "Academy:net-a:dead:eth0",
            "xacademy:net-a:dead:eth0",
        ] {
            let link = veth(&name, Some(alias), BRIDGE);
            assert!(!stale(&link, BRIDGE), "alias {alias:?}");
        }
    }

    #[test]
    fn an_unlabelled_veth_is_stale_only_under_a_derived_name_on_this_bridge_unlisted() {
        // An ADD killed between creating the pair and labelling it.
        let orphan = veth(&attachment::host_name("dead", "eth0"), None, BRIDGE);
        assert!(stale(&orphan, BRIDGE), "an orphaned pair on the bridge");

        // An ADD of a listed attachment between those two steps right now.
        let in_flight = veth(&attachment::host_name("live", "eth0"), None, BRIDGE);
        assert!(
            !stale(&in_flight, BRIDGE),
            "a listed attachment's unlabelled pair"
        );

        // The reference bridge plugin's names (veth + 8 hex) and anything else not derived.
        for name in [
            "veth1234abcd",
            "vethABCDEF01234",
            "eth0",
            "veth0123456789a0",
        ] {
            let link = veth(name, None, BRIDGE);
            assert!(!stale(&link, BRIDGE), "unlabelled {name}");
        }

        // Not a port of this network's bridge: another bridge's, or nobody's.
        for controller in [Some(9), None] {
            let link = veth(&attachment::host_name("dead", "eth0"), None, controller);
            assert!(
                !stale(&link, BRIDGE),
                "unlabelled, controller {controller:?}"
            );
        }
    }

    #[test]
    fn without_the_bridge_no_unlabelled_veth_is_stale() {
        // No bridge of this network: a bridgeless veth must not match "no bridge" (None ==
        // None), or GC would delete every unattached derived-name veth on the host.
        let loose = veth(&attachment::host_name("dead", "eth0"), None, None);
        assert!(!stale(&loose, None));
        let labelled = veth(
            &attachment::host_name("dead", "eth0"),
            Some("academy:net-a:dead:eth0"),
            None,
        );
        assert!(stale(&labelled, None), "the alias still decides");
    }
}
