//! nf_tables as data: tables, chains, sets and maps, elements, rules as lists of typed
//! expressions, and the changes of a batch. Built by src/firewall/ (which says what
//! academy wants), written by encode.rs and read back by decode.rs: the only two places
//! that know the uapi's attribute numbers, so a policy never sees one.

use std::ops::Range;

use super::consts::{
    NFPROTO_BRIDGE, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFTA_FIB_F_DADDR, NFT_REG32_00,
    NFT_REG_1, NFT_REG_2, NFT_REG_VERDICT, NF_BR_PRI_NAT_DST_BRIDGED, NF_IP_PRI_FILTER,
    NF_IP_PRI_NAT_DST, NF_IP_PRI_NAT_SRC,
};
use super::step::Step;
use crate::netlink::nfnetlink::Family;

/// A table: its family (nfproto) and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub nfproto: u8,
    pub name: &'static str,
}

impl Table {
    pub const fn new(nfproto: u8, name: &'static str) -> Table {
        Table { nfproto, name }
    }

    /// A table of the `inet` family (both IP families).
    pub const fn inet(name: &'static str) -> Table {
        Table::new(NFPROTO_INET, name)
    }

    /// A table of the `bridge` family.
    pub const fn bridge(name: &'static str) -> Table {
        Table::new(NFPROTO_BRIDGE, name)
    }

    /// A table of `ip` or `ip6` (iptables-nft's).
    pub fn ip(family: Family, name: &'static str) -> Table {
        Table::new(family.layout().0, name)
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let family = match self.nfproto {
            NFPROTO_INET => "inet",
            NFPROTO_BRIDGE => "bridge",
            NFPROTO_IPV4 => "ip",
            NFPROTO_IPV6 => "ip6",
            _ => "?",
        };
        write!(f, "{family} {}", self.name)
    }
}

/// The netfilter hook of a base chain; the inet and bridge families number theirs alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
}

/// A base chain's priority on its hook (enum nf_ip_hook_priorities, nf_br_hook_priorities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority(pub i32);

impl Priority {
    pub const NAT_DST: Priority = Priority(NF_IP_PRI_NAT_DST);
    pub const FILTER: Priority = Priority(NF_IP_PRI_FILTER);
    pub const NAT_SRC: Priority = Priority(NF_IP_PRI_NAT_SRC);
    /// The bridge family's prerouting priority the reference's macspoofchk uses.
    pub const BRIDGE_NAT_DST_BRIDGED: Priority = Priority(NF_BR_PRI_NAT_DST_BRIDGED);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
}

impl ChainType {
    pub fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
        }
    }
}

/// A base chain: its table, name, hook, priority and type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chain {
    pub table: Table,
    pub name: &'static str,
    pub hook: Hook,
    pub priority: Priority,
    pub kind: ChainType,
}

/// A chain as the kernel shows it (GETCHAIN): what academy reads of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainInfo {
    /// A base chain's policy.
    pub policy: Option<Verdict>,
}

/// A set, or a map when it has `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub table: Table,
    pub name: String,
    /// The set's id within its creating batch: a rule's lookup in the same batch names
    /// the set so, before it exists (0: none).
    pub id: u32,
    /// (type, length) of the key (nft's datatypes: consts::TYPE_*).
    pub key: (u32, u32),
    /// (type, length) of a map's values.
    pub data: Option<(u32, u32)>,
    /// libnftnl's user data (attrs::name_byteorder), for nft's listing only.
    pub userdata: Option<Vec<u8>>,
    /// NLM_F_EXCL: an existing set of the name refuses the batch (EEXIST). Without it an
    /// identical set is success and a different one EEXIST.
    pub exclusive: bool,
}

/// A set as the kernel shows it (GETSET): what tells academy's own from another's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetInfo {
    pub key_type: Option<u32>,
    pub key_len: Option<u32>,
    /// Its flags (0 when none are shown).
    pub flags: u32,
    pub timeout: bool,
    pub data_type: Option<u32>,
    pub object_map: bool,
    /// Set expressions (NFTA_SET_EXPR or _EXPRESSIONS).
    pub expressions: bool,
}

