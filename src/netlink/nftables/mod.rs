//! nf_tables over NETLINK_NETFILTER: the masquerade behind `ipMasq`, encoded by hand
//! (the uapi is /usr/include/linux/netfilter/nf_tables.h; no crate covers it).
//!
//! academy owns one table, `inet academy`, and never touches any other (iptables-nft
//! keeps its rules in tables `ip nat`, `ip filter`, ...). In it:
//! - chain `postrouting`: type nat, hook postrouting, priority srcnat (100);
//! - per network and family, a set `<network>-v4` / `<network>-v6` of container
//!   addresses, and one rule: source in the set, destination outside every subnet of the
//!   network and not multicast: masquerade;
//! - each set element carries a comment naming its attachment, so GC can find the
//!   elements of attachments that are gone without the address store.
//!
//! Port mapping's maps, chains and rules share the table: portmap.rs; so does the
//! loopback guard of the bridges port mapping sets route_localnet on: localnet.rs; and so
//! does the isolation of the networks with `ingressPolicy` same-bridge: isolation.rs.
//!
//! Every change is one batch: one sendmsg, applied by the kernel all or nothing (split
//! only when it would not fit a sendmsg: thousands of elements). A set and its rule are
//! created in the same batch, and a rule found missing or outdated is re-created in the
//! batch that adds the elements (change.rs). What academy finds under its names is
//! judged before it is used (inspect.rs): a set of another shape, or a rule without
//! academy's comment, is someone else's and left alone.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST};

use super::nfnetlink::{attributes, encode, Attrs, Family, HEADERS_LEN};
use super::socket::{Await, NlError, NlResult, NlSocket, Subsystem};

mod attrs;
mod batch;
mod change;
mod consts;
mod digest;
mod forward;
mod inspect;
mod isolation;
mod localnet;
mod macspoof;
mod monitor;
mod objects;
mod port_elements;
mod portmap;
mod portmap_rules;
mod reference;
mod rule;
pub(super) mod step;

pub use attrs::stored_comment;
use attrs::{address_from, comment_of};
use batch::nftables_type;
pub use change::{NatChange, SetElement};
pub use consts::CHAIN;
use consts::{
    NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFTA_SET_ELEM_KEY,
    NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE,
    NFTA_SET_ELEM_USERDATA, NFT_MSG_GETGEN, NFT_MSG_GETSETELEM, TABLE,
};
pub use inspect::{MasqRule, SetShape, RULE_PREFIX};
pub use macspoof::{guard_sets, GuardedPort};
pub use monitor::{Commit, Monitor, Notice};
pub use objects::{Object, Table, TableRule};
pub use port_elements::{key_text, PortElement, PortKey};
pub use reference::{Expr, IptablesRemoval, IptablesRule, Verdict};
pub use step::Step;

/// What a family is to academy's tables (nfnetlink.rs defines it, for conntrack too).
impl Family {
    fn suffix(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::V6 => "v6",
        }
    }

    /// (nfproto, address length, source offset, destination offset in the header).
    fn layout(self) -> (u8, u32, u32, u32) {
        match self {
            Family::V4 => (NFPROTO_IPV4, 4, 12, 16),
            Family::V6 => (NFPROTO_IPV6, 16, 8, 24),
        }
    }

    fn multicast(self) -> IpNetwork {
        match self {
            Family::V4 => "224.0.0.0/4".parse().unwrap(),
            Family::V6 => "ff00::/8".parse().unwrap(),
        }
    }
}

/// One network's masquerade in one family: traffic from the set's addresses to anything
/// outside `subnets` and `non_masquerade` (and not multicast) leaves with the host's
/// address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqNetwork {
    pub network: String,
    pub family: Family,
    /// The network's own subnets.
    pub subnets: Vec<IpNetwork>,
    /// The config's `nonMasqueradeCIDRs` of this family (other nodes' pods, the cluster).
    pub non_masquerade: Vec<IpNetwork>,
}

impl MasqNetwork {
    pub fn set_name(&self) -> String {
        set_name(&self.network, self.family)
    }

