//! The state academy adds beside the wiring, as one table of kinds.
//!
//! Each kind is state academy adds for its attachments and their networks: masquerade
//! elements (ipMasq), published ports (portMappings, with their hairpin mark and the
//! loopback guard), the MAC filter (macspoofchk), the bridge's FORWARD accepts, traffic
//! shaping (the bandwidth capability: tc, not nf_tables) and the network's isolation
//! (ingressPolicy same-bridge). Each is one folder here, and answers every operation
//! through one `match` with no default arm, so a new kind is one variant plus its folder,
//! and the compiler lists every operation it must answer:
//!
//! - `add`, in its `phase` of ADD: before the veth pair, once the pair exists, once the
//!   container is wired, or in ADD's one nf_tables batch;
//! - `remove`: one attachment's state, by its owner (the one removal), whatever the
//!   config at hand enables: a key taken out of a conflist since ADD (macspoofchk for a
//!   VRRP container, ipMasq, the bandwidth keys) must not leave its state behind, so
//!   each kind looks for it, cheaply when it is not there (one lookup, or one dump per
//!   set when the attachment's key is unknown): the engine's `take` of the sets the
//!   kind names (`engine::AttachmentSet`) with the keys it knows;
//! - `check`: what CHECK compares with what ADD reported;
//! - `sweep`: GC's removal of elements no valid attachment owns, key set or not: the
//!   the same `take` of the same sets, each read whole;
//! - `missing` / `restore`: what an admin's flush or a reload took that academy can see,
//!   and putting it back (STATUS, `academy restore`);
//! - `release`: the network's own objects, deleted by network/ once the network has no
//!   attachment left, looked for whether or not the key is still set.
//!
//! A kind declared to the engine (engine/) says only what it wants (`Kind::wants`):
//! its `add`, `check`, `missing`, `restore` and `release` are then the engine's one
//! comparison of those wants with the kernel (isolation and the FORWARD accepts wholly;
//! the MAC filter and the masquerade, whose wants are per attachment too, and port
//! mapping's network objects, beside its published ports, through their own thin calls).
//!
//! Each operation takes one context: the config, the sockets it may use (opened at the
//! first kind that needs one) and what that operation is about. ADD, the one removal,
//! GC, CHECK, STATUS and the restore command loop over `KINDS` and name no kind.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::attachment::Attachment;
use crate::cni::result::Interface;
use crate::cni::{Error, Result};
use crate::config::Config;
use crate::netlink::{Netlink, NftablesOnDemand, Object};
use engine::{Keys, Want};

pub mod bandwidth;
pub mod engine;
pub mod forward;
pub mod isolation;
pub mod mac_filter;
pub mod masquerade;
pub mod network;
pub mod ports;
pub mod reference;
mod reports;
pub mod tables;
pub mod upgrade;
mod wired;

use reports::said;
pub use reports::{Diff, Repair, Restoration};
pub use wired::{Asked, Wired};

/// Writes the kinds once: the enum, `KINDS` in the order the walks visit them, and the
/// guard test's list, so a variant cannot be left out of one of them.
macro_rules! kinds {
    ($($kind:ident),+ $(,)?) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Kind {
            $($kind),+
        }

        /// Every kind, in the order the walks visit them.
        pub const KINDS: &[Kind] = &[$(Kind::$kind),+];
    };
}

kinds![Masquerade, Ports, MacFilter, Forward, Bandwidth, Isolation];

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Masquerade => "outbound NAT",
            Kind::Ports => "published ports",
            Kind::MacFilter => "MAC filter",
            Kind::Forward => "FORWARD accepts",
            Kind::Bandwidth => "bandwidth shaping",
            Kind::Isolation => "network isolation",
        })
    }
}