/// One element: its key, a map's value, and a comment ("" for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub key: Vec<u8>,
    pub data: Option<Vec<u8>>,
    pub comment: String,
}

impl Element {
    /// An element named by its key alone (a removal, a lookup).
    pub fn key(key: Vec<u8>) -> Element {
        Element {
            key,
            data: None,
            comment: String::new(),
        }
    }
}

/// A rule: where it is (or goes), its comment (libnftnl's user data) and expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub table: Table,
    pub chain: String,
    /// The kernel's handle of a rule read back (0 for one to add).
    pub handle: u64,
    pub comment: Option<String>,
    pub exprs: Vec<Expr>,
}

/// A register (enum nft_registers): the verdict, the four 16-byte ones, and the 32-bit
/// ones that overlay them (a concatenation's later fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg(pub u32);

impl Reg {
    pub const VERDICT: Reg = Reg(NFT_REG_VERDICT);
    pub const R1: Reg = Reg(NFT_REG_1);
    pub const R2: Reg = Reg(NFT_REG_2);

    /// The `n`th 32-bit register: R1's bytes are 32-bit registers 0-3.
    pub const fn r32(n: u32) -> Reg {
        Reg(NFT_REG32_00 + n)
    }
}

/// A meta key (enum nft_meta_keys) academy loads or sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKey {
    Mark,
    IifName,
    OifName,
    NfProto,
    L4Proto,
    Other(u32),
}

/// enum nft_cmp_ops
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Neq,
    Lt,
    Lte,
    Gt,
    Gte,
}

/// enum nft_payload_bases
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadBase {
    LinkLayer,
    Network,
    Transport,
}

/// A conntrack key (enum nft_ct_keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtKey {
    Status,
    Other(u32),
}

/// What `fib` gives (enum nft_fib_result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FibResult {
    /// The address type (RTN_LOCAL, ...).
    AddrType,
    Other(u32),
}

/// What `fib` looks up by (enum nft_fib_flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FibFlags(pub u32);

impl FibFlags {
    pub const DADDR: FibFlags = FibFlags(NFTA_FIB_F_DADDR);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatType {
    Snat,
    Dnat,
}

/// A verdict (NF_ACCEPT, NF_DROP and enum nft_verdicts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Jump(String),
    Goto(String),
    Other(i32),
}

/// One expression of a rule, as `nft --debug=netlink` shows it. Several are written in
/// two tools' attribute orders (the kernel takes either): academy writes nft's for its
/// own rules and iptables-nft's for the rules it puts in iptables' chains, so that each
/// tool reads them back as its own, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta load KEY => reg`, in nft's order (register, key).
    Meta { key: MetaKey, dreg: Reg },
    /// The same in iptables-nft's order (key, register).
    IptablesMeta { key: MetaKey, dreg: Reg },
    /// `meta set KEY with reg`.
    MetaSet { key: MetaKey, sreg: Reg },
    /// `cmp OP reg DATA`.
    Cmp { sreg: Reg, op: CmpOp, data: Vec<u8> },
    /// `payload load LEN @ BASE header + OFFSET => reg`.
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
        dreg: Reg,
    },
    /// `ct load KEY => reg`.
    Ct { key: CtKey, dreg: Reg },
    /// `bitwise reg = (reg & mask) ^ xor` on `mask.len()` bytes.
    Bitwise {
        sreg: Reg,
        dreg: Reg,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// `lookup reg set SET [dreg]`: `set_id` names a set new in the same batch (0: it
    /// exists); `inverted` matches what is not in the set; `dreg` receives a map's value.
    Lookup {
        set: String,
        sreg: Reg,
        dreg: Option<Reg>,
        set_id: u32,
        inverted: bool,
    },
    /// `fib FLAGS RESULT => reg`.
    Fib {
        dreg: Reg,
        result: FibResult,
        flags: FibFlags,
    },
    /// `nat TYPE FAMILY addr reg [proto reg]`.
    Nat {
        kind: NatType,
        family: Family,
        addr: Reg,
        proto: Option<Reg>,
    },
    /// `masq`.
    Masq,
    /// `counter`.
    Counter { bytes: u64, packets: u64 },
    /// `immediate` of a verdict.
    Verdict(Verdict),
    /// `immediate` of data into a register.
    Immediate { dreg: Reg, data: Vec<u8> },
    /// An xt match inside the rule (nft_compat), as iptables-nft writes `-m NAME`.
    Match {
        name: String,
        rev: u32,
        info: Vec<u8>,
    },
    /// An xt target (`-j MASQUERADE`, `-j DNAT`, ...).
    Target {
        name: String,
        rev: u32,
        info: Vec<u8>,
    },
    /// Any other expression, as read: its name and its data's attributes.
    Other { name: String, data: Vec<u8> },
}