    /// The rule's comment: academy's mark (RULE_PREFIX), the set, and the destinations
    /// the rule leaves alone, so that a rule made for other ranges reads as outdated:
    /// `academy ipMasq <set> except <subnets>`, then ` nonMasqueradeCIDRs <prefixes>`
    /// when the config has some of this family (without any, the comment is the one
    /// academy wrote before the key existed, so such rules stay current). Capped as
    /// every stored comment is (a network name may be 128 bytes).
    pub fn rule_comment(&self) -> String {
        stored_comment(&format!(
            "{RULE_PREFIX}{} except {}{}",
            self.set_name(),
            joined(&self.subnets),
            self.non_masquerade_tail()
        ))
    }

    /// The part of the rule's comment that names `non_masquerade` ("" without any).
    pub fn non_masquerade_tail(&self) -> String {
        match self.non_masquerade.as_slice() {
            [] => String::new(),
            some => format!(" {NON_MASQUERADE_WORD} {}", joined(some)),
        }
    }

    /// Whether a rule `comment` of academy's for this set was made for this network's
    /// nonMasqueradeCIDRs, whatever subnets it names (a delegated IPAM's subnets are
    /// known only from each ADD's addresses, so only this part is compared there). A
    /// comment capped to nft's 127 bytes no longer shows its tail: it is taken as
    /// current, as any rule of academy's is for such a network's subnets.
    pub fn non_masquerade_matches(&self, comment: &str) -> bool {
        let tail = self.non_masquerade_tail();
        if is_capped(comment) {
            return true;
        }
        match tail.as_str() {
            "" => !comment.contains(&format!(" {NON_MASQUERADE_WORD} ")),
            tail => comment.ends_with(tail),
        }
    }

    /// Every destination the rule leaves alone, in the rule's order: the network's
    /// subnets, the nonMasqueradeCIDRs, multicast.
    pub(super) fn excluded(&self) -> Vec<IpNetwork> {
        let mut all = self.subnets.clone();
        all.extend(self.non_masquerade.iter().copied());
        all.push(self.family.multicast());
        all
    }
}

/// The word of a rule comment before its nonMasqueradeCIDRs.
const NON_MASQUERADE_WORD: &str = "nonMasqueradeCIDRs";

/// Whether `comment` is a capped one (stored_comment's `#` and 32 hex digits).
fn is_capped(comment: &str) -> bool {
    let b = comment.as_bytes();
    b.len() > 33 && b[b.len() - 33] == b'#' && b[b.len() - 32..].iter().all(u8::is_ascii_hexdigit)
}

fn joined(prefixes: &[IpNetwork]) -> String {
    let texts: Vec<String> = prefixes.iter().map(|s| s.to_string()).collect();
    texts.join(",")
}

pub fn set_name(network: &str, family: Family) -> String {
    format!("{network}-{}", family.suffix())
}

/// A container address in a network's set, and the comment naming its attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqElement {
    pub address: IpAddr,
    pub comment: String,
}

pub struct Nftables {
    socket: NlSocket,
}

/// One nf_tables socket for a command's several steps, opened at the first that needs it.
/// With a socket per step, an ADD's second open and first close waited about 1 ms each
/// here (an RCU grace period), in an ADD of about 5 ms: ADD's filter, forward,
/// masquerade and port steps share this one, and a command that needs none never opens it.
#[derive(Default)]
pub struct NftablesOnDemand(Option<Nftables>);

impl NftablesOnDemand {
    pub fn get(&mut self) -> NlResult<&mut Nftables> {
        if self.0.is_none() {
            self.0 = Some(Nftables::open()?);
        }
        Ok(self.0.as_mut().expect("just opened"))
    }
}

impl Nftables {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> NlResult<Nftables> {
        Ok(Nftables {
            socket: NlSocket::open(Subsystem::NfTables)?,
        })
    }

    /// Removes the addresses from the network's sets. Nothing to remove is success.
    pub fn delete_elements(&mut self, network: &str, addresses: &[IpAddr]) -> NlResult<()> {
        match self.change_elements(network, addresses) {
            // One batch is all or nothing: one missing element (or set, or table) keeps
            // the others. Rare (a DEL repeated, a crash undone), so one at a time.
            Err(e) if e.is(libc::ENOENT) => {
                for address in addresses {
                    match self.change_elements(network, std::slice::from_ref(address)) {
                        Err(e) if !e.is(libc::ENOENT) => return Err(e),
                        _ => {}
                    }
                }
                Ok(())
            }
            other => other,
        }
    }

