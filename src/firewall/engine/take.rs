//! Taking attachments' elements, the same for every kind: GC's sweep (the elements whose
//! owner is no valid attachment) and the one removal (those whose owner is the removed
//! attachment). A kind says where its attachments' elements are (`AttachmentSet`), and
//! the caller which owners go. Where the keys are known (a removal: the attachment's
//! addresses, its host veth, its published ports) each is looked up, and one of another
//! owner is left and reported; otherwise the set is read whole (one dump). What goes
//! goes in one batch.

use super::look::{elements_under, keep_keys, DUMP_PAST};
use crate::netlink::nftables::batch::named;
use crate::netlink::nftables::model::{Change, Element, Op, Set};
use crate::netlink::{Nftables, NlError, NlResult, Table};

/// An element in words, or None when it is not the swept network's.
type Shown = Box<dyn Fn(&Element) -> Option<String>>;

/// The keys, by set, of the elements that go with one.
type Along = Box<dyn Fn(&Element) -> Vec<(String, Vec<u8>)>>;

/// A set (or map) whose elements are attachments', each with its owner's comment.
pub struct AttachmentSet {
    /// The set as academy makes it: one of its name in another shape is someone else's
    /// and is left alone.
    pub set: Set,
    /// An element in GC's words ("masquerade of 10.1.0.5"); None for one that is not the
    /// network's (a set every network shares holds the others' too) or not in a form
    /// academy writes.
    shown: Shown,
    /// The elements of other sets that go with a swept one: the MAC filter's two sets
    /// follow its map (an older academy wrote their elements without a comment).
    along: Along,
    /// Its elements are published ports: a refusal reads as unpublishing one.
    published: bool,
    /// The keys to look up, when the caller knows them; None: every element is looked
    /// at.
    keys: Option<Vec<Vec<u8>>>,
}

impl AttachmentSet {
    pub fn new(set: Set, shown: impl Fn(&Element) -> Option<String> + 'static) -> AttachmentSet {
        AttachmentSet {
            set,
            shown: Box::new(shown),
            along: Box::new(|_| Vec::new()),
            published: false,
            keys: None,
        }
    }

    /// Only the elements under `keys` (past DUMP_PAST of them, one dump of the set is
    /// cheaper than a lookup each).
    pub fn only(mut self, keys: Vec<Vec<u8>>) -> AttachmentSet {
        self.keys = Some(keys);
        self
    }

    /// With the elements of other sets that go with each of its own.
    pub fn along(
        mut self,
        along: impl Fn(&Element) -> Vec<(String, Vec<u8>)> + 'static,
    ) -> AttachmentSet {
        self.along = Box::new(along);
        self
    }

    /// Its elements are published ports.
    pub fn published(mut self) -> AttachmentSet {
        self.published = true;
        self
    }
}

/// What a take did.
#[derive(Debug, Default)]
pub struct Taken {
    /// Deleted: (the element in words, its owner's comment).
    pub removed: Vec<(String, String)>,
    /// Found under a key looked up, and not taken: (the element in words, its owner's
    /// comment).
    pub left: Vec<(String, String)>,
    /// Sets under academy's name in another shape, left alone: ("inet academy n-v4",
    /// how it differs).
    pub foreign: Vec<(String, String)>,
    pub errors: Vec<NlError>,
}

/// One element to delete: where, its key, the keys going with it, and its words.
struct Stale<'h> {
    of: &'h AttachmentSet,
    element: Element,
    shown: String,
}

impl Stale<'_> {
    /// Its key and those that go with it, by set.
    fn keys(&self) -> Vec<(String, Vec<u8>)> {
        let own = (self.of.set.name.clone(), self.element.key.clone());
        let mut keys = vec![own];
        keys.extend((self.of.along)(&self.element));
        keys
    }
}

/// Deletes the elements of `sets` that are the network's and whose owner `goes`: one
/// lookup per key known (or one dump of the set), one batch for all. Errors are
/// collected; the rest goes on.
pub fn take(nft: &mut Nftables, sets: &[AttachmentSet], goes: impl Fn(&str) -> bool) -> Taken {
    let mut taken = Taken::default();
    let mut stale: Vec<Stale> = Vec::new();
    for h in sets {
        let all = match read(nft, h) {
            Ok(Read::Missing) => continue,
            Ok(Read::Foreign(why)) => {
                let set = format!("{} {}", h.set.table, h.set.name);
                taken.foreign.push((set, why));
                continue;
            }
            Ok(Read::Elements(all)) => all,
            Err(e) => {
                taken.errors.push(e);
                continue;
            }
        };
        for element in all {
            let Some(shown) = (h.shown)(&element) else {
                continue;
            };
            match goes(&element.comment) {
                true => stale.push(Stale {
                    of: h,
                    element,
                    shown,
                }),
                false if h.keys.is_some() => taken.left.push((shown, element.comment)),
                false => {}
            }
        }
    }
    if stale.is_empty() {
        return taken;
    }
    let deleted: Vec<bool> = match nft.run(deletions(&stale)) {
        Ok(()) => vec![true; stale.len()],
        // The batch is all or nothing, and one of them went meanwhile (a DEL, another
        // GC): each alone, one gone already skipped.
        Err(e) if e.is(libc::ENOENT) => stale
            .iter()
            .map(|s| match nft.run(deletions(std::slice::from_ref(s))) {
                Ok(()) => true,
                Err(e) if e.is(libc::ENOENT) => delete_each(nft, s, &mut taken.errors),
                Err(e) => {
                    taken.errors.push(e);
                    false
                }
            })
            .collect(),
        Err(e) => {
            taken.errors.push(e);
            vec![false; stale.len()]
        }
    };
    for (s, deleted) in stale.into_iter().zip(deleted) {
        if deleted {
            taken.removed.push((s.shown, s.element.comment));
        }
    }
    taken
}

