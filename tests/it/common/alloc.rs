//! The one allocator of the tests' address space and names. Every lab takes a [`Slot`]:
//! a number n, unique in this test process, and from it
//!
//! - its IPv4 subnet 10.A.n.0/24 (A per process, see [`second_octet`]), so no two labs
//!   put one gateway on two bridges;
//! - its IPv6 subnet fd00:A:n::/64;
//! - its interface names, `<kind><n>-<pid mod 10000>` (within the kernel's 15 bytes);
//! - its other names (netns, network, container id, folders),
//!   `[<kind>-]<tag>-<n>-<pid>`: the tag only makes them readable.
//!
//! Nothing is picked by hand: a new test takes a slot (through `Lab::new`) and cannot
//! collide with another test of any module, nor with a concurrent run on the machine.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// Slots of finished labs, taken again before new ones.
static FREE: Mutex<Vec<u8>> = Mutex::new(Vec::new());

use super::process::run_quiet;

/// One lab's share of addresses and names.
#[derive(Debug, Clone)]
pub struct Slot {
    /// Unique among this process's live labs, 1..=254.
    pub n: u8,
    octet: u8,
}

impl Slot {
    /// The next free slot of this process: one a finished lab gave back (its links,
    /// netns and folders are gone by then), else a new one.
    pub fn take() -> Slot {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let reused = FREE.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let n = reused.unwrap_or_else(|| {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            u8::try_from(n)
                .ok()
                .filter(|n| *n <= 254)
                .unwrap_or_else(|| {
                    panic!("more than 254 labs alive at once in one test process: 10.A.n.0/24 is used up")
                })
        });
        Slot {
            n,
            octet: second_octet(),
        }
    }

    /// Gives the slot back, once everything named after it is gone (Lab's Drop).
    pub fn release(&self) {
        FREE.lock().unwrap_or_else(|p| p.into_inner()).push(self.n);
    }

    /// "10.A.n": the slot's IPv4 /24 without its last octet.
    pub fn v4_prefix(&self) -> String {
        format!("10.{}.{}", self.octet, self.n)
    }

    /// "fd00:A:n": the slot's IPv6 /64 without its interface part.
    pub fn v6_prefix(&self) -> String {
        format!("fd00:{}:{}", self.octet, self.n)
    }

    /// An interface name of this slot, e.g. `link_name("acb")` = "acb7-4242".
    pub fn link_name(&self, kind: &str) -> String {
        let name = format!("{kind}{}-{}", self.n, std::process::id() % 10000);
        assert!(name.len() <= 15, "interface name {name} is too long");
        name
    }

    /// An identifier unique on the machine: "<tag>-<n>-<pid>".
    pub fn id(&self, tag: &str) -> String {
        format!("{tag}-{}-{}", self.n, std::process::id())
    }

    /// Any other name of this slot: "<kind>-<tag>-<n>-<pid>".
    pub fn name(&self, kind: &str, tag: &str) -> String {
        format!("{kind}-{}", self.id(tag))
    }
}

/// A, the second octet of every lab subnet in this process: picked from the pid among
/// 201..=230, skipping any 10.A. the host already has an address or route in, so two
/// concurrent `cargo test` runs on one machine rarely meet (and never on a host network).
fn second_octet() -> u8 {
    static OCTET: OnceLock<u8> = OnceLock::new();
    *OCTET.get_or_init(|| {
        let used = format!(
            "{}\n{}",
            run_quiet("ip", &["-4", "-o", "addr"])
                .map(|o| o.stdout)
                .unwrap_or_default(),
            run_quiet("ip", &["-4", "route", "show", "table", "all"])
                .map(|o| o.stdout)
                .unwrap_or_default()
        );
        let start = 201 + (std::process::id() % 30) as u8;
        (0..30)
            .map(|i| 201 + (start - 201 + i) % 30)
            .find(|a| !used.contains(&format!("10.{a}.")))
            .unwrap_or(start)
    })
}
