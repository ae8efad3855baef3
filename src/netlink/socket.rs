//! One blocking netlink socket and the request/ack loop every protocol shares: sequence
//! numbers, reading datagrams (a truncated one is an error, never silently lost
//! messages), matching replies to requests, acks, dumps, the acks of a batch, and the
//! kernel's own reason for a refusal (extended ack). The protocols (route, nftables)
//! only encode requests and decode the data messages handed to them.

use std::fmt;
use std::ops::Range;

use netlink_sys::protocols::{NETLINK_NETFILTER, NETLINK_ROUTE};
use netlink_sys::{Socket, SocketAddr};

use super::nftables::step::Step;

/// Large enough for a link dump datagram; recv passes MSG_TRUNC so a larger one is an
/// error instead of silently lost messages.
const RECV_BUFFER: usize = 64 * 1024;

const HEADER_LEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// NLM_F_ROOT | NLM_F_MATCH: a GET's dump flags.
const NLM_F_DUMP: u16 = 0x300;
/// rtnetlink's first message type (RTM_NEWLINK).
const RTM_BASE: u16 = 16;
/// The error message echoes only the request's header, not its payload.
const NLM_F_CAPPED: u16 = 0x100;
/// The error message carries extended-ack attributes after the echoed request.
const NLM_F_ACK_TLVS: u16 = 0x200;

/// The kernel subsystem a socket speaks to. Two share NETLINK_NETFILTER.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subsystem {
    Rtnetlink,
    NfTables,
    Conntrack,
}

impl Subsystem {
    fn protocol(self) -> isize {
        match self {
            Subsystem::Rtnetlink => NETLINK_ROUTE,
            Subsystem::NfTables | Subsystem::Conntrack => NETLINK_NETFILTER,
        }
    }

    /// As the errors of opening a socket name it.
    fn name(self) -> &'static str {
        match self {
            Subsystem::Rtnetlink => "rtnetlink",
            Subsystem::NfTables => "nf_tables",
            Subsystem::Conntrack => "conntrack",
        }
    }
}

/// A failed netlink request: which request, the errno, and the kernel's own reason
/// (extended ack) when it gave one; the subsystem it went to, and for a message of an
/// nf_tables batch, what that message did, so that callers decide by type, not by the
/// request's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlError {
    pub request: String,
    pub errno: i32,
    pub reason: Option<String>,
    pub subsystem: Option<Subsystem>,
    pub refused: Option<Step>,
}

impl NlError {
    pub fn new(request: impl Into<String>, errno: i32) -> Self {
        NlError {
            request: request.into(),
            errno,
            reason: None,
            subsystem: None,
            refused: None,
        }
    }

    /// The error as one of `subsystem`'s, unless it already names one.
    pub(super) fn within(mut self, subsystem: Subsystem) -> Self {
        self.subsystem.get_or_insert(subsystem);
        self
    }

    /// Whether the kernel refused a batch message doing one of `steps`.
    pub fn refused_in(&self, steps: &[Step]) -> bool {
        self.refused.is_some_and(|step| steps.contains(&step))
    }

    fn io(request: &str, e: std::io::Error) -> Self {
        NlError::new(request, e.raw_os_error().unwrap_or(libc::EIO))
    }

    fn malformed(request: &str, reason: String) -> Self {
        NlError {
            reason: Some(reason),
            ..NlError::new(request, libc::EBADMSG)
        }
    }

    pub fn is(&self, errno: i32) -> bool {
        self.errno == errno
    }
}

impl fmt::Display for NlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = std::io::Error::from_raw_os_error(self.errno);
        write!(f, "{}: {text}", self.request)?;
        if let Some(reason) = &self.reason {
            write!(f, " ({reason})")?;
        }
        Ok(())
    }
}

impl std::error::Error for NlError {}

pub type NlResult<T> = Result<T, NlError>;

/// What ends the replies to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Await {
    /// A change: an ACK (or an error).
    Ack,
    /// A single object: the object (or an error).
    One,
    /// Many objects: NLMSG_DONE (or an error).
    Dump,
}

/// The fixed header of one received message.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub kind: u16,
    pub flags: u16,
    pub sequence: u32,
}

pub struct NlSocket {
    socket: Socket,
    subsystem: Subsystem,
    sequence: u32,
    buffer: Vec<u8>,
    /// Whether a datagram was received on it yet (see `has_received`).
    received: bool,
    /// NETLINK_GET_STRICT_CHK and NETLINK_CAP_ACK (see `options_for`).
    strict: OnDemand,
    capped: OnDemand,
}

/// A socket option set on demand (`NlSocket::options_for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnDemand {
    /// Not for this socket.
    Unwanted,
    /// For this socket, once a request needs it.
    Wanted,
    Set,
}

