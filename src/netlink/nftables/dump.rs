//! Reading objects back, as the typed model (decode.rs): a table's or chain's rules, a
//! set's elements, one element, a set's or a chain's shape. A table, chain or set that is
//! gone reads as empty (an admin's flush is not an error).

use super::consts::{
    NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_CHAIN, NFTA_RULE_TABLE, NFTA_SET_NAME,
    NFTA_SET_TABLE, NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_GETSET, NFT_MSG_GETSETELEM,
};
use super::decode;
use super::encode::{element, element_list};
use super::model::{ChainInfo, Element, Rule, SetInfo, Table};
use super::Nftables;
use crate::netlink::nfnetlink::Attrs;
use crate::netlink::socket::{Await, NlResult};

/// One element as the kernel lists it (the model's element).
pub type RawElement = Element;

/// The elements of one NEWSETELEM reply (attributes after the nfgenmsg).
#[cfg(test)]
pub fn decode_elements(payload: &[u8]) -> Vec<Element> {
    decode::elements(payload)
}

impl Nftables {
    /// The rules of `table` (of one chain when given), expressions and all, in one dump;
    /// none when the table or chain is gone.
    pub fn rules(&mut self, table: Table, chain: Option<&str>) -> NlResult<Vec<Rule>> {
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
            found.extend(decode::rule(p, table))
        })
    }

    /// Every element of `set`; none when the set (or its table) is gone.
    pub fn elements_of(&mut self, table: Table, set: &str) -> NlResult<Vec<Element>> {
        let mut attrs = Attrs::default();
        element_list(&mut attrs, table.name, set, |_| {});
        let what = format!("list the elements of nf_tables set {table} {set}");
        self.dump(
            table.nfproto,
            NFT_MSG_GETSETELEM,
            attrs,
            &what,
            |p, found| found.extend(decode::elements(p)),
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
    ) -> NlResult<Option<Element>> {
        let mut found = None;
        let result = self.get_element(table, set, key, what, |p| {
            found = decode::elements(p).into_iter().next()
        });
        match result {
            Ok(()) => Ok(found),
            Err(e) if e.is(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn get_element(
        &mut self,
        table: Table,
        set: &str,
        key: &[u8],
        what: &str,
        on_reply: impl FnMut(&[u8]),
    ) -> NlResult<()> {
        let mut attrs = Attrs::default();
        element_list(&mut attrs, table.name, set, |list| {
            element(list, &Element::key(key.to_vec()))
        });
        self.request_in(
            table.nfproto,
            NFT_MSG_GETSETELEM,
            0,
            attrs,
            Await::One,
            what,
            on_reply,
        )
    }

    /// The set (or map) `name` of `table` as the kernel shows it; None when it is missing.
    pub fn set_info(&mut self, table: Table, name: &str) -> NlResult<Option<SetInfo>> {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_TABLE, table.name);
        attrs.str(NFTA_SET_NAME, name);
        let what = format!("look up nf_tables set {table} {name}");
        let mut info = None;
        match self.get(table.nfproto, NFT_MSG_GETSET, attrs, &what, |p| {
            info = Some(decode::set(p))
        }) {
            Err(e) if e.is(libc::ENOENT) => Ok(None),
            other => other.map(|()| info),
        }
    }

    /// Chains as the kernel shows them, asked in one sendmsg: each one's shape, None for
    /// one that does not exist, in the order asked.
    pub fn chain_infos(
        &mut self,
        chains: &[(Table, &str)],
        what: &str,
    ) -> NlResult<Vec<Option<ChainInfo>>> {
        let requests = chains
            .iter()
            .map(|(table, name)| {
                let mut attrs = Attrs::default();
                attrs.str(NFTA_CHAIN_TABLE, table.name);
                attrs.str(NFTA_CHAIN_NAME, name);
                (table.nfproto, NFT_MSG_GETCHAIN, attrs)
            })
            .collect();
        let replies = self.get_each(requests, what)?;
        Ok(replies
            .into_iter()
            .map(|reply| reply.map(|p| decode::chain(&p)))
            .collect())
    }
}
