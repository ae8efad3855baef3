//! A network's own objects, listed and deleted when its last attachment is gone (and by
//! GC for a network left with none): its masquerade rule and sets in `inet academy`, its
//! MAC filter's rule, map and sets in `bridge academy`, its bridge's hairpin, loopback
//! guard and isolation elements and its accept rules in iptables' FORWARD. The tables and
//! the shared chains, maps and rules stay: other networks use them, and an empty chain
//! (or a rule whose set is empty) costs a packet nothing (one lookup).

use netlink_packet_core::NLM_F_CREATE;

use super::batch::{Batch, Change};
use super::consts::{
    HAIRPIN_SET, ISOLATED_SET, LOCALNET_SET, NFPROTO_BRIDGE, NFPROTO_INET, NFTA_DATA_VALUE,
    NFTA_LIST_ELEM, NFTA_RULE_CHAIN, NFTA_RULE_HANDLE, NFTA_RULE_TABLE, NFTA_SET_ELEM_KEY,
    NFTA_SET_NAME, NFTA_SET_TABLE, NFT_MSG_DELRULE, NFT_MSG_DELSET, NFT_MSG_DELSETELEM, TABLE,
};
use super::consts::{
    NFTA_CHAIN_HOOK, NFTA_CHAIN_NAME, NFTA_CHAIN_TABLE, NFTA_CHAIN_TYPE, NFTA_HOOK_HOOKNUM,
    NFTA_HOOK_PRIORITY, NFTA_TABLE_NAME, NFT_MSG_NEWCHAIN, NFT_MSG_NEWTABLE,
};
use super::localnet::localnet_key;
use super::portmap::{element_list, hairpin_key};
use super::step::Step;
use super::{Family, Nftables};
use crate::netlink::nfnetlink::Attrs;
use crate::netlink::socket::NlResult;

/// The tables academy keeps state in (its own two) or adds rules to (iptables-nft's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `inet academy`: masquerade and port mapping.
    Academy,
    /// `bridge academy`: the MAC filter.
    AcademyBridge,
    /// `ip filter` / `ip6 filter`, iptables-nft's: the FORWARD accepts.
    IptablesFilter(Family),
}

impl Table {
    fn nfproto(self) -> u8 {
        match self {
            Table::Academy => NFPROTO_INET,
            Table::AcademyBridge => NFPROTO_BRIDGE,
            Table::IptablesFilter(family) => family.layout().0,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Table::Academy | Table::AcademyBridge => TABLE,
            Table::IptablesFilter(_) => "filter",
        }
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Table::Academy => write!(f, "inet {TABLE}"),
            Table::AcademyBridge => write!(f, "bridge {TABLE}"),
            Table::IptablesFilter(Family::V4) => write!(f, "ip filter"),
            Table::IptablesFilter(Family::V6) => write!(f, "ip6 filter"),
        }
    }
}

/// A rule that carries a comment, where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRule {
    pub table: Table,
    pub chain: String,
    pub handle: u64,
    pub comment: String,
}

/// One object to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    Rule(TableRule),
    /// A set or map, by name (its elements go with it).
    Set(Table, String),
    /// The `bridge . bridge` element of `_hairpin` that marks a bridge's hairpin traffic.
    Hairpin(String),
    /// The bridge's element of `_localnet`, the loopback guard of a bridge academy set
    /// route_localnet on (localnet.rs).
    Localnet(String),
    /// The bridge's `bridge . bridge` element of `_isolated`, the isolation of a network
    /// with `ingressPolicy` same-bridge (isolation.rs).
    Isolated(String),
}

impl Object {
    fn table(&self) -> Table {
        match self {
            Object::Rule(r) => r.table,
            Object::Set(t, _) => *t,
            Object::Hairpin(_) | Object::Localnet(_) | Object::Isolated(_) => Table::Academy,
        }
    }
}

/// Academy's table in `table`'s family, made if missing (an existing one is success).
pub(super) fn new_table(table: Table) -> Change {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_TABLE_NAME, table.name());
    Change {
        step: Step::CreateTable,
        kind: NFT_MSG_NEWTABLE,
        flags: NLM_F_CREATE,
        attrs,
        description: format!("create table {table}"),
    }
}

/// A base chain of academy's: its name, hook, priority and type.
pub(super) struct BaseChain {
    pub(super) name: &'static str,
    pub(super) hook: u32,
    pub(super) priority: i32,
    pub(super) kind: &'static str,
}

/// The base chain in `table`, made if missing (one of the same name is success, so the
/// kinds that share a chain, e.g. `forward`, each make it whichever comes first).
pub(super) fn new_chain(table: Table, chain: BaseChain) -> Change {
    let mut attrs = Attrs::default();
    attrs.str(NFTA_CHAIN_TABLE, table.name());
    attrs.str(NFTA_CHAIN_NAME, chain.name);
    attrs.nested(NFTA_CHAIN_HOOK, |hook| {
        hook.be32(NFTA_HOOK_HOOKNUM, chain.hook);
        hook.be32(NFTA_HOOK_PRIORITY, chain.priority as u32);
    });
    attrs.str(NFTA_CHAIN_TYPE, chain.kind);
    Change {
        step: Step::CreateChain,
        kind: NFT_MSG_NEWCHAIN,
        flags: NLM_F_CREATE,
        attrs,
        description: format!(
            "create chain {table} {} (type {}, hook {})",
            chain.name,
            chain.kind,
            hook_name(chain.hook)
        ),
    }
}