/// When in ADD a kind makes its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Before the veth pair exists: the container's first packet already meets it.
    BeforePair,
    /// Once the pair exists, before the container's interface has an address: none of
    /// its frames goes unchecked or unshaped.
    PairMade,
    /// Once the container is wired, before the batch.
    Wired,
    /// In ADD's one nf_tables batch (masquerade/nat.rs), all or nothing.
    OneBatch,
}

/// ADD, for one attachment: what every kind's `add` is given.
pub struct Adding<'a> {
    pub conf: &'a Config,
    pub who: &'a Attachment<'a>,
    pub nl: &'a mut Netlink,
    pub nft: &'a mut NftablesOnDemand,
    /// The container's addresses.
    pub addresses: &'a [IpNetwork],
    /// Once the pair exists: the host veth's name and the container end's MAC.
    pub host: Option<(String, [u8; 6])>,
    /// Interfaces a kind adds to the result (bandwidth's ifb), in the reference's order.
    pub interfaces: Vec<Interface>,
    /// What the kinds of the one batch put in it (masquerade/nat.rs sends it).
    pub batch: masquerade::nat::Staged,
}

/// One attachment as the one removal knows it. Every kind is asked, whatever `conf`
/// enables (see the module's comment).
pub struct Removing<'a> {
    pub conf: &'a Config,
    pub nft: &'a mut NftablesOnDemand,
    /// The removal's rtnetlink socket (bandwidth's ifb lookup), when it could open one.
    pub nl: Option<&'a mut Netlink>,
    pub who: Attachment<'a>,
    /// Where its masquerade elements may be (empty when unknown).
    pub addresses: &'a [IpAddr],
    /// False when no kind keeps state by address for the network (`keyed_on_addresses`,
    /// asked before the store is read): nothing to look for by address.
    pub address_state: bool,
    /// Found by its traces (GC, reclaim, healing): the runtime's arguments at hand
    /// (portMappings) are not this attachment's, so the kinds keyed by them look by owner.
    pub traced: bool,
}

/// CHECK of one attachment: what ADD reported for it.
pub struct Checking<'a> {
    pub conf: &'a Config,
    pub nft: &'a mut NftablesOnDemand,
    pub who: &'a Attachment<'a>,
    pub addresses: &'a [IpNetwork],
    /// The container end's MAC, as the result gave it.
    pub mac: &'a str,
}

/// GC of one network (or `academy install`'s sweep): the valid attachments' owners, the
/// errors collected, and what was removed, in words (the installer reports it).
pub struct Sweeping<'a> {
    pub conf: &'a Config,
    pub nft: &'a mut NftablesOnDemand,
    pub live: &'a Live,
    pub errors: &'a mut Vec<Error>,
    pub removed: &'a mut Vec<String>,
}

/// STATUS and the restore command for one network: its wired attachments.
pub struct Looking<'a> {
    pub conf: &'a Config,
    pub nft: &'a mut NftablesOnDemand,
    pub wired: &'a Wired,
}

/// The release of one network's own objects.
pub struct Releasing<'a> {
    pub conf: &'a Config,
    pub nft: &'a mut NftablesOnDemand,
}

/// The owner comments of GC's valid attachments, in every form academy has written.
pub struct Live {
    owners: HashSet<String>,
}

impl Live {
    pub fn of(conf: &Config, valid: &HashSet<(String, String)>) -> Live {
        let mut owners = HashSet::new();
        for (cid, ifname) in valid {
            let who = Attachment::new(&conf.name, cid, ifname);
            owners.extend(who.owners());
        }
        Live { owners }
    }

    pub fn owns(&self, comment: &str) -> bool {
        self.owners.contains(comment)
    }
}

impl Kind {
    /// What this kind wants of nf_tables for the network and its bridge, as data: the
    /// engine (engine/) makes, checks, restores and releases it. The kinds not yet
    /// declared answer each operation with their own code below.
    fn wants(self, nft: &mut NftablesOnDemand, conf: &Config, keys: Keys) -> Result<Vec<Want>> {
        match self {
            Kind::Isolation => Ok(isolation::wants(conf, keys)),
            Kind::Forward => forward::wants(nft, conf, keys),
            Kind::Masquerade | Kind::Ports | Kind::MacFilter | Kind::Bandwidth => Ok(Vec::new()),
        }
    }

