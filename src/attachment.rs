//! One attachment: a container's interface on a network, (network, container id,
//! ifname). Everything academy keeps about it is named from this one value: the holder
//! of its reservations (the store's index), its host veth's name and owner alias, and
//! the owner comment of every nf_tables element academy keeps for it (`owner`); GC's
//! valid list is matched against the same parts.
//!
//! The host end of a container's veth: its name is derived from the attachment, and its
//! alias records the owner, so DEL and GC find it without the netns and academy never
//! deletes a link it did not make for that attachment.
//!
//! Name: "veth" + 11 hex digits (44 bits) of a hash of (container id, ifname). The same
//! attachment always gets the same name; the reference plugin's names are "veth" + 8 hex
//! digits, so the two never collide.
//! Alias: "academy:<network>:<container id>:<ifname>" (':' is allowed in none of the parts).

use crate::cni::env::Env;
use std::collections::HashSet;

use crate::cni::{code, Error, Result};
use crate::config::Config;
use crate::ipam::Holder;
use crate::netlink::nftables::digest::{hex, sha256};
use crate::netlink::{stored_comment, Link, LinkKind, Netlink};

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
        host_name(self.container_id, self.ifname)
    }

    pub fn alias(&self) -> String {
        owner_alias(self.network, self.container_id, self.ifname)
    }

    /// The comment every nf_tables element of this attachment carries (masquerade,
    /// published ports, MAC filter): `<network key>:<container id>:<ifname>`, as the
    /// kernel stores it. The network is part of it because the port maps are shared by
    /// every network, and as its bounded key (`network_key`): with a container id of up
    /// to 64 bytes the owner fits nft's 127 bytes whole, however long the network's name,
    /// so owners are compared whole and a network's elements are told by their key,
    /// never by a prefix of a comment that may have been cut.
    pub fn owner(&self) -> String {
        stored_comment(&format!(
            "{}:{}:{}",
            network_key(self.network),
            self.container_id,
            self.ifname
        ))
    }

    /// The comment academy wrote before the network's key, `<network>:<container
    /// id>:<ifname>` (capped past 127 bytes): still recognised, so elements made before
    /// an upgrade are removed, checked and kept by GC.
    pub fn named_owner(&self) -> String {
        stored_comment(&format!(
            "{}:{}:{}",
            self.network, self.container_id, self.ifname
        ))
    }

    /// The comment academy wrote before one format served every kind, in the
    /// per-network masquerade sets and MAC filter maps: `<container id>:<ifname>`. Still
    /// recognised, so elements made by an older academy are removed, checked and kept
    /// by GC after an upgrade.
    pub fn legacy_owner(&self) -> String {
        stored_comment(&self.holder().key())
    }

    /// Every form of owner comment this attachment's elements may carry.
    pub fn owners(&self) -> [String; 3] {
        [self.owner(), self.named_owner(), self.legacy_owner()]
    }

    /// Whether an element's comment names this attachment, in any form.
    pub fn owns(&self, comment: &str) -> bool {
        self.owners().iter().any(|o| o == comment)
    }

    /// Who holds its addresses in the network's store.
    pub fn holder(&self) -> Holder {
        Holder::new(self.container_id, self.ifname)
    }
}

/// A network's part of its attachments' owner comments: the first bytes of its name
/// (up to NETWORK_KEY_NAME, on a character boundary), '#', and 12 hex digits of the
/// SHA-256 of the whole name. Bounded (at most 33 bytes), so never cut from an owner;
/// distinct for names that share their first bytes; and readable in `nft list`.
pub fn network_key(network: &str) -> String {
    let mut end = network.len().min(NETWORK_KEY_NAME);
    while !network.is_char_boundary(end) {
        end -= 1;
    }
    let digest = hex(&sha256(network.as_bytes())[..6]);
    format!("{}#{digest}", &network[..end])
}

const NETWORK_KEY_NAME: usize = 20;

