//! nf_tables objects as batch changes: a table, a base chain, a set or map, a rule, an
//! element list; and any of them to delete, named by table, kind and name (or handle, or
//! key). One builder each, so every caller writes an object the same way.

use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL};

use super::attrs::comment_udata;
use super::batch::Change;
use super::consts::{
    NFPROTO_BRIDGE, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFTA_CHAIN_HOOK, NFTA_CHAIN_NAME,
    NFTA_CHAIN_TABLE, NFTA_CHAIN_TYPE, NFTA_DATA_VALUE, NFTA_HOOK_HOOKNUM, NFTA_HOOK_PRIORITY,
    NFTA_LIST_ELEM, NFTA_RULE_CHAIN, NFTA_RULE_EXPRESSIONS, NFTA_RULE_HANDLE, NFTA_RULE_TABLE,
    NFTA_RULE_USERDATA, NFTA_SET_DATA_LEN, NFTA_SET_DATA_TYPE, NFTA_SET_ELEM_DATA,
    NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET,
    NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_USERDATA, NFTA_SET_FLAGS, NFTA_SET_ID,
    NFTA_SET_KEY_LEN, NFTA_SET_KEY_TYPE, NFTA_SET_NAME, NFTA_SET_TABLE, NFTA_SET_USERDATA,
    NFTA_TABLE_NAME, NFT_MSG_DELRULE, NFT_MSG_DELSET, NFT_MSG_DELSETELEM, NFT_MSG_NEWCHAIN,
    NFT_MSG_NEWRULE, NFT_MSG_NEWSET, NFT_MSG_NEWTABLE, NFT_SET_MAP,
};
use super::model::{self, Op};
use super::step::Step;
use super::Nftables;
use crate::netlink::nfnetlink::Attrs;
use crate::netlink::socket::NlResult;

pub use super::model::Table;

/// A rule that carries a comment, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRule {
    pub table: Table,
    pub chain: String,
    pub handle: u64,
    pub comment: String,
}

/// One object to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    Rule(TableRule),
    /// A set or map, by name (its elements go with it).
    Set(Table, String),
    /// One element of a set, by its key; `shown` is the key as a reader knows it.
    Element {
        table: Table,
        set: String,
        key: Vec<u8>,
        shown: String,
    },
}

impl Object {
    pub fn table(&self) -> Table {
        match self {
            Object::Rule(r) => r.table,
            Object::Set(t, _) => *t,
            Object::Element { table, .. } => *table,
        }
    }

    /// Rules before the elements and sets they look up.
    fn order(&self) -> u8 {
        match self {
            Object::Rule(_) => 0,
            Object::Element { .. } => 1,
            Object::Set(..) => 2,
        }
    }

    /// The object in words: "rule \"...\" of chain inet t c", "set inet t s", ...
    pub fn describe(&self) -> String {
        match self {
            Object::Rule(r) => format!(
                "rule {:?} (handle {}) of chain {} {}",
                r.comment, r.handle, r.table, r.chain
            ),
            Object::Set(table, name) => format!("set {table} {name}"),
            Object::Element {
                table, set, shown, ..
            } => format!("element {shown} of set {table} {set}"),
        }
    }

    /// The change deleting it.
    pub fn delete(&self) -> model::Change {
        match self {
            Object::Rule(rule) => model::Change::delete_rule(
                rule.table,
                &rule.chain,
                rule.handle,
                format!(
                    "delete rule {:?} (handle {}) from chain {} {}",
                    rule.comment, rule.handle, rule.table, rule.chain
                ),
            ),
            Object::Set(table, name) => model::Change::new(
                Op::DeleteSet {
                    table: *table,
                    name: name.clone(),
                },
                format!("delete set {table} {name}"),
            ),
            Object::Element {
                table,
                set,
                key,
                shown,
            } => model::Change::new(
                Op::DeleteElements {
                    table: *table,
                    set: set.clone(),
                    keys: vec![key.clone()],
                    publish: false,
                },
                format!("remove {shown} from set {table} {set}"),
            ),
        }
    }
}

/// The table, made if missing (an existing one is success).
pub fn new_table(table: Table) -> Change {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_TABLE_NAME, table.name);
    Change {
        step: Step::CreateTable,
        kind: NFT_MSG_NEWTABLE,
        flags: NLM_F_CREATE,
        attrs,
        description: format!("create table {table}"),
    }
}

/// A base chain: its name, hook, priority and type.
pub struct BaseChain {
    pub name: &'static str,
    pub hook: u32,
    pub priority: i32,
    pub kind: &'static str,
}

/// The base chain in `table`, made if missing (one of the same name is success, so
/// callers that share a chain each make it whichever comes first).
pub fn new_chain(table: Table, chain: BaseChain) -> Change {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_CHAIN_TABLE, table.name);
    attrs.str(NFTA_CHAIN_NAME, chain.name);
    attrs.nested(NFTA_CHAIN_HOOK, |hook| {
        hook.be32(NFTA_HOOK_HOOKNUM, chain.hook);
        hook.be32(NFTA_HOOK_PRIORITY, chain.priority as u32);
    });
    attrs.str(NFTA_CHAIN_TYPE, chain.kind);
    Change {
        step: Step::CreateChain,
        kind: NFT_MSG_NEWCHAIN,
        flags: NLM_F_CREATE,
        attrs,
        description: format!(
            "create chain {table} {} (type {}, hook {})",
            chain.name,
            chain.kind,
            hook_name(chain.hook)
        ),
    }
}

/// The netfilter hook's name; the inet and bridge families number theirs alike.
fn hook_name(hook: u32) -> &'static str {
    ["prerouting", "input", "forward", "output", "postrouting"]
        .get(hook as usize)
        .copied()
        .unwrap_or("?")
}

