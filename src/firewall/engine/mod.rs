//! The one engine: a kind says what it wants of nf_tables, as data (want.rs), and every
//! path that makes, checks, restores or releases that state is one comparison of those
//! wants with the kernel (look.rs) and, where they differ, one batch.
//!
//! - ADD and the restore (the watch, `academy restore`, an upgrade's) `complete` the
//!   wants: a restore after a flush is the very code that set them up;
//! - ADD first sends the attachment's own elements alone (one batch, the steady case)
//!   and completes the network's wants only when the kernel refuses for want of them;
//! - CHECK and STATUS say what is `missing`, in the same words, and what differs;
//! - the network's release deletes what is `present` of them, the host's objects aside,
//!   its bridge's only once no network uses the bridge (network/ decides).
//!
//! A kind's wants are computed with its key as configured, or with every key on
//! (`Keys::All`) for a release: an admin may have taken the key out of the conflist
//! since the objects were made, and they must still go.

mod look;
mod take;
mod want;

pub use look::{elements_under, look, Look};
pub use take::{take, AttachmentSet, Taken};
pub use want::{Accepts, Owner, Slot, Want, Wanted};

use crate::netlink::nftables::batch::named;
use crate::netlink::nftables::model::{Change, Element, Op};
use crate::netlink::{Nftables, NlResult, Object, Table};

/// Which keys a kind's wants follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// As the config sets them (ADD, CHECK, STATUS, restore).
    AsConfigured,
    /// All on, whatever the config says: everything the network may have made (its
    /// release).
    All,
}

/// What a completion did: what it put back, replaced (a stale element of the same
/// owner) and deleted (surplus), and what it left, (what, because), since another owner
/// holds it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Completed {
    pub put_back: Vec<Want>,
    pub replaced: Vec<Want>,
    pub deleted: Vec<Object>,
    pub left: Vec<(String, String)>,
}

impl Completed {
    /// What it did, in words; attachments' objects counted as one line (`noun`: "MAC
    /// filter"), so a restore of a thousand ports says one line, not three thousand.
    pub fn words(&self, noun: &str) -> Vec<String> {
        let put_back: Vec<&Want> = self.put_back.iter().collect();
        let mut words = grouped(&put_back, noun, Want::put_back_words);
        for want in &self.replaced {
            words.push(format!("replaced the stale {}", want.put_back_words()));
        }
        for object in &self.deleted {
            words.push(format!(
                "deleted {} (a second copy or an older form)",
                object.describe()
            ));
        }
        words
    }
}

/// What of `missing` wants is missing, in CHECK's and STATUS's words; attachments'
/// objects counted as one line.
pub fn summary(missing: &[&Want], noun: &str) -> Vec<String> {
    grouped(missing, noun, Want::missing_words)
}

/// Each want in words, but the attachments' ones counted: "the MAC filter of 3 wired
/// container(s)".
fn grouped(wants: &[&Want], noun: &str, say: fn(&Want) -> String) -> Vec<String> {
    let mut words = Vec::new();
    let mut owners: Vec<&str> = Vec::new();
    for want in wants {
        match &want.owner {
            Owner::Attachment(forms) => {
                let owner = forms.first().map_or("", String::as_str);
                if !owners.contains(&owner) {
                    owners.push(owner);
                }
            }
            _ => words.push(say(want)),
        }
    }
    if !owners.is_empty() {
        words.push(format!("the {noun} of {} wired container(s)", owners.len()));
    }
    words
}

/// Makes the kernel hold `wants`: one look and, only when something differs, one batch.
/// A batch that appends or deletes a rule is made under the host's repair lock after a
/// second look, so concurrent invocations that both found a rule missing append it once.
pub fn complete(nft: &mut Nftables, wants: &[Want]) -> NlResult<Completed> {
    complete_retried(nft, wants, Lock::Take, &[])
}

