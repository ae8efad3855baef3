//! A network's MAC filter objects (its map, two sets and rule in `bridge academy`):
//! made with its first guarded port, looked at, and made whole again when only part of
//! them is there: the map
//! deleted alone (nothing refers to it, so the kernel lets it go while the rule and sets
//! stay), or the sets without their rule (an admin's `nft delete rule`, or a flush that
//! came between a restore's look and its batch). The first ADD's exclusive batch is
//! refused then, and re-adding the elements would fail (ENOENT) for ever: what lacks is
//! made, in place, and what is there (the sets' elements of live ports) stays.
//!
//! The kernel keeps the sets while the rule is there (a bound set cannot be deleted), so
//! a batch holding a lacking set holds the rule too when it lacks, and a concurrent
//! maker of the same set is refused (EEXIST): the rule is never made twice. The one
//! batch with nothing exclusive in it (the rule alone, its sets there) runs under the
//! host's repair lock, which every completion takes.

use super::create::{guard_changes, Lacking};
use super::names::{cut_rule_comment, guard_sets, rule_comment, BRIDGE_CHAIN};
use crate::firewall::network::repair_lock;
use crate::firewall::tables::ACADEMY_BRIDGE;
use crate::netlink::{Nftables, NlResult, TableRule};

/// The table, chain, map, sets and rule of one network, in one batch. The map and sets
/// are created exclusively and the rule with them: if one exists the kernel refuses the
/// whole batch, and what is there (all of it, a concurrent first ADD's; or part, what an
/// admin's deletion or a flush racing a restore left) is completed (complete_guard, below).
pub(super) fn create_guard(nft: &mut Nftables, network: &str) -> NlResult<()> {
    match nft.run(guard_changes(network, &Lacking::ALL)) {
        Err(e) if e.is(libc::EEXIST) => complete_guard(nft, network),
        other => other,
    }
}

/// Makes whatever of the network's map, sets and rule is missing. A concurrent maker
/// that got in first is looked at again (three times at most: each round, a maker
/// created something, and there are four things).
pub(super) fn complete_guard(nft: &mut Nftables, network: &str) -> NlResult<()> {
    let mut round = 0;
    loop {
        if !lacking(nft, network)?.any() {
            return Ok(());
        }
        let _lock = repair_lock();
        let lacking = lacking(nft, network)?;
        if !lacking.any() {
            return Ok(());
        }
        match nft.run(guard_changes(network, &lacking)) {
            Err(e) if e.is(libc::EEXIST) && round < 3 => round += 1,
            other => return other,
        }
    }
}

/// What of the network's filter objects is not in `bridge academy`: three set lookups
/// and the chain's rules.
fn lacking(nft: &mut Nftables, network: &str) -> NlResult<Lacking> {
    let [map, guarded, allowed] = guard_sets(network);
    Ok(Lacking {
        map: !guard_set_exists(nft, &map)?,
        guarded: !guard_set_exists(nft, &guarded)?,
        allowed: !guard_set_exists(nft, &allowed)?,
        rule: !has_guard_rule(nft, network)?,
    })
}

/// Whether set (or map) `set` of `bridge academy` exists: one lookup.
pub fn guard_set_exists(nft: &mut Nftables, set: &str) -> NlResult<bool> {
    Ok(nft.set_info(ACADEMY_BRIDGE, set)?.is_some())
}

/// The network's MAC filter rule, if it is there.
pub fn guard_rule(nft: &mut Nftables, network: &str) -> NlResult<Option<TableRule>> {
    let wanted = [rule_comment(network), cut_rule_comment(network)];
    Ok(nft
        .rules_of(ACADEMY_BRIDGE, Some(BRIDGE_CHAIN))?
        .into_iter()
        .find(|r| wanted.contains(&r.comment)))
}

/// Whether chain prerouting holds the network's drop rule.
pub fn has_guard_rule(nft: &mut Nftables, network: &str) -> NlResult<bool> {
    guard_rule(nft, network).map(|rule| rule.is_some())
}