    /// Every element of a network's set; none when the set does not exist.
    pub fn elements(&mut self, network: &str, family: Family) -> NlResult<Vec<MasqElement>> {
        let set = set_name(network, family);
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        attrs.str(NFTA_SET_ELEM_LIST_SET, &set);
        let what = format!("list the elements of nf_tables set {TABLE} {set}");
        self.dump_in(
            NFPROTO_INET,
            NFT_MSG_GETSETELEM,
            attrs,
            &what,
            |p, found| found.extend(decode_elements(p, family)),
        )
    }

    /// One batch removing `addresses` from the network's sets (all or nothing).
    fn change_elements(&mut self, network: &str, addresses: &[IpAddr]) -> NlResult<()> {
        let change = NatChange {
            retake: addresses
                .iter()
                .map(|a| SetElement {
                    set: set_name(network, Family::of(*a)),
                    element: MasqElement {
                        address: *a,
                        comment: String::new(),
                    },
                })
                .collect(),
            ..NatChange::default()
        };
        self.apply(&change)
    }

    /// One request outside a batch (the GET messages), its replies' attributes handed to
    /// `on_reply` (the bytes after the nfgenmsg).
    fn request(
        &mut self,
        kind: u8,
        flags: u16,
        attrs: Attrs,
        awaiting: Await,
        what: &str,
        on_reply: impl FnMut(&[u8]),
    ) -> NlResult<()> {
        self.request_in(NFPROTO_INET, kind, flags, attrs, awaiting, what, on_reply)
    }

