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
//! Port mapping's maps, chains and rules share the table: portmap.rs.
//!
//! Every change is one batch: one sendmsg, applied by the kernel all or nothing. A set
//! and its rule are created in the same batch, so a set never exists without its rule,
//! and adding elements (the common case) needs nothing but the elements.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST};
use netlink_sys::protocols::NETLINK_NETFILTER;

use super::socket::{Await, NlResult, NlSocket};

mod attrs;
mod batch;
mod port_elements;
mod portmap;
mod portmap_rules;
mod rule;

pub use attrs::stored_comment;
use attrs::{
    address_bytes, address_from, attributes, comment_of, comment_udata, Attrs, NFTA_DATA_VALUE,
    NFTA_LIST_ELEM,
};
use batch::{encode, nftables_type, Batch, HEADERS_LEN};
pub use port_elements::{key_text, PortElement, PortKey};
use rule::masquerade_rule;

pub const TABLE: &str = "academy";
pub const CHAIN: &str = "postrouting";

const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

// enum nf_tables_msg_types
const NFT_MSG_NEWTABLE: u8 = 0;
const NFT_MSG_NEWCHAIN: u8 = 3;
const NFT_MSG_NEWRULE: u8 = 6;
const NFT_MSG_GETRULE: u8 = 7;
const NFT_MSG_NEWSET: u8 = 9;
const NFT_MSG_NEWSETELEM: u8 = 12;
const NFT_MSG_GETSETELEM: u8 = 13;
const NFT_MSG_DELSETELEM: u8 = 14;

// Attributes, each from its own enum in nf_tables.h.
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_ID: u16 = 10;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_USERDATA: u16 = 6;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;

const NF_INET_POST_ROUTING: u32 = 4;
const NF_IP_PRI_NAT_SRC: u32 = 100;
/// nft's datatypes for set keys (nft shows the elements as addresses).
const TYPE_IPV4_ADDR: u32 = 7;
const TYPE_IPV6_ADDR: u32 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

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
/// outside `subnets` (and not multicast) leaves with the host's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasqNetwork {
    pub network: String,
    pub family: Family,
    pub subnets: Vec<IpNetwork>,
}

impl MasqNetwork {
    pub fn set_name(&self) -> String {
        set_name(&self.network, self.family)
    }

    /// The rule's comment: how CHECK recognises it among others in the chain.
    fn rule_comment(&self) -> String {
        format!("academy ipMasq {}", self.set_name())
    }
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

impl Nftables {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> NlResult<Nftables> {
        Ok(Nftables {
            socket: NlSocket::open(NETLINK_NETFILTER, "nf_tables")?,
        })
    }

