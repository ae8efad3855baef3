//! When the watch acts: a burst of notifications coalesced into one restore, a growing
//! delay between attempts of what keeps failing, and a bound on restores against a
//! program that keeps taking academy's state.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A burst is over once this passes without a notification ...
pub(super) const QUIET: Duration = Duration::from_millis(100);
/// ... or this after its first, whichever comes first.
pub(super) const LIMIT: Duration = Duration::from_millis(500);
/// Retries of a failed restore or socket: from FIRST_RETRY, doubling, at most LAST_RETRY.
pub(super) const FIRST_RETRY: Duration = Duration::from_millis(250);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// Restores that put something back, at most this many per window.
pub(super) const FIGHT_LIMIT: usize = 10;
pub(super) const FIGHT_WINDOW: Duration = Duration::from_secs(10);

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