/// `complete`, for a caller that holds the host's repair lock already (a second take,
/// on another descriptor, would wait for itself).
pub fn complete_held(nft: &mut Nftables, wants: &[Want]) -> NlResult<Completed> {
    complete_retried(nft, wants, Lock::AttachmentSet, &[])
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lock {
    Take,
    AttachmentSet,
}

/// `added`: elements added without a look, for a caller that knows they are not all
/// there (an add of one already there, same value, is success).
fn complete_retried<'w>(
    nft: &mut Nftables,
    wants: &'w [Want],
    lock: Lock,
    added: &'w [Want],
) -> NlResult<Completed> {
    match complete_once(nft, wants, lock, added) {
        // A release deleting a table or set between the look and the batch: look again.
        Err(e) if e.is(libc::ENOENT) => complete_once(nft, wants, lock, added),
        other => other,
    }
}

fn complete_once<'w>(
    nft: &mut Nftables,
    wants: &'w [Want],
    lock: Lock,
    added: &'w [Want],
) -> NlResult<Completed> {
    let mut found = look(nft, wants)?;
    let _held = match lock == Lock::Take && found.writes_rules() {
        true => {
            let held = super::network::repair_lock();
            found = look(nft, wants)?;
            Some(held)
        }
        false => None,
    };
    found.missing.extend(added);
    apply(nft, &found)
}

/// Makes the kernel hold what `found` lacks, in one batch: for a caller that looked
/// (under the repair lock, if the batch writes rules) and says in its own words what it
/// found.
pub fn apply(nft: &mut Nftables, found: &Look) -> NlResult<Completed> {
    let changes = batch(found);
    if !changes.is_empty() {
        nft.run(changes)?;
    }
    Ok(Completed {
        put_back: found.missing.iter().map(|w| (*w).clone()).collect(),
        replaced: found.replaced().map(|(w, _)| (*w).clone()).collect(),
        deleted: found.surplus.clone(),
        left: found
            .left()
            .map(|(w, there)| held_by(w, &there.comment))
            .collect(),
    })
}

/// An element left alone, in words: what, and whose it is.
fn held_by(want: &Want, comment: &str) -> (String, String) {
    let because = match comment {
        "" => "the element there holds another value".to_string(),
        holder => format!("{holder:?} holds it"),
    };
    (want.put_back_words(), because)
}

/// ADD of one attachment: its elements (`own`) in one batch, the steady case; when the
/// kernel refuses them for want of a set or table, the network's wants completed and the
/// elements added in one batch (what they need made first is their setup), the network's
/// alone looked at. Elements under the attachment's own key with another value (its earlier
/// pair's, from an ADD killed before its DEL) are replaced.
pub fn add(nft: &mut Nftables, network: &[Want], own: &[Want]) -> NlResult<Completed> {
    if own.is_empty() {
        return complete(nft, network);
    }
    match nft.run(element_adds(own.iter())) {
        // The attachment's elements are not all there (the batch failed whole): they go
        // in the completion's batch unlooked at, with what they need made first.
        Err(e) if e.is(libc::ENOENT) => match complete_retried(nft, network, Lock::Take, own) {
            // One of them there with another value (a stale one): all looked at.
            Err(e) if e.is(libc::EBUSY) || e.is(libc::EEXIST) => {
                let all: Vec<Want> = network.iter().chain(own).cloned().collect();
                complete(nft, &all)
            }
            other => other,
        },
        Err(e) if e.is(libc::EBUSY) || e.is(libc::EEXIST) => complete(nft, own),
        other => other.map(|()| Completed::default()),
    }
}

/// The elements added: each set's in one message, or in as many as its list needs
/// (netlink's attribute length is 16 bits: a restore of thousands is cut by size), in
/// the order the sets first come.
fn element_adds<'w>(wants: impl Iterator<Item = &'w Want>) -> Vec<Change> {
    type OfSet<'w> = Vec<(&'w Want, &'w Element)>;
    let mut sets: Vec<((Table, &str), OfSet)> = Vec::new();
    for want in wants {
        let Wanted::Element {
            table,
            set,
            element,
            ..
        } = &want.wanted
        else {
            continue;
        };
        match sets.iter_mut().find(|(k, _)| *k == (*table, set.as_str())) {
            Some((_, of_set)) => of_set.push((want, element)),
            None => sets.push(((*table, set), vec![(want, element)])),
        }
    }
    let mut changes = Vec::new();
    for ((table, set), of_set) in sets {
        changes.extend(Change::elements(
            &of_set,
            |(_, element)| (*element).clone(),
            |elements| Op::AddElements {
                table,
                set: set.to_string(),
                elements,
                exclusive: false,
                publish: false,
            },
            |part| {
                let whats = part.iter().map(|(w, _)| w.what.clone());
                format!("add {} to {}", named(whats), part[0].0.place())
            },
        ));
    }
    changes
}