/// A set, or a map when it has `data`.
pub struct NewSet<'a> {
    pub table: Table,
    pub name: &'a str,
    /// The set's id within its creating batch: a rule's lookup in the same batch names
    /// the set so, before it exists (0: none).
    pub id: u32,
    /// (type, length) of the key.
    pub key: (u32, u32),
    /// (type, length) of a map's values.
    pub data: Option<(u32, u32)>,
    /// libnftnl's user data (attrs::name_byteorder), for nft's listing only.
    pub userdata: Option<Vec<u8>>,
    /// NLM_F_EXCL: an existing set of the name refuses the batch (EEXIST). Without it an
    /// identical set is success and a different one EEXIST.
    pub exclusive: bool,
}

impl NewSet<'_> {
    pub fn change(&self) -> Change {
        let mut attrs = Attrs::default();
        attrs.str(NFTA_SET_TABLE, self.table.name);
        attrs.str(NFTA_SET_NAME, self.name);
        if self.data.is_some() {
            attrs.be32(NFTA_SET_FLAGS, NFT_SET_MAP);
        }
        attrs.be32(NFTA_SET_KEY_TYPE, self.key.0);
        attrs.be32(NFTA_SET_KEY_LEN, self.key.1);
        if let Some((data_type, data_len)) = self.data {
            attrs.be32(NFTA_SET_DATA_TYPE, data_type);
            attrs.be32(NFTA_SET_DATA_LEN, data_len);
        }
        if self.id != 0 {
            attrs.be32(NFTA_SET_ID, self.id);
        }
        if let Some(userdata) = &self.userdata {
            attrs.put(NFTA_SET_USERDATA, userdata);
        }
        let kind = if self.data.is_some() { "map" } else { "set" };
        let exclusive = if self.exclusive { NLM_F_EXCL } else { 0 };
        Change {
            step: Step::CreateSet,
            kind: NFT_MSG_NEWSET,
            flags: NLM_F_CREATE | exclusive,
            attrs,
            description: format!("create {kind} {} {}", self.table, self.name),
        }
    }
}

/// A rule appended to `chain`, with `comment` as its user data when there is one.
pub fn new_rule(
    table: Table,
    chain: &str,
    comment: Option<&str>,
    expressions: impl FnOnce(&mut Attrs),
    description: String,
) -> Change {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_RULE_TABLE, table.name);
    attrs.str(NFTA_RULE_CHAIN, chain);
    attrs.nested(NFTA_RULE_EXPRESSIONS, expressions);
    if let Some(comment) = comment {
        attrs.put(NFTA_RULE_USERDATA, &comment_udata(comment));
    }
    Change {
        step: Step::AddRule,
        kind: NFT_MSG_NEWRULE,
        flags: NLM_F_CREATE | NLM_F_APPEND,
        attrs,
        description,
    }
}

/// The rule of `chain` whose handle is `handle`, deleted.
pub fn delete_rule(table: Table, chain: &str, handle: u64, description: String) -> Change {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_RULE_TABLE, table.name);
    attrs.str(NFTA_RULE_CHAIN, chain);
    attrs.be64(NFTA_RULE_HANDLE, handle);
    Change {
        step: Step::DeleteRule,
        kind: NFT_MSG_DELRULE,
        flags: 0,
        attrs,
        description,
    }
}

/// A set's element list message: table, set, and the elements `elements` writes (each
/// one NFTA_LIST_ELEM, see [`element`]).
pub fn element_list(table: Table, set: &str, elements: impl FnOnce(&mut Attrs)) -> Attrs {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_SET_ELEM_LIST_TABLE, table.name);
    attrs.str(NFTA_SET_ELEM_LIST_SET, set);
    attrs.nested(NFTA_SET_ELEM_LIST_ELEMENTS, elements);
    attrs
}

/// One element of a list: its key, a map's value, and a comment ("" for none).
pub fn element(list: &mut Attrs, key: &[u8], data: Option<&[u8]>, comment: &str) {
    list.nested(NFTA_LIST_ELEM, |elem| {
        elem.nested(NFTA_SET_ELEM_KEY, |k| k.put(NFTA_DATA_VALUE, key));
        if let Some(data) = data {
            elem.nested(NFTA_SET_ELEM_DATA, |d| d.put(NFTA_DATA_VALUE, data));
        }
        if !comment.is_empty() {
            elem.put(NFTA_SET_ELEM_USERDATA, &comment_udata(comment));
        }
    });
}

impl Nftables {
    /// Deletes `objects`: per table one batch, rules before the elements and sets they
    /// look up. Objects already gone are success (a concurrent removal, an admin's
    /// flush): the batch is all or nothing, so on ENOENT each object is deleted alone.
    pub fn delete_objects(&mut self, objects: &[Object]) -> NlResult<()> {
        let mut tables: Vec<Table> = objects.iter().map(Object::table).collect();
        tables.dedup();
        for table in tables {
            let mut mine: Vec<&Object> = objects.iter().filter(|o| o.table() == table).collect();
            mine.sort_by_key(|o| o.order());
            let changes = |of: &[&Object]| of.iter().map(|o| o.delete()).collect::<Vec<_>>();
            match self.run(changes(&mine)) {
                Err(e) if e.is(libc::ENOENT) => {
                    for object in mine {
                        match self.run(changes(&[object])) {
                            Err(e) if !e.is(libc::ENOENT) => return Err(e),
                            _ => {}
                        }
                    }
                }
                other => other?,
            }
        }
        Ok(())
    }
}