/// Whether an owner comment is of one of `network`'s attachments: its network key
/// compared whole, or (elements written before the key) the network's name.
pub fn of_network(network: &str, comment: &str) -> bool {
    let key = comment.split(':').next().unwrap_or_default();
    key == network_key(network) || comment.starts_with(&format!("{network}:"))
}

/// The container id an owner comment names (both forms with a network), when it names
/// one whole (a capped comment may have lost it: then it names none or a cut one).
pub fn container_of(comment: &str) -> Option<&str> {
    let mut parts = comment.splitn(3, ':');
    let (_network, cid, _ifname) = (parts.next()?, parts.next()?, parts.next()?);
    Some(cid)
}

pub fn host_name(container_id: &str, ifname: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325; // FNV-1a: tiny, stable across releases
    for byte in container_id
        .bytes()
        .chain(std::iter::once(0))
        .chain(ifname.bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // A final avalanche so that every bit of the 44 kept depends on every input byte.
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    format!("veth{:011x}", hash >> 20)
}

/// True for names of the form `name` produces ("veth" + 11 hex digits).
pub fn is_derived_name(name: &str) -> bool {
    name.len() == 15
        && name.starts_with("veth")
        && name[4..]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub fn owner_alias(network: &str, container_id: &str, ifname: &str) -> String {
    format!("academy:{network}:{container_id}:{ifname}")
}

/// The kernel's limit for an interface alias (IFALIASZ 256, with its NUL).
pub const MAX_ALIAS: usize = 255;

/// ADD's validation: the owner alias must fit, or the kernel refuses to label the pair
/// after it was made. The network name (up to 128 bytes) and the container id (up to
/// 200) are each valid alone, so only the pair can be checked. Code 4: it is this
/// container id that cannot join this network.
pub fn check_alias_fits(network: &str, container_id: &str, ifname: &str) -> Result<()> {
    let len = owner_alias(network, container_id, ifname).len();
    if len <= MAX_ALIAS {
        return Ok(());
    }
    Err(Error::env(format!(
        "CNI_CONTAINERID is {} bytes long: with network name {network:?} and CNI_IFNAME {ifname:?}, the host veth's owner alias would be {len} bytes, over the kernel's limit of {MAX_ALIAS}",
        container_id.len()
    ))
    .details(format!(
        "network name, container id and interface name together may be at most {} bytes; use a shorter network name",
        MAX_ALIAS - "academy:::".len()
    )))
}

/// The (network, container id, ifname) an academy alias names.
pub fn owner(alias: &str) -> Option<(&str, &str, &str)> {
    let rest = alias.strip_prefix("academy:")?;
    let mut parts = rest.splitn(3, ':');
    Some((parts.next()?, parts.next()?, parts.next()?))
}

/// Whose is this link, as far as one attachment is concerned.
#[derive(Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Made by academy for this attachment.
    Ours,
    /// A veth with this attachment's name but no alias: academy was killed between
    /// creating the pair and naming its owner (nothing else makes "veth" + 11 hex names).
    OursUnlabelled,
    /// Somebody else's: never touch it.
    Foreign(String),
}

pub fn ownership(link: &Link, expected_alias: &str) -> Ownership {
    match (&link.alias, &link.kind) {
        (Some(a), _) if a == expected_alias => Ownership::Ours,
        (None, LinkKind::Veth) => Ownership::OursUnlabelled,
        (Some(a), _) => Ownership::Foreign(format!("its alias is {a:?}")),
        (None, kind) => Ownership::Foreign(format!("it is a {kind:?} link, not academy's")),
    }
}

/// Who judges. ADD runs in the netns the runtime keeps the network in, and may judge
/// before it has (re)created the bridge (after a reboot); an operator's command may run
/// anywhere, and refuses to judge from a netns without the network's bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Add,
    Operator,
}

/// The host's links as far as this network is concerned.
pub struct HostLinks {
    names: HashSet<String>,
    /// (container id, ifname) of every link whose alias names this network.
    owners: HashSet<(String, String)>,
    /// Those links with their names, for the veths that have no reservation.
    pub owned: Vec<(String, String, String)>,
}

