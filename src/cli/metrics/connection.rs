//! One connection of the metrics listener, moved on by its poll loop (listener.rs)
//! whenever its socket is ready and never blocking: the request head read as it comes,
//! the answer written as fast as the client takes it, then what the client still sends
//! dropped until it closes. Each stage has a deadline fixed when it starts, so a client
//! trickling bytes holds the connection no longer than a silent one.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::PollFlags;

use super::http::{head_end, response_head, route, Request, MAX_HEAD, TEXT};

/// From accept to the end of the head, for writing the answer, and for draining.
pub const STAGE_TIME: Duration = Duration::from_secs(2);
/// What is read and dropped after the answer before closing anyway.
const DRAIN_MAX: usize = 64 * 1024;

pub enum Stage {
    /// The head as read so far.
    Reading(Vec<u8>),
    /// A complete `GET /metrics`, waiting for the page the listener computes once for
    /// every connection that asked in the same round.
    Asked,
    /// The answer's head and body (a page shared by the round's requests), and how many
    /// of their bytes the socket took.
    Writing {
        head: Vec<u8>,
        body: Arc<[u8]>,
        sent: usize,
    },
    /// Answered and our side shut: bytes dropped since. Closing with unread bytes makes
    /// the kernel reset the connection, and the client would lose the answer (a 431
    /// above all), so what it still sends is read first.
    Draining(usize),
    Closed,
}

pub struct Connection {
    stream: TcpStream,
    /// Its peer's address, which bounds how many connections it may hold.
    pub client: IpAddr,
    pub accepted: Instant,
    /// When the current stage ends, whatever the client does.
    deadline: Instant,
    pub stage: Stage,
}

impl Connection {
    /// A connection just accepted (non-blocking), whose head is read as far as it came.
    pub fn accepted(stream: TcpStream, client: IpAddr, now: Instant) -> Connection {
        let mut c = Connection {
            stream,
            client,
            accepted: now,
            deadline: now + STAGE_TIME,
            stage: Stage::Reading(Vec::new()),
        };
        c.progress(now);
        c
    }

    /// What its socket is polled for.
    pub fn interest(&self) -> PollFlags {
        match self.stage {
            Stage::Reading(_) | Stage::Draining(_) => PollFlags::POLLIN,
            Stage::Writing { .. } => PollFlags::POLLOUT,
            Stage::Asked | Stage::Closed => PollFlags::empty(),
        }
    }

    pub fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.stream.as_fd()
    }

    /// When it must be looked at even if its socket stays quiet.
    pub fn deadline(&self) -> Option<Instant> {
        match self.stage {
            Stage::Reading(_) | Stage::Writing { .. } | Stage::Draining(_) => Some(self.deadline),
            Stage::Asked | Stage::Closed => None,
        }
    }

    /// Reads or writes what the socket allows now.
    pub fn progress(&mut self, now: Instant) {
        match self.stage {
            Stage::Reading(_) => self.read_head(now),
            Stage::Writing { .. } => self.write_answer(now),
            Stage::Draining(_) => self.drain(),
            Stage::Asked | Stage::Closed => {}
        }
    }

    /// A stage past its deadline: a head not complete is answered 408, an answer not
    /// taken or a drain not finished is given up.
    pub fn expire(&mut self, now: Instant) {
        if now < self.deadline {
            return;
        }
        match self.stage {
            Stage::Reading(_) => {
                let body = format!("request not complete within {} s\n", STAGE_TIME.as_secs());
                self.answer("408 Request Timeout", TEXT, body.into_bytes().into(), now);
            }
            Stage::Writing { .. } | Stage::Draining(_) => self.stage = Stage::Closed,
            Stage::Asked | Stage::Closed => {}
        }
    }

    /// Starts writing the answer, and writes what the socket takes at once.
    pub fn answer(&mut self, status: &str, content_type: &str, body: Arc<[u8]>, now: Instant) {
        self.stage = Stage::Writing {
            head: response_head(status, content_type, body.len()),
            body,
            sent: 0,
        };
        self.deadline = now + STAGE_TIME;
        self.write_answer(now);
    }

    /// Closes it to make room for another: one that has not asked yet is told why
    /// (a best try: its socket takes these few bytes or it does not).
    pub fn evict(mut self) {
        match self.stage {
            Stage::Reading(_) => {
                let head = response_head("503 Service Unavailable", TEXT, BUSY.len());
                let _ = self.stream.write(&[head.as_slice(), BUSY].concat());
            }
            Stage::Asked | Stage::Writing { .. } | Stage::Draining(_) | Stage::Closed => {}
        }
    }

    fn read_head(&mut self, now: Instant) {
        let Stage::Reading(bytes) = &mut self.stage else {
            return;
        };
        let mut chunk = [0u8; 2048];
        let outcome = loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => break Head::Closed,
                Ok(n) => {
                    // Only the new bytes and the 3 before can end the head: a client
                    // sending a byte per packet costs no rescans.
                    let from = bytes.len().saturating_sub(3);
                    bytes.extend_from_slice(&chunk[..n]);
                    if let Some(end) = head_end(&bytes[from..]) {
                        break Head::Complete(route(&bytes[..from + end]));
                    }
                    if bytes.len() > MAX_HEAD {
                        break Head::TooLarge;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => break Head::Closed,
            }
        };
        match outcome {
            Head::Complete(Request::Metrics) => self.stage = Stage::Asked,
            Head::Complete(Request::Refused(status, body)) => {
                self.answer(status, TEXT, body.as_bytes().into(), now)
            }
            Head::TooLarge => {
                let body = format!("request head over {} KiB\n", MAX_HEAD / 1024);
                self.answer(
                    "431 Request Header Fields Too Large",
                    TEXT,
                    body.into_bytes().into(),
                    now,
                )
            }
            Head::Closed => self.stage = Stage::Closed,
        }
    }

    fn write_answer(&mut self, now: Instant) {
        let Connection { stream, stage, .. } = self;
        let Stage::Writing { head, body, sent } = stage else {
            return;
        };
        loop {
            let rest = match head.get(*sent..) {
                Some(h) if !h.is_empty() => h,
                _ => &body[*sent - head.len()..],
            };
            if rest.is_empty() {
                break;
            }
            // TcpStream's write is send(2) with MSG_NOSIGNAL: a client gone is an
            // error here, never a SIGPIPE.
            match stream.write(rest) {
                Ok(0) => return self.stage = Stage::Closed,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => return self.stage = Stage::Closed,
            }
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        self.stage = Stage::Draining(0);
        self.deadline = now + STAGE_TIME;
        self.drain();
    }

    fn drain(&mut self) {
        let Stage::Draining(dropped) = &mut self.stage else {
            return;
        };
        let mut chunk = [0u8; 2048];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(n) if n > 0 && *dropped + n <= DRAIN_MAX => *dropped += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // The client closed, failed, or sends more than an answer's worth.
                Ok(_) | Err(_) => return self.stage = Stage::Closed,
            }
        }
    }
}

enum Head {
    Complete(Request),
    TooLarge,
    Closed,
}

const BUSY: &[u8] = b"too many connections waiting: this one was the oldest idle\n";
