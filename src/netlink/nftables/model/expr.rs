//! A rule's expressions, and the registers, keys and verdicts they name.

use super::super::consts::{NFTA_FIB_F_DADDR, NFT_REG32_00, NFT_REG_1, NFT_REG_2, NFT_REG_VERDICT};
use crate::netlink::nfnetlink::Family;

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
