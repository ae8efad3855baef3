//! `academy watch --metrics ADDR`: the Prometheus text exposition of every academy
//! network of the conf dir and of the watch's own work, served at `GET /metrics` by a
//! plain listener thread beside the watch loop (no async runtime).
//!
//! - exposition.rs writes the text from what it is given (no I/O: unit-tested alone);
//! - http.rs: what a request asks and the head of an answer (no I/O);
//! - connection.rs: one connection read, answered and closed without blocking, each
//!   stage within its deadline;
//! - listener.rs: the listener's thread, one poll over every connection, bounding them
//!   per client and in all, and making room for a newcomer;
//! - here: the counters the watch loop and the listener share, and the scrape itself,
//!   computed when asked from the store and the kernel (network_view.rs), so a scrape
//!   never shows a stale pool and the watch loop never waits on a scrape.

mod connection;
mod exposition;
mod http;
mod listener;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::nat::networks_in;
use super::network_view::NetworkView;
use super::node_look::{NodeLook, StoreCache};
use super::repairs::RUN_DIR;

pub use exposition::render;

/// What the watch loop counts, read by each scrape. Counters only grow.
#[derive(Debug)]
pub struct Counters {
    /// Kinds put back, by (network, kind slug).
    repairs: Mutex<BTreeMap<(String, String), u64>>,
    /// Restores of a network that failed, by network.
    failures: Mutex<BTreeMap<String, u64>>,
    events_own: AtomicU64,
    events_other: AtomicU64,
    overflows: AtomicU64,
    started: SystemTime,
}

/// The counters at one moment, for exposition.rs.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub repairs: BTreeMap<(String, String), u64>,
    pub failures: BTreeMap<String, u64>,
    pub events_own: u64,
    pub events_other: u64,
    pub overflows: u64,
    pub started: u64,
}

impl Counters {
    pub fn new() -> Counters {
        Counters {
            repairs: Mutex::default(),
            failures: Mutex::default(),
            events_own: AtomicU64::new(0),
            events_other: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            started: SystemTime::now(),
        }
    }

    pub fn repaired(&self, network: &str, kind: &str) {
        let mut repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
        *repairs
            .entry((network.to_string(), kind.to_string()))
            .or_default() += 1;
    }

    pub fn failed(&self, network: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        *failures.entry(network.to_string()).or_default() += 1;
    }

    /// One nf_tables transaction notified; `own` when academy committed it.
    pub fn event(&self, own: bool) {
        let counter = if own {
            &self.events_own
        } else {
            &self.events_other
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn overflow(&self) {
        self.overflows.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        // A panicking holder cannot leave a map half-updated (one insert), so a
        // poisoned lock still holds good counts.
        Snapshot {
            repairs: self
                .repairs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            failures: self
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            events_own: self.events_own.load(Ordering::Relaxed),
            events_other: self.events_other.load(Ordering::Relaxed),
            overflows: self.overflows.load(Ordering::Relaxed),
            started: self
                .started
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        }
    }
}

/// One scrape: every network of the conf dir read now, and the counters.
fn scrape(conf_dir: &Path, counters: &Counters, stores: &mut StoreCache) -> String {
    let start = Instant::now();
    let (views, dir_error) = match networks_in(conf_dir) {
        Ok(confs) => {
            let mut look = NodeLook::now(stores);
            let views = confs
                .iter()
                .map(|conf| NetworkView::read(conf, Path::new(RUN_DIR), &mut look))
                .collect();
            let looked: Vec<_> = confs
                .iter()
                .filter_map(|c| c.builtin().map(|b| b.data_dir.join(&c.name)))
                .collect();
            stores.retain(&looked);
            (views, false)
        }
        Err(_) => (Vec::new(), true),
    };
    render(&exposition::Scrape {
        views: &views,
        counters: &counters.snapshot(),
        conf_dir_unreadable: dir_error,
        duration: start.elapsed(),
    })
}

/// The address `--metrics` names: IP:PORT, numeric (a name could resolve elsewhere
/// than the operator meant, and the watch listens only where asked).
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!("--metrics {text:?} is not IP:PORT (e.g. 127.0.0.1:9604 or [::1]:9604)")
    })
}

/// Starts serving `/metrics` on `addr` in a thread of its own; fails only when the
/// address cannot be listened on, so a wrong flag ends the watch at its start.
pub fn serve(
    addr: SocketAddr,
    conf_dir: PathBuf,
    counters: Arc<Counters>,
) -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| format!("cannot listen on {addr} for --metrics: {e}"))?;
    // std listens with a queue of 128. A client reopening hundreds of connections fills
    // that while the listener waits for the CPU, and the kernel then drops a scraper's
    // SYN, whose retry comes a second later: measured 1.03 s scrapes beside 400 idle
    // connections with the watch paused 100 ms in 400. Listening again with -1 raises the
    // queue to the node's somaxconn (4096 since Linux 5.4); if it fails, 128 stays.
    let _ = nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::MAXALLOWABLE);
    let bound = listener.local_addr().unwrap_or(addr);
    // The listener computes one page per round for every request then complete; the
    // stores as last read are kept between scrapes.
    let stores = Mutex::new(StoreCache::kept());
    let page = move || {
        let mut stores = stores.lock().unwrap_or_else(|e| e.into_inner());
        scrape(&conf_dir, &counters, &mut stores)
    };
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || listener::serve(listener, Arc::new(page)))
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    Ok(bound)
}
