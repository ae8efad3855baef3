//! Reading objects back: a table's commented rules, a set's elements, one element.
//! A table, chain or set that is gone reads as empty (an admin's flush is not an error).

use super::attrs::comment_of;
use super::consts::{
    NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFTA_RULE_CHAIN, NFTA_RULE_HANDLE, NFTA_RULE_TABLE,
    NFTA_RULE_USERDATA, NFTA_SET_ELEM_DATA, NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_LIST_ELEMENTS,
    NFTA_SET_ELEM_USERDATA, NFT_MSG_GETRULE, NFT_MSG_GETSETELEM,
};
use super::objects::{element, element_list, Table, TableRule};
use super::Nftables;
use crate::netlink::nfnetlink::{attributes, Attrs};
use crate::netlink::socket::{Await, NlResult};

/// One element as the kernel lists it: its key, a map's value, its comment ("" if none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawElement {
    pub key: Vec<u8>,
    pub data: Option<Vec<u8>>,
    pub comment: String,
}

impl Nftables {
    /// The commented rules of `table` (of one chain when given), in one dump; none when
    /// the table or chain is gone.
    pub fn rules_of(&mut self, table: Table, chain: Option<&str>) -> NlResult<Vec<TableRule>> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_RULE_TABLE, table.name);
        if let Some(chain) = chain {
            attrs.str(NFTA_RULE_CHAIN, chain);
        }
        let what = match chain {
            Some(chain) => format!("list the rules of nf_tables chain {table} {chain}"),
            None => format!("list the rules of nf_tables table {table}"),
        };
        self.dump(table.nfproto, NFT_MSG_GETRULE, attrs, &what, |p, found| {
            found.extend(decode_rule(p, table))
        })
    }

    /// Every element of `set`; none when the set (or its table) is gone.
    pub fn elements_of(&mut self, table: Table, set: &str) -> NlResult<Vec<RawElement>> {
        let attrs = element_list(table, set, |_| {});
        let what = format!("list the elements of nf_tables set {table} {set}");
        self.dump(
            table.nfproto,
            NFT_MSG_GETSETELEM,
            attrs,
            &what,
            |p, found| found.extend(decode_elements(p)),
        )
    }

    /// The element of `set` whose key is `key` (its bytes as the set stores them); None
    /// when it, the set or the table is missing.
    pub fn element_of(
        &mut self,
        table: Table,
        set: &str,
        key: &[u8],
        what: &str,
    ) -> NlResult<Option<RawElement>> {
        let attrs = element_list(table, set, |list| element(list, key, None, ""));
        let mut found = None;
        let result = self.request_in(
            table.nfproto,
            NFT_MSG_GETSETELEM,
            0,
            attrs,
            Await::One,
            what,
            |p| found = decode_elements(p).into_iter().next(),
        );
        match result {
            Ok(()) => Ok(found),
            Err(e) if e.is(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `set` holds the element whose key is `key`. A missing set or table is "no".
    pub fn has_element(
        &mut self,
        table: Table,
        set: &str,
        key: &[u8],
        what: &str,
    ) -> NlResult<bool> {
        let attrs = element_list(table, set, |list| element(list, key, None, ""));
        match self.request_in(
            table.nfproto,
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
}

/// A rule of a NEWRULE reply that carries a comment.
fn decode_rule(payload: &[u8], table: Table) -> Option<TableRule> {
    let (mut chain, mut comment, mut handle) = (None, None, None);
    for (kind, data) in attributes(payload) {
        match kind {
            NFTA_RULE_CHAIN => {
                let name = data.split(|b| *b == 0).next().unwrap_or(data);
                chain = Some(String::from_utf8_lossy(name).into_owned());
            }
            NFTA_RULE_USERDATA => comment = comment_of(data),
            NFTA_RULE_HANDLE => handle = <[u8; 8]>::try_from(data).ok().map(u64::from_be_bytes),
            _ => {}
        }
    }
    Some(TableRule {
        table,
        chain: chain?,
        handle: handle?,
        comment: comment?,
    })
}

/// The elements of one NEWSETELEM reply (attributes after the nfgenmsg).
pub fn decode_elements(payload: &[u8]) -> Vec<RawElement> {
    let mut found = Vec::new();
    let lists = attributes(payload).filter(|(k, _)| *k == NFTA_SET_ELEM_LIST_ELEMENTS);
    for (_, list) in lists {
        for (_, element) in attributes(list).filter(|(k, _)| *k == NFTA_LIST_ELEM) {
            let (mut key, mut data, mut comment) = (None, None, String::new());
            for (kind, value) in attributes(element) {
                let inner = || {
                    attributes(value)
                        .find(|(k, _)| *k == NFTA_DATA_VALUE)
                        .map(|(_, b)| b.to_vec())
                };
                match kind {
                    NFTA_SET_ELEM_KEY => key = inner(),
                    NFTA_SET_ELEM_DATA => data = inner(),
                    NFTA_SET_ELEM_USERDATA => comment = comment_of(value).unwrap_or_default(),
                    _ => {}
                }
            }
            if let Some(key) = key {
                found.push(RawElement { key, data, comment });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::attrs::comment_udata;
    use crate::netlink::nftables::consts::NFTA_SET_ELEM_LIST_TABLE;

    #[test]
    fn elements_decode_from_a_set_element_reply() {
        let mut reply = Attrs::default();
        reply.str(NFTA_SET_ELEM_LIST_TABLE, "t");
        reply.nested(NFTA_SET_ELEM_LIST_ELEMENTS, |list| {
            list.nested(NFTA_LIST_ELEM, |e| {
                e.nested(NFTA_SET_ELEM_KEY, |k| {
                    k.put(NFTA_DATA_VALUE, &[10, 1, 2, 3])
                });
                e.put(NFTA_SET_ELEM_USERDATA, &comment_udata("owner"));
            });
        });
        assert_eq!(
            decode_elements(&reply.0),
            vec![RawElement {
                key: vec![10, 1, 2, 3],
                data: None,
                comment: "owner".into()
            }]
        );
    }
}