impl HostLinks {
    /// The links of the calling netns, refused when the network's bridge is not among
    /// them: from another netns every attachment would look leaked.
    pub fn read(nl: &mut Netlink, conf: &Config, caller: Caller) -> Result<HostLinks> {
        HostLinks::of(&nl.links()?, conf, caller)
    }

    /// As `read`, from links dumped once for many networks (a scrape, `academy status`).
    pub fn of(links: &[Link], conf: &Config, caller: Caller) -> Result<HostLinks> {
        if caller == Caller::Operator
            && !links
                .iter()
                .any(|l| l.name == conf.bridge && l.kind == LinkKind::Bridge)
        {
            return Err(Error::new(
                code::NOT_AVAILABLE,
                format!(
                    "bridge {} of network {} is not in this network namespace, so academy cannot see its attachments' veths and will not judge its reservations",
                    conf.bridge, conf.name
                ),
            )
            .details("run this in the netns that holds the bridge (the node's), e.g. nsenter -t 1 -n academy ..."));
        }
        let mut owners = HashSet::new();
        let mut owned = Vec::new();
        for link in links {
            let owner = link.alias.as_deref().and_then(owner);
            if let Some((net, cid, ifname)) = owner {
                if net == conf.name && link.kind == LinkKind::Veth {
                    owners.insert((cid.to_string(), ifname.to_string()));
                    owned.push((link.name.clone(), cid.to_string(), ifname.to_string()));
                }
            }
        }
        Ok(HostLinks {
            names: links.iter().map(|l| l.name.clone()).collect(),
            owners,
            owned,
        })
    }