    /// Whether set `set` of academy's table in `family` holds the element whose key is
    /// `key` (its bytes as the set stores them). A missing set or table is "no".
    fn has_element(&mut self, family: u8, set: &str, key: &[u8], what: &str) -> NlResult<bool> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        attrs.str(NFTA_SET_ELEM_LIST_SET, set);
        attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
            list.nested(NFTA_LIST_ELEM, |elem| {
                elem.nested(NFTA_SET_ELEM_KEY, |k| k.put(NFTA_DATA_VALUE, key));
            });
        });
        match self.request_in(
            family,
            NFT_MSG_GETSETELEM,
            0,
            attrs,
            Await::One,
            what,
            |_| {},
        ) {
            Ok(()) => Ok(true),
            Err(e) if e.is(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A dump in `family` whose replies `collect` decodes into a list; the list is empty
    /// when the table, chain or set dumped is gone (ENOENT), as after an admin's flush.
    fn dump_in<T>(
        &mut self,
        family: u8,
        kind: u8,
        attrs: Attrs,
        what: &str,
        mut collect: impl FnMut(&[u8], &mut Vec<T>),
    ) -> NlResult<Vec<T>> {
        if !self.socket.has_received() {
            self.generation()?;
        }
        let mut found = Vec::new();
        let result = self.request_in(family, kind, NLM_F_DUMP, attrs, Await::Dump, what, |p| {
            collect(p, &mut found)
        });
        match result {
            Err(e) if e.is(libc::ENOENT) => Ok(Vec::new()),
            other => other.map(|()| found),
        }
    }

    /// One small round trip (the ruleset's generation), so that the socket's next dump
    /// comes in messages large enough for any rule (`NlSocket::has_received`).
    fn generation(&mut self) -> NlResult<()> {
        self.request_in(
            0,
            NFT_MSG_GETGEN,
            0,
            Attrs::default(),
            Await::One,
            "read the nf_tables generation",
            |_| {},
        )
    }

    /// [`Nftables::request`] to the tables of another family (macspoofchk's bridge).
    #[allow(clippy::too_many_arguments)]
    fn request_in(
        &mut self,
        family: u8,
        kind: u8,
        flags: u16,
        attrs: Attrs,
        awaiting: Await,
        what: &str,
        mut on_reply: impl FnMut(&[u8]),
    ) -> NlResult<()> {
        if attrs.too_long() {
            return Err(NlError::new(what, libc::EMSGSIZE).within(Subsystem::NfTables));
        }
        let sequence = self.socket.next_sequence();
        let mut bytes = Vec::new();
        encode(
            &mut bytes,
            nftables_type(kind),
            NLM_F_REQUEST | flags,
            sequence,
            family,
            0,
            attrs.0,
        );
        self.socket.send(&bytes, what)?;
        self.socket.receive(sequence, awaiting, what, |message| {
            if let Some(payload) = message.get(HEADERS_LEN..) {
                on_reply(payload);
            }
            Ok(())
        })
    }
}

/// The elements of one NEWSETELEM reply (attributes after the nfgenmsg).
fn decode_elements(payload: &[u8], family: Family) -> Vec<MasqElement> {
    let mut found = Vec::new();
    let lists = attributes(payload).filter(|(k, _)| *k == NFTA_SET_ELEM_LIST_ELEMENTS);
    for (_, list) in lists {
        for (_, element) in attributes(list).filter(|(k, _)| *k == NFTA_LIST_ELEM) {
            let mut address = None;
            let mut comment = String::new();
            for (kind, value) in attributes(element) {
                match kind {
                    NFTA_SET_ELEM_KEY => {
                        address = attributes(value)
                            .find(|(k, _)| *k == NFTA_DATA_VALUE)
                            .and_then(|(_, bytes)| address_from(bytes, family));
                    }
                    NFTA_SET_ELEM_USERDATA => comment = comment_of(value).unwrap_or_default(),
                    _ => {}
                }
            }
            if let Some(address) = address {
                found.push(MasqElement { address, comment });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::attrs::comment_udata;

    fn network(name: &str, subnets: &[&str], kept: &[&str]) -> MasqNetwork {
        let parse = |l: &[&str]| l.iter().map(|s| s.parse().unwrap()).collect();
        MasqNetwork {
            network: name.into(),
            family: Family::V4,
            subnets: parse(subnets),
            non_masquerade: parse(kept),
        }
    }

    /// The comment names every exclusion, so a rule made for other nonMasqueradeCIDRs
    /// reads as outdated; without any, it is the comment rules had before the key.
    #[test]
    fn the_rule_comment_names_the_non_masquerade_cidrs() {
        let plain = network("n", &["10.244.1.0/24"], &[]);
        assert_eq!(
            plain.rule_comment(),
            "academy ipMasq n-v4 except 10.244.1.0/24"
        );
        let kept = network("n", &["10.244.1.0/24"], &["10.244.0.0/16", "10.96.0.0/12"]);
        assert_eq!(
            kept.rule_comment(),
            "academy ipMasq n-v4 except 10.244.1.0/24 nonMasqueradeCIDRs 10.244.0.0/16,10.96.0.0/12"
        );
        let other = network("n", &["10.244.1.0/24"], &["10.244.0.0/16"]);
        assert_ne!(kept.rule_comment(), other.rule_comment());

        // A delegated IPAM compares the nonMasqueradeCIDRs only.
        let from_other_subnet = network("n", &["10.9.0.0/24"], &["10.244.0.0/16", "10.96.0.0/12"]);
        assert!(kept.non_masquerade_matches(&from_other_subnet.rule_comment()));
        assert!(!kept.non_masquerade_matches(&other.rule_comment()));
        assert!(!kept.non_masquerade_matches(&plain.rule_comment()));
        assert!(!plain.non_masquerade_matches(&kept.rule_comment()));
        assert!(plain.non_masquerade_matches(&network("n", &["10.9.0.0/24"], &[]).rule_comment()));

        // A long one is capped like every comment (and then taken as current by a
        // delegated IPAM, which cannot read its tail).
        let long = network(&"x".repeat(100), &["10.244.1.0/24"], &["10.244.0.0/16"]);
        let capped = long.rule_comment();
        assert_eq!(capped.len(), 127, "{capped}");
        assert_ne!(
            capped,
            network(&"x".repeat(100), &["10.244.1.0/24"], &[]).rule_comment()
        );
        assert!(plain.non_masquerade_matches(&capped));
    }

    #[test]
    fn elements_decode_from_a_set_element_reply() {
        let mut reply = Attrs::default();
        reply.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        reply.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
            list.nested(NFTA_LIST_ELEM, |e| {
                e.nested(NFTA_SET_ELEM_KEY, |k| {
                    k.put(NFTA_DATA_VALUE, &[10, 1, 2, 3])
                });
                e.put(NFTA_SET_ELEM_USERDATA, &comment_udata("owner"));
            });
        });
        let found = decode_elements(&reply.0, Family::V4);
        assert_eq!(
            found,
            vec![MasqElement {
                address: "10.1.2.3".parse().unwrap(),
                comment: "owner".into()
            }]
        );
    }
}
