//! academy: a CNI plugin wiring containers to a Linux bridge, with a built-in file-backed IPAM.
//!
//! The layers, top to bottom (a module imports only from its own layer's leaves or below):
//!
//! - `plugin`: decodes a CNI invocation and dispatches to a verb; `cli/`: academy's own
//!   commands (install, convert, reclaim, restore, watch).
//! - `verbs/`: ADD, DEL, CHECK, GC, STATUS, each a list of steps.
//! - `removal`: the one removal of an attachment, in one order (DEL, a failed ADD,
//!   healing, reclaim, GC). `leaks/`: what ADD and an operator do about leaked attachments.
//! - `firewall/`: the state academy keeps beside the wiring, as one table of kinds
//!   (masquerade, published ports, MAC filter, FORWARD accepts, bandwidth, isolation),
//!   one folder each, that ADD (by phase), removal, GC, CHECK, STATUS and the restore
//!   command walk; a network's own objects and their release.
//! - `wire/`: the bridge, the veth pair and the container's interface, bridge port
//!   VLANs, DAD. `addressing/`: academy's store or a delegated IPAM plugin.
//! - `attachment`: one attachment's identity and every name derived from it.
//! - `config/`, `ipam/` (the file store), `cni/` (the protocol's types and codes).
//! - `netns`: the only place a namespace is entered; `netlink/`: the only place that
//!   speaks to the kernel's network stack; `random`: the kernel's random bytes.

mod addressing;
mod attachment;
pub mod cli;
mod cni;
mod config;
mod firewall;
mod ipam;
mod leaks;
mod log;
mod netlink;
mod netns;
pub mod plugin;
mod random;
mod removal;
mod verbs;
mod wire;

#[cfg(test)]
mod property_tests;
