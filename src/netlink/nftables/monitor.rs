//! nf_tables' change notifications: a NETLINK_NETFILTER socket subscribed to the
//! multicast group NFNLGRP_NFTABLES, on which the kernel announces every committed
//! transaction of the netns (any program's: nft, iptables-nft, firewalld, academy) as
//! its change messages (NFT_MSG_NEWTABLE ... NFT_MSG_DELSETELEM, the object each made or
//! deleted) followed by one NFT_MSG_NEWGEN that closes it with the new generation id
//! and the pid and name of the process that committed it. `academy watch` reads them.
//!
//! What it hands on is one [`Notice`] per transaction, or [`Notice::Lost`] when the
//! kernel dropped notifications because the socket's buffer was full (ENOBUFS, after a
//! change to a huge ruleset): then something changed, but what is unknown.

use std::os::fd::{AsFd, BorrowedFd};

use netlink_sys::protocols::NETLINK_NETFILTER;
use netlink_sys::Socket;

use super::consts::NFNL_SUBSYS_NFTABLES;
use super::consts::{
    NFNLGRP_NFTABLES, NFTA_GEN_ID, NFTA_GEN_PROC_NAME, NFTA_GEN_PROC_PID, NFT_MSG_NEWGEN,
};
use crate::netlink::attributes::attributes;
use crate::netlink::nfnetlink::HEADERS_LEN;
use crate::netlink::socket::{NlError, NlResult, Subsystem};

/// Bytes asked for the socket's receive buffer (the kernel doubles it): a flush of a
/// ruleset of tens of thousands of rules fits; a larger one overflows into
/// [`Notice::Lost`], which costs nothing but a restore pass.
const RECEIVE_BUFFER: usize = 8 << 20;
/// One datagram: the kernel packs a transaction's notifications into datagrams of at
/// most a page or two; a larger one is read as lost notifications, never cut silently.
const DATAGRAM: usize = 64 * 1024;
const HEADER_LEN: usize = 16;
/// Datagrams read per [`Monitor::receive`]: 256 MiB at most, far more than the buffer.
const MAX_DATAGRAMS: usize = 4096;

/// One committed nf_tables transaction, as its notifications tell it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Commit {
    /// The ruleset's generation after it.
    pub generation: u32,
    /// The process that committed it: its pid (in the kernel's initial pid namespace)
    /// and its name (comm, at most 15 bytes).
    pub pid: u32,
    pub process: String,
    /// How many objects it made, changed or deleted (its messages before NEWGEN).
    pub changes: usize,
}

/// What the socket had to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    Commit(Commit),
    /// Notifications were dropped (the receive buffer overflowed): some change, unknown.
    Lost,
}

/// A socket subscribed to nf_tables' notifications in the calling thread's netns.
pub struct Monitor {
    socket: Socket,
    buffer: Vec<u8>,
    /// Change messages seen since the last NEWGEN.
    pending: usize,
}

impl Monitor {
    /// Opens and subscribes the socket: non-blocking (the caller polls its fd), with a
    /// large receive buffer.
    pub fn open() -> NlResult<Monitor> {
        let failed = |step: &str, e: std::io::Error| {
            NlError::new(
                format!("{step} the nf_tables notification socket"),
                e.raw_os_error().unwrap_or(libc::EIO),
            )
            .within(Subsystem::NfTables)
        };
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| failed("open", e))?;
        socket.bind_auto().map_err(|e| failed("bind", e))?;
        socket
            .add_membership(NFNLGRP_NFTABLES)
            .map_err(|e| failed("subscribe", e))?;
        socket
            .set_non_blocking(true)
            .map_err(|e| failed("configure", e))?;
        // Beyond net.core.rmem_max when allowed (CAP_NET_ADMIN, which a watch has), else
        // what rmem_max allows: either way a larger buffer only delays an overflow.
        if force_receive_buffer(&socket, RECEIVE_BUFFER).is_err() {
            let _ = socket.set_rx_buf_sz(RECEIVE_BUFFER);
        }
        Ok(Monitor {
            socket,
            buffer: Vec::with_capacity(DATAGRAM),
            pending: 0,
        })
    }

    /// The notices queued now (none when nothing is), at most MAX_DATAGRAMS datagrams'
    /// worth (the rest at the next call, so that a stream of changes cannot keep the
    /// caller here); never blocks.
    pub fn receive(&mut self) -> NlResult<Vec<Notice>> {
        let mut notices = Vec::new();
        for _ in 0..MAX_DATAGRAMS {
            self.buffer.clear();
            match self.socket.recv(&mut self.buffer, libc::MSG_TRUNC) {
                Ok(len) if len > self.buffer.len() => {
                    // Part of a transaction unread: as good as lost.
                    self.pending = 0;
                    notices.push(Notice::Lost);
                }
                Ok(_) => self.pending = decode(&self.buffer, self.pending, &mut notices),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(notices),
                    Some(libc::EINTR) => {}
                    Some(libc::ENOBUFS) => {
                        // The messages before the overflow are still queued; a
                        // transaction cut by it is not worth finishing.
                        self.pending = 0;
                        notices.push(Notice::Lost);
                    }
                    errno => {
                        return Err(NlError::new(
                            "read nf_tables notifications",
                            errno.unwrap_or(libc::EIO),
                        )
                        .within(Subsystem::NfTables))
                    }
                },
            }
        }
        Ok(notices)
    }

    /// The size the kernel gives the receive buffer (doubled from what was asked).
    pub fn receive_buffer(&self) -> usize {
        self.socket.get_rx_buf_sz().unwrap_or(0)
    }
}