    pub fn wired(&self, container_id: &str, ifname: &str) -> bool {
        // Any link under the derived name counts: an unlabelled pair is an ADD that was
        // killed while wiring, and a foreign link there is not academy's to judge.
        self.names.contains(&host_name(container_id, ifname))
            || (!self.owners.is_empty()
                && self
                    .owners
                    .contains(&(container_id.to_string(), ifname.to_string())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_valid_and_distinct() {
        let a = host_name("c1", "eth0");
        assert_eq!(a, host_name("c1", "eth0"));
        assert_eq!(a.len(), 15);
        assert!(is_derived_name(&a));
        assert!(!is_derived_name("veth1234abcd"));
        assert!(!is_derived_name("vethXXXXXXXXXXX"));
        assert_ne!(a, host_name("c1", "eth1"));
        assert_ne!(a, host_name("c2", "eth0"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(host_name("ab", "c"), host_name("a", "bc"));
        let many: std::collections::HashSet<_> = (0..20_000)
            .map(|i| host_name(&format!("container{i}"), "eth0"))
            .collect();
        assert_eq!(many.len(), 20_000);
    }

    #[test]
    fn alias_length_is_checked_before_the_kernel() {
        let fits = "n".repeat(245 - 200 - 4);
        assert!(check_alias_fits(&fits, &"c".repeat(200), "eth0").is_ok());
        assert_eq!(
            owner_alias(&fits, &"c".repeat(200), "eth0").len(),
            MAX_ALIAS
        );
        let e = check_alias_fits(&"n".repeat(128), &"c".repeat(200), "eth0").unwrap_err();
        assert_eq!(e.code, crate::cni::code::INVALID_ENVIRONMENT);
        assert!(
            e.msg.contains("CNI_CONTAINERID") && e.msg.contains("255"),
            "{}",
            e.msg
        );
    }

    /// A 128-byte network name and a 64-byte container id: the owner fits nft's 127
    /// bytes whole, so it is never cut; two long names sharing their first bytes keep
    /// distinct keys; the forms written before the key are still recognised.
    #[test]
    fn owners_fit_whole_and_name_their_network_by_its_key() {
        let (long, other) = ("n".repeat(128), format!("{}x", "n".repeat(127)));
        let cid = "c".repeat(64);
        let who = Attachment::new(&long, &cid, "eth0");
        let owner = who.owner();
        assert!(owner.len() <= 127, "{}", owner.len());
        assert_eq!(owner.split(':').count(), 3, "{owner}");
        assert_eq!(container_of(&owner), Some(cid.as_str()));
        assert_ne!(network_key(&long), network_key(&other));
        assert_eq!(network_key("podman").len(), "podman".len() + 13);
        assert!(network_key(&long).len() <= 33);
        assert!(of_network(&long, &owner));
        assert!(!of_network(&other, &owner));
        assert!(!of_network(
            &long,
            &Attachment::new(&other, &cid, "eth0").owner()
        ));
        // Written before the key: the named form, and the legacy one without a network.
        let short = Attachment::new("net", "c1", "eth0");
        assert!(short.owns("net:c1:eth0") && short.owns("c1:eth0"));
        assert!(of_network("net", "net:c1:eth0"));
        assert!(!short.owns("net:c1:eth1"));
        assert_eq!(short.owner(), format!("{}:c1:eth0", network_key("net")));
    }

    #[test]
    fn alias_round_trips() {
        let a = owner_alias("harness", "abc", "eth0");
        assert_eq!(owner(&a), Some(("harness", "abc", "eth0")));
        assert_eq!(owner("something else"), None);
    }

    /// A link as netlink reports it, with only what ownership looks at set.
    fn link(kind: LinkKind, alias: Option<&str>) -> Link {
        Link {
            index: 5,
            name: host_name("c1", "eth0"),
            kind,
            mac: None,
            mtu: None,
            up: true,
            promisc: false,
            controller: None,
            alias: alias.map(str::to_string),
            group: 0,
        }
    }

    #[test]
    fn ours_only_by_this_attachments_exact_alias_or_as_an_unlabelled_veth() {
        let mine = owner_alias("net", "c1", "eth0");
        assert_eq!(
            ownership(&link(LinkKind::Veth, Some(&mine)), &mine),
            Ownership::Ours
        );
        // DEL and undo delete an unlabelled veth of the derived name: a killed ADD's pair.
        assert_eq!(
            ownership(&link(LinkKind::Veth, None), &mine),
            Ownership::OursUnlabelled
        );
        // Another attachment's alias, even one differing only in a part's tail, and any
        // alias that is not academy's.
        for other in [
            owner_alias("net", "c2", "eth0"),
            owner_alias("net", "c1", "eth1"),
            owner_alias("net2", "c1", "eth0"),
            owner_alias("net", "c1", "eth"),
            format!("{mine} "),
            mine.to_uppercase(),
            "uplink".into(),
            String::new(),
        ] {
            match ownership(&link(LinkKind::Veth, Some(&other)), &mine) {
                Ownership::Foreign(why) => assert!(why.contains(&format!("{other:?}")), "{why}"),
                o => panic!("a veth labelled {other:?} is {o:?}, not foreign"),
            }
        }
    }

    #[test]
    fn an_unlabelled_link_of_another_kind_is_foreign() {
        let mine = owner_alias("net", "c1", "eth0");
        for kind in [
            LinkKind::Bridge,
            LinkKind::Other("dummy".into()),
            LinkKind::None,
        ] {
            match ownership(&link(kind.clone(), None), &mine) {
                Ownership::Foreign(why) => assert!(why.contains("not academy's"), "{why}"),
                o => panic!("an unlabelled {kind:?} is {o:?}, not foreign"),
            }
        }
    }

    #[test]
    fn owner_reads_only_complete_academy_aliases() {
        assert_eq!(owner("academy:n:c:eth0"), Some(("n", "c", "eth0")));
        // The ifname is the rest: a ':' there cannot come from academy, and GC compares
        // it whole against the valid list, so it never matches a listed attachment.
        assert_eq!(owner("academy:n:c:eth0:x"), Some(("n", "c", "eth0:x")));
        for alias in [
            "academy:",
            "academy:n",
            "academy:n:c",
            "Academy:n:c:eth0",
            "academyn:c:eth0",
        ] {
            assert_eq!(owner(alias), None, "{alias:?}");
        }
    }
}