    /// When in ADD this kind makes its state.
    pub fn phase(self) -> Phase {
        match self {
            Kind::Isolation => Phase::BeforePair,
            Kind::MacFilter | Kind::Bandwidth => Phase::PairMade,
            Kind::Masquerade | Kind::Ports => Phase::OneBatch,
            Kind::Forward => Phase::Wired,
        }
    }

    /// ADD's state of this kind for the attachment (nothing when its key is off).
    pub fn add(self, a: &mut Adding) -> Result<()> {
        match self {
            Kind::Masquerade => masquerade::add(a),
            Kind::Ports => ports::add(a),
            Kind::MacFilter => mac_filter::add(a),
            Kind::Forward | Kind::Isolation => complete(self, a.nft, a.conf).map(drop),
            Kind::Bandwidth => bandwidth::add(a),
        }
    }

    /// The one removal's first step for one attachment: its elements of this kind, only
    /// those whose comment names it.
    pub fn remove(self, r: &mut Removing) -> Result<()> {
        match self {
            Kind::Masquerade => masquerade::remove(r),
            Kind::Ports => ports::remove(r),
            Kind::MacFilter => mac_filter::remove(r),
            Kind::Bandwidth => bandwidth::remove(r),
            Kind::Forward | Kind::Isolation => Ok(()),
        }
    }

    /// CHECK: the differences between the kernel and what ADD reported.
    pub fn check(self, c: &mut Checking) -> Result<Vec<Diff>> {
        match self {
            Kind::Masquerade => masquerade::check(c),
            Kind::Ports => ports::check(c),
            Kind::MacFilter => mac_filter::check(c),
            Kind::Forward | Kind::Isolation => {
                let wants = self.wants(c.nft, c.conf, Keys::AsConfigured)?;
                Ok(lacking(c.nft, &wants)?
                    .into_iter()
                    .map(|text| Diff {
                        text,
                        restorable: true,
                    })
                    .collect())
            }
            Kind::Bandwidth => bandwidth::check(c),
        }
    }

    /// GC: removes this network's elements of the kind that no valid attachment owns.
    /// Errors are collected; GC goes on.
    pub fn sweep(self, s: &mut Sweeping) {
        let held = match self {
            Kind::Masquerade => masquerade::attachment_sets(s.conf),
            Kind::Ports => ports::attachment_sets(s.conf),
            Kind::MacFilter => mac_filter::attachment_sets(s.conf),
            Kind::Bandwidth => return bandwidth::sweep(s),
            Kind::Forward | Kind::Isolation => return,
        };
        let nft = match s.nft.get() {
            Ok(nft) => nft,
            Err(e) => return s.errors.push(e.into()),
        };
        let swept = engine::take(nft, &held, |comment| !s.live.owns(comment));
        reports::swept(self, s, swept);
    }

    /// What of this kind the network should have and the kernel lacks (STATUS), in words.
    pub fn missing(self, l: &mut Looking) -> Result<Vec<String>> {
        match self {
            Kind::Masquerade => masquerade::missing(l),
            Kind::Ports => ports::missing(l),
            Kind::MacFilter => mac_filter::missing(l),
            Kind::Forward | Kind::Isolation => match l.wired.bridge_in_use {
                true => {
                    let wants = self.wants(l.nft, l.conf, Keys::AsConfigured)?;
                    lacking(l.nft, &wants)
                }
                false => Ok(Vec::new()),
            },
            Kind::Bandwidth => bandwidth::missing(l),
        }
    }

