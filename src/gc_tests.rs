//! GC's staleness test decides which host veths it deletes: every way a link can look,
//! without root (no kernel, only the decision).

use std::collections::HashSet;

use super::{stale as verdict, Stale};
use crate::config::Config;
use crate::hostveth;
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
    }
}

/// Whether GC would delete `link` with "live"/eth0 the only valid attachment.
fn stale(link: &Link, bridge: Option<u32>) -> bool {
    let valid: HashSet<(String, String)> = [("live".to_string(), "eth0".to_string())].into();
    let valid_names: HashSet<String> = [hostveth::name("live", "eth0")].into();
    verdict(link, &conf(), bridge, &valid, &valid_names) != Stale::Keep
}

#[test]
fn a_labelled_veth_is_stale_only_when_its_network_is_ours_and_it_is_not_listed() {
    let named = |cid: &str, ifname: &str| hostveth::name(cid, ifname);
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
    let name = hostveth::name("dead", "eth0");
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
    let orphan = veth(&hostveth::name("dead", "eth0"), None, BRIDGE);
    assert!(stale(&orphan, BRIDGE), "an orphaned pair on the bridge");

    // An ADD of a listed attachment between those two steps right now.
    let in_flight = veth(&hostveth::name("live", "eth0"), None, BRIDGE);
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
        let link = veth(&hostveth::name("dead", "eth0"), None, controller);
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
    let loose = veth(&hostveth::name("dead", "eth0"), None, None);
    assert!(!stale(&loose, None));
    let labelled = veth(
        &hostveth::name("dead", "eth0"),
        Some("academy:net-a:dead:eth0"),
        None,
    );
    assert!(stale(&labelled, None), "the alias still decides");
}
