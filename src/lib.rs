//! academy: a CNI plugin wiring containers to a Linux bridge, with a built-in file-backed IPAM.
//!
//! Follow one ADD: main.rs reads the environment and stdin, plugin.rs decodes and
//! dispatches, add.rs lists the steps, wire.rs does each step through netlink/ (the only
//! netlink user) and netns.rs (the only place that enters a namespace), masquerade.rs
//! puts the addresses in nf_tables for ipMasq and portmap.rs the published ports (one
//! batch for both), and ipam/ holds the addresses. DEL, and
//! a failed ADD, undo it all through teardown.rs; attachment.rs names what belongs to
//! whom.

mod add;
mod addressing;
mod attachment;
mod check;
pub mod cli;
mod cni;
mod config;
mod del;
mod delegate;
mod gc;
mod hostveth;
mod ipam;
mod masquerade;
mod netlink;
mod netns;
pub mod plugin;
mod portmap;
mod reclaim;
mod status;
mod teardown;
mod wire;

#[cfg(test)]
mod property_tests;
