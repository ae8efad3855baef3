//! nf_tables over NETLINK_NETFILTER, encoded by hand (the uapi is
//! /usr/include/linux/netfilter/nf_tables.h; no crate covers it). This folder knows how
//! nf_tables spells a table, a chain, a set or map and its elements, a rule and its
//! expressions, a batch and a dump; it knows nothing of what academy keeps in them
//! (src/firewall/ says which tables, names and comments are academy's, and why).
//!
//! - `model`: tables, base chains, sets and maps, elements, rules as lists of typed
//!   expressions, and the typed changes of a batch: what src/firewall/ builds;
//! - `encode`: the one encoder (a change as its message, expressions attribute for
//!   attribute as nft or iptables-nft writes them); `decode`: the one decoder (replies
//!   as the model, unknown expressions kept as bytes);
//! - `batch`: changes sent together in one sendmsg and applied all or nothing
//!   (`Nftables::run`);
//! - `dump`: reading rules, sets, chains and elements back; `objects`: academy's objects
//!   to delete; `iptables`: iptables-nft's rules as the model reads them, and deleted;
//! - `attrs`: what attributes hold beyond TLVs (addresses, libnftnl's comments);
//! - `consts`: every uapi number, once; `step`: what kind of change a message is, so a
//!   refusal says which; `digest`: SHA-256 (comments capped, wire bytes pinned);
//! - `monitor`: the kernel's change notifications (`academy watch`).

use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST};

use super::nfnetlink::{encode, Attrs, Family, HEADERS_LEN};
use super::socket::{Await, NlError, NlResult, NlSocket, Subsystem};

pub mod attrs;
pub mod batch;
pub mod consts;
mod decode;
pub mod digest;
pub mod dump;
mod element_lists;
pub mod encode;
mod iptables;
pub mod model;
mod monitor;
pub mod objects;
pub mod step;

pub use attrs::stored_comment;
use batch::nftables_type;
use batch::Message;
use consts::{NFPROTO_IPV4, NFPROTO_IPV6, NFT_MSG_GETGEN};
pub use iptables::{IptablesRemoval, IptablesRule};
pub use model::{CmpOp, Expr, PayloadBase, Verdict};
pub use monitor::{Commit, Monitor, Notice};
pub use objects::{Object, Table, TableRule};
pub use step::Step;

impl Family {
    /// (nfproto, address length, source offset, destination offset in the IP header).
    pub fn layout(self) -> (u8, u32, u32, u32) {
        match self {
            Family::V4 => (NFPROTO_IPV4, 4, 12, 16),
            Family::V6 => (NFPROTO_IPV6, 16, 8, 24),
        }
    }
}

pub struct Nftables {
    socket: NlSocket,
}

/// One nf_tables socket for a command's several steps, opened at the first that needs it.
/// With a socket per step, an ADD's second open and first close waited about 1 ms each
/// here (an RCU grace period), in an ADD of about 5 ms: ADD's filter, forward,
/// masquerade and port steps share this one, and a command that needs none never opens it.
#[derive(Default)]
pub struct NftablesOnDemand(Option<Nftables>);

impl NftablesOnDemand {
    pub fn get(&mut self) -> NlResult<&mut Nftables> {
        if self.0.is_none() {
            self.0 = Some(Nftables::open()?);
        }
        Ok(self.0.as_mut().expect("just opened"))
    }
}

impl Nftables {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> NlResult<Nftables> {
        Ok(Nftables {
            socket: NlSocket::open(Subsystem::NfTables)?,
        })
    }

    /// Applies `changes` in one batch (split only past BATCH_BYTES), in order, each to
    /// the table it names: all or nothing; stops at the first refused batch.
    pub fn run(&mut self, changes: Vec<model::Change>) -> NlResult<()> {
        let changes = changes.into_iter().map(|change| {
            let encoded = encode::op(&change.op);
            let message = Message {
                step: change.op.step(),
                kind: encoded.kind,
                flags: encoded.flags,
                attrs: encoded.attrs,
                description: change.description,
            };
            (change.op.table().nfproto, message)
        });
        batch::commit_all(&mut self.socket, changes)
    }

    /// One GET request outside a batch, its reply's attributes (after the nfgenmsg)
    /// handed to `on_reply`. ENOENT is the caller's to judge.
    pub fn get(
        &mut self,
        family: u8,
        kind: u8,
        attrs: Attrs,
        what: &str,
        on_reply: impl FnMut(&[u8]),
    ) -> NlResult<()> {
        self.request_in(family, kind, 0, attrs, Await::One, what, on_reply)
    }

    /// A dump in `family` whose replies `collect` decodes into a list; the list is empty
    /// when the table, chain or set dumped is gone (ENOENT), as after an admin's flush.
    pub fn dump<T>(
        &mut self,
        family: u8,
        kind: u8,
        attrs: Attrs,
        what: &str,
        mut collect: impl FnMut(&[u8], &mut Vec<T>),
    ) -> NlResult<Vec<T>> {
        if !self.socket.has_received() {
            self.generation()?;
        }
        let mut found = Vec::new();
        let result = self.request_in(family, kind, NLM_F_DUMP, attrs, Await::Dump, what, |p| {
            collect(p, &mut found)
        });
        match result {
            Err(e) if e.is(libc::ENOENT) => Ok(Vec::new()),
            other => other.map(|()| found),
        }
    }