/// The batch that makes the kernel match: what the missing objects need made first
/// (once each, and no chain the look found holding rules: making an existing base chain
/// again is an update, whose old copy the kernel frees after an RCU grace period that
/// the socket's close waits out, 8-12 ms), the surplus and the replaced elements
/// deleted, then the missing and replaced objects added. For a caller that sends it
/// with changes of its own (ADD's one batch); `complete` sends it alone.
pub fn batch(found: &Look) -> Vec<Change> {
    let mut changes: Vec<Change> = Vec::new();
    let replaced: Vec<&Want> = found.replaced().map(|(w, _)| *w).collect();
    for want in found.missing.iter().chain(&replaced) {
        for change in want.setup() {
            let there = match &change.op {
                Op::AddChain(chain) => found
                    .chains_present
                    .iter()
                    .any(|(t, c)| *t == chain.table && c == chain.name),
                _ => false,
            };
            if !there && !changes.contains(change) {
                changes.push(change.clone());
            }
        }
    }
    changes.extend(
        found
            .surplus
            .iter()
            .chain(&found.remade)
            .map(Object::delete),
    );
    changes.extend(replaced.iter().map(|w| w.object(0).delete()));
    for want in &found.missing {
        let what = format!("add {} to {}", want.what, want.place());
        match &want.wanted {
            Wanted::Rule { rule, .. } => changes.push(Change::add_rule(rule.clone(), what)),
            Wanted::Group { rules, .. } => {
                for rule in rules {
                    let what = format!(
                        "add the rule {:?} to chain {} {}",
                        rule.comment.as_deref().unwrap_or(""),
                        rule.table,
                        rule.chain
                    );
                    changes.push(Change::add_rule(rule.clone(), what));
                }
            }
            Wanted::Set { set, .. } => changes.push(Change::add_set(set.clone())),
            // Added last, each set's in as few messages as they fit.
            Wanted::Element { .. } | Wanted::OutdatedRule { .. } => {}
        }
    }
    changes.extend(element_adds(found.missing.iter().copied().chain(replaced)));
    changes
}

