//! What a kind wants of nf_tables, as data: each object with its owner and, in words,
//! what it is and what its absence opens.

use crate::netlink::nftables::model::{Change, Element, Rule};
use crate::netlink::{Object, Table, TableRule};

/// Who an object is for, which says when it may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Every network of the kind on the host (a rule that names no network: it stays,
    /// and with its set empty does nothing).
    Host,
    /// Every network that uses the bridge: it goes only when none does (network.rs).
    Bridge(String),
}

/// One object a kind wants there, or (`Outdated`) not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// A rule, known by `comment` in its chain (in either form: `Rule::comments`);
    /// `setup` makes what it needs (table, sets, chain), each an idempotent create.
    Rule {
        rule: Rule,
        comment: String,
        setup: Vec<Change>,
    },
    /// An element, known by its key (already there is success when added).
    Element {
        table: Table,
        set: String,
        element: Element,
        setup: Vec<Change>,
    },
    /// A rule an older academy wrote, known by its comment: deleted wherever found.
    Outdated {
        table: Table,
        chain: String,
        comment: String,
    },
}

/// One object of a kind's wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub wanted: Wanted,
    pub owner: Owner,
    /// The object in words: "the isolation rule", "br0 . br0".
    pub what: String,
    /// What is open while it is missing: "bridge br0 is reachable from ...".
    pub harm: String,
}

impl Wanted {
    /// A rule known by `comment`, with what it needs made first.
    pub fn rule(rule: Rule, comment: &str, setup: Vec<Change>) -> Wanted {
        Wanted::Rule {
            rule,
            comment: comment.to_string(),
            setup,
        }
    }
}

impl Want {
    /// Where the object is, in words: "nf_tables chain inet academy forward".
    pub fn place(&self) -> String {
        match &self.wanted {
            Wanted::Rule { rule, .. } => format!("nf_tables chain {} {}", rule.table, rule.chain),
            Wanted::Element { table, set, .. } => format!("nf_tables set {table} {set}"),
            Wanted::Outdated { table, chain, .. } => format!("nf_tables chain {table} {chain}"),
        }
    }

    /// What CHECK and STATUS say of it when it is missing.
    pub fn missing_words(&self) -> String {
        format!(
            "{} is missing from {}: {}",
            self.what,
            self.place(),
            self.harm
        )
    }

    /// What a restore says once it is back.
    pub fn put_back_words(&self) -> String {
        format!("{} in {}", self.what, self.place())
    }

    /// The object to delete, as the kernel has it (a rule by its handle).
    pub(super) fn object(&self, handle: u64) -> Object {
        match &self.wanted {
            Wanted::Element {
                table,
                set,
                element,
                ..
            } => Object::Element {
                table: *table,
                set: set.clone(),
                key: element.key.clone(),
                shown: self.what.clone(),
            },
            _ => Object::Rule(self.rule_at(handle).expect("a rule")),
        }
    }

    /// A wanted or outdated rule, as the kernel has it under `handle`.
    pub(super) fn rule_at(&self, handle: u64) -> Option<TableRule> {
        let (table, chain, comment) = match &self.wanted {
            Wanted::Rule { rule, comment, .. } => (rule.table, &rule.chain, comment),
            Wanted::Outdated {
                table,
                chain,
                comment,
            } => (*table, chain, comment),
            Wanted::Element { .. } => return None,
        };
        Some(TableRule {
            table,
            chain: chain.clone(),
            handle,
            comment: comment.clone(),
        })
    }
}