    /// Puts back what `missing` names, and says what it could not.
    pub fn restore(self, l: &mut Looking) -> Result<Repair> {
        match self {
            Kind::Masquerade => masquerade::restore(l),
            Kind::Ports => ports::restore(l),
            Kind::MacFilter => mac_filter::restore(l),
            Kind::Forward | Kind::Isolation => match l.wired.bridge_in_use {
                true => complete(self, l.nft, l.conf),
                false => Ok(Repair::default()),
            },
            Kind::Bandwidth => bandwidth::restore(l),
        }
    }

    /// Whether this kind's network objects are keyed on the bridge (its elements name the
    /// bridge, its FORWARD accepts match it): owned by every network on the bridge, and
    /// released only when none uses it (network/); the others' are the network's own.
    pub fn keyed_on_bridge(self) -> bool {
        match self {
            Kind::Ports | Kind::Forward | Kind::Isolation => true,
            Kind::Masquerade | Kind::MacFilter | Kind::Bandwidth => false,
        }
    }

    /// The network's own objects of this kind, to delete with its last attachment; None
    /// while elements of the kind remain (another's, never a removal's to take: GC
    /// sweeps them first if their owner is gone).
    pub fn release(self, r: &mut Releasing) -> Result<Option<Vec<Object>>> {
        match self {
            Kind::Masquerade => masquerade::objects(r),
            Kind::Ports => ports::objects(r),
            Kind::MacFilter => mac_filter::objects(r),
            Kind::Forward | Kind::Isolation => {
                let wants = self.wants(r.nft, r.conf, Keys::All)?;
                match wants.is_empty() {
                    true => Ok(Some(Vec::new())),
                    false => Ok(Some(engine::present(r.nft.get()?, &wants)?)),
                }
            }
            Kind::Bandwidth => bandwidth::objects(r),
        }
    }
}

/// A legacy reservation's state (one that names its container, no interface): only
/// the masquerade ever kept state by address for such a reservation, so the walk is the
/// masquerade's elements at `addresses` whose comment names the container, looked up
/// whether or not ipMasq is still set (it may have been taken out since ADD): one lookup.
pub fn remove_of_container(conf: &Config, container_id: &str, addresses: &[IpAddr]) -> Result<()> {
    masquerade::remove_of_container(conf, container_id, addresses)
}

/// A declared kind's wants made to hold (ADD, the restore): what it changed and what
/// it left, in words.
fn complete(kind: Kind, nft: &mut NftablesOnDemand, conf: &Config) -> Result<Repair> {
    let mut asked_again = false;
    let completed = loop {
        let wants = kind.wants(nft, conf, Keys::AsConfigured)?;
        if wants.is_empty() {
            return Ok(Repair::default());
        }
        // The debug build's test hook: the wants made, the batch not sent
        // (tests/it/forward/policy.rs: iptables' table deleted there).
        hold_for_test("ACADEMY_TEST_HOLD_WANTS");
        match engine::complete(nft.get()?, &wants) {
            // The FORWARD accepts follow iptables' policy, in iptables' own table: an
            // admin's flush or reload that took the table after the wants were made
            // leaves them asking for a chain that is gone, and the engine's second look
            // cannot help. Asked again once: no dropping policy now, nothing wanted.
            Err(e) if e.is(libc::ENOENT) && !asked_again => asked_again = true,
            other => break other?,
        }
    };
    let words = completed.words(&kind.to_string());
    if !words.is_empty() {
        crate::log::debug(format_args!(
            "{kind} of network {}: {}",
            conf.name,
            words.join(", ")
        ));
    }
    Ok(Repair {
        put_back: words,
        not_put_back: completed.left,
        unrecorded: Vec::new(),
    })
}

/// What of `wants` nf_tables lacks, in words (no socket opened for no wants).
fn lacking(nft: &mut NftablesOnDemand, wants: &[Want]) -> Result<Vec<String>> {
    match wants.is_empty() {
        true => Ok(Vec::new()),
        false => Ok(engine::missing(nft.get()?, wants)?),
    }
}

