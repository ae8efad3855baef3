//! academy: a CNI plugin wiring containers to a Linux bridge, with a built-in file-backed IPAM.
//!
//! Follow one ADD: main.rs reads the environment and stdin, plugin.rs decodes and
//! dispatches, add.rs lists the steps, wire.rs does each step through netlink/ (the only
//! netlink user) and netns.rs (the only place that enters a namespace), masquerade.rs
//! puts the addresses in nf_tables for ipMasq, and ipam/ holds the addresses. DEL, and
//! a failed ADD, undo it all through teardown.rs; attachment.rs names what belongs to
//! whom.

pub mod add;
pub mod addressing;
pub mod attachment;
pub mod check;
pub mod cni;
pub mod config;
pub mod del;
pub mod delegate;
pub mod gc;
pub mod hostveth;
pub mod ipam;
pub mod masquerade;
pub mod netlink;
pub mod netns;
pub mod plugin;
pub mod status;
pub mod teardown;
pub mod wire;
