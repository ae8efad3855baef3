//! The metrics listener: one thread, one poll(2) over the listening socket and every
//! open connection (connection.rs), so a client that connects and sends nothing, or
//! trickles its head, holds a table slot and no thread.
//!
//! No client can keep a scrape out: the table holds at most MAX_CONNECTIONS, at most
//! PER_CLIENT of one address, and a connection arriving at either bound takes the slot
//! of the oldest one that has not asked for anything yet (then of one answered and only
//! draining, then of one being answered; at the table's bound, of the address holding
//! the most), after a last read of it so a request that has come meanwhile is served,
//! not cut. A client reopening what is closed only takes its own slots in turn, and
//! once a round has had to make room, the next accepts wait ACCEPT_PACE: a scraper from
//! the same address (behind the same NAT) then waits in the kernel's queue, where its
//! request comes while it waits, and is accepted already asking, out of reach; one
//! accepted before its request came is among the newest and keeps its slot at least
//! that long. Without the pause, a hog's reconnections came in back to back rounds and
//! went through its 32 slots in under a millisecond, before Prometheus' request came.
//! Descriptors and threads stay
//! bounded whatever arrives; memory too: a head is at most MAX_HEAD, and the page is
//! computed once per round for every request complete by then and shared by them.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::connection::{Connection, Stage};
use super::exposition::CONTENT_TYPE;

/// Connections open at once, in any stage.
pub const MAX_CONNECTIONS: usize = 64;
/// Connections of one client address at once; Prometheus makes one per scrape. Half
/// the table: a scraper behind the same address as a hog reopening its connections
/// keeps its own until the hog has opened this many more, time enough for its request
/// (sent as it connects) to come.
pub const PER_CLIENT: usize = MAX_CONNECTIONS / 2;
/// Accepted per round at most. The kernel's accept queue (128) is emptied at each round:
/// a client holding hundreds of connections, reopening each one closed, would otherwise
/// keep it full, and the kernel would drop a scraper's SYN (its retry comes a second
/// later, past Prometheus' timeout) before the listener ever saw it. The bound only keeps
/// a flood faster than accepts from starving the connections already open.
const ACCEPTS_PER_ROUND: usize = 1024;
/// The pause before the next accepts after a round that had to make room: the time a
/// connection is sure to keep its slot to send its request, and the most a scrape waits
/// beside a hog.
const ACCEPT_PACE: Duration = Duration::from_millis(50);

/// The listener, for ever (the thread ends with the process).
pub fn serve(listener: TcpListener, page: Arc<dyn Fn() -> String + Send + Sync>) {
    // fcntl on a socket we own cannot fail; if it did, accept would only block between
    // rounds.
    let _ = listener.set_nonblocking(true);
    let mut table = Table::default();
    let mut paused_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        for c in &mut table.open {
            c.expire(now);
        }
        table.sweep();
        let paused_until_now = paused_until.filter(|&at| at > now);
        let (acceptable, ready) = match table.wait(&listener, paused_until_now, now) {
            Ok(ready) => ready,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let now = Instant::now();
        for (c, ready) in table.open.iter_mut().zip(ready) {
            if ready {
                c.progress(now);
            }
        }
        if acceptable {
            let crowded = table.accept(&listener, now);
            paused_until = crowded.then(|| now + ACCEPT_PACE);
        }
        table.answer_asked(&*page, Instant::now());
        table.sweep();
    }
}

#[derive(Default)]
struct Table {
    open: Vec<Connection>,
}

impl Table {
    /// Sleeps in poll until the listener (unless accepts are paused) or a connection is
    /// ready, or a deadline or the pause's end comes; which of them are ready (the
    /// connections in table order).
    fn wait(
        &self,
        listener: &TcpListener,
        paused_until: Option<Instant>,
        now: Instant,
    ) -> Result<(bool, Vec<bool>), nix::errno::Errno> {
        let mut fds = Vec::with_capacity(self.open.len() + 1);
        let listen_for = match paused_until {
            Some(_) => PollFlags::empty(),
            None => PollFlags::POLLIN,
        };
        fds.push(PollFd::new(listener.as_fd(), listen_for));
        fds.extend(
            self.open
                .iter()
                .map(|c| PollFd::new(c.socket(), c.interest())),
        );
        let wake = self
            .open
            .iter()
            .filter_map(Connection::deadline)
            .chain(paused_until)
            .min();
        let timeout = match wake {
            None => PollTimeout::NONE,
            // Rounded up: waking a little early would only poll again at once.
            Some(at) => {
                PollTimeout::try_from(at.saturating_duration_since(now) + Duration::from_millis(1))
                    .unwrap_or(PollTimeout::MAX)
            }
        };
        nix::poll::poll(&mut fds, timeout)?;
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        Ok((ready(&fds[0]), fds[1..].iter().map(ready).collect()))
    }

    /// Accepts what the kernel has queued; whether room had to be made for any of it.
    fn accept(&mut self, listener: &TcpListener, now: Instant) -> bool {
        let mut crowded = false;
        for _ in 0..ACCEPTS_PER_ROUND {
            match listener.accept() {
                Ok((stream, peer)) => crowded |= self.admit(stream, peer.ip().to_canonical(), now),
                Err(e) => match e.kind() {
                    std::io::ErrorKind::WouldBlock => break,
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::ConnectionAborted => {}
                    // EMFILE and the like: a short pause instead of a busy loop.
                    _ => {
                        std::thread::sleep(Duration::from_millis(50));
                        break;
                    }
                },
            }
        }
        crowded
    }

