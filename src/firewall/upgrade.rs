//! A network's state version: which release's kinds of state its live attachments were
//! given, so a binary replaced under running containers (nothing restarted) brings them
//! up to its own at its first invocation on the network, instead of leaving them without
//! what the new release adds (0.4.0's loopback guard, missing on networks 0.3 made, let
//! their containers reach the node's 127.0.0.1 services until a restore or an ADD).
//!
//! The record is `/run/academy/networks/<name>.<node>.state`, beside the network's lock
//! and `.unused` record (network/, per node: `<name>@<node>.unused`): on /run, so it goes with a reboot, as the nf_tables
//! state it describes does; per node (the netns's inode), since nf_tables is per netns
//! and one host may run a network of the same name in several (a test's node netns). A
//! network name is at most 128 bytes of `[A-Za-z0-9_.-]`, so the file name stays under
//! 160 bytes and never leaves the folder. Its first line is the version, in decimal; the
//! second names the binary that wrote it (for whoever looks, never read back).
//!
//! Every CNI verb reads the record first (one open and read of a few bytes, plus the
//! netns's stat: no netlink, no nf_tables dump when it is current). A record that is
//! missing or names another version, on a network with live attachments, runs the
//! restore (firewall::restore, `academy restore`'s own, under the network's lock), which
//! records this binary's version once it succeeds; CHECK and STATUS then answer from the
//! state after it. A network with no attachment has nothing to bring up to date: its
//! first ADD makes what it needs, and records the version.

use super::{network, restore, Restoration};
use crate::addressing::open_store;
use crate::cni::Result;
use crate::config::Config;

/// The version of the kinds of state academy keeps for a live network. Bump it in the
/// release that adds a kind of state (or an object of a kind) that a network made by an
/// older release lacks and needs: a running container must get it from the new binary's
/// first invocation, not from its next restart. A change that only fixes how existing
/// state is made or removed does not bump it. 0 is "no record": every release before
/// 0.5.0, which wrote none.
pub const STATE_VERSION: u32 = 1;

/// What bringing one network up to date did.
#[derive(Debug)]
pub enum Step {
    /// The record names this version: nothing was looked at.
    Current,
    /// No live attachment: nothing to bring up to date (recorded when `Mode` says so).
    NoAttachments,
    /// The restore ran from version `from` (0: no record); `restored` is what it put
    /// back, empty when nothing was missing.
    Brought { from: u32, restored: Restoration },
}

/// Who asks: a verb, cheaply and only when the record is not current; or the
/// installer, always (a downgrade and upgrade again would leave a current record on
/// state the older binary made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A CNI verb other than ADD: records nothing for a network with no attachment.
    Verb,
    /// ADD: a network with no attachment gets the record (its objects are made now).
    Add,
    /// `academy install`: the restore whatever the record says.
    Install,
}

/// The first thing every CNI verb does with its network (plugin.rs): silent unless the
/// restore put something back (one line on stderr: a repair), or failed (a warning; the
/// verb goes on and the next invocation tries again).
pub fn on_invocation(conf: &Config, mode: Mode) {
    match bring_up_to_date(conf, mode) {
        Ok(Step::Brought { from, restored }) if !restored.is_empty() => {
            eprintln!("academy: {}", brought(&conf.name, from, &restored))
        }
        Ok(_) => {}
        Err(e) => eprintln!(
            "academy: warning: network {} could not be brought up to state version {STATE_VERSION}: {e}; the next invocation or `academy restore` tries again",
            conf.name
        ),
    }
}

/// Brings the network to this binary's state version if its record says otherwise (or
/// always, for the installer).
pub fn bring_up_to_date(conf: &Config, mode: Mode) -> Result<Step> {
    let Some(path) = record_path(&conf.name) else {
        return Ok(Step::Current);
    };
    let recorded = read(&path);
    if !due(recorded, mode) {
        return Ok(Step::Current);
    }
    // A store academy cannot read is the verb's own error to report (code 5, with its
    // fix), not a second line here; the next invocation looks again.
    let Ok(live) = has_attachments(conf) else {
        return Ok(Step::NoAttachments);
    };
    if !live {
        if mode == Mode::Add {
            let _ = write(&path);
        }
        return Ok(Step::NoAttachments);
    }
    let restored = restore(conf)?;
    Ok(Step::Brought {
        from: recorded.unwrap_or(0),
        restored,
    })
}

/// Whether the record calls for a look at the network: any version but this one's (an
/// older one's state lacks what this release adds; a newer one's, after a downgrade,
/// is re-recorded so the upgrade again brings it back), or none.
fn due(recorded: Option<u32>, mode: Mode) -> bool {
    mode == Mode::Install || recorded != Some(STATE_VERSION)
}

/// Called by the restore once every kind put back what it missed: the network now has
/// this version's state. Written only when it changes (the watch restores often).
pub fn record_current(conf: &Config) {
    if let Some(path) = record_path(&conf.name) {
        if read(&path) != Some(STATE_VERSION) {
            let _ = write(&path);
        }
    }
}

