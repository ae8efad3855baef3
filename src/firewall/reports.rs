//! What the walks over the kinds report: a CHECK's differences, and a restore's
//! repairs, per kind and for the network.

use super::Kind;
use crate::cni::Error;

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