/// The netfilter hook's name; the inet and bridge families number theirs alike.
fn hook_name(hook: u32) -> &'static str {
    ["prerouting", "input", "forward", "output", "postrouting"]
        .get(hook as usize)
        .copied()
        .unwrap_or("?")
}

impl Nftables {
    /// The commented rules of `table` (of one chain, or all); none when it is gone.
    pub fn rules_of(&mut self, table: Table, chain: Option<&str>) -> NlResult<Vec<TableRule>> {
        Ok(self
            .commented_rules(table.nfproto(), table.name(), chain)?
            .into_iter()
            .map(|r| TableRule {
                table,
                chain: r.chain,
                handle: r.handle,
                comment: r.comment,
            })
            .collect())
    }

    /// Deletes `objects`: per table one batch, rules before the sets they look up.
    /// Objects already gone are success (a concurrent removal, an admin's flush): the
    /// batch is all or nothing, so on ENOENT each object is deleted alone.
    pub fn delete_objects(&mut self, objects: &[Object]) -> NlResult<()> {
        let mut tables: Vec<Table> = objects.iter().map(Object::table).collect();
        tables.dedup();
        for table in tables {
            let mut mine: Vec<&Object> = objects.iter().filter(|o| o.table() == table).collect();
            mine.sort_by_key(|o| match o {
                Object::Rule(_) => 0,
                Object::Hairpin(_) | Object::Localnet(_) | Object::Isolated(_) => 1,
                Object::Set(..) => 2,
            });
            match self.delete_batch(table, &mine) {
                Err(e) if e.is(libc::ENOENT) => {
                    for object in mine {
                        match self.delete_batch(table, &[object]) {
                            Err(e) if !e.is(libc::ENOENT) => return Err(e),
                            _ => {}
                        }
                    }
                }
                other => other?,
            }
        }
        Ok(())
    }

    fn delete_batch(&mut self, table: Table, objects: &[&Object]) -> NlResult<()> {
        let mut batch = Batch::in_family(&mut self.socket, table.nfproto());
        for object in objects {
            match object {
                Object::Rule(rule) => {
                    let mut attrs = Attrs::default();
                    attrs.str(NFTA_RULE_TABLE, table.name());
                    attrs.str(NFTA_RULE_CHAIN, &rule.chain);
                    attrs.be64(NFTA_RULE_HANDLE, rule.handle);
                    batch.add(
                        Step::DeleteRule,
                        NFT_MSG_DELRULE,
                        0,
                        attrs,
                        format!(
                            "delete rule {:?} (handle {}) from chain {table} {}",
                            rule.comment, rule.handle, rule.chain
                        ),
                    );
                }
                Object::Set(_, name) => {
                    let mut attrs = Attrs::default();
                    attrs.str(NFTA_SET_TABLE, table.name());
                    attrs.str(NFTA_SET_NAME, name);
                    batch.add(
                        Step::DeleteSet,
                        NFT_MSG_DELSET,
                        0,
                        attrs,
                        format!("delete set {table} {name}"),
                    );
                }
                Object::Hairpin(bridge) => {
                    let attrs = element_list(HAIRPIN_SET, |list| {
                        list.nested(NFTA_LIST_ELEM, |elem| {
                            elem.nested(NFTA_SET_ELEM_KEY, |k| {
                                k.put(NFTA_DATA_VALUE, &hairpin_key(bridge))
                            });
                        });
                    });
                    batch.add(
                        Step::RemoveElement,
                        NFT_MSG_DELSETELEM,
                        0,
                        attrs,
                        format!("remove {bridge} . {bridge} from set {table} {HAIRPIN_SET}"),
                    );
                }
                Object::Localnet(bridge) => {
                    let attrs = element_list(LOCALNET_SET, |list| {
                        list.nested(NFTA_LIST_ELEM, |elem| {
                            elem.nested(NFTA_SET_ELEM_KEY, |k| {
                                k.put(NFTA_DATA_VALUE, &localnet_key(bridge))
                            });
                        });
                    });
                    batch.add(
                        Step::RemoveElement,
                        NFT_MSG_DELSETELEM,
                        0,
                        attrs,
                        format!("remove {bridge} from set {table} {LOCALNET_SET}"),
                    );
                }
                Object::Isolated(bridge) => {
                    batch.add(
                        Step::RemoveElement,
                        NFT_MSG_DELSETELEM,
                        0,
                        super::isolation::element(bridge),
                        format!("remove {bridge} . {bridge} from set {table} {ISOLATED_SET}"),
                    );
                }
            }
        }
        batch.commit()
    }

    /// Whether `_hairpin` holds `bridge . bridge`.
    pub fn has_hairpin(&mut self, bridge: &str) -> NlResult<bool> {
        let what =
            format!("look up {bridge} . {bridge} in nf_tables set inet {TABLE} {HAIRPIN_SET}");
        self.has_element(NFPROTO_INET, HAIRPIN_SET, &hairpin_key(bridge), &what)
    }
}
