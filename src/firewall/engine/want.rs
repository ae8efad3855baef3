//! What a kind wants of nf_tables, as data: each object with its owner and, in words,
//! what it is and what its absence opens.

use crate::netlink::nftables::model::{Change, Element, Rule, Set};
use crate::netlink::{Object, Table, TableRule};

/// Who an object is for, which says when it may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Every network of the kind on the host (a rule that names no network: it stays,
    /// and with its set empty does nothing).
    Host,
    /// Every network that uses the bridge: it goes only when none does (network/).
    Bridge(String),
    /// The network: it goes with its last attachment.
    Network(String),
    /// One attachment: its elements carry its owner comment, in any of the forms
    /// academy has written (`Attachment::owners`), the first the one written now.
    Attachment(Vec<String>),
}

impl Owner {
    /// Whether an element's comment says it is this owner's (always, for an owner that
    /// writes no comment).
    pub fn owns(&self, comment: &str) -> bool {
        match self {
            Owner::Attachment(forms) => forms.iter().any(|f| f == comment),
            Owner::Host | Owner::Bridge(_) | Owner::Network(_) => true,
        }
    }
}

/// One object a kind wants there, or (`OutdatedRule`) not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// A rule, known by any of `known_as` in its chain (in either comment form:
    /// `Rule::comments`), or by its `slot`; `setup` makes what it needs (table, sets,
    /// chain), each an idempotent create.
    Rule {
        rule: Rule,
        known_as: Vec<String>,
        slot: Option<Slot>,
        setup: Vec<Change>,
    },
    /// Rules that go together, each in its chain in the order given: every rule of
    /// those chains whose comment starts with `prefix` is the group's. Whole when each
    /// is there once and nothing else of the prefix is; otherwise made again whole
    /// (what is there deleted, all added in order), since a rule appended alone would
    /// come after the others. `setup` makes what they need.
    Group {
        prefix: String,
        rules: Vec<Rule>,
        setup: Vec<Change>,
    },
    /// A set or map, known by its name.
    Set { set: Set, setup: Vec<Change> },
    /// An element, known by its key. Wanted with its value and comment when it has
    /// them: an element under the key with another value or another owner's comment
    /// differs. `replace`: the key is the owner's own (its host veth's name), so such an
    /// element is a stale one of the same attachment and a completion replaces it; any
    /// other is left and reported.
    Element {
        table: Table,
        set: String,
        element: Element,
        replace: bool,
        setup: Vec<Change>,
    },
    /// A rule an older academy wrote, known by its comment: deleted wherever found.
    OutdatedRule {
        table: Table,
        chain: String,
        comment: String,
    },
}

/// The rules of a chain that are forms of one wanted rule, whatever config they were
/// made for: academy's (their comment starts with `prefix`) that look up `set`. Those
/// named in the want's `known_as`, or that `also_current` accepts, are the rule; the
/// others are outdated forms (made for other ranges, say), deleted when the rule is
/// completed and released with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub prefix: String,
    pub set: String,
    pub also_current: Option<Accepts>,
}

/// A test of a rule's comment beyond an exact name, with what it compares against: a
/// delegated IPAM's masquerade rule names the subnets of whichever ADD made it, and is
/// current whatever they are.
#[derive(Clone)]
pub struct Accepts {
    pub test: fn(&str, &str) -> bool,
    pub arg: String,
}

impl Accepts {
    pub fn accepts(&self, comment: &str) -> bool {
        (self.test)(comment, &self.arg)
    }
}

impl PartialEq for Accepts {
    fn eq(&self, other: &Accepts) -> bool {
        // The same function, by address (std::ptr::fn_addr_eq is newer than the MSRV).
        self.test as usize == other.test as usize && self.arg == other.arg
    }
}

impl Eq for Accepts {}

impl std::fmt::Debug for Accepts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Accepts({:?})", self.arg)
    }
}

impl Slot {
    /// Whether a rule with these comments and looked-up sets is a form of the slot's rule.
    pub fn holds(&self, comments: &[String], sets: &[String]) -> bool {
        sets.contains(&self.set) && comments.iter().any(|c| c.starts_with(&self.prefix))
    }
}

