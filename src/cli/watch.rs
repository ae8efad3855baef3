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
//! There is no polling: the command sleeps in poll(2) on the notification socket and a
//! signalfd, with a timeout only while a burst, a retry or a reopen is pending.
//!
//! Each repair is counted and recorded as the network's last (repairs.rs, for `academy
//! status`); with `--metrics ADDR` a listener thread serves those counts and every
//! network's state at each scrape (metrics/), sharing only the counters with this loop.

use std::collections::VecDeque;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::metrics::{self, Counters};
use super::nat::{could_not, networks_in, restore_each, words, DEFAULT_CONF_DIR};
use super::network_view::kind_slug;
use super::repairs::{self, LastRepair, RUN_DIR};
use super::{CliError, Parsed};
use crate::netlink::{NftCommit, NftMonitor, NftNotice};

/// A burst is over once this passes without a notification ...
const QUIET: Duration = Duration::from_millis(100);
/// ... or this after its first, whichever comes first.
const LIMIT: Duration = Duration::from_millis(500);
/// Retries of a failed restore or socket: from FIRST_RETRY, doubling, at most LAST_RETRY.
const FIRST_RETRY: Duration = Duration::from_millis(250);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// Restores that put something back, at most this many per window.
const FIGHT_LIMIT: usize = 10;
const FIGHT_WINDOW: Duration = Duration::from_secs(10);

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

/// The notifications of one burst, coalesced: due once QUIET has passed since the last
/// or LIMIT since the first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Debounce {
    quiet: Duration,
    limit: Duration,
    /// (first, last) notification of the burst in progress.
    burst: Option<(Instant, Instant)>,
}

impl Debounce {
    pub(super) fn new(quiet: Duration, limit: Duration) -> Debounce {
        Debounce {
            quiet,
            limit,
            burst: None,
        }
    }

    /// A notification came at `now`.
    pub(super) fn note(&mut self, now: Instant) {
        let first = self.burst.map_or(now, |(first, _)| first);
        self.burst = Some((first, now));
    }

    /// When the burst in progress is over (None: no burst).
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.burst
            .map(|(first, last)| (last + self.quiet).min(first + self.limit))
    }

    /// Whether a burst is over at `now`; it is then taken (the next note starts another).
    pub(super) fn take_due(&mut self, now: Instant) -> bool {
        let due = self.deadline().is_some_and(|d| d <= now);
        if due {
            self.burst = None;
        }
        due
    }
}

/// A growing delay between attempts of something that keeps failing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(super) fn new() -> Backoff {
        Backoff { next: FIRST_RETRY }
    }

    pub(super) fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(LAST_RETRY);
        now
    }

    pub(super) fn reset(&mut self) {
        self.next = FIRST_RETRY;
    }
}

/// The restores that put something back lately: a program taking academy's state as
/// often as it comes back is answered FIGHT_LIMIT times per FIGHT_WINDOW, not in a loop.
#[derive(Debug, Default)]
pub(super) struct Fights {
    restored: VecDeque<Instant>,
}

impl Fights {
    pub(super) fn restored(&mut self, now: Instant) {
        self.restored.push_back(now);
        while self.restored.len() > FIGHT_LIMIT {
            self.restored.pop_front();
        }
    }

    /// When the next restore may run (None: now).
    pub(super) fn hold(&self, now: Instant) -> Option<Instant> {
        if self.restored.len() < FIGHT_LIMIT {
            return None;
        }
        let free = *self.restored.front()? + FIGHT_WINDOW;
        (free > now).then_some(free)
    }
}

/// Whether a transaction is academy's own (its restores, the plugin's verbs): the
/// kernel names the process that committed it.
pub(super) fn ours(commit: &NftCommit, own_name: &str) -> bool {
    commit.process == own_name
}

/// What set off the restore to come, for its log line.
#[derive(Debug, Default)]
struct Trigger {
    commits: usize,
    changes: usize,
    by: Vec<String>,
    lost: bool,
}

