//! What one message of an nf_tables batch does, so that a refusal says which kind of
//! change the kernel refused (`NlError::refused`) without the caller reading the
//! request's text.

/// The kind of change of one batch message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    CreateTable,
    CreateChain,
    DeleteChain,
    /// A set or a map.
    CreateSet,
    DeleteSet,
    AddRule,
    DeleteRule,
    /// Elements into a set (the masquerade's addresses, the hairpin bridges, the
    /// guarded ports).
    AddElement,
    RemoveElement,
    /// Published ports into port mapping's maps: a key another attachment holds is
    /// refused with EEXIST.
    Publish,
    Unpublish,
}

impl Step {
    /// Whether the step makes a table, chain or set, which a foreign object of the same
    /// name refuses.
    pub fn creates(self) -> bool {
        matches!(
            self,
            Step::CreateTable | Step::CreateChain | Step::CreateSet
        )
    }
}