/// The largest request sent without capped error echoes: its echo, with the error's
/// header and the kernel's extended-ack attributes (a few hundred bytes at most), then
/// fits the receive buffer with room to spare.
const UNCAPPED_REQUEST: usize = RECV_BUFFER / 2;

/// An rtnetlink dump request, as rtnetlink_rcv_msg tells one: a GET (the third of
/// each family's four message types) with either dump flag.
fn is_dump(h: Header) -> bool {
    h.kind >= RTM_BASE && h.kind & 3 == 2 && h.flags & NLM_F_DUMP != 0
}

/// The headers of the messages in `bytes` (one request, or a batch), as far as they parse.
fn messages(bytes: &[u8]) -> impl Iterator<Item = Header> + '_ {
    let mut offset = 0;
    std::iter::from_fn(move || {
        let rest = bytes.get(offset..)?;
        if rest.len() < HEADER_LEN {
            return None;
        }
        let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
        if len < HEADER_LEN {
            return None;
        }
        offset += (len + 3) & !3;
        Some(Header {
            kind: u16::from_ne_bytes([rest[4], rest[5]]),
            flags: u16::from_ne_bytes([rest[6], rest[7]]),
            sequence: u32::from_ne_bytes(rest[8..12].try_into().unwrap()),
        })
    })
}

impl NlSocket {
    /// Opens a socket to `subsystem` in the calling thread's network namespace.
    pub fn open(subsystem: Subsystem) -> NlResult<NlSocket> {
        // Strict checking (dumps filtered by the kernel) is rtnetlink's alone: nfnetlink
        // never reads it, so a netfilter socket is spared the syscall (one per ADD).
        Self::open_with(subsystem, subsystem == Subsystem::Rtnetlink)
    }

    /// As `open`, without NETLINK_GET_STRICT_CHK (one setsockopt fewer): the kernel then
    /// ignores a dump's filters and sends every object, so only for a socket whose
    /// dumps are few and small and whose replies are matched again.
    pub fn open_unfiltered(subsystem: Subsystem) -> NlResult<NlSocket> {
        Self::open_with(subsystem, false)
    }

