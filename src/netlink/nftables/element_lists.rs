//! A set's element changes cut to what one message can carry: netlink's attribute
//! length is 16 bits, so a long list goes in several messages of one batch. The cut is
//! made by encoded size, so it lives beside the encoder, not in the model.

use std::ops::Range;

use super::encode::element_len;
use super::model::{Change, Element, Op};

impl Change {
    /// The element changes for `items` of one set: one message per ELEMENT_LIST_BYTES of
    /// elements (a list longer than netlink's 16-bit attribute length cannot be sent),
    /// each described by `describe` of its items.
    pub fn elements<T>(
        items: &[T],
        element: impl Fn(&T) -> Element,
        op: impl Fn(Vec<Element>) -> Op,
        describe: impl Fn(&[T]) -> String,
    ) -> Vec<Change> {
        let elements: Vec<Element> = items.iter().map(element).collect();
        let ranges = element_groups(elements.len(), |i| element_len(&elements[i]));
        let mut elements = elements.into_iter();
        let mut changes = Vec::with_capacity(ranges.len());
        for range in ranges {
            let group: Vec<Element> = elements.by_ref().take(range.len()).collect();
            changes.push(Change::new(op(group), describe(&items[range])));
        }
        changes
    }
}

/// Bytes of one message's element list (NFTA_SET_ELEM_LIST_ELEMENTS): an attribute's
/// length is 16 bits, so a longer list cannot be sent at all; this leaves room for the
/// rest of the message and keeps a few messages in one batch.
pub const ELEMENT_LIST_BYTES: usize = 48 * 1024;

/// Ranges of `count` items whose encoded elements (`len` of each) fit ELEMENT_LIST_BYTES.
fn element_groups(count: usize, len: impl Fn(usize) -> usize) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let (mut bytes, mut start) = (0, 0);
    for i in 0..count {
        let one = len(i);
        if bytes != 0 && bytes + one > ELEMENT_LIST_BYTES {
            groups.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += one;
    }
    if bytes != 0 {
        groups.push(start..count);
    }
    groups
}