    /// Removes the addresses from the network's sets. Nothing to remove is success.
    pub fn delete_elements(&mut self, network: &str, addresses: &[IpAddr]) -> NlResult<()> {
        let networks: Vec<MasqNetwork> = [Family::V4, Family::V6]
            .into_iter()
            .map(|family| MasqNetwork {
                network: network.to_string(),
                family,
                subnets: Vec::new(),
            })
            .collect();
        let elements: Vec<MasqElement> = addresses
            .iter()
            .map(|a| MasqElement {
                address: *a,
                comment: String::new(),
            })
            .collect();
        match self.change_elements(NFT_MSG_DELSETELEM, &networks, &elements) {
            // One batch is all or nothing: one missing element (or set, or table) keeps
            // the others. Rare (a DEL repeated, a crash undone), so one at a time.
            Err(e) if e.is(libc::ENOENT) => {
                for element in &elements {
                    let one = std::slice::from_ref(element);
                    match self.change_elements(NFT_MSG_DELSETELEM, &networks, one) {
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
        let mut found = Vec::new();
        let result = self.request(
            NFT_MSG_GETSETELEM,
            NLM_F_DUMP,
            attrs,
            Await::Dump,
            &what,
            |p| {
                found.extend(decode_elements(p, family));
            },
        );
        match result {
            Err(e) if e.is(libc::ENOENT) => Ok(Vec::new()),
            other => other.map(|()| found),
        }
    }

    /// Whether `address` is in its network's set.
    pub fn has_element(&mut self, network: &str, address: IpAddr) -> NlResult<bool> {
        let set = set_name(network, Family::of(address));
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        attrs.str(NFTA_SET_ELEM_LIST_SET, &set);
        attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
            list.nested(NFTA_LIST_ELEM, |elem| {
                elem.nested(NFTA_SET_ELEM_KEY, |key| {
                    key.put(NFTA_DATA_VALUE, &address_bytes(address))
                })
            })
        });
        let what = format!("look up {address} in nf_tables set {TABLE} {set}");
        match self.request(NFT_MSG_GETSETELEM, 0, attrs, Await::One, &what, |_| {}) {
            Ok(()) => Ok(true),
            Err(e) if e.is(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether the chain holds the network's masquerade rule.
    pub fn has_rule(&mut self, network: &MasqNetwork) -> NlResult<bool> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_RULE_TABLE, TABLE);
        attrs.str(NFTA_RULE_CHAIN, CHAIN);
        let wanted = network.rule_comment();
        let what = format!("list the rules of nf_tables chain {TABLE} {CHAIN}");
        let mut found = false;
        let result = self.request(
            NFT_MSG_GETRULE,
            NLM_F_DUMP,
            attrs,
            Await::Dump,
            &what,
            |p| {
                let comment = attributes(p)
                    .find(|(kind, _)| *kind == NFTA_RULE_USERDATA)
                    .and_then(|(_, data)| comment_of(data));
                found |= comment.as_deref() == Some(wanted.as_str());
            },
        );
        match result {
            Err(e) if e.is(libc::ENOENT) => Ok(false),
            other => other.map(|()| found),
        }
    }

    /// The table, chain, set and rule of one network and family, in one batch. The set
    /// is created exclusively and the rule with it: if the set exists, so does the rule,
    /// and the kernel refuses the whole batch, which is success here.
    fn create(&mut self, network: &MasqNetwork) -> NlResult<()> {
        let set = network.set_name();
        let (_, len, _, _) = network.family.layout();
        let mut batch = Batch::new(&mut self.socket);

        let mut table = Attrs::default();
        table.str(NFTA_TABLE_NAME, TABLE);
        batch.add(
            NFT_MSG_NEWTABLE,
            NLM_F_CREATE,
            table,
            format!("create table inet {TABLE}"),
        );

        let mut chain = Attrs::default();
        chain.str(NFTA_CHAIN_TABLE, TABLE);
        chain.str(NFTA_CHAIN_NAME, CHAIN);
        chain.nested(NFTA_CHAIN_HOOK, |hook| {
            hook.be32(NFTA_HOOK_HOOKNUM, NF_INET_POST_ROUTING);
            hook.be32(NFTA_HOOK_PRIORITY, NF_IP_PRI_NAT_SRC);
        });
        chain.str(NFTA_CHAIN_TYPE, "nat");
        batch.add(
            NFT_MSG_NEWCHAIN,
            NLM_F_CREATE,
            chain,
            format!("create chain {CHAIN}"),
        );

        let mut set_attrs = Attrs::default();
        set_attrs.str(NFTA_SET_TABLE, TABLE);
        set_attrs.str(NFTA_SET_NAME, &set);
        let key_type = match network.family {
            Family::V4 => TYPE_IPV4_ADDR,
            Family::V6 => TYPE_IPV6_ADDR,
        };
        set_attrs.be32(NFTA_SET_KEY_TYPE, key_type);
        set_attrs.be32(NFTA_SET_KEY_LEN, len);
        set_attrs.be32(NFTA_SET_ID, 1);
        batch.add(
            NFT_MSG_NEWSET,
            NLM_F_CREATE | NLM_F_EXCL,
            set_attrs,
            format!("create set {set}"),
        );

        let mut rule = Attrs::default();
        rule.str(NFTA_RULE_TABLE, TABLE);
        rule.str(NFTA_RULE_CHAIN, CHAIN);
        rule.nested(NFTA_RULE_EXPRESSIONS, |list| masquerade_rule(list, network));
        rule.put(NFTA_RULE_USERDATA, &comment_udata(&network.rule_comment()));
        batch.add(
            NFT_MSG_NEWRULE,
            NLM_F_CREATE | NLM_F_APPEND,
            rule,
            format!("add the masquerade rule of set {set}"),
        );

        match batch.commit() {
            Err(e) if e.is(libc::EEXIST) => Ok(()),
            other => other,
        }
    }

    /// One batch of `push_elements`.
    fn change_elements(
        &mut self,
        kind: u8,
        networks: &[MasqNetwork],
        elements: &[MasqElement],
    ) -> NlResult<()> {
        let mut batch = Batch::new(&mut self.socket);
        push_elements(&mut batch, kind, networks, elements);
        batch.commit()
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
        mut on_reply: impl FnMut(&[u8]),
    ) -> NlResult<()> {
        let sequence = self.socket.next_sequence();
        let mut bytes = Vec::new();
        encode(
            &mut bytes,
            nftables_type(kind),
            NLM_F_REQUEST | flags,
            sequence,
            NFPROTO_INET,
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

/// One NEWSETELEM or DELSETELEM message per family present, added to `batch`.
fn push_elements(batch: &mut Batch, kind: u8, networks: &[MasqNetwork], elements: &[MasqElement]) {
    let verb = if kind == NFT_MSG_NEWSETELEM {
        "add"
    } else {
        "remove"
    };
    for network in networks {
        let mine: Vec<&MasqElement> = elements
            .iter()
            .filter(|e| Family::of(e.address) == network.family)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let set = network.set_name();
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_ELEM_LIST_TABLE, TABLE);
        attrs.str(NFTA_SET_ELEM_LIST_SET, &set);
        attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
            for element in &mine {
                list.nested(NFTA_LIST_ELEM, |elem| {
                    elem.nested(NFTA_SET_ELEM_KEY, |key| {
                        key.put(NFTA_DATA_VALUE, &address_bytes(element.address))
                    });
                    if !element.comment.is_empty() {
                        elem.put(NFTA_SET_ELEM_USERDATA, &comment_udata(&element.comment));
                    }
                });
            }
        });
        let addresses: Vec<String> = mine.iter().map(|e| e.address.to_string()).collect();
        let what = format!(
            "{verb} {} in nf_tables set inet {TABLE} {set}",
            addresses.join(", ")
        );
        // A new element that exists already (an ADD repeated) is fine: no EXCL.
        batch.add(kind, NLM_F_CREATE, attrs, what);
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
