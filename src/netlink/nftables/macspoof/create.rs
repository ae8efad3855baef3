//! A network's MAC filter made, in one batch with its first guarded port's ADD: the
//! table `bridge academy`, its chain, the network's map and two sets, and its rule.

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL};

use super::*;
use crate::netlink::nftables::objects::{new_chain, new_table, BaseChain, Table};

impl Nftables {
    /// The table, chain, map, sets and rule of one network, in one batch. The map is
    /// created exclusively and the rule with it: if the map exists, so does the rule,
    /// and the kernel refuses the whole batch, which is success here.
    pub(super) fn create_guard(&mut self, network: &str) -> NlResult<()> {
        let (map, guarded, set) = (
            ports_map(network),
            guarded_set(network),
            allowed_set(network),
        );
        let mut batch = Batch::in_family(&mut self.socket, NFPROTO_BRIDGE);

        batch.push(new_table(Table::AcademyBridge));

        batch.push(new_chain(
            Table::AcademyBridge,
            BaseChain {
                name: BRIDGE_CHAIN,
                hook: NF_BR_PRE_ROUTING,
                priority: NF_BR_PRI_NAT_DST_BRIDGED,
                kind: "filter",
            },
        ));

        // Keyed by interface name, the map and the guarded set say so in their userdata
        // as nft does (so `nft list` prints names, not bytes); the pair set's
        // concatenated key needs no such hint.
        let sets = [
            NewSet {
                id: PORTS_ID,
                name: &map,
                key: (TYPE_IFNAME, IFNAMSIZ),
                data: Some((TYPE_ETHERADDR, 6)),
                names_in_userdata: true,
            },
            NewSet {
                id: GUARDED_ID,
                name: &guarded,
                key: (TYPE_IFNAME, IFNAMSIZ),
                data: None,
                names_in_userdata: true,
            },
            NewSet {
                id: ALLOWED_ID,
                name: &set,
                key: (TYPE_IFNAME << 6 | TYPE_ETHERADDR, PAIR_LEN),
                data: None,
                names_in_userdata: false,
            },
        ];
        for new in sets {
            let kind = if new.data.is_some() { "map" } else { "set" };
            batch.add(
                Step::CreateSet,
                NFT_MSG_NEWSET,
                NLM_F_CREATE | NLM_F_EXCL,
                new.attrs(),
                format!("create {kind} {}", new.name),
            );
        }

        let mut rule = Attrs::default();
        rule.str(NFTA_RULE_TABLE, TABLE);
        rule.str(NFTA_RULE_CHAIN, BRIDGE_CHAIN);
        rule.nested(NFTA_RULE_EXPRESSIONS, |list| {
            drop_rule(list, &guarded, &set)
        });
        rule.put(NFTA_RULE_USERDATA, &comment_udata(&rule_comment(network)));
        batch.add(
            Step::AddRule,
            NFT_MSG_NEWRULE,
            NLM_F_CREATE | NLM_F_APPEND,
            rule,
            format!("add the macspoofchk rule of network {network}"),
        );

        match batch.commit() {
            Err(e) if e.is(libc::EEXIST) => Ok(()),
            other => other,
        }
    }
}

/// libnftnl's set user data telling nft the byte order of a key that is a name, and of
/// a map's data (NFTNL_UDATA_SET_KEYBYTEORDER host, NFTNL_UDATA_SET_DATABYTEORDER big
/// endian), as nft writes it: without it, nft reads a name as a big-endian number and
/// lists every port as "". The kernel ignores it.
fn name_byteorder() -> Vec<u8> {
    const KEY_BYTEORDER: u8 = 0;
    const DATA_BYTEORDER: u8 = 1;
    const HOST_ENDIAN: u32 = 1;
    const BIG_ENDIAN: u32 = 2;
    let mut udata = vec![KEY_BYTEORDER, 4];
    udata.extend_from_slice(&HOST_ENDIAN.to_ne_bytes());
    udata.extend_from_slice(&[DATA_BYTEORDER, 4]);
    udata.extend_from_slice(&BIG_ENDIAN.to_ne_bytes());
    udata
}

/// The ids that name the map and sets within their creating batch (the rule's lookups
/// refer to them so, before they exist).
pub(super) const PORTS_ID: u32 = 1;
const ALLOWED_ID: u32 = 2;
const GUARDED_ID: u32 = 3;

/// One of a network's map and sets, as its first ADD creates it.
pub(super) struct NewSet<'a> {
    pub(super) id: u32,
    pub(super) name: &'a str,
    /// (type, length) of the key.
    pub(super) key: (u32, usize),
    /// (type, length) of a map's values.
    pub(super) data: Option<(u32, usize)>,
    pub(super) names_in_userdata: bool,
}

impl NewSet<'_> {
    pub(super) fn attrs(&self) -> Attrs {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_TABLE, TABLE);
        attrs.str(NFTA_SET_NAME, self.name);
        if self.data.is_some() {
            attrs.be32(NFTA_SET_FLAGS, NFT_SET_MAP);
        }
        attrs.be32(NFTA_SET_KEY_TYPE, self.key.0);
        attrs.be32(NFTA_SET_KEY_LEN, self.key.1 as u32);
        if let Some((data_type, data_len)) = self.data {
            attrs.be32(NFTA_SET_DATA_TYPE, data_type);
            attrs.be32(NFTA_SET_DATA_LEN, data_len as u32);
        }
        attrs.be32(NFTA_SET_ID, self.id);
        if self.names_in_userdata {
            attrs.put(NFTA_SET_USERDATA, &name_byteorder());
        }
        attrs
    }
}

/// The rule, as `nft --debug=netlink` shows it for
/// `iifname @GUARDED iifname . ether saddr != @ALLOWED drop`.
pub(super) fn drop_rule(list: &mut Attrs, guarded: &str, set: &str) {
    let iifname = |list: &mut Attrs| {
        expr(list, "meta", |e| {
            e.be32(NFTA_META_DREG, NFT_REG_1);
            e.be32(NFTA_META_KEY, NFT_META_IIFNAME);
        })
    };
    iifname(list);
    expr(list, "lookup", |e| {
        e.str(NFTA_LOOKUP_SET, guarded);
        e.be32(NFTA_LOOKUP_SREG, NFT_REG_1);
        // New in this batch.
        e.be32(NFTA_LOOKUP_SET_ID, GUARDED_ID);
    });
    // The name fills register 1 (16 bytes); the MAC follows it in register 2, and the
    // lookup reads both as one 24-byte key.
    iifname(list);
    expr(list, "payload", |e| {
        e.be32(NFTA_PAYLOAD_DREG, NFT_REG_2);
        e.be32(NFTA_PAYLOAD_BASE, NFT_PAYLOAD_LL_HEADER);
        // The source address, after the destination's 6 bytes.
        e.be32(NFTA_PAYLOAD_OFFSET, 6);
        e.be32(NFTA_PAYLOAD_LEN, 6);
    });
    expr(list, "lookup", |e| {
        e.str(NFTA_LOOKUP_SET, set);
        e.be32(NFTA_LOOKUP_SREG, NFT_REG_1);
        e.be32(NFTA_LOOKUP_SET_ID, ALLOWED_ID);
        // Not in the set.
        e.be32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
    });
    expr(list, "immediate", |e| {
        e.be32(NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        e.nested(NFTA_IMMEDIATE_DATA, |data| {
            data.nested(NFTA_DATA_VERDICT, |verdict| {
                verdict.be32(NFTA_VERDICT_CODE, NF_DROP)
            })
        });
    });
}