/// ADD's state for one phase: every kind of that phase, in `KINDS`' order; after the
/// kinds of the one batch, the batch itself.
pub fn add(phase: Phase, a: &mut Adding) -> Result<()> {
    for kind in KINDS.iter().filter(|k| k.phase() == phase) {
        kind.add(a)?;
    }
    if phase == Phase::OneBatch {
        masquerade::nat::send_staged(a)?;
        // Port mapping's network state for Services (ports/services.rs), after the batch
        // that may have made its rules.
        ports::services::add(a.nft, a.conf)?;
    }
    Ok(())
}

/// Whether a kind keeps state by address for the network, so that a removal must know
/// the attachment's addresses (a store read): the masquerade's sets, looked for when
/// ipMasq is off (perhaps taken out since ADD). One lookup per family then.
pub fn keyed_on_addresses(nft: &mut NftablesOnDemand, conf: &Config) -> Result<bool> {
    match conf.ip_masq {
        true => Ok(true),
        false => masquerade::has_sets(nft.get()?, conf),
    }
}

/// STATUS and the restore command's look: what each kind finds missing of the network's
/// state, only the kinds that miss something.
pub fn missing(conf: &Config) -> Result<Vec<(Kind, Vec<String>)>> {
    missing_in(conf, &Wired::read(conf)?, &mut NftablesOnDemand::default())
}

/// As `missing`, against attachments and a socket shared by several looks.
pub fn missing_in(
    conf: &Config,
    wired: &Wired,
    nft: &mut NftablesOnDemand,
) -> Result<Vec<(Kind, Vec<String>)>> {
    let mut look = Looking { conf, nft, wired };
    let mut found = Vec::new();
    for &kind in KINDS {
        let missing = kind.missing(&mut look)?;
        if !missing.is_empty() {
            found.push((kind, missing));
        }
    }
    Ok(found)
}

/// The restore command (and `academy watch`) for one network: every kind puts back what
/// it misses. Each kind is tried even when another failed; the kinds that failed are in
/// the restoration's errors, beside what the others did.
///
/// The network's lock and its bridge's are held shared, as ADD holds them (network/),
/// and the network's attachments are read under them: a last DEL's release either ran
/// wholly before, so the restore finds no attachment and puts nothing back, or finds the
/// lock busy and writes the network's record, which the next invocation releases once
/// the restore is done; and no release of another network on the bridge takes the
/// bridge's objects while the restore puts them back.
pub fn restore(conf: &Config) -> Result<Restoration> {
    hold_for_test("ACADEMY_TEST_HOLD_RESTORE");
    let share = network::restoring(conf);
    let links = Netlink::open()?.links()?;
    let wired = Wired::beside(conf, &links)?;
    hold_for_test("ACADEMY_TEST_HOLD_RESTORE_LOCKED");
    if wired.attachments.is_empty() && !wired.bridge_in_use {
        drop(share);
        network::release_if_unused(conf)?;
        upgrade::record_current(conf);
        return Ok(Restoration::default());
    }
    // From here to the last batch no removal of the network is in flight, and the
    // attachments are read again under that (network::removal): the store only. A
    // removal that ran meanwhile freed its reservations last, so its attachment is gone
    // from the store whatever the links said; an ADD's new veth, missing from them,
    // leaves that attachment to its ADD, which makes its own state.
    let _no_removals = network::no_removal_in_flight(&conf.name);
    let wired = Wired::beside(conf, &links)?;
    let mut nft = NftablesOnDemand::default();
    let mut look = Looking {
        conf,
        nft: &mut nft,
        wired: &wired,
    };
    let mut restored = Restoration::default();
    for &kind in KINDS {
        match kind.restore(&mut look) {
            Ok(what) if what.is_empty() => {}
            Ok(mut what) => {
                what.put_back = what.put_back.iter().map(|w| as_put_back(w)).collect();
                restored.kinds.push((kind, what))
            }
            Err(e) => restored.errors.push((kind, e)),
        }
    }
    if restored.errors.is_empty() {
        // Every kind this binary knows is now complete: the network is at its state
        // version.
        upgrade::record_current(conf);
    }
    // A last DEL that ran beside the restore skipped its release, as behind an ADD in
    // flight (this restore's share): the network, left with no attachment, is released
    // (or recorded for its release) here, once the share is dropped.
    drop(share);
    if let Err(e) = network::release_if_unused(conf) {
        eprintln!("academy: warning: network {}: {e}", conf.name);
    }
    Ok(restored)
}