impl AsFd for Monitor {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// SO_RCVBUFFORCE, which netlink-sys does not wrap.
fn force_receive_buffer(socket: &Socket, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `value` is a live c_int for the duration of the call and its size is the
    // length passed; the kernel only reads it. The fd is the socket's own, open.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The notices of one datagram. `pending` is the number of change messages of the
/// transaction still open before it; returns the number open after it.
fn decode(datagram: &[u8], mut pending: usize, notices: &mut Vec<Notice>) -> usize {
    let mut offset = 0;
    while offset + HEADER_LEN <= datagram.len() {
        let rest = &datagram[offset..];
        let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
        if len < HEADER_LEN || len > rest.len() {
            // Malformed: what it held is unknown.
            notices.push(Notice::Lost);
            return 0;
        }
        offset += (len + 3) & !3;
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        if kind >> 8 != NFNL_SUBSYS_NFTABLES {
            continue; // netlink's own (NLMSG_NOOP, _ERROR, _DONE): none is a change
        }
        if (kind & 0xff) as u8 != NFT_MSG_NEWGEN {
            pending += 1;
            continue;
        }
        let mut commit = Commit {
            changes: pending,
            ..Commit::default()
        };
        for (attr, value) in attributes(rest[..len].get(HEADERS_LEN..).unwrap_or(&[])) {
            match attr {
                NFTA_GEN_ID => commit.generation = be32(value),
                NFTA_GEN_PROC_PID => commit.pid = be32(value),
                NFTA_GEN_PROC_NAME => {
                    let name = value.split(|b| *b == 0).next().unwrap_or(value);
                    commit.process = String::from_utf8_lossy(name).into_owned();
                }
                _ => {}
            }
        }
        notices.push(Notice::Commit(commit));
        pending = 0;
    }
    pending
}

fn be32(value: &[u8]) -> u32 {
    value
        .get(0..4)
        .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nfnetlink::{encode, Attrs};
    use crate::netlink::nftables::batch::nftables_type;

    const DELRULE: u8 = 8;
    const DELTABLE: u8 = 2;

    fn message(out: &mut Vec<u8>, kind: u8, attrs: Attrs) {
        encode(out, nftables_type(kind), 0, 0, 1, 0, attrs.0);
    }

    fn newgen(out: &mut Vec<u8>, generation: u32, pid: u32, name: &str) {
        let mut a = Attrs::default();
        a.be32(NFTA_GEN_ID, generation);
        a.be32(NFTA_GEN_PROC_PID, pid);
        a.str(NFTA_GEN_PROC_NAME, name);
        message(out, NFT_MSG_NEWGEN, a);
    }

    #[test]
    fn a_transaction_is_its_changes_closed_by_newgen() {
        let mut first = Vec::new();
        message(&mut first, DELRULE, Attrs::default());
        message(&mut first, DELRULE, Attrs::default());
        let mut notices = Vec::new();
        // A transaction spread over two datagrams.
        let open = decode(&first, 0, &mut notices);
        assert_eq!((open, notices.len()), (2, 0));
        let mut second = Vec::new();
        message(&mut second, DELTABLE, Attrs::default());
        newgen(&mut second, 41, 1234, "nft");
        newgen(&mut second, 42, 99, "academy");
        let open = decode(&second, open, &mut notices);
        assert_eq!(open, 0);
        assert_eq!(
            notices,
            vec![
                Notice::Commit(Commit {
                    generation: 41,
                    pid: 1234,
                    process: "nft".into(),
                    changes: 3
                }),
                Notice::Commit(Commit {
                    generation: 42,
                    pid: 99,
                    process: "academy".into(),
                    changes: 0
                }),
            ]
        );
    }

    #[test]
    fn a_malformed_datagram_reads_as_lost_notifications() {
        let mut bytes = Vec::new();
        message(&mut bytes, DELRULE, Attrs::default());
        bytes[0] = 200; // longer than the datagram
        let mut notices = Vec::new();
        assert_eq!(decode(&bytes, 5, &mut notices), 0);
        assert_eq!(notices, vec![Notice::Lost]);
    }
}
