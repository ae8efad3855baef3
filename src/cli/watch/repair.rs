//! One pass of the watch: the restore of every academy network of the conf dir, its log
//! lines, and each repair counted (metrics) and recorded as the network's last
//! (repairs.rs, for `academy status`).

use std::path::Path;
use std::time::{Instant, SystemTime};

use super::{log, Watch};
use crate::cli::nat::{could_not, networks_in, restore_each, words};
use crate::cli::network_view::kind_slug;
use crate::cli::repairs::{self, LastRepair, RUN_DIR};
use crate::cli::CliError;

impl Watch {
    /// One pass: the restore of every academy network of the conf dir, one log line
    /// when it put something back ("put back after ...") or failed ("could not put
    /// back after ..."), and what it could not put back for another reason whenever
    /// that changes.
    pub(super) fn restore(&mut self, why: &str) {
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
            "could not put back after {why}: {error}; trying again in {} ms",
            wait.as_millis()
        ));
        self.retry_at = Some(Instant::now() + wait);
    }
}
