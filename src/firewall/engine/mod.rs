//! The one engine: a kind says what it wants of nf_tables, as data (want.rs), and every
//! path that makes, checks, restores or releases that state is one comparison of those
//! wants with the kernel (look.rs) and, where they differ, one batch.
//!
//! - ADD and the restore (the watch, `academy restore`, an upgrade's) `complete` the
//!   wants: a restore after a flush is the very code that set them up;
//! - CHECK and STATUS say what is `missing`, in the same words;
//! - the network's release deletes what is `present` of them, the host's objects aside,
//!   its bridge's only once no network uses the bridge (network.rs decides).
//!
//! A kind's wants are computed with its key as configured, or with every key on
//! (`Keys::All`) for a release: an admin may have taken the key out of the conflist
//! since the objects were made, and they must still go.

mod look;
mod want;

pub use look::{look, Look};
pub use want::{Owner, Want, Wanted};

use crate::netlink::nftables::model::Change;
use crate::netlink::{Nftables, NlResult, Object};

/// Which keys a kind's wants follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// As the config sets them (ADD, CHECK, STATUS, restore).
    AsConfigured,
    /// All on, whatever the config says: everything the network may have made (its
    /// release).
    All,
}

/// Makes the kernel hold `wants`: one look and, only when something differs, one batch.
/// A batch that appends or deletes a rule is made under the host's repair lock after a
/// second look, so concurrent invocations that both found a rule missing append it once.
/// Returns what it put back and deleted, in words (nothing when all was there).
pub fn complete(nft: &mut Nftables, wants: &[Want]) -> NlResult<Vec<String>> {
    match complete_once(nft, wants) {
        // A release deleting a table or set between the look and the batch: look again.
        Err(e) if e.is(libc::ENOENT) => complete_once(nft, wants),
        other => other,
    }
}

fn complete_once(nft: &mut Nftables, wants: &[Want]) -> NlResult<Vec<String>> {
    let mut found = look(nft, wants)?;
    if found.complete() {
        return Ok(Vec::new());
    }
    let _held = match found.writes_rules() {
        true => {
            let held = super::network::repair_lock();
            found = look(nft, wants)?;
            Some(held)
        }
        false => None,
    };
    let (changes, done) = batch(&found);
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    nft.run(changes)?;
    Ok(done)
}

/// The batch that makes the kernel match, and what it does in words: what the missing
/// objects need made first (once each), the surplus rules deleted, then the missing
/// objects added.
fn batch(found: &Look) -> (Vec<Change>, Vec<String>) {
    let mut changes: Vec<Change> = Vec::new();
    let mut done = Vec::new();
    for want in &found.missing {
        let setup = match &want.wanted {
            Wanted::Rule { setup, .. } | Wanted::Element { setup, .. } => setup.as_slice(),
            Wanted::Outdated { .. } => &[],
        };
        for change in setup {
            if !changes.contains(change) {
                changes.push(change.clone());
            }
        }
    }
    for rule in &found.surplus {
        let what = format!(
            "delete the rule {:?} (handle {}) from nf_tables chain {} {}",
            rule.comment, rule.handle, rule.table, rule.chain
        );
        changes.push(Change::delete_rule(
            rule.table,
            &rule.chain,
            rule.handle,
            what,
        ));
        done.push(format!(
            "deleted {:?} (handle {}, a second copy or an older form) from nf_tables chain {} {}",
            rule.comment, rule.handle, rule.table, rule.chain
        ));
    }
    for want in &found.missing {
        let what = format!("add {} to {}", want.what, want.place());
        match &want.wanted {
            Wanted::Rule { rule, .. } => changes.push(Change::add_rule(rule.clone(), what)),
            Wanted::Element {
                table,
                set,
                element,
                ..
            } => changes.push(Change::add_element(*table, set, element.clone(), what)),
            Wanted::Outdated { .. } => continue,
        }
        done.push(want.put_back_words());
    }
    (changes, done)
}

/// What of `wants` nf_tables lacks, in CHECK's and STATUS's words.
pub fn missing(nft: &mut Nftables, wants: &[Want]) -> NlResult<Vec<String>> {
    Ok(look(nft, wants)?
        .missing
        .iter()
        .map(|w| w.missing_words())
        .collect())
}

/// The objects of `wants` nf_tables has, those of every network on the host aside:
/// what a release of them deletes (outdated rules and second copies included).
pub fn present(nft: &mut Nftables, wants: &[Want]) -> NlResult<Vec<Object>> {
    let released: Vec<Want> = wants
        .iter()
        .filter(|w| w.owner != Owner::Host)
        .cloned()
        .collect();
    Ok(look(nft, &released)?
        .present
        .into_iter()
        .map(|(_, object)| object)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::model::{Element, Op, Rule};
    use crate::netlink::{Table, TableRule};

    const T: Table = Table::inet("t");

    fn rule_want(comment: &str) -> Want {
        let rule = Rule {
            table: T,
            chain: "c".into(),
            handle: 0,
            comment: Some(comment.into()),
            exprs: Vec::new(),
        };
        Want {
            wanted: Wanted::rule(rule, comment, vec![Change::add_table(T)]),
            owner: Owner::Host,
            what: format!("rule {comment}"),
            harm: "h".into(),
        }
    }

    fn element_want(key: u8) -> Want {
        Want {
            wanted: Wanted::Element {
                table: T,
                set: "s".into(),
                element: Element::key(vec![key]),
                setup: vec![Change::add_table(T)],
            },
            owner: Owner::Bridge("b".into()),
            what: format!("element {key}"),
            harm: "h".into(),
        }
    }

    /// What the missing objects need is made once and first, surplus rules go before
    /// anything is added, and every change is said in words.
    #[test]
    fn a_batch_makes_what_is_needed_once_deletes_then_adds() {
        let (r, e) = (rule_want("r"), element_want(7));
        let found = Look {
            missing: vec![&r, &e],
            surplus: vec![TableRule {
                table: T,
                chain: "c".into(),
                handle: 9,
                comment: "r".into(),
            }],
            present: Vec::new(),
        };
        let (changes, done) = batch(&found);
        let ops: Vec<&str> = changes
            .iter()
            .map(|c| match &c.op {
                Op::AddTable(_) => "table",
                Op::DeleteRule {
                    handle: Some(9), ..
                } => "delete 9",
                Op::AddRule(_) => "rule",
                Op::AddElements { .. } => "element",
                _ => "other",
            })
            .collect();
        assert_eq!(ops, ["table", "delete 9", "rule", "element"]);
        assert_eq!(done.len(), 3);
        assert_eq!(done[1], "rule r in nf_tables chain inet t c");
        assert_eq!(
            e.missing_words(),
            "element 7 is missing from nf_tables set inet t s: h"
        );
    }

    #[test]
    fn only_a_rule_or_a_surplus_takes_the_repair_lock() {
        let e = element_want(1);
        let elements_only = Look {
            missing: vec![&e],
            ..Look::default()
        };
        assert!(!elements_only.writes_rules());
        let r = rule_want("r");
        let with_rule = Look {
            missing: vec![&r],
            ..Look::default()
        };
        assert!(with_rule.writes_rules());
        assert!(Look::default().complete());
    }
}
