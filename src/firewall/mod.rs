//! The nf_tables state academy keeps.

pub mod forward;
pub mod macspoof;
pub mod masquerade;
pub mod nat;
pub mod ports;
pub mod reference;
