//! One comparison of wants with the kernel: one dump per chain that holds a wanted
//! rule, one lookup per wanted set, and per set one lookup per wanted element (a
//! network's set may hold thousands of others' elements; a lookup costs the same
//! whatever their number) or, past DUMP_PAST elements wanted of it (a restore of many
//! ports), one dump of the set.

use std::collections::HashMap;

use super::want::{Want, Wanted};
use crate::netlink::nftables::model::Element;
use crate::netlink::{Nftables, NlResult, Object, Table};

/// What the kernel has of some wants.
#[derive(Debug, Default)]
pub struct Look<'w> {
    /// Wanted and not there.
    pub missing: Vec<&'w Want>,
    /// Elements under a wanted key with another value or another owner's comment, as
    /// found.
    pub differing: Vec<(&'w Want, Element)>,
    /// What to delete so that the kernel holds what is wanted: second copies of a
    /// wanted rule, outdated rules.
    pub surplus: Vec<Object>,
    /// Every object of the wants that is there, surplus and differing included (what
    /// a release deletes).
    pub present: Vec<(&'w Want, Object)>,
}

impl Look<'_> {
    /// Whether completing it appends or deletes a rule: rules are not merged like
    /// elements, so two invocations that both found one missing would both append it.
    pub fn writes_rules(&self) -> bool {
        self.surplus.iter().any(|o| matches!(o, Object::Rule(_)))
            || self
                .missing
                .iter()
                .any(|w| matches!(w.wanted, Wanted::Rule { .. }))
    }

    /// The differing elements a completion replaces (their key is their owner's own).
    pub fn replaced(&self) -> impl Iterator<Item = &(&Want, Element)> {
        self.differing
            .iter()
            .filter(|(w, _)| matches!(w.wanted, Wanted::Element { replace: true, .. }))
    }

    /// The differing elements a completion leaves: another owner's.
    pub fn left(&self) -> impl Iterator<Item = &(&Want, Element)> {
        self.differing
            .iter()
            .filter(|(w, _)| !matches!(w.wanted, Wanted::Element { replace: true, .. }))
    }
}

/// Wanted elements of one set past which one dump of the set is cheaper than a lookup
/// each (a dump reply carries many elements per message).
const DUMP_PAST: usize = 16;

/// A rule read back: its handle and its comments.
type Commented = (u64, Vec<String>);

/// The rules of each chain looked at, read once.
struct Chains(Vec<((Table, String), Vec<Commented>)>);

impl Chains {
    fn of(&mut self, nft: &mut Nftables, table: Table, chain: &str) -> NlResult<&[Commented]> {
        let at = match self
            .0
            .iter()
            .position(|((t, c), _)| *t == table && c == chain)
        {
            Some(at) => at,
            None => {
                let rules = nft.rules(table, Some(chain))?;
                let read = rules.iter().map(|r| (r.handle, r.comments())).collect();
                self.0.push(((table, chain.to_string()), read));
                self.0.len() - 1
            }
        };
        Ok(&self.0[at].1)
    }
}

/// The sets read whole (those with more than DUMP_PAST wanted elements): their
/// elements by key.
struct Dumped(Vec<((Table, String), ByKey)>);

/// A set's elements by key.
type ByKey = HashMap<Vec<u8>, Element>;

impl Dumped {
    fn of(nft: &mut Nftables, wants: &[Want]) -> NlResult<Dumped> {
        let mut counts: Vec<((Table, &str), usize)> = Vec::new();
        for want in wants {
            if let Wanted::Element { table, set, .. } = &want.wanted {
                match counts
                    .iter_mut()
                    .find(|(k, _)| *k == (*table, set.as_str()))
                {
                    Some((_, n)) => *n += 1,
                    None => counts.push(((*table, set), 1)),
                }
            }
        }
        let mut dumped = Vec::new();
        for ((table, set), _) in counts.into_iter().filter(|(_, n)| *n > DUMP_PAST) {
            let elements = nft.elements_of(table, set)?;
            let by_key = elements.into_iter().map(|e| (e.key.clone(), e)).collect();
            dumped.push(((table, set.to_string()), by_key));
        }
        Ok(Dumped(dumped))
    }

    /// The element of `set` under `key`, when the set was read whole.
    fn get(&self, table: Table, set: &str, key: &[u8]) -> Option<Option<Element>> {
        let (_, by_key) = self.0.iter().find(|((t, s), _)| *t == table && s == set)?;
        Some(by_key.get(key).cloned())
    }
}

/// Compares `wants` with what nf_tables holds.
pub fn look<'w>(nft: &mut Nftables, wants: &'w [Want]) -> NlResult<Look<'w>> {
    let mut found = Look::default();
    let mut chains = Chains(Vec::new());
    let dumped = Dumped::of(nft, wants)?;
    for want in wants {
        match &want.wanted {
            Wanted::Rule { rule, known_as, .. } => {
                let rules = chains.of(nft, rule.table, &rule.chain)?;
                let handles = with_comment(rules, known_as);
                match handles.split_first() {
                    None => found.missing.push(want),
                    Some((_, copies)) => {
                        let copies = copies.iter().map(|h| want.object(*h));
                        found.surplus.extend(copies);
                    }
                }
                for handle in handles {
                    found.present.push((want, want.object(handle)));
                }
            }
            Wanted::OutdatedRule {
                table,
                chain,
                comment,
            } => {
                let rules = chains.of(nft, *table, chain)?;
                for handle in with_comment(rules, std::slice::from_ref(comment)) {
                    found.surplus.push(want.object(handle));
                    found.present.push((want, want.object(handle)));
                }
            }
            Wanted::Set { set, .. } => match nft.set_info(set.table, &set.name)? {
                Some(_) => found.present.push((want, want.object(0))),
                None => found.missing.push(want),
            },
            Wanted::Element {
                table,
                set,
                element,
                ..
            } => {
                let there = match dumped.get(*table, set, &element.key) {
                    Some(there) => there,
                    None => {
                        let what = format!("look up {} in nf_tables set {table} {set}", want.what);
                        nft.element_of(*table, set, &element.key, &what)?
                    }
                };
                match there {
                    None => found.missing.push(want),
                    Some(there) => {
                        if differs(want, element, &there) {
                            found.differing.push((want, there));
                        }
                        found.present.push((want, want.object(0)));
                    }
                }
            }
        }
    }
    Ok(found)
}

/// Whether the element under a wanted key is not the one wanted: another value, or
/// another owner's comment.
fn differs(want: &Want, wanted: &Element, there: &Element) -> bool {
    (wanted.data.is_some() && there.data != wanted.data) || !want.owner.owns(&there.comment)
}

fn with_comment(rules: &[Commented], known_as: &[String]) -> Vec<u64> {
    rules
        .iter()
        .filter(|(_, comments)| comments.iter().any(|c| known_as.contains(c)))
        .map(|(handle, _)| *handle)
        .collect()
}
