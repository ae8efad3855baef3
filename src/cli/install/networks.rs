//! The conf dir's academy networks once the new binary is in place.

use std::path::Path;

use super::orphans::{self, Swept};
use super::say;
use crate::cli::nat::networks_in;
use crate::config::Config;
use crate::firewall::upgrade::{self, Mode, Step, STATE_VERSION};

/// Once the new binary is in place: the academy networks of the conf dir get this
/// release's state now (upgrade.rs), not at their next CNI call, which may be hours
/// away on a quiet node. Whatever their records say: a downgrade and upgrade again would
/// leave a current record on state the older binary made. A network without attachments
/// here has nothing to bring up to date and is not named. Never fails the install: the
/// binary is in, and each network's next invocation tries again.
pub(super) fn bring_networks_up_to_date(conf_dir: &Path) {
    // No conf dir (yet) or none readable: no network to look at.
    let Ok(confs) = networks_in(conf_dir) else {
        return;
    };
    for conf in &confs {
        // First: what a rollback's DEL left goes before anything is put back around it.
        report_sweep(conf, orphans::sweep(conf));
        match upgrade::bring_up_to_date(conf, Mode::Install) {
            Ok(Step::Brought { from, restored }) if !restored.is_empty() => {
                say(&upgrade::brought(&conf.name, from, &restored))
            }
            Ok(Step::Brought { .. }) => say(&format!(
                "network {}: up to date (state version {STATE_VERSION}), nothing missing",
                conf.name
            )),
            Ok(Step::Current | Step::NoAttachments) => {}
            Err(e) => eprintln!(
                "academy install: network {} not brought up to state version {STATE_VERSION}: {e}; its next invocation or `academy restore` tries again",
                conf.name
            ),
        }
    }
}

/// One line per network the sweep removed something from (stdout: done), or could not
/// judge or finish (stderr: the operator's CNI GC or the next install does it).
fn report_sweep(conf: &Config, swept: Swept) {
    match swept {
        Swept::Removed { removed, errors } => {
            if !removed.is_empty() {
                say(&format!(
                    "network {}: removed what no reservation or host veth owns (an older release's DEL leaves it after a rollback): {}",
                    conf.name,
                    removed.join(", ")
                ));
            }
            for e in errors {
                eprintln!(
                    "academy install: network {}: the sweep of what no reservation owns failed: {e}; the next install, or CNI GC with the valid attachments, removes it",
                    conf.name
                );
            }
        }
        Swept::LeftAlone(None) => {}
        Swept::LeftAlone(Some(why)) => eprintln!(
            "academy install: network {}: not swept of what no reservation owns, because {why}",
            conf.name
        ),
    }
}
