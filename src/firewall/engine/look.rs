//! One comparison of wants with the kernel: one dump per chain that holds a wanted
//! rule, one lookup per wanted element (a network's set may hold thousands of others'
//! elements; a lookup costs the same whatever their number).

use super::want::{Want, Wanted};
use crate::netlink::{Nftables, NlResult, Object, Table, TableRule};

/// What the kernel has of some wants.
#[derive(Debug, Default)]
pub struct Look<'w> {
    /// Wanted and not there.
    pub missing: Vec<&'w Want>,
    /// Rules to delete so that the kernel holds what is wanted: second copies of a
    /// wanted rule, and outdated ones.
    pub surplus: Vec<TableRule>,
    /// Every object of the wants that is there, surplus included (what a release
    /// deletes).
    pub present: Vec<(&'w Want, Object)>,
}

impl Look<'_> {
    /// Whether the kernel holds exactly what is wanted.
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.surplus.is_empty()
    }

    /// Whether completing it appends a rule: rules are not merged like elements, so two
    /// invocations that both found one missing would both append it.
    pub fn writes_rules(&self) -> bool {
        !self.surplus.is_empty()
            || self
                .missing
                .iter()
                .any(|w| matches!(w.wanted, Wanted::Rule { .. }))
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
            Wanted::Rule { rule, comment, .. } => {
                let handles = with_comment(chains.of(nft, rule.table, &rule.chain)?, comment);
                match handles.split_first() {
                    None => found.missing.push(want),
                    Some((_, copies)) => {
                        for &handle in copies {
                            found.surplus.push(as_table_rule(want, handle));
                        }
                    }
                }
                for handle in handles {
                    found.present.push((want, want.object(handle)));
                }
            }
            Wanted::Outdated {
                table,
                chain,
                comment,
            } => {
                for handle in with_comment(chains.of(nft, *table, chain)?, comment) {
                    found.surplus.push(as_table_rule(want, handle));
                    found.present.push((want, want.object(handle)));
                }
            }
            Wanted::Element {
                table,
                set,
                element,
                ..
            } => {
                let what = format!("look up {} in nf_tables set {table} {set}", want.what);
                match nft.has_element(*table, set, &element.key, &what)? {
                    true => found.present.push((want, want.object(0))),
                    false => found.missing.push(want),
                }
            }
        }
    }
    Ok(found)
}

fn with_comment(rules: &[Commented], comment: &str) -> Vec<u64> {
    rules
        .iter()
        .filter(|(_, comments)| comments.iter().any(|c| c == comment))
        .map(|(handle, _)| *handle)
        .collect()
}

fn as_table_rule(want: &Want, handle: u64) -> TableRule {
    want.rule_at(handle).expect("wants with a handle are rules")
}