    /// Takes a new connection in, making room for it when its client or the table is
    /// at its bound; refused (503) only when every connection in its way has asked and
    /// waits for this round's page. Whether room had to be made.
    fn admit(&mut self, stream: TcpStream, client: IpAddr, now: Instant) -> bool {
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let new = Connection::accepted(stream, client, now);
        if matches!(new.stage, Stage::Closed) {
            return false;
        }
        let mut made_room = false;
        loop {
            let crowded = self.open.iter().filter(|c| c.client == client).count() >= PER_CLIENT;
            if !crowded && self.open.len() < MAX_CONNECTIONS {
                self.open.push(new);
                return made_room;
            }
            made_room = true;
            let Some(i) = self.victim(crowded.then_some(client)) else {
                new.evict();
                return true;
            };
            // A last read: a head that has come since is served, and a client that
            // has gone frees its slot without an eviction.
            self.open[i].progress(now);
            match self.open[i].stage {
                Stage::Reading(_) | Stage::Writing { .. } | Stage::Draining(_) => {
                    self.open.swap_remove(i).evict()
                }
                Stage::Closed => drop(self.open.swap_remove(i)),
                Stage::Asked => {}
            }
        }
    }

    /// The connection to close for a newcomer, among `client`'s (or all): the oldest
    /// that has not asked yet, else the oldest draining, else the oldest being written;
    /// among all, of the address holding the most first, so a scraper holding one
    /// connection keeps it while a hog holds more.
    fn victim(&self, client: Option<IpAddr>) -> Option<usize> {
        let mut held: BTreeMap<IpAddr, usize> = BTreeMap::new();
        for c in &self.open {
            *held.entry(c.client).or_default() += 1;
        }
        self.open
            .iter()
            .enumerate()
            .filter(|(_, c)| client.is_none_or(|a| c.client == a))
            .filter_map(|(i, c)| {
                let rank = match c.stage {
                    Stage::Closed => 0,
                    Stage::Reading(_) => 1,
                    Stage::Draining(_) => 2,
                    Stage::Writing { .. } => 3,
                    Stage::Asked => return None,
                };
                Some(((rank, Reverse(held[&c.client]), c.accepted), i))
            })
            .min()
            .map(|(_, i)| i)
    }

    /// One page, computed now (after every head it answers was read, so none is
    /// stale), for every connection that asked.
    fn answer_asked(&mut self, page: &(dyn Fn() -> String + Send + Sync), now: Instant) {
        let mut asked = self
            .open
            .iter_mut()
            .filter(|c| matches!(c.stage, Stage::Asked))
            .peekable();
        if asked.peek().is_none() {
            return;
        }
        let body: Arc<[u8]> = page().into_bytes().into();
        for c in asked {
            c.answer("200 OK", CONTENT_TYPE, Arc::clone(&body), now);
        }
    }

    fn sweep(&mut self) {
        self.open.retain(|c| !matches!(c.stage, Stage::Closed));
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::super::connection::STAGE_TIME;
    use super::*;

    fn listening() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(listener, Arc::new(|| "up 1\n".to_string())));
        addr
    }

    fn get(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// A client that sends nothing holds one connection until its time is up; the
    /// others are answered meanwhile, and an oversized head is refused.
    #[test]
    fn a_silent_client_does_not_hold_the_others_and_a_huge_head_is_refused() {
        let addr = listening();
        let silent = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(
            ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("\r\n\r\nup 1\n"),
            "{ok}"
        );
        assert!(
            ok.contains("Content-Type: text/plain; version=0.0.4"),
            "{ok}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
        huge.extend(std::iter::repeat_n(b"X-Pad: aaaaaaaaaaaaaaaa\r\n", 600).flatten());
        let refused = get(addr, &huge);
        assert!(refused.starts_with("HTTP/1.1 431 "), "{refused}");
        let mut silent = silent;
        let mut out = String::new();
        silent.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
        let held = start.elapsed();
        assert!(held >= STAGE_TIME && held < STAGE_TIME * 2, "{held:?}");
    }

    /// A client trickling its head a byte at a time is cut off at the same deadline as
    /// a silent one.
    #[test]
    fn a_trickling_client_is_cut_off_at_its_deadline() {
        let addr = listening();
        let mut slow = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        slow.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut out = Vec::new();
        for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle() {
            if slow.write_all(&[*byte]).is_err() {
                break;
            }
            let mut chunk = [0u8; 256];
            match slow.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(_) => {}
            }
            assert!(start.elapsed() < STAGE_TIME * 3, "never cut off");
        }
        let held = start.elapsed();
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
        assert!(held >= STAGE_TIME && held < STAGE_TIME * 2, "{held:?}");
    }

    /// A client holding as many idle connections as it may does not keep its own next
    /// scrape out: the oldest idle one is closed, told why.
    #[test]
    fn a_new_connection_takes_the_slot_of_its_clients_oldest_idle_one() {
        let addr = listening();
        let idle: Vec<TcpStream> = (0..PER_CLIENT)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        // The listener has taken them all in before the scrape comes.
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        let mut oldest = &idle[0];
        let mut out = String::new();
        oldest.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 503 "), "{out}");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    }
}
