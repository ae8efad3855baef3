//! One change of a batch: a typed operation and its words.

use super::super::step::Step;
use super::tables::*;

/// One change of a batch: a typed operation and what it does, in words (an error names
/// the refused change so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub op: Op,
    pub description: String,
}

/// What one message of a batch does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The table, made if missing (an existing one is success).
    AddTable(Table),
    /// The base chain, made if missing (one of the same name is success).
    AddChain(Chain),
    AddSet(Set),
    DeleteSet {
        table: Table,
        name: String,
    },
    /// The rule appended to its chain.
    AddRule(Rule),
    /// The rule of `chain` under `handle`; every rule of the chain without one.
    DeleteRule {
        table: Table,
        chain: String,
        handle: Option<u64>,
    },
    DeleteChain {
        table: Table,
        chain: String,
    },
    /// Elements added; `exclusive`: one already there refuses the batch (EEXIST);
    /// `publish`: they are published ports (a refusal then reads as a port conflict).
    AddElements {
        table: Table,
        set: String,
        elements: Vec<Element>,
        exclusive: bool,
        publish: bool,
    },
    /// Elements removed, named by key.
    DeleteElements {
        table: Table,
        set: String,
        keys: Vec<Vec<u8>>,
        publish: bool,
    },
}

impl Op {
    pub fn table(&self) -> Table {
        match self {
            Op::AddTable(table) => *table,
            Op::AddChain(chain) => chain.table,
            Op::AddSet(set) => set.table,
            Op::AddRule(rule) => rule.table,
            Op::DeleteSet { table, .. }
            | Op::DeleteRule { table, .. }
            | Op::DeleteChain { table, .. }
            | Op::AddElements { table, .. }
            | Op::DeleteElements { table, .. } => *table,
        }
    }

    pub fn step(&self) -> Step {
        match self {
            Op::AddTable(_) => Step::CreateTable,
            Op::AddChain(_) => Step::CreateChain,
            Op::AddSet(_) => Step::CreateSet,
            Op::DeleteSet { .. } => Step::DeleteSet,
            Op::AddRule(_) => Step::AddRule,
            Op::DeleteRule { .. } => Step::DeleteRule,
            Op::DeleteChain { .. } => Step::DeleteChain,
            Op::AddElements { publish: true, .. } => Step::Publish,
            Op::AddElements { publish: false, .. } => Step::AddElement,
            Op::DeleteElements { publish: true, .. } => Step::Unpublish,
            Op::DeleteElements { publish: false, .. } => Step::RemoveElement,
        }
    }
}

impl Change {
    pub fn new(op: Op, description: impl Into<String>) -> Change {
        Change {
            op,
            description: description.into(),
        }
    }

    /// The table, made if missing.
    pub fn add_table(table: Table) -> Change {
        Change::new(Op::AddTable(table), format!("create table {table}"))
    }

    /// The base chain, made if missing (callers that share a chain each make it,
    /// whichever comes first).
    pub fn add_chain(chain: Chain) -> Change {
        let description = format!(
            "create chain {} {} (type {}, hook {})",
            chain.table,
            chain.name,
            chain.kind.name(),
            chain.hook.name()
        );
        Change::new(Op::AddChain(chain), description)
    }

    pub fn add_set(set: Set) -> Change {
        let kind = if set.data.is_some() { "map" } else { "set" };
        let description = format!("create {kind} {} {}", set.table, set.name);
        Change::new(Op::AddSet(set), description)
    }

    pub fn add_rule(rule: Rule, description: impl Into<String>) -> Change {
        Change::new(Op::AddRule(rule), description)
    }

    pub fn delete_rule(
        table: Table,
        chain: &str,
        handle: u64,
        description: impl Into<String>,
    ) -> Change {
        let op = Op::DeleteRule {
            table,
            chain: chain.to_string(),
            handle: Some(handle),
        };
        Change::new(op, description)
    }

    /// One element added to `set` if missing (already there is success).
    pub fn add_element(
        table: Table,
        set: &str,
        element: Element,
        description: impl Into<String>,
    ) -> Change {
        let op = Op::AddElements {
            table,
            set: set.to_string(),
            elements: vec![element],
            exclusive: false,
            publish: false,
        };
        Change::new(op, description)
    }
}
