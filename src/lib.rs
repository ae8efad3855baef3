//! academy: a CNI plugin wiring containers to a Linux bridge, with a built-in file-backed IPAM.
//!
//! The binary (src/main.rs) only reads the environment and stdin and prints; everything it
//! calls lives here so that unit tests can reach it.

pub mod cni;
pub mod ipam;
