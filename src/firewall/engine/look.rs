//! One comparison of wants with the kernel: one dump per chain that holds a wanted
//! rule, one lookup per wanted set, and per set one lookup per wanted element (a
//! network's set may hold thousands of others' elements; a lookup costs the same
//! whatever their number) or, past a few elements wanted of it (a restore of many
//! ports), one dump of the set (`elements_under`).

use std::collections::{HashMap, HashSet};

use super::want::{Slot, Want, Wanted};
use crate::netlink::nftables::model::{Element, Expr};
use crate::netlink::{Nftables, NlResult, Object, Table, TableRule};

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
    /// The rules of incomplete groups, deleted to be added again whole and in order.
    pub remade: Vec<Object>,
    /// Every object of the wants that is there, surplus and differing included (what
    /// a release deletes).
    pub present: Vec<(&'w Want, Object)>,
    /// For each incomplete group, the comments of its rules that are not there.
    pub group_lacks: Vec<(&'w Want, Vec<String>)>,
    /// Outdated forms of a slotted rule (also in `surplus`), with their comment.
    pub outdated: Vec<(&'w Want, String)>,
    /// The chains found holding rules: there, so a batch need not make them again.
    pub chains_present: Vec<(Table, String)>,
}

impl Look<'_> {
    /// What is missing, in CHECK's and STATUS's words: a group names the rules it
    /// lacks (or says it has others of its prefix).
    pub fn missing_words(&self) -> Vec<String> {
        let mut words = Vec::new();
        for want in &self.missing {
            let lacks = self
                .group_lacks
                .iter()
                .find(|(g, _)| std::ptr::eq(*g, *want));
            let (what, place, harm) = (&want.what, want.place(), &want.harm);
            match lacks {
                Some((_, lacks)) if lacks.is_empty() => words.push(format!(
                    "{what}'s rules in {place} include others of their kind or second copies: {harm}"
                )),
                Some((_, lacks)) => words.extend(lacks.iter().map(|rule| {
                    format!("{what}'s rule {rule:?} is missing from {place}: {harm}")
                })),
                None => words.push(want.missing_words()),
            }
        }
        words
    }

    /// Whether completing it appends or deletes a rule: rules are not merged like
    /// elements, so two invocations that both found one missing would both append it.
    pub fn writes_rules(&self) -> bool {
        self.surplus.iter().any(|o| matches!(o, Object::Rule(_)))
            || self
                .missing
                .iter()
                .any(|w| matches!(w.wanted, Wanted::Rule { .. } | Wanted::Group { .. }))
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

/// Keys of one set past which one dump of it is cheaper than a lookup each.
pub(super) const DUMP_PAST: usize = 16;

/// The elements of `set` under `keys`: one lookup each, or, past DUMP_PAST of them, one
/// dump of the set (a dump reply carries many elements per message; a lookup costs the
/// same whatever the set holds). The element look of the removal, GC and published
/// ports' holders.
pub fn elements_under(
    nft: &mut Nftables,
    table: Table,
    set: &str,
    keys: &[Vec<u8>],
) -> NlResult<Vec<Element>> {
    if keys.len() > DUMP_PAST {
        let mut all = nft.elements_of(table, set)?;
        keep_keys(&mut all, keys);
        return Ok(all);
    }
    let what = format!("look up an element in nf_tables set {table} {set}");
    let mut found = Vec::new();
    for key in keys {
        found.extend(nft.element_of(table, set, key, &what)?);
    }
    Ok(found)
}

/// Keeps of a set's elements those under `keys`.
pub(super) fn keep_keys(elements: &mut Vec<Element>, keys: &[Vec<u8>]) {
    let keys: HashSet<&Vec<u8>> = keys.iter().collect();
    elements.retain(|e| keys.contains(&e.key));
}

/// A rule read back: its handle, its comments and the sets it looks up.
#[derive(Clone)]
struct Commented {
    handle: u64,
    comments: Vec<String>,
    sets: Vec<String>,
}

/// What one dump read: a table's rules (`chain` None: all of its chains), each with its
/// chain.
struct Read {
    table: Table,
    chain: Option<String>,
    rules: Vec<(String, Commented)>,
}

/// The rules looked at, each chain read once: a table read whole (for a group, whose
/// rules span its chains) serves every chain of it.
struct Chains(Vec<Read>);

impl Chains {
    fn of(&mut self, nft: &mut Nftables, table: Table, chain: &str) -> NlResult<Vec<Commented>> {
        let covers = |r: &Read| r.table == table && r.chain.as_deref().is_none_or(|c| c == chain);
        if !self.0.iter().any(covers) {
            self.read(nft, table, Some(chain))?;
        }
        let read = self.0.iter().find(|r| covers(r)).expect("just read");
        Ok(read
            .rules
            .iter()
            .filter(|(c, _)| c == chain)
            .map(|(_, rule)| rule.clone())
            .collect())
    }

    /// The chains read that hold at least one rule.
    fn holding_rules(&self) -> Vec<(Table, String)> {
        let mut held: Vec<(Table, String)> = Vec::new();
        for read in &self.0 {
            for (chain, _) in &read.rules {
                if !held.iter().any(|(t, c)| *t == read.table && c == chain) {
                    held.push((read.table, chain.clone()));
                }
            }
        }
        held
    }

    /// Reads all of `table` in one dump, unless it was.
    fn read_whole(&mut self, nft: &mut Nftables, table: Table) -> NlResult<()> {
        match self.0.iter().any(|r| r.table == table && r.chain.is_none()) {
            true => Ok(()),
            false => self.read(nft, table, None),
        }
    }

    fn read(&mut self, nft: &mut Nftables, table: Table, chain: Option<&str>) -> NlResult<()> {
        let rules = nft.rules(table, chain)?;
        let rules = rules
            .iter()
            .map(|r| {
                let sets = r.exprs.iter().filter_map(|e| match e {
                    Expr::Lookup { set, .. } => Some(set.clone()),
                    _ => None,
                });
                let seen = Commented {
                    handle: r.handle,
                    comments: r.comments(),
                    sets: sets.collect(),
                };
                (r.chain.clone(), seen)
            })
            .collect();
        self.0.push(Read {
            table,
            chain: chain.map(str::to_string),
            rules,
        });
        Ok(())
    }
}

/// The wanted elements there, by set and key: the engine's element look of each set
/// (`elements_under`: a lookup per key, or one dump of a set past a few).
struct Elements(Vec<((Table, String), ByKey)>);

/// A set's elements by key.
type ByKey = HashMap<Vec<u8>, Element>;

impl Elements {
    fn of(nft: &mut Nftables, wants: &[Want]) -> NlResult<Elements> {
        type Keys = Vec<Vec<u8>>;
        let mut keys: Vec<((Table, &str), Keys)> = Vec::new();
        for want in wants {
            if let Wanted::Element {
                table,
                set,
                element,
                ..
            } = &want.wanted
            {
                let key = element.key.clone();
                match keys.iter_mut().find(|(k, _)| *k == (*table, set.as_str())) {
                    Some((_, of_set)) => of_set.push(key),
                    None => keys.push(((*table, set), vec![key])),
                }
            }
        }
        let mut found = Vec::new();
        for ((table, set), keys) in keys {
            let there = elements_under(nft, table, set, &keys)?;
            let by_key = there.into_iter().map(|e| (e.key.clone(), e)).collect();
            found.push(((table, set.to_string()), by_key));
        }
        Ok(Elements(found))
    }

    /// The element of `set` under `key`, if there.
    fn get(&self, table: Table, set: &str, key: &[u8]) -> Option<Element> {
        let (_, by_key) = self.0.iter().find(|((t, s), _)| *t == table && s == set)?;
        by_key.get(key).cloned()
    }
}

/// Compares `wants` with what nf_tables holds.
pub fn look<'w>(nft: &mut Nftables, wants: &'w [Want]) -> NlResult<Look<'w>> {
    let mut found = Look::default();
    let mut chains = Chains(Vec::new());
    let elements = Elements::of(nft, wants)?;
    for want in wants {
        match &want.wanted {
            Wanted::Rule {
                rule,
                known_as,
                slot,
                ..
            } => {
                let rules = chains.of(nft, rule.table, &rule.chain)?;
                let mut current = with_comment(&rules, known_as);
                let outdated: Vec<TableRule> = match slot {
                    Some(slot) => slot_forms(slot, &rules, &mut current),
                    None => Vec::new(),
                }
                .into_iter()
                .map(|(handle, comment)| TableRule {
                    table: rule.table,
                    chain: rule.chain.clone(),
                    handle,
                    comment,
                })
                .collect();
                match current.split_first() {
                    None => found.missing.push(want),
                    Some((_, copies)) => {
                        let copies = copies.iter().map(|h| want.object(*h));
                        found.surplus.extend(copies);
                    }
                }
                for handle in current {
                    found.present.push((want, want.object(handle)));
                }
                for rule in outdated {
                    found.outdated.push((want, rule.comment.clone()));
                    found.surplus.push(Object::Rule(rule.clone()));
                    found.present.push((want, Object::Rule(rule)));
                }
            }
            Wanted::Group { prefix, rules, .. } => {
                let mut ours: Vec<TableRule> = Vec::new();
                let mut seen: Vec<(Table, &str)> = Vec::new();
                for rule in rules {
                    if seen.contains(&(rule.table, rule.chain.as_str())) {
                        continue;
                    }
                    seen.push((rule.table, &rule.chain));
                    chains.read_whole(nft, rule.table)?;
                    for seen in chains.of(nft, rule.table, &rule.chain)? {
                        let comments = seen.comments.iter();
                        if let Some(c) = comments.clone().find(|c| c.starts_with(prefix.as_str())) {
                            ours.push(TableRule {
                                table: rule.table,
                                chain: rule.chain.clone(),
                                handle: seen.handle,
                                comment: c.clone(),
                            });
                        }
                    }
                }
                let lacks: Vec<String> = rules
                    .iter()
                    .filter(|r| {
                        let comment = r.comment.as_deref();
                        !ours
                            .iter()
                            .any(|o| o.chain == r.chain && Some(o.comment.as_str()) == comment)
                    })
                    .map(|r| r.comment.clone().unwrap_or_default())
                    .collect();
                if !lacks.is_empty() || ours.len() != rules.len() {
                    found.missing.push(want);
                    found.group_lacks.push((want, lacks));
                    found.remade.extend(ours.iter().cloned().map(Object::Rule));
                }
                found
                    .present
                    .extend(ours.into_iter().map(|r| (want, Object::Rule(r))));
            }
            Wanted::OutdatedRule {
                table,
                chain,
                comment,
            } => {
                let rules = chains.of(nft, *table, chain)?;
                for handle in with_comment(&rules, std::slice::from_ref(comment)) {
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
            } => match elements.get(*table, set, &element.key) {
                None => found.missing.push(want),
                Some(there) => {
                    if differs(want, element, &there) {
                        found.differing.push((want, there));
                    }
                    found.present.push((want, want.object(0)));
                }
            },
        }
    }
    found.chains_present = chains.holding_rules();
    Ok(found)
}

/// Whether the element under a wanted key is not the one wanted: another value, or
/// another owner's comment.
fn differs(want: &Want, wanted: &Element, there: &Element) -> bool {
    (wanted.data.is_some() && there.data != wanted.data) || !want.owner.owns(&there.comment)
}

/// The other forms of a slotted rule among `rules`: those the slot's test takes as
/// current join `current`; the outdated ones are returned, (handle, comment).
fn slot_forms(slot: &Slot, rules: &[Commented], current: &mut Vec<u64>) -> Vec<(u64, String)> {
    let mut outdated = Vec::new();
    for seen in rules {
        if current.contains(&seen.handle) || !slot.holds(&seen.comments, &seen.sets) {
            continue;
        }
        let comment = seen.comments.first().cloned().unwrap_or_default();
        match slot
            .also_current
            .as_ref()
            .is_some_and(|a| a.accepts(&comment))
        {
            true => current.push(seen.handle),
            false => outdated.push((seen.handle, comment)),
        }
    }
    outdated
}

fn with_comment(rules: &[Commented], known_as: &[String]) -> Vec<u64> {
    rules
        .iter()
        .filter(|r| r.comments.iter().any(|c| known_as.contains(c)))
        .map(|r| r.handle)
        .collect()
}