/// "brought network X up to date from state version A to B: put back ...", with what
/// could not be put back after it.
pub fn brought(name: &str, from: u32, restored: &Restoration) -> String {
    let mut line =
        format!("brought network {name} up to date from state version {from} to {STATE_VERSION}");
    let put_back = restored.put_back_words();
    if !put_back.is_empty() {
        line += &format!(": put back {put_back}");
    }
    for (kind, e) in &restored.errors {
        line += &format!("; could not put back: {kind}, because {e}");
    }
    line
}

/// Live state to bring up to date: a reservation in academy's store, or (without one)
/// a veth labelled for the network or a port on its bridge.
fn has_attachments(conf: &Config) -> Result<bool> {
    if conf.builtin().is_some() {
        return match open_store(conf)? {
            Some(store) => store.holds_any(),
            None => Ok(false),
        };
    }
    let wired = super::Wired::read(conf)?;
    Ok(!wired.attachments.is_empty() || wired.bridge_in_use)
}

fn record_path(name: &str) -> Option<String> {
    Some(path_of(name, network::node()?))
}

fn path_of(name: &str, node: u64) -> String {
    format!("{}/{name}.{node}{RECORD_SUFFIX}", network::LOCK_DIR)
}

const RECORD_SUFFIX: &str = ".state";

fn read(path: &str) -> Option<u32> {
    parse(&crate::ipam::store::files::read_host_file(path, 4096).ok()?)
}

/// The version a record names; None for one that is not a record (empty, cut, garbage).
fn parse(text: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(text).ok()?;
    let first = text.lines().next()?.trim();
    if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    first.parse().ok()
}

fn render() -> String {
    format!(
        "{STATE_VERSION}\nwritten by academy {} ({})\n",
        env!("CARGO_PKG_VERSION"),
        env!("ACADEMY_GIT_COMMIT")
    )
}

fn write(path: &str) -> std::io::Result<()> {
    network::write_atomically(path, render().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firewall::{Kind, Repair};

    #[test]
    fn a_record_names_this_version_on_its_first_line() {
        assert_eq!(parse(render().as_bytes()), Some(STATE_VERSION));
        assert_eq!(parse(b"7\n"), Some(7));
        assert_eq!(parse(b"7"), Some(7));
        assert_eq!(parse(b" 3 \nanything\n"), Some(3));
    }

    #[test]
    fn what_is_not_a_record_counts_as_none() {
        for text in [
            &b""[..],
            b"\n",
            b"-1\n",
            b"+1\n",
            b"1.0\n",
            b"v1\n",
            b"99999999999999999999\n",
            b"\xff\n",
        ] {
            assert_eq!(parse(text), None, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn only_this_version_s_record_spares_a_verb_the_look() {
        for mode in [Mode::Verb, Mode::Add] {
            assert!(!due(Some(STATE_VERSION), mode));
            assert!(due(None, mode), "no record: a release before 0.5.0");
            assert!(due(Some(0), mode));
            assert!(due(Some(STATE_VERSION - 1), mode), "an older release's");
            assert!(due(Some(STATE_VERSION + 1), mode), "after a downgrade");
        }
        assert!(
            due(Some(STATE_VERSION), Mode::Install),
            "the installer always looks"
        );
    }

    /// A name of 128 bytes (config's limit) and the largest inode stay one file name,
    /// well under NAME_MAX, even with the temp file's suffix.
    #[test]
    fn the_record_path_fits_a_128_byte_name() {
        let name = "n".repeat(128);
        let path = path_of(&name, u64::MAX);
        let file = path.rsplit('/').next().unwrap();
        let tmp = format!("{file}.{}.tmp", u32::MAX);
        assert!(tmp.len() <= 255, "{}", tmp.len());
        assert!(path.starts_with("/run/academy/networks/"));
        assert_eq!(path.matches('/').count(), 4, "{path}");
        assert!(file.ends_with(".state"));
    }

    /// Networks of the same name in two netns, and two names where one prefixes the
    /// other, have records of their own.
    #[test]
    fn records_are_per_name_and_node() {
        assert_ne!(path_of("a", 1), path_of("a", 2));
        assert_ne!(path_of("a", 12), path_of("a.1", 2));
        assert_ne!(path_of("a", 1), path_of("a.1", 1));
    }

    /// The one line a verb prints when the step repaired something.
    #[test]
    fn the_repair_line_names_both_versions_and_what_came_back() {
        let line = brought(
            "podman",
            0,
            &Restoration {
                kinds: vec![(
                    Kind::Ports,
                    Repair {
                        put_back: vec!["the loopback guard of br0".into()],
                        ..Repair::default()
                    },
                )],
                errors: Vec::new(),
            },
        );
        assert_eq!(
            line,
            format!(
                "brought network podman up to date from state version 0 to {STATE_VERSION}: put back published ports: the loopback guard of br0"
            )
        );
    }
}