/// What stands under an attachment set's name.
enum Read {
    Missing,
    Foreign(String),
    Elements(Vec<Element>),
}

fn read(nft: &mut Nftables, of: &AttachmentSet) -> NlResult<Read> {
    let (table, name) = (of.set.table, of.set.name.as_str());
    match &of.keys {
        Some(keys) if keys.len() <= DUMP_PAST => match elements_under(nft, table, name, keys) {
            Ok(found) => Ok(Read::Elements(found)),
            // A set of another shape refuses a key of academy's (EINVAL): say so.
            Err(e) => match read_whole(nft, of)? {
                Read::Foreign(why) => Ok(Read::Foreign(why)),
                _ => Err(e),
            },
        },
        _ => read_whole(nft, of),
    }
}

/// The set read whole, or what stands under its name; only the keys asked for kept.
fn read_whole(nft: &mut Nftables, of: &AttachmentSet) -> NlResult<Read> {
    let set = &of.set;
    let Some(info) = nft.set_info(set.table, &set.name)? else {
        return Ok(Read::Missing);
    };
    let differences = set.differences(&info);
    if !differences.is_empty() {
        return Ok(Read::Foreign(differences.join(", ")));
    }
    let mut all = nft.elements_of(set.table, &set.name)?;
    if let Some(keys) = &of.keys {
        keep_keys(&mut all, keys);
    }
    Ok(Read::Elements(all))
}

/// An element and those going with it, each alone, those already gone skipped (an
/// older academy's set may lack one): whether the element itself was deleted.
fn delete_each(nft: &mut Nftables, stale: &Stale, errors: &mut Vec<NlError>) -> bool {
    let table = stale.of.set.table;
    let mut deleted = true;
    for (set, key) in stale.keys() {
        let change = deletion(table, set, vec![key], stale.of.published, &stale.shown);
        match nft.run(vec![change]) {
            Ok(()) => {}
            Err(e) if e.is(libc::ENOENT) => {}
            Err(e) => {
                errors.push(e);
                deleted = false;
            }
        }
    }
    deleted
}

/// The batch deleting `stale`: each set's keys in as few messages as they fit, in the
/// order the sets first come.
fn deletions(stale: &[Stale]) -> Vec<Change> {
    type OfSet<'s> = Vec<(Vec<u8>, &'s str)>;
    let mut sets: Vec<((Table, String, bool), OfSet)> = Vec::new();
    for s in stale {
        let (table, published) = (s.of.set.table, s.of.published);
        for (set, key) in s.keys() {
            let at = (table, set, published);
            match sets.iter_mut().find(|(k, _)| *k == at) {
                Some((_, keys)) => keys.push((key, &s.shown)),
                None => sets.push((at, vec![(key, &s.shown)])),
            }
        }
    }
    let mut changes = Vec::new();
    for ((table, set, publish), keys) in sets {
        changes.extend(Change::elements(
            &keys,
            |(key, _)| Element::key(key.clone()),
            |elements| Op::DeleteElements {
                table,
                set: set.clone(),
                keys: elements.into_iter().map(|e| e.key).collect(),
                publish,
            },
            |part| {
                let shown = part.iter().map(|(_, shown)| shown.to_string());
                format!("remove {} from nf_tables set {table} {set}", named(shown))
            },
        ));
    }
    changes
}

fn deletion(table: Table, set: String, keys: Vec<Vec<u8>>, publish: bool, shown: &str) -> Change {
    let what = format!("remove {shown} from nf_tables set {table} {set}");
    let op = Op::DeleteElements {
        table,
        set,
        keys,
        publish,
    };
    Change::new(op, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Table = Table::inet("t");

    fn set(name: &str) -> Set {
        Set {
            table: T,
            name: name.into(),
            id: 0,
            key: (7, 1),
            data: None,
            userdata: None,
            exclusive: false,
        }
    }

    /// Each set's keys, and those of the sets that go with them, in one message per set.
    #[test]
    fn a_sweep_deletes_each_set_s_keys_in_one_message_with_those_going_along() {
        let map = AttachmentSet::new(set("map"), |e| Some(format!("port {}", e.key[0])))
            .along(|e| vec![("pairs".to_string(), vec![e.key[0], 0])]);
        let other = AttachmentSet::new(set("other"), |_| Some("x".into())).published();
        let stale = |of, key: u8| Stale {
            of,
            element: Element::key(vec![key]),
            shown: format!("port {key}"),
        };
        let all = [stale(&map, 1), stale(&other, 9), stale(&map, 2)];
        let ops: Vec<(String, Vec<Vec<u8>>, bool)> = deletions(&all)
            .into_iter()
            .map(|c| match c.op {
                Op::DeleteElements {
                    set, keys, publish, ..
                } => (set, keys, publish),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            ops,
            [
                ("map".to_string(), vec![vec![1], vec![2]], false),
                ("pairs".to_string(), vec![vec![1, 0], vec![2, 0]], false),
                ("other".to_string(), vec![vec![9]], true),
            ]
        );
    }
}
