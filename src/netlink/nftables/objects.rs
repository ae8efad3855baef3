//! academy's objects to delete, named by table, kind and name (or handle, or key): a
//! commented rule, a set, an element; deleted together, rules before what they look up.

use super::model::{self, Op};
use super::Nftables;
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