impl Expr {
    /// The expression's name in the kernel (`nft --debug=netlink` prints it first).
    pub fn name(&self) -> &str {
        match self {
            Expr::Meta { .. } | Expr::IptablesMeta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Payload { .. } => "payload",
            Expr::Ct { .. } => "ct",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Fib { .. } => "fib",
            Expr::Nat { .. } => "nat",
            Expr::Masq => "masq",
            Expr::Counter { .. } => "counter",
            Expr::Verdict(_) | Expr::Immediate { .. } => "immediate",
            Expr::Match { .. } => "match",
            Expr::Target { .. } => "target",
            Expr::Other { name, .. } => name,
        }
    }

    /// `meta KEY` into `dreg`, in nft's order.
    pub fn meta(key: MetaKey, dreg: Reg) -> Expr {
        Expr::Meta { key, dreg }
    }

    pub fn cmp(sreg: Reg, op: CmpOp, data: impl Into<Vec<u8>>) -> Expr {
        Expr::Cmp {
            sreg,
            op,
            data: data.into(),
        }
    }

    pub fn payload(base: PayloadBase, offset: u32, len: u32, dreg: Reg) -> Expr {
        Expr::Payload {
            base,
            offset,
            len,
            dreg,
        }
    }

    /// A lookup of the key in `sreg` in `set` (no value loaded).
    pub fn lookup(set: impl Into<String>, sreg: Reg, set_id: u32, inverted: bool) -> Expr {
        Expr::Lookup {
            set: set.into(),
            sreg,
            dreg: None,
            set_id,
            inverted,
        }
    }

    /// A zeroed counter, as nft and iptables-nft send one.
    pub fn counter() -> Expr {
        Expr::Counter {
            bytes: 0,
            packets: 0,
        }
    }
}

/// One change of a batch: a typed operation and what it does, in words (an error names
/// the refused change so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub op: Op,
    pub description: String,
}

/// What one message of a batch does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The table, made if missing (an existing one is success).
    AddTable(Table),
    /// The base chain, made if missing (one of the same name is success).
    AddChain(Chain),
    AddSet(Set),
    DeleteSet {
        table: Table,
        name: String,
    },
    /// The rule appended to its chain.
    AddRule(Rule),
    /// The rule of `chain` under `handle`; every rule of the chain without one.
    DeleteRule {
        table: Table,
        chain: String,
        handle: Option<u64>,
    },
    DeleteChain {
        table: Table,
        chain: String,
    },
    /// Elements added; `exclusive`: one already there refuses the batch (EEXIST);
    /// `publish`: they are published ports (a refusal then reads as a port conflict).
    AddElements {
        table: Table,
        set: String,
        elements: Vec<Element>,
        exclusive: bool,
        publish: bool,
    },
    /// Elements removed, named by key.
    DeleteElements {
        table: Table,
        set: String,
        keys: Vec<Vec<u8>>,
        publish: bool,
    },
}

impl Op {
    pub fn table(&self) -> Table {
        match self {
            Op::AddTable(table) => *table,
            Op::AddChain(chain) => chain.table,
            Op::AddSet(set) => set.table,
            Op::AddRule(rule) => rule.table,
            Op::DeleteSet { table, .. }
            | Op::DeleteRule { table, .. }
            | Op::DeleteChain { table, .. }
            | Op::AddElements { table, .. }
            | Op::DeleteElements { table, .. } => *table,
        }
    }