    /// One small round trip (the ruleset's generation), so that the socket's next dump
    /// comes in messages large enough for any rule (`NlSocket::has_received`).
    fn generation(&mut self) -> NlResult<()> {
        self.request_in(
            0,
            NFT_MSG_GETGEN,
            0,
            Attrs::default(),
            Await::One,
            "read the nf_tables generation",
            |_| {},
        )
    }

    /// GET requests of one object each, `(family, kind, attrs)`, sent in one sendmsg and
    /// answered in turn: each one's reply attributes (after the nfgenmsg), None for an
    /// ENOENT, in the order asked.
    pub fn get_each(
        &mut self,
        requests: Vec<(u8, u8, Attrs)>,
        what: &str,
    ) -> NlResult<Vec<Option<Vec<u8>>>> {
        let first = self.socket.next_sequence();
        let mut last = first;
        let mut bytes = Vec::new();
        for (i, (family, kind, attrs)) in requests.into_iter().enumerate() {
            if attrs.too_long() {
                return Err(NlError::new(what, libc::EMSGSIZE).within(Subsystem::NfTables));
            }
            if i > 0 {
                last = self.socket.next_sequence();
            }
            let flags = NLM_F_REQUEST;
            encode(
                &mut bytes,
                nftables_type(kind),
                flags,
                last,
                family,
                0,
                attrs.0,
            );
        }
        let mut answers: Vec<NlResult<Option<Vec<u8>>>> =
            (first..=last).map(|_| Ok(None)).collect();
        self.socket.send(&bytes, what)?;
        self.socket
            .receive_each_one(first..last + 1, what, |sequence, answer| {
                answers[(sequence - first) as usize] = match answer {
                    Ok(message) => Ok(message
                        .and_then(|m| m.get(HEADERS_LEN..))
                        .map(<[u8]>::to_vec)),
                    Err(e) if e.is(libc::ENOENT) => Ok(None),
                    Err(e) => Err(e),
                };
            })?;
        answers.into_iter().collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn request_in(
        &mut self,
        family: u8,
        kind: u8,
        flags: u16,
        attrs: Attrs,
        awaiting: Await,
        what: &str,
        mut on_reply: impl FnMut(&[u8]),
    ) -> NlResult<()> {
        if attrs.too_long() {
            return Err(NlError::new(what, libc::EMSGSIZE).within(Subsystem::NfTables));
        }
        let sequence = self.socket.next_sequence();
        let mut bytes = Vec::new();
        encode(
            &mut bytes,
            nftables_type(kind),
            NLM_F_REQUEST | flags,
            sequence,
            family,
            0,
            attrs.0,
        );
        self.socket.send(&bytes, what)?;
        self.socket.receive(sequence, awaiting, what, |message| {
            if let Some(payload) = message.get(HEADERS_LEN..) {
                on_reply(payload);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The uapi's names (NFTA_ attributes, NFT_MSG_ messages, any other NFT_ number)
    /// stay in this layer: src/firewall/ and the rest build the typed model (model.rs)
    /// and never see an attribute. Comments may name them; code may not.
    #[test]
    fn no_nf_tables_constant_is_named_outside_src_netlink() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        let mut files = vec![src.clone()];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                if path == src.join("netlink") {
                    continue;
                }
                let entries = std::fs::read_dir(&path).expect("a readable source folder");
                files.extend(entries.map(|e| e.expect("a folder entry").path()));
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            for (i, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                if let Some(name) = uapi_name(line) {
                    let file = path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
                    found.push(format!("{}:{}: {name}", file.display(), i + 1));
                }
            }
        }
        assert!(
            found.is_empty(),
            "nf_tables constants used outside src/netlink/ (build the typed model instead):\n{}",
            found.join("\n")
        );
    }

    /// The first identifier of `line` that starts with NFT_ or NFTA_ (NFT_MSG_ included).
    fn uapi_name(line: &str) -> Option<&str> {
        let bytes = line.as_bytes();
        let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        for (at, _) in line.match_indices("NFT") {
            let rest = &line[at..];
            let starts = at == 0 || !ident(bytes[at - 1]);
            if starts && (rest.starts_with("NFT_") || rest.starts_with("NFTA_")) {
                let end = rest.find(|c: char| !c.is_ascii_alphanumeric() && c != '_');
                return Some(&rest[..end.unwrap_or(rest.len())]);
            }
        }
        None
    }

    #[test]
    fn uapi_names_are_told_from_other_words() {
        assert_eq!(
            uapi_name("use c::{NFTA_SET_NAME, X};"),
            Some("NFTA_SET_NAME")
        );
        assert_eq!(uapi_name("kind: NFT_MSG_NEWRULE,"), Some("NFT_MSG_NEWRULE"));
        assert_eq!(uapi_name("(NFT_REG_1)"), Some("NFT_REG_1"));
        assert_eq!(uapi_name("let nft = NftablesOnDemand;"), None);
        assert_eq!(uapi_name("XNFT_A"), None);
    }
}
