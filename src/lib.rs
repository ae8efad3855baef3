//! academy: a CNI plugin wiring containers to a Linux bridge, with a built-in file-backed IPAM.
//!
//! Follow one ADD: main.rs reads the environment and stdin, plugin.rs decodes and
//! dispatches, add.rs lists the steps, wire.rs does each step through netlink.rs (the
//! only netlink user) and netns.rs (the only place that enters a namespace), and ipam/
//! holds the addresses.

pub mod add;
pub mod addressing;
pub mod check;
pub mod cli;
pub mod cni;
pub mod config;
pub mod del;
pub mod delegate;
pub mod gc;
pub mod hostveth;
pub mod ipam;
pub mod netlink;
pub mod netns;
pub mod plugin;
pub mod reclaim;
pub mod status;
pub mod wire;