    fn open_with(subsystem: Subsystem, strict: bool) -> NlResult<NlSocket> {
        let name = subsystem.name();
        let failed =
            |step: &str, e| NlError::io(&format!("{step} {name} socket"), e).within(subsystem);
        let socket = Socket::new(subsystem.protocol()).map_err(|e| failed("open", e))?;
        // Connected to the kernel: no other process's message reaches it. connect binds
        // an unbound netlink socket to a free port itself, so no bind and getsockname
        // (2 syscalls a socket, 3 sockets an ADD); nothing here needs its port number.
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| failed("connect", e))?;
        // Best-effort: the kernel's reason for a refusal, in the error it sends back.
        let _ = socket.set_ext_ack(true);
        Ok(NlSocket {
            socket,
            subsystem,
            sequence: 0,
            buffer: Vec::with_capacity(RECV_BUFFER),
            received: false,
            strict: if strict {
                OnDemand::Wanted
            } else {
                OnDemand::Unwanted
            },
            capped: OnDemand::Wanted,
        })
    }

    /// The socket options a request needs, set before the first that does (a
    /// setsockopt each, and most sockets never need either; best-effort, as they only
    /// make errors and dumps smaller): strict checking before the first dump, which it
    /// makes the kernel filter (a GET of one object or a change is answered the same
    /// with or without it), and capped error echoes before a request whose echo could
    /// outgrow the receive buffer. Uncapped, a refusal echoes the refused message whole
    /// (an ack never does); every rtnetlink request and nf_tables lookup is a few hundred
    /// bytes, far below RECV_BUFFER, and only a large nf_tables batch comes near it.
    fn options_for(&mut self, bytes: &[u8]) {
        if self.strict == OnDemand::Wanted && messages(bytes).any(is_dump) {
            let _ = self.socket.set_netlink_get_strict_chk(true);
            self.strict = OnDemand::Set;
        }
        if self.capped == OnDemand::Wanted && bytes.len() > UNCAPPED_REQUEST {
            let _ = self.socket.set_cap_ack(true);
            self.capped = OnDemand::Set;
        }
    }

    /// The kernel sizes a dump's messages by the largest buffer a receive on the socket
    /// has filled (at most 32 KiB); before the first, one page. nf_tables ends a dump
    /// early, silently, at an object that does not fit an empty message (a masquerade
    /// rule with many excluded prefixes): a dump should not be a socket's first receive.
    pub fn has_received(&self) -> bool {
        self.received
    }

    pub fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// One sendmsg of `bytes`: a request, or a whole batch.
    pub fn send(&mut self, bytes: &[u8], what: &str) -> NlResult<()> {
        self.options_for(bytes);
        self.socket
            .send(bytes, 0)
            .map(drop)
            .map_err(|e| NlError::io(what, e).within(self.subsystem))
    }

    /// Reads the replies to request `sequence` until `awaiting` ends them, handing each
    /// data message (header included) to `on_data`.
    pub fn receive(
        &mut self,
        sequence: u32,
        awaiting: Await,
        what: &str,
        mut on_data: impl FnMut(&[u8]) -> NlResult<()>,
    ) -> NlResult<()> {
        let subsystem = self.subsystem;
        self.read(what, |header, message| {
            if header.sequence != sequence {
                return Ok(false);
            }
            match header.kind {
                NLMSG_ERROR => error_of(header, message, what).map(|()| true),
                NLMSG_DONE => Ok(true),
                _ => on_data(message).map(|()| awaiting == Await::One),
            }
        })
        .map_err(|e| e.within(subsystem))
    }

    /// Waits for the ack of every message of a batch (`sequences`, each sent with
    /// NLM_F_ACK). The first refusal is returned, named and tagged by
    /// `describe(sequence)`.
    pub fn receive_acks(
        &mut self,
        sequences: Range<u32>,
        describe: impl Fn(u32) -> (String, Option<Step>),
    ) -> NlResult<()> {
        let subsystem = self.subsystem;
        let mut pending = sequences.len();
        let mut first_error = None;
        let result = self.read("read the batch's acks", |header, message| {
            if !sequences.contains(&header.sequence) || header.kind != NLMSG_ERROR {
                return Ok(false);
            }
            pending -= 1;
            let (what, step) = describe(header.sequence);
            if let Err(e) = error_of(header, message, &what) {
                // The kernel rejects the whole batch; it may not answer the rest.
                first_error.get_or_insert(NlError { refused: step, ..e });
                return Ok(true);
            }
            Ok(pending == 0)
        });
        match first_error {
            Some(e) => Err(e),
            None => result,
        }
        .map_err(|e| e.within(subsystem))
    }

    /// Waits for the ack of every request of `sequences`, sent together but each on its
    /// own (not a batch: the kernel answers every one, whatever the others' fate), and
    /// hands each answer to `on_ack`. A change's only answer is its ack, so this is
    /// `receive_each_one` with no object to hand on.
    pub fn receive_each_ack(
        &mut self,
        sequences: Range<u32>,
        what: &str,
        mut on_ack: impl FnMut(u32, NlResult<()>),
    ) -> NlResult<()> {
        self.receive_each_one(sequences, what, |sequence, answer| {
            on_ack(sequence, answer.map(drop))
        })
    }

    /// Reads the answers to GET requests of one object each, `sequences`, sent together
    /// but each on its own (the kernel answers every one in turn): each request's object
    /// (its data message, header included), or its refusal, handed to `on_answer`.
    pub fn receive_each_one(
        &mut self,
        sequences: Range<u32>,
        what: &str,
        mut on_answer: impl FnMut(u32, NlResult<Option<&[u8]>>),
    ) -> NlResult<()> {
        let subsystem = self.subsystem;
        let mut pending = sequences.len();
        if pending == 0 {
            return Ok(());
        }
        self.read(what, |header, message| {
            if !sequences.contains(&header.sequence) || header.kind == NLMSG_DONE {
                return Ok(false);
            }
            let answer = match header.kind {
                NLMSG_ERROR => error_of(header, message, what)
                    .map_err(|e| e.within(subsystem))
                    .map(|()| None),
                _ => Ok(Some(message)),
            };
            on_answer(header.sequence, answer);
            pending -= 1;
            Ok(pending == 0)
        })
        .map_err(|e| e.within(subsystem))
    }

    /// Reads datagrams and hands each message to `handle` until it says it is done.
    fn read(
        &mut self,
        what: &str,
        mut handle: impl FnMut(Header, &[u8]) -> NlResult<bool>,
    ) -> NlResult<()> {
        loop {
            self.buffer.clear();
            let len = self
                .socket
                .recv(&mut self.buffer, libc::MSG_TRUNC)
                .map_err(|e| NlError::io(what, e))?;
            self.received = true;
            if len > self.buffer.len() {
                return Err(NlError {
                    reason: Some(format!("reply of {len} bytes truncated")),
                    ..NlError::new(what, libc::EMSGSIZE)
                });
            }
            let mut offset = 0;
            while offset + HEADER_LEN <= self.buffer.len() {
                let rest = &self.buffer[offset..];
                let msg_len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
                if msg_len < HEADER_LEN || msg_len > rest.len() {
                    return Err(NlError::malformed(what, "malformed reply".into()));
                }
                offset += (msg_len + 3) & !3;
                let header = Header {
                    kind: u16::from_ne_bytes([rest[4], rest[5]]),
                    flags: u16::from_ne_bytes([rest[6], rest[7]]),
                    sequence: u32::from_ne_bytes(rest[8..12].try_into().unwrap()),
                };
                if handle(header, &rest[..msg_len])? {
                    return Ok(());
                }
            }
        }
    }
}