impl Wanted {
    /// A rule known by `comment`, with what it needs made first.
    pub fn rule(rule: Rule, comment: &str, setup: Vec<Change>) -> Wanted {
        Wanted::Rule {
            rule,
            known_as: vec![comment.to_string()],
            slot: None,
            setup,
        }
    }

    /// Rules that go together, known by `prefix` (see `Group`): at least one.
    pub fn group(prefix: &str, rules: Vec<Rule>, setup: Vec<Change>) -> Wanted {
        assert!(!rules.is_empty(), "a group of no rules");
        Wanted::Group {
            prefix: prefix.to_string(),
            rules,
            setup,
        }
    }

    /// An element of `set`, to add if missing.
    pub fn element(table: Table, set: &str, element: Element, setup: Vec<Change>) -> Wanted {
        Wanted::Element {
            table,
            set: set.to_string(),
            element,
            replace: false,
            setup,
        }
    }
}

/// One object of a kind's wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub wanted: Wanted,
    pub owner: Owner,
    /// The object in words: "the isolation rule", "br0 . br0"; for a group, whose
    /// rules they are ("port mapping").
    pub what: String,
    /// What is open while it is missing: "bridge br0 is reachable from ...".
    pub harm: String,
}

impl Want {
    /// Where the object is, in words: "nf_tables chain inet academy forward".
    pub fn place(&self) -> String {
        match &self.wanted {
            Wanted::Rule { rule, .. } => format!("nf_tables chain {} {}", rule.table, rule.chain),
            Wanted::Group { rules, .. } => match rules.first() {
                Some(rule) => format!("nf_tables table {}", rule.table),
                None => "nf_tables".to_string(),
            },
            Wanted::Set { set, .. } => format!("nf_tables table {}", set.table),
            Wanted::Element { table, set, .. } => format!("nf_tables set {table} {set}"),
            Wanted::OutdatedRule { table, chain, .. } => {
                format!("nf_tables chain {table} {chain}")
            }
        }
    }

    /// What CHECK and STATUS say of it when it is missing.
    pub fn missing_words(&self) -> String {
        let (what, place, harm) = (&self.what, self.place(), &self.harm);
        match self.wanted {
            Wanted::Group { .. } => format!("{what}'s rules are incomplete in {place}: {harm}"),
            _ => format!("{what} is missing from {place}: {harm}"),
        }
    }

    /// What a restore says once it is back.
    pub fn put_back_words(&self) -> String {
        match self.wanted {
            Wanted::Group { .. } => format!("{}'s rules in {}", self.what, self.place()),
            _ => format!("{} in {}", self.what, self.place()),
        }
    }

    /// The object as the kernel has it (a rule under `handle`).
    pub(super) fn object(&self, handle: u64) -> Object {
        match &self.wanted {
            Wanted::Rule { rule, known_as, .. } => Object::Rule(TableRule {
                table: rule.table,
                chain: rule.chain.clone(),
                handle,
                comment: known_as[0].clone(),
            }),
            Wanted::OutdatedRule {
                table,
                chain,
                comment,
            } => Object::Rule(TableRule {
                table: *table,
                chain: chain.clone(),
                handle,
                comment: comment.clone(),
            }),
            Wanted::Set { set, .. } => Object::Set(set.table, set.name.clone()),
            // A group's rules are named one by one where they are found (look.rs); as a
            // whole, under its first rule's chain (`Wanted::group` makes none empty).
            Wanted::Group { prefix, rules, .. } => Object::Rule(TableRule {
                table: rules[0].table,
                chain: rules[0].chain.clone(),
                handle,
                comment: prefix.clone(),
            }),
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
        }
    }

    /// What must be made before it: table, chain, sets.
    pub(super) fn setup(&self) -> &[Change] {
        match &self.wanted {
            Wanted::Rule { setup, .. }
            | Wanted::Group { setup, .. }
            | Wanted::Set { setup, .. }
            | Wanted::Element { setup, .. } => setup,
            Wanted::OutdatedRule { .. } => &[],
        }
    }
}
