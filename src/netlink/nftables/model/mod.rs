//! nf_tables as data: tables, chains, sets and maps, elements, rules as lists of typed
//! expressions, and the changes of a batch. Built by src/firewall/ (which says what
//! academy wants), written by encode.rs and read back by decode.rs: the only two places
//! that know the uapi's attribute numbers, so a policy never sees one.
//!
//! - `tables.rs`: what nf_tables holds (tables, chains, sets, elements, rules);
//! - `expr.rs`: a rule's expressions and the registers, keys and verdicts they name;
//! - `change.rs`: one change of a batch (encode.rs splits long element lists).

mod change;
mod expr;
mod tables;

pub use change::{Change, Op};
pub use expr::*;
pub use tables::*;
