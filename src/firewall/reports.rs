//! What the walks over the kinds report: a CHECK's differences, a restore's repairs, per
//! kind and for the network, and what a take of attachments' elements (GC's sweep, the
//! one removal) did.

use super::engine::Taken;
use super::{ports, Kind, Sweeping};
use crate::cni::{Error, Result};
use crate::config::Config;

/// A difference CHECK found, and whether the restore command repairs it (state an
/// admin's flush took, rebuilt from the store and the links) or only DEL and ADD do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub text: String,
    pub restorable: bool,
}

/// What one kind's restore did: what it put back, what it could not and why (a port
/// another container holds now, an attachment whose runtime academy never recorded),
/// and what it found intact but could not put back after a later flush.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Repair {
    pub put_back: Vec<String>,
    /// (what, because): not errors, so never retried: the state stays as it is until
    /// the attachment's next ADD, or its holder lets the port go.
    pub not_put_back: Vec<(String, String)>,
    /// Intact, but not recorded: a flush would lose it.
    pub unrecorded: Vec<String>,
}

impl Repair {
    pub fn is_empty(&self) -> bool {
        self.put_back.is_empty() && self.not_put_back.is_empty() && self.unrecorded.is_empty()
    }
}

/// A network's restore: each kind's repair, and the kinds the kernel refused (worth a
/// retry: the restore command fails, the watch tries again).
#[derive(Debug, Default)]
pub struct Restoration {
    pub kinds: Vec<(Kind, Repair)>,
    pub errors: Vec<(Kind, Error)>,
}

impl Restoration {
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.errors.is_empty()
    }

    /// "outbound NAT: a, b; published ports: c": what was put back (empty when nothing).
    pub fn put_back_words(&self) -> String {
        let what: Vec<String> = self
            .kinds
            .iter()
            .filter(|(_, r)| !r.put_back.is_empty())
            .map(|(kind, r)| format!("{kind}: {}", r.put_back.join(", ")))
            .collect();
        what.join("; ")
    }

    /// The kinds that put something back.
    pub fn repaired(&self) -> Vec<Kind> {
        self.kinds
            .iter()
            .filter(|(_, r)| !r.put_back.is_empty())
            .map(|(k, _)| *k)
            .collect()
    }
}

/// GC's sweep of one kind, said: a set of academy's name in another shape on stderr,
/// what went in the debug log (a few, then counted) and in the sweep's words.
pub(super) fn swept(kind: Kind, s: &mut Sweeping, swept: Taken) {
    for (set, why) in &swept.foreign {
        eprintln!("academy: GC left nf_tables set {set} alone: it is not academy's ({why})");
    }
    for (what, owner) in swept.removed.iter().take(ports::LOGGED) {
        crate::log::debug(format_args!("GC removed the {what} (held by {owner})"));
    }
    if swept.removed.len() > ports::LOGGED {
        crate::log::debug(format_args!(
            "GC removed {} more of network {}'s {kind}",
            swept.removed.len() - ports::LOGGED,
            s.conf.name
        ));
    }
    let removed = swept.removed.into_iter();
    s.removed
        .extend(removed.map(|(what, owner)| format!("{what} ({owner})")));
    s.errors.extend(swept.errors.into_iter().map(Error::from));
}

/// What the one removal's take (`engine::take`) did, said on stderr: a set of academy's
/// name in another shape, and (`left_said`) an element under the attachment's key that
/// is another's. Its first error, if any.
pub(super) fn said(conf: &Config, taken: Taken, left_said: bool) -> Result<Taken> {
    for (set, why) in &taken.foreign {
        eprintln!(
            "academy: nf_tables set {set} is not academy's ({why}): nothing of this attachment's is in it, left alone"
        );
    }
    if left_said {
        for (what, owner) in &taken.left {
            eprintln!(
                "academy: left the {what} of network {}: it is {owner:?}'s, not this attachment's",
                conf.name
            );
        }
    }
    match taken.errors.first() {
        Some(e) => Err(e.clone().into()),
        None => Ok(taken),
    }
}