impl Trigger {
    fn commit(&mut self, c: &NftCommit) {
        self.commits += 1;
        self.changes += c.changes;
        let by = format!("{} (pid {})", c.process, c.pid);
        if !self.by.contains(&by) && self.by.len() < 3 {
            self.by.push(by);
        }
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.commits > 0 {
            parts.push(format!(
                "{} change(s) in {} transaction(s) by {}",
                self.changes,
                self.commits,
                self.by.join(", ")
            ));
        }
        if self.lost {
            parts.push("lost notifications (ENOBUFS)".into());
        }
        match parts.is_empty() {
            true => "a retry".into(),
            false => parts.join(" and "),
        }
    }
}

struct Watch {
    dir: PathBuf,
    own_name: String,
    monitor: Option<NftMonitor>,
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
    /// When the next unused network's record expires (firewall/network.rs): the watch
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
            let timeout = self.timeout(Instant::now());
            let (stop, readable) = {
                let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
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
                (ready(&fds[0]), fds.get(1).is_some_and(ready))
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
                log(&format!("{e}; trying again in {}s", wait.as_secs()));
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

    /// One pass: the restore of every academy network of the conf dir, one log line
    /// when it put something back ("put back after ...") or failed ("could not put
    /// back after ..."), and what it could not put back for another reason whenever
    /// that changes.
    fn restore(&mut self, why: &str) {
        let start = Instant::now();
        if !self.dir.is_dir() {
            // Not made yet (the installer makes it): no network, so nothing to put
            // back, and nothing to retry: the next change reads it again.
            if !self.said_no_dir {
                log(&format!(
                    "{} is not a directory (yet): no academy network to restore",
                    self.dir.display()
                ));
                self.said_no_dir = true;
            }
            self.retry_at = None;
            return;
        }
        self.said_no_dir = false;
        let confs = match networks_in(Path::new(&self.dir)) {
            Ok(confs) => confs,
            Err(CliError::Failed(e) | CliError::Usage(e)) => {
                self.failed(why, &e);
                return;
            }
        };
        let mut restored = Vec::new();
        let mut failed = Vec::new();
        let mut could_not_now = Vec::new();
        for network in restore_each(&confs) {
            match network.outcome {
                Ok(done) => {
                    let put_back = words(&done);
                    if !put_back.is_empty() {
                        self.repaired(&network.name, &done.repaired(), why);
                        restored.push(format!("network {}: {put_back}", network.name));
                    }
                    if !done.errors.is_empty() {
                        self.counters.failed(&network.name);
                        let errors: Vec<String> = done
                            .errors
                            .iter()
                            .map(|(kind, e)| format!("{kind}, because {e}"))
                            .collect();
                        failed.push(format!("network {}: {}", network.name, errors.join("; ")));
                    }
                    let notes = could_not(&done)
                        .into_iter()
                        .skip(done.errors.len())
                        .map(|line| format!("network {}: {line}", network.name));
                    could_not_now.extend(notes);
                }
                Err(e) => {
                    self.counters.failed(&network.name);
                    failed.push(format!("network {}: its state, because {e}", network.name));
                }
            }
        }
        if !restored.is_empty() {
            self.fights.restored(Instant::now());
            log(&format!(
                "put back after {why}, in {} ms: {}",
                start.elapsed().as_millis(),
                restored.join("; ")
            ));
        }
        if could_not_now != self.said_could_not {
            for line in &could_not_now {
                log(line);
            }
            self.said_could_not = could_not_now;
        }
        if failed.is_empty() {
            self.retry_at = None;
            self.restore_backoff.reset();
        } else {
            self.failed(why, &failed.join("; "));
        }
    }

    /// Counts a network's repair by kind and records it as the network's last.
    fn repaired(&mut self, network: &str, what: &[crate::firewall::Kind], why: &str) {
        let kinds: Vec<String> = what.iter().map(|kind| kind_slug(*kind)).collect();
        for kind in &kinds {
            self.counters.repaired(network, kind);
        }
        let repair = LastRepair {
            at: SystemTime::now(),
            kinds,
            trigger: why.to_string(),
        };
        match repairs::record(Path::new(RUN_DIR), network, &repair) {
            Ok(()) => self.said_no_record = false,
            Err(e) if !self.said_no_record => {
                log(&format!("{e} (academy status will not show it)"));
                self.said_no_record = true;
            }
            Err(_) => {}
        }
    }

    fn failed(&mut self, why: &str, error: &str) {
        let wait = self.restore_backoff.next();
        log(&format!(
            "could not put back after {why}: {error}; trying again in {}s",
            wait.as_secs()
        ));
        self.retry_at = Some(Instant::now() + wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped unit runs this subcommand with flags it accepts, and is restarted.
    #[test]
    fn the_systemd_unit_runs_the_watch_with_valid_flags() {
        let unit = include_str!("../../deploy/systemd/academy-watch.service");
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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A burst is restored once, QUIET after its last notification, or LIMIT after its
    /// first when it never pauses; nothing is due without one.
    #[test]
    fn a_burst_is_coalesced_until_it_pauses_or_lasts_too_long() {
        let t0 = Instant::now();
        let mut d = Debounce::new(ms(100), ms(500));
        assert_eq!(d.deadline(), None);
        assert!(!d.take_due(t0 + ms(10_000)));

        // Notifications 30 ms apart: due 100 ms after the last one.
        for i in 0..5 {
            d.note(t0 + ms(30 * i));
        }
        assert_eq!(d.deadline(), Some(t0 + ms(220)));
        assert!(!d.take_due(t0 + ms(219)));
        assert!(d.take_due(t0 + ms(220)));
        assert!(!d.take_due(t0 + ms(221)), "taken once");
        assert_eq!(d.deadline(), None);

        // A burst that never pauses 100 ms: due 500 ms after its first notification.
        let t1 = t0 + ms(1000);
        let mut at = t1;
        while at < t1 + ms(900) {
            d.note(at);
            if d.take_due(at) {
                break;
            }
            at += ms(50);
        }
        assert_eq!(at, t1 + ms(500), "bounded by the limit");
        // The next notification starts a new burst.
        d.note(at + ms(50));
        assert_eq!(d.deadline(), Some(at + ms(150)));
    }

    #[test]
    fn retries_back_off_to_a_ceiling_and_reset() {
        let mut b = Backoff::new();
        let waits: Vec<u128> = (0..9).map(|_| b.next().as_millis()).collect();
        assert_eq!(
            waits,
            [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]
        );
        b.reset();
        assert_eq!(b.next().as_millis(), 250);
    }

    #[test]
    fn a_fight_is_answered_a_few_times_per_window() {
        let t0 = Instant::now();
        let mut f = Fights::default();
        for i in 0..FIGHT_LIMIT as u64 {
            assert_eq!(f.hold(t0 + ms(100 * i)), None);
            f.restored(t0 + ms(100 * i));
        }
        let now = t0 + ms(1000);
        assert_eq!(f.hold(now), Some(t0 + FIGHT_WINDOW));
        assert_eq!(f.hold(t0 + FIGHT_WINDOW), None);
    }

    /// academy's own transactions (its restore's batch, the plugin's ADD) are passed
    /// over; another program's are not.
    #[test]
    fn academy_s_own_transactions_are_passed_over() {
        let commit = |process: &str| NftCommit {
            generation: 7,
            pid: 42,
            process: process.into(),
            changes: 3,
        };
        assert!(ours(&commit("academy"), "academy"));
        for other in ["nft", "iptables-restor", "firewalld", ""] {
            assert!(!ours(&commit(other), "academy"), "{other}");
        }
    }

    #[test]
    fn the_trigger_says_who_changed_what() {
        let mut t = Trigger::default();
        assert_eq!(t.describe(), "a retry");
        for process in ["nft", "nft", "iptables-restor"] {
            t.commit(&NftCommit {
                generation: 1,
                pid: 5,
                process: process.into(),
                changes: 2,
            });
        }
        t.lost = true;
        assert_eq!(
            t.describe(),
            "6 change(s) in 3 transaction(s) by nft (pid 5), iptables-restor (pid 5) and lost notifications (ENOBUFS)"
        );
    }
}