/// An NLMSG_ERROR message: Ok for an ack, else the errno and the kernel's reason.
fn error_of(header: Header, message: &[u8], what: &str) -> NlResult<()> {
    let payload = &message[HEADER_LEN..];
    let Some(code) = payload.get(0..4) else {
        return Err(NlError::malformed(what, "short error message".into()));
    };
    let code = i32::from_ne_bytes(code.try_into().unwrap());
    if code == 0 {
        return Ok(());
    }
    let mut err = NlError::new(what, -code);
    if header.flags & NLM_F_ACK_TLVS != 0 {
        err.reason = ext_ack_message(&payload[4..], header.flags & NLM_F_CAPPED != 0);
    }
    Err(err)
}

/// The kernel's human-readable reason (NLMSGERR_ATTR_MSG): the TLVs that follow the
/// echoed request (its header alone when capped, else the whole request).
fn ext_ack_message(echoed: &[u8], capped: bool) -> Option<String> {
    const NLMSGERR_ATTR_MSG: u16 = 1;
    let skip = if capped {
        HEADER_LEN
    } else {
        u32::from_ne_bytes(echoed.get(0..4)?.try_into().ok()?) as usize
    };
    let mut rest = echoed.get((skip + 3) & !3..)?;
    while rest.len() >= 4 {
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]);
        if len < 4 || len > rest.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &rest[4..len];
            let text = text.split(|b| *b == 0).next().unwrap_or(text);
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        rest = &rest[((len + 3) & !3).min(rest.len())..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason_tlv(text: &[u8]) -> Vec<u8> {
        let mut tlv = Vec::new();
        tlv.extend_from_slice(&((4 + text.len()) as u16).to_ne_bytes());
        tlv.extend_from_slice(&1u16.to_ne_bytes());
        tlv.extend_from_slice(text);
        tlv
    }

    fn header(len: u32, kind: u16, flags: u16) -> Vec<u8> {
        let mut h = len.to_ne_bytes().to_vec();
        h.extend_from_slice(&kind.to_ne_bytes());
        h.extend_from_slice(&flags.to_ne_bytes());
        h.extend_from_slice(&[0; 8]);
        h.resize(len as usize, 0);
        h
    }

    #[test]
    fn strict_checking_is_for_rtnetlink_dumps_only() {
        const RTM_NEWADDR: u16 = 20;
        const RTM_GETADDR: u16 = 22;
        const RTM_GETLINK: u16 = 18;
        // NLM_F_EXCL | NLM_F_CREATE share the dump flags' bits in a change.
        let change = header(20, RTM_NEWADDR, 0x1 | 0x4 | 0x200 | 0x400);
        let get_one = header(20, RTM_GETLINK, 0x1);
        let dump = header(20, RTM_GETADDR, 0x1 | 0x300);
        let not_dumps = [change.clone(), get_one.clone()].concat();
        assert!(!messages(&not_dumps).any(is_dump));
        assert_eq!(messages(&not_dumps).count(), 2);
        assert!(messages(&[change, dump].concat()).any(is_dump));
        // A header that says it is shorter than a header ends the walk.
        assert_eq!(messages(&header(16, RTM_GETLINK, 0x1)[..12]).count(), 0);
    }

    #[test]
    fn ext_ack_reason_is_read_after_the_echoed_header() {
        let mut echoed = vec![0u8; 16];
        echoed.extend(reason_tlv(b"Address already assigned\0"));
        assert_eq!(
            ext_ack_message(&echoed, true).as_deref(),
            Some("Address already assigned")
        );
        assert_eq!(ext_ack_message(&echoed[..10], true), None);
    }

    #[test]
    fn ext_ack_reason_skips_an_uncapped_request() {
        // An echoed request of 24 bytes: its header says so in its first four bytes.
        let mut echoed = vec![0u8; 24];
        echoed[0..4].copy_from_slice(&24u32.to_ne_bytes());
        echoed.extend(reason_tlv(b"No such file\0"));
        assert_eq!(
            ext_ack_message(&echoed, false).as_deref(),
            Some("No such file")
        );
    }
}