/// A kind's words for what it misses ("X is missing from nf_tables set S: what that
/// opens"), as what was put back ("X in nf_tables set S"): the restore's report says
/// what it repaired, not the harm it no longer does.
fn as_put_back(missing: &str) -> String {
    match missing.split_once(" is missing from ") {
        Some((what, place)) => {
            let place = place.split_once(": ").map_or(place, |(p, _)| p);
            format!("{what} in {place}")
        }
        None => missing.to_string(),
    }
}

/// Tests only (debug builds): with ACADEMY_TEST_HOLD_RESTORE set to a path, a network's
/// restore, once started and before it takes the lock, creates `<path>.held` and waits
/// (30 s at most) while `<path>` exists; with ACADEMY_TEST_HOLD_RESTORE_LOCKED, the same
/// once it holds the lock and has read the attachments; with ACADEMY_TEST_HOLD_LISTING,
/// a listing of the release records once it has read the folder (network/). A test
/// can so run a DEL in the middle of a restore or a listing without racing a signal.
pub(crate) fn hold_for_test(variable: &str) {
    #[cfg(not(debug_assertions))]
    let _ = variable;
    #[cfg(debug_assertions)]
    if let Some(path) = std::env::var_os(variable) {
        let path = std::path::PathBuf::from(path);
        let mut held = path.clone().into_os_string();
        held.push(".held");
        let _ = std::fs::write(&held, b"");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while path.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// The remedy CHECK and STATUS name for what a flush or a reload took.
pub const RESTORE_HINT: &str = "run `academy restore` (or `academy restore --conf-dir DIR`) to rebuild it from the store and the host's links; the next ADD on the network also repairs its rules";

/// The first error of a walk over the kinds, with the others in its details.
pub fn first_of(mut errors: Vec<Error>) -> Result<()> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => {
            let first = errors.remove(0);
            let rest: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            Err(first.details(format!("also: {}", rest.join("; "))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind appears once in KINDS (the macro writes the enum and the list from one
    /// list of names), and every kind has a phase of ADD whose walk reaches it.
    #[test]
    fn every_kind_is_walked_once() {
        let phases = [
            Phase::BeforePair,
            Phase::PairMade,
            Phase::Wired,
            Phase::OneBatch,
        ];
        for kind in KINDS {
            assert_eq!(KINDS.iter().filter(|k| *k == kind).count(), 1, "{kind}");
            let walked: usize = phases
                .iter()
                .map(|p| {
                    KINDS
                        .iter()
                        .filter(|k| k.phase() == *p && *k == kind)
                        .count()
                })
                .sum();
            assert_eq!(walked, 1, "{kind} is added in exactly one phase");
        }
        assert_eq!(KINDS.len(), 6);
    }

    #[test]
    fn what_was_missing_reads_as_what_was_put_back() {
        assert_eq!(
            as_put_back("bridge br0 is missing from nf_tables set inet academy _localnet: its containers can reach the host's services bound to 127.0.0.1"),
            "bridge br0 in nf_tables set inet academy _localnet"
        );
        assert_eq!(
            as_put_back("port mapping's rules (11 of them)"),
            "port mapping's rules (11 of them)"
        );
    }
}
