//! `academy watch [--conf-dir DIR]`: puts academy's nf_tables state back as soon as
//! something takes it, instead of after the next reload hook or ADD.
//!
//! It subscribes to nf_tables' change notifications in the netns it runs in
//! (src/netlink/nftables/monitor.rs), and after each burst of changes by another program
//! (`nft flush ruleset`, `nft delete table inet academy`, an iptables-nft reload, a
//! firewalld restart) runs the restore of `academy restore` for every academy network
//! of DIR, read again each time so that networks added since count. Once at start too.
//! Its log says `put back after ...` and `could not put back after ...` as the restore
//! command says `put back:` and `could not put back:`.
//!
//! - A flush is a burst of notifications: they are coalesced until QUIET passes without
//!   one, at most LIMIT after the first (the debounce), then restored once.
//! - Transactions committed by a process named as this one (academy: its own restores,
//!   and the plugin's ADD, DEL, GC) are passed over: academy's own changes are never a
//!   loss to repair. Were one not, the restore after it finds nothing missing and sends
//!   nothing, so nothing follows it: the watch cannot feed itself.
//! - Lost notifications (ENOBUFS: a huge change overflowed the socket's buffer) count
//!   as a change. A failed restore is retried, a failed socket reopened, both after a
//!   growing delay; nothing but SIGTERM or SIGINT (exit 0) ends the command.
//! - Another program that takes academy's state each time it is back gets at most
//!   FIGHT_LIMIT restores per FIGHT_WINDOW, then waits.
//!
//! - A network file of DIR written, renamed in or removed (conf_dir.rs) sets off a
//!   restore the same way: a key turned on for live containers is put in place at once.
//!
//! There is no polling: the command sleeps in poll(2) on the notification socket, the
//! conf dir's inotify and a signalfd, with a timeout only while a burst, a retry or a
//! reopen is pending.
//!
//! Each repair is counted and recorded as the network's last (repairs.rs, for `academy
//! status`); with `--metrics ADDR` a listener thread serves those counts and every
//! network's state at each scrape (metrics/), sharing only the counters with this loop.

use std::io::Write as _;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::metrics::{self, Counters};
use super::nat::DEFAULT_CONF_DIR;
use super::{CliError, Parsed};
use crate::netlink::{NftMonitor, NftNotice};
use conf_dir::ConfDir;
use pacing::{Backoff, Debounce, Fights, FIGHT_LIMIT, FIGHT_WINDOW, FIRST_RETRY, LIMIT, QUIET};
use trigger::{ours, Trigger};

mod conf_dir;
mod pacing;
mod repair;
mod trigger;

pub fn run(p: &Parsed) -> Result<(), CliError> {
    let dir = PathBuf::from(p.value("--conf-dir").unwrap_or(DEFAULT_CONF_DIR));
    let metrics_addr = p
        .value("--metrics")
        .map(metrics::parse_addr)
        .transpose()
        .map_err(CliError::Usage)?;
    // Blocked before the listener's thread starts, so that it inherits the mask and the
    // signals come to the signalfd, not to it.
    let signals = stop_signals()
        .map_err(|e| CliError::Failed(format!("cannot take SIGTERM and SIGINT: {e}")))?;
    let counters = Arc::new(Counters::new());
    if let Some(addr) = metrics_addr {
        let bound =
            metrics::serve(addr, dir.clone(), Arc::clone(&counters)).map_err(CliError::Failed)?;
        log(&format!("serving metrics at http://{bound}/metrics"));
    }
    Watch::new(dir, counters).run(&signals);
    Ok(())
}

/// SIGTERM and SIGINT, blocked and read from a signalfd.
fn stop_signals() -> nix::Result<SignalFd> {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGTERM);
    mask.add(Signal::SIGINT);
    mask.thread_block()?;
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
}

/// One line on stderr; a closed stderr (a journal restarting) must not end the watch.
fn log(line: &str) {
    let _ = writeln!(std::io::stderr(), "academy watch: {line}");
}
struct Watch {
    dir: PathBuf,
    own_name: String,
    monitor: Option<NftMonitor>,
    /// The conf dir's changes; None when inotify cannot be had (said at start): then
    /// only nf_tables changes set off a restore.
    conf_dir: Option<ConfDir>,
    /// The release records' folder (a new `.due` marker wakes the loop); None when
    /// inotify cannot be had: releases then wait for another wake-up.
    release_records: Option<ConfDir>,
    /// When to try opening the socket again.
    reopen_at: Option<Instant>,
    socket_backoff: Backoff,
    changes: Debounce,
    trigger: Trigger,
    /// A failed restore's retry.
    retry_at: Option<Instant>,
    restore_backoff: Backoff,
    fights: Fights,
    /// A due restore held back by `fights`.
    held: Option<Instant>,
    /// Whether the conf dir's absence was said.
    said_no_dir: bool,
    counters: Arc<Counters>,
    /// Whether a failure to record a repair was said.
    said_no_record: bool,
    /// What the last pass could not put back (no kernel error: a port taken, an
    /// attachment never recorded), said again only when it changes.
    said_could_not: Vec<String>,
    /// When the next unused network's record expires (firewall/network/): the watch
    /// releases it then, as any invocation would.
    release_at: Option<Instant>,
}