    pub fn step(&self) -> Step {
        match self {
            Op::AddTable(_) => Step::CreateTable,
            Op::AddChain(_) => Step::CreateChain,
            Op::AddSet(_) => Step::CreateSet,
            Op::DeleteSet { .. } => Step::DeleteSet,
            Op::AddRule(_) => Step::AddRule,
            Op::DeleteRule { .. } => Step::DeleteRule,
            Op::DeleteChain { .. } => Step::DeleteChain,
            Op::AddElements { publish: true, .. } => Step::Publish,
            Op::AddElements { publish: false, .. } => Step::AddElement,
            Op::DeleteElements { publish: true, .. } => Step::Unpublish,
            Op::DeleteElements { publish: false, .. } => Step::RemoveElement,
        }
    }
}

impl Change {
    pub fn new(op: Op, description: impl Into<String>) -> Change {
        Change {
            op,
            description: description.into(),
        }
    }

    /// The table, made if missing.
    pub fn add_table(table: Table) -> Change {
        Change::new(Op::AddTable(table), format!("create table {table}"))
    }

    /// The base chain, made if missing (callers that share a chain each make it,
    /// whichever comes first).
    pub fn add_chain(chain: Chain) -> Change {
        let description = format!(
            "create chain {} {} (type {}, hook {})",
            chain.table,
            chain.name,
            chain.kind.name(),
            chain.hook.name()
        );
        Change::new(Op::AddChain(chain), description)
    }

    pub fn add_set(set: Set) -> Change {
        let kind = if set.data.is_some() { "map" } else { "set" };
        let description = format!("create {kind} {} {}", set.table, set.name);
        Change::new(Op::AddSet(set), description)
    }

    pub fn add_rule(rule: Rule, description: impl Into<String>) -> Change {
        Change::new(Op::AddRule(rule), description)
    }

    pub fn delete_rule(
        table: Table,
        chain: &str,
        handle: u64,
        description: impl Into<String>,
    ) -> Change {
        let op = Op::DeleteRule {
            table,
            chain: chain.to_string(),
            handle: Some(handle),
        };
        Change::new(op, description)
    }

    /// One element added to `set` if missing (already there is success).
    pub fn add_element(
        table: Table,
        set: &str,
        element: Element,
        description: impl Into<String>,
    ) -> Change {
        let op = Op::AddElements {
            table,
            set: set.to_string(),
            elements: vec![element],
            exclusive: false,
            publish: false,
        };
        Change::new(op, description)
    }

    /// The element changes for `items` of one set: one message per ELEMENT_LIST_BYTES of
    /// elements (a list longer than netlink's 16-bit attribute length cannot be sent),
    /// each described by `describe` of its items.
    pub fn elements<T>(
        items: &[T],
        element: impl Fn(&T) -> Element,
        op: impl Fn(Vec<Element>) -> Op,
        describe: impl Fn(&[T]) -> String,
    ) -> Vec<Change> {
        let elements: Vec<Element> = items.iter().map(element).collect();
        let ranges = element_groups(elements.len(), |i| super::encode::element_len(&elements[i]));
        let mut elements = elements.into_iter();
        let mut changes = Vec::with_capacity(ranges.len());
        for range in ranges {
            let group: Vec<Element> = elements.by_ref().take(range.len()).collect();
            changes.push(Change::new(op(group), describe(&items[range])));
        }
        changes
    }
}

/// Bytes of one message's element list (NFTA_SET_ELEM_LIST_ELEMENTS): an attribute's
/// length is 16 bits, so a longer list cannot be sent at all; this leaves room for the
/// rest of the message and keeps a few messages in one batch.
pub const ELEMENT_LIST_BYTES: usize = 48 * 1024;

/// Ranges of `count` items whose encoded elements (`len` of each) fit ELEMENT_LIST_BYTES.
fn element_groups(count: usize, len: impl Fn(usize) -> usize) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let (mut bytes, mut start) = (0, 0);
    for i in 0..count {
        let one = len(i);
        if bytes != 0 && bytes + one > ELEMENT_LIST_BYTES {
            groups.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += one;
    }
    if bytes != 0 {
        groups.push(start..count);
    }
    groups
}