/// What of `wants` nf_tables lacks, in CHECK's and STATUS's words.
pub fn missing(nft: &mut Nftables, wants: &[Want]) -> NlResult<Vec<String>> {
    Ok(look(nft, wants)?.missing_words())
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
            wanted: Wanted::element(T, "s", Element::key(vec![key]), vec![Change::add_table(T)]),
            owner: Owner::Bridge("b".into()),
            what: format!("element {key}"),
            harm: "h".into(),
        }
    }

    /// What the missing objects need is made once and first, and surplus rules go
    /// before anything is added.
    #[test]
    fn a_batch_makes_what_is_needed_once_deletes_then_adds() {
        let (r, e) = (rule_want("r"), element_want(7));
        let found = Look {
            missing: vec![&r, &e],
            surplus: vec![Object::Rule(TableRule {
                table: T,
                chain: "c".into(),
                handle: 9,
                comment: "r".into(),
            })],
            ..Look::default()
        };
        let changes = batch(&found);
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
        assert_eq!(r.put_back_words(), "rule r in nf_tables chain inet t c");
        assert_eq!(
            e.missing_words(),
            "element 7 is missing from nf_tables set inet t s: h"
        );
    }

    /// An attachment's objects are counted in one line, the network's said each.
    #[test]
    fn attachments_are_counted_in_a_summary() {
        let port = |owner: &str, key| Want {
            owner: Owner::Attachment(vec![owner.to_string()]),
            ..element_want(key)
        };
        let (a1, a2, b) = (port("a", 1), port("a", 2), port("b", 3));
        let r = rule_want("r");
        let words = summary(&[&a1, &r, &a2, &b], "MAC filter");
        assert_eq!(
            words,
            [
                "rule r is missing from nf_tables chain inet t c: h",
                "the MAC filter of 2 wired container(s)"
            ]
        );
    }

    /// A restore of many elements sends each set's in one message, or in as many as the
    /// 16-bit attribute length allows, not one message per element.
    #[test]
    fn missing_elements_go_in_one_message_per_set_cut_by_size() {
        let in_set = |set: &str, key: u16| Want {
            wanted: Wanted::element(T, set, Element::key(key.to_be_bytes().to_vec()), vec![]),
            ..element_want(0)
        };
        let (a1, b1, a2) = (in_set("a", 1), in_set("b", 2), in_set("a", 3));
        let found = Look {
            missing: vec![&a1, &b1, &a2],
            ..Look::default()
        };
        let lists: Vec<(String, usize)> = batch(&found)
            .iter()
            .filter_map(|c| match &c.op {
                Op::AddElements { set, elements, .. } => Some((set.clone(), elements.len())),
                _ => None,
            })
            .collect();
        assert_eq!(lists, [("a".to_string(), 2), ("b".to_string(), 1)]);

        let many: Vec<Want> = (0..5000).map(|k| in_set("a", k)).collect();
        let found = Look {
            missing: many.iter().collect(),
            ..Look::default()
        };
        let sizes: Vec<usize> = batch(&found)
            .iter()
            .filter_map(|c| match &c.op {
                Op::AddElements { elements, .. } => Some(elements.len()),
                _ => None,
            })
            .collect();
        assert!(sizes.len() > 1, "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 5000);
    }

    /// A chain the look found holding rules is not made again (an update of a base
    /// chain costs the socket's close an RCU grace period); one it did not find is.
    #[test]
    fn a_batch_leaves_out_a_chain_found_holding_rules() {
        use crate::netlink::nftables::model::{Chain, ChainType, Hook, Priority};
        let chain = Change::add_chain(Chain {
            table: T,
            name: "c",
            hook: Hook::Postrouting,
            priority: Priority::NAT_SRC,
            kind: ChainType::Nat,
        });
        let mut r = rule_want("r");
        if let Wanted::Rule { setup, .. } = &mut r.wanted {
            setup.push(chain.clone());
        }
        let mut found = Look {
            missing: vec![&r],
            ..Look::default()
        };
        assert!(batch(&found).contains(&chain));
        found.chains_present = vec![(T, "c".to_string())];
        let changes = batch(&found);
        assert!(!changes.contains(&chain), "{changes:?}");
        assert!(changes.iter().any(|c| matches!(c.op, Op::AddRule(_))));
    }

    /// A slot holds academy's rules that look up its set, whatever ranges they name;
    /// `also_current` takes some of them as the wanted rule.
    #[test]
    fn a_slot_holds_every_form_of_its_rule() {
        fn ends_with(comment: &str, tail: &str) -> bool {
            comment.ends_with(tail)
        }
        let slot = Slot {
            prefix: "academy ipMasq ".into(),
            set: "n-v4".into(),
            also_current: Some(Accepts {
                test: ends_with,
                arg: " nonMasqueradeCIDRs 10.0.0.0/8".into(),
            }),
        };
        let comments = |c: &str| vec![c.to_string()];
        let sets = |s: &str| vec![s.to_string()];
        let old = "academy ipMasq n-v4 except 10.1.0.0/24";
        assert!(slot.holds(&comments(old), &sets("n-v4")));
        assert!(!slot.holds(&comments(old), &sets("m-v4")), "another set's");
        assert!(
            !slot.holds(&comments("someone's"), &sets("n-v4")),
            "not academy's"
        );
        let accepts = slot.also_current.as_ref().unwrap();
        assert!(!accepts.accepts(old));
        assert!(
            accepts.accepts("academy ipMasq n-v4 except 10.9.0.0/24 nonMasqueradeCIDRs 10.0.0.0/8")
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
    }
}