impl Watch {
    fn new(dir: PathBuf, counters: Arc<Counters>) -> Watch {
        let own_name = std::fs::read_to_string("/proc/self/comm")
            .map(|s| s.trim_end().to_string())
            .unwrap_or_else(|_| crate::plugin::NAME.to_string());
        Watch {
            dir,
            own_name,
            monitor: None,
            conf_dir: ConfDir::open()
                .map_err(|e| {
                    log(&format!(
                        "cannot watch the conf dir ({e}): a conflist changed takes effect at the next nf_tables change or ADD"
                    ))
                })
                .ok(),
            release_records: ConfDir::release_records().ok(),
            reopen_at: None,
            socket_backoff: Backoff::new(),
            changes: Debounce::new(QUIET, LIMIT),
            trigger: Trigger::default(),
            retry_at: None,
            restore_backoff: Backoff::new(),
            fights: Fights::default(),
            held: None,
            said_no_dir: false,
            counters,
            said_no_record: false,
            said_could_not: Vec::new(),
            release_at: None,
        }
    }

    fn run(mut self, signals: &SignalFd) {
        // Subscribed before the first restore: a change during it is not missed.
        self.open_socket(Instant::now());
        self.restore("start");
        log(&format!(
            "watching nf_tables changes for the academy networks of {} (receive buffer {} bytes)",
            self.dir.display(),
            self.monitor.as_ref().map_or(0, |m| m.receive_buffer())
        ));
        loop {
            let now = Instant::now();
            if self.monitor.is_none() && self.reopen_at.is_some_and(|t| t <= now) {
                self.open_socket(now);
            }
            self.restore_if_due(now);
            // At every wake-up (a readdir), and when a record is due.
            self.release_at = crate::firewall::network::release_expired().map(|at| {
                let wait = at
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or_default();
                Instant::now() + wait
            });
            // A dir made or put back since is watched from now (one cheap call).
            let watching = match self.conf_dir.as_mut() {
                Some(c) => c.watch(&self.dir),
                None => false,
            };
            let conf_dir = self.conf_dir.as_ref().filter(|_| watching);
            let records_dir = Path::new(crate::firewall::network::RECORDS_DIR);
            let records_watched = match self.release_records.as_mut() {
                Some(r) => r.watch(records_dir),
                None => false,
            };
            let records = self.release_records.as_ref().filter(|_| records_watched);
            let timeout = self.timeout(Instant::now());
            let (stop, readable, conf_changed, records_changed) = {
                let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
                if let Some(c) = conf_dir {
                    fds.push(PollFd::new(c.as_fd(), PollFlags::POLLIN));
                }
                if let Some(r) = records {
                    fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
                }
                if let Some(m) = &self.monitor {
                    fds.push(PollFd::new(m.as_fd(), PollFlags::POLLIN));
                }
                match nix::poll::poll(&mut fds, timeout) {
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        log(&format!("poll: {e}; retrying"));
                        std::thread::sleep(FIRST_RETRY);
                        continue;
                    }
                }
                let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
                let conf_changed = conf_dir.is_some() && ready(&fds[1]);
                let records_at = 1 + usize::from(conf_dir.is_some());
                let records_changed = records.is_some() && ready(&fds[records_at]);
                let monitor = records_at + usize::from(records.is_some());
                let readable = fds.get(monitor).is_some_and(ready);
                (ready(&fds[0]), readable, conf_changed, records_changed)
            };
            if stop {
                let signal = signals
                    .read_signal()
                    .ok()
                    .flatten()
                    .and_then(|s| Signal::try_from(s.ssi_signo as i32).ok());
                log(&format!(
                    "stopping on {}",
                    signal.map_or("a signal", |s| s.as_str())
                ));
                return;
            }
            if readable {
                self.read_notifications(Instant::now());
            }
            if conf_changed {
                self.read_conf_dir(Instant::now());
            }
            if records_changed {
                // Read to empty it; the loop's next turn reads the records' due times.
                if let Some(r) = self.release_records.as_mut() {
                    r.changed();
                }
            }
        }
    }

    fn read_conf_dir(&mut self, now: Instant) {
        let Some(c) = self.conf_dir.as_mut() else {
            return;
        };
        let changed = c.changed();
        if !changed.is_empty() {
            self.trigger.conf_files(&changed);
            self.changes.note(now);
        }
    }

    /// How long poll may sleep: until the burst is over, a retry or a reopen is due;
    /// forever when nothing is pending.
    fn timeout(&self, now: Instant) -> PollTimeout {
        // A restore held back waits for the hold, whether a burst or a retry is due.
        let restore = [self.changes.deadline(), self.retry_at]
            .into_iter()
            .flatten()
            .min()
            .map(|d| self.held.map_or(d, |h| h.max(d)));
        let reopen = self.reopen_at.filter(|_| self.monitor.is_none());
        let next = [restore, reopen, self.release_at]
            .into_iter()
            .flatten()
            .min();
        match next {
            None => PollTimeout::NONE,
            Some(at) => {
                // Rounded up: waking a little early would only poll again at once.
                let wait = at.saturating_duration_since(now) + Duration::from_millis(1);
                PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX)
            }
        }
    }

    fn open_socket(&mut self, now: Instant) {
        match NftMonitor::open() {
            Ok(m) => {
                if self.reopen_at.is_some() {
                    log("notification socket reopened");
                    // What changed while it was closed is unknown.
                    self.trigger.lost = true;
                    self.changes.note(now);
                }
                self.monitor = Some(m);
                self.reopen_at = None;
                self.socket_backoff.reset();
            }
            Err(e) => {
                let wait = self.socket_backoff.next();
                log(&format!("{e}; trying again in {} ms", wait.as_millis()));
                self.reopen_at = Some(now + wait);
            }
        }
    }

    fn read_notifications(&mut self, now: Instant) {
        let Some(monitor) = self.monitor.as_mut() else {
            return;
        };
        match monitor.receive() {
            Ok(notices) => {
                for notice in notices {
                    match notice {
                        NftNotice::Commit(c) if ours(&c, &self.own_name) => {
                            self.counters.event(true);
                        }
                        NftNotice::Commit(c) => {
                            self.counters.event(false);
                            self.trigger.commit(&c);
                            self.changes.note(now);
                        }
                        NftNotice::Lost => {
                            self.counters.overflow();
                            if !self.trigger.lost {
                                log("nf_tables notifications lost (the receive buffer overflowed): restoring");
                            }
                            self.trigger.lost = true;
                            self.changes.note(now);
                        }
                    }
                }
            }
            Err(e) => {
                log(&format!("{e}; reopening the notification socket"));
                self.monitor = None;
                self.reopen_at = Some(now);
            }
        }
    }

    fn restore_if_due(&mut self, now: Instant) {
        let retry = self.retry_at.is_some_and(|t| t <= now);
        let burst = self.changes.deadline().is_some_and(|d| d <= now);
        if !retry && !burst {
            return;
        }
        if let Some(until) = self.fights.hold(now) {
            if self.held.is_none() {
                log(&format!(
                    "academy's state was put back {FIGHT_LIMIT} times in {}s: another program keeps taking it; the next restore waits {}ms",
                    FIGHT_WINDOW.as_secs(),
                    until.saturating_duration_since(now).as_millis()
                ));
            }
            self.held = Some(until);
            return;
        }
        self.held = None;
        self.changes.take_due(now);
        let trigger = std::mem::take(&mut self.trigger);
        self.restore(&trigger.describe());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped unit runs this subcommand with flags it accepts, and is restarted.
    #[test]
    fn the_systemd_unit_runs_the_watch_with_valid_flags() {
        let unit = include_str!("../../../deploy/systemd/academy-watch.service");
        let line = unit
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .expect("ExecStart");
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        assert!(words[0].ends_with("/academy"), "{line}");
        assert_eq!(words[1], "watch", "{line}");
        let watch = crate::cli::definitions::find("watch").unwrap();
        let parsed = Parsed::new(&words[2..], watch).ok();
        assert!(
            parsed
                .as_ref()
                .is_some_and(|p| p.value("--conf-dir").is_some()),
            "{line}"
        );
        let metrics = parsed.and_then(|p| p.value("--metrics").map(metrics::parse_addr));
        assert!(
            metrics.is_some_and(|a| a.is_ok_and(|a| a.ip().is_loopback())),
            "the unit serves metrics on loopback only: {line}"
        );
        for line in [
            "Restart=always",
            "After=network.target",
            "WantedBy=multi-user.target",
        ] {
            assert!(unit.lines().any(|l| l.starts_with(line)), "{line}");
        }
    }
}
