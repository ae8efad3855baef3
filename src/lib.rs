//! academy: a CNI plugin wiring containers to a Linux bridge, with a built-in file-backed IPAM.
//!
//! Follow one ADD: main.rs reads the environment and stdin, plugin.rs decodes and
//! dispatches, add.rs lists the steps, wire.rs does each step through netlink/ (the only
//! netlink user) and netns.rs (the only place that enters a namespace), masquerade.rs
//! puts the addresses in nf_tables for ipMasq and portmap.rs the published ports (one
//! batch for both), macspoof.rs the MAC filter of macspoofchk, and ipam/ holds the
//! addresses. DEL, a failed ADD, healing, reclaim and GC undo it all through removal.rs;
//! attachment.rs names what belongs to
//! whom.

mod add;
mod addressing;
mod attachment;
mod check;
pub mod cli;
mod cni;
mod config;
mod dad;
mod del;
mod delegate;
mod forward;
mod gc;
mod hostveth;
mod ipam;
mod leaks;
mod macspoof;
mod masquerade;
mod nat_repair;
mod netlink;
mod netns;
pub mod plugin;
mod port;
mod portmap;
mod removal;
mod status;
mod wire;

#[cfg(test)]
mod property_tests;
