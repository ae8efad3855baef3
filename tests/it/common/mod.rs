//! Helpers shared by every module of the integration test binary, split by job:
//!
//! - [`process`]: running the plugin as a runtime does ([`Call`]) and any other program;
//! - [`alloc`]: the one allocator of subnets and names ([`Slot`]);
//! - [`lab`]: the [`Lab`] guard, its attachments, configs, calls and cnitool;
//! - [`store`]: what the plugin's store holds (reservations, holders, leftovers);
//! - [`kernel`]: asking the kernel what it has (`ip`);
//! - [`netns_state`]: a container netns's routes, addresses and sysctls, to compare;
//! - [`snapshot`]: what a failed invocation must leave as it was;
//! - [`assertions`]: the CNI error contract, ADD results, the state after DEL;
//! - [`strace`]: the one strace parser, and fault injection through strace;
//! - [`shim`]: the LD_PRELOAD netlink fault shim;
//! - [`outside`]: the made "outside" of outbound-NAT tests;
//! - [`nft`]: academy's nf_tables table, read and cleaned with the `nft` tool;
//! - [`node`]: a private netns academy runs in as its host, for tests that flush or
//!   plant objects in academy's nf_tables table;
//! - [`nft_bridge`]: the same for macspoofchk's table `bridge academy`;
//! - [`host`]: file locks that serialise tests across processes, mounts left in a folder;
//! - [`podman`]: a podman on a test folder's own stores and config;
//! - [`reference`]: running the reference bridge plugin beside academy.
//!
//! Everything is re-exported here: a test module says `use crate::common::*;`.
//!
//! Network safety: tests only ping addresses of their own lab's subnet, from their own
//! netns, through their own bridge.

pub mod alloc;
pub mod assertions;
pub mod host;
pub mod kernel;
pub mod lab;
pub mod netns_state;
pub mod nft;
pub mod nft_bridge;
pub mod node;
pub mod outside;
pub mod podman;
pub mod process;
pub mod reference;
pub mod shim;
pub mod snapshot;
pub mod store;
pub mod strace;

pub use alloc::Slot;
pub use assertions::*;
pub use host::*;
pub use kernel::*;
pub use lab::*;
pub use netns_state::*;
pub use nft_bridge::*;
pub use node::*;
pub use outside::*;
pub use podman::*;
pub use process::*;
pub use reference::*;
pub use shim::*;
pub use snapshot::*;
pub use store::*;
pub use strace::*;
