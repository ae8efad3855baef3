//! One comparison of wants with the kernel: one dump per chain that holds a wanted
//! rule, one lookup per wanted set or element (a network's set may hold thousands of
//! others' elements; a lookup costs the same whatever their number).

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

/// Compares `wants` with what nf_tables holds.
pub fn look<'w>(nft: &mut Nftables, wants: &'w [Want]) -> NlResult<Look<'w>> {
    let mut found = Look::default();
    let mut chains = Chains(Vec::new());
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
                let what = format!("look up {} in nf_tables set {table} {set}", want.what);
                match nft.element_of(*table, set, &element.key, &what)? {
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
