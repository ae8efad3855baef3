//! One invocation: from the validated environment and the stdin bytes to what is printed
//! on stdout and the exit status. No I/O of its own besides what the verbs do.

use serde_json::json;

use crate::attachment;
use crate::cni::env::Command;
pub use crate::cni::env::Env;
use crate::cni::{code, version, Error, Result};
use crate::config::{self, Config};
use crate::firewall::upgrade;
pub use crate::verbs::LeftOpen;
use crate::verbs::{add, check, del, gc, status};

pub const NAME: &str = env!("CARGO_PKG_NAME");
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the process prints on stdout (if anything) and its exit status, and what the
/// verb left open for the exit to close (verbs::LeftOpen).
pub struct Outcome {
    pub stdout: Option<String>,
    pub exit_code: i32,
    pub open: LeftOpen,
}

/// Shown when a person runs the binary with no CNI_COMMAND.
pub fn about() -> String {
    format!(
        "CNI {NAME} plugin v{VERSION}\nCNI protocol versions supported: {}",
        version::SUPPORTED.join(", ")
    )
}

pub fn run(env: Result<Option<Env>>, stdin: &[u8]) -> Option<Outcome> {
    // Errors are printed in the runtime's own version when the config names one.
    let err_version = config::peek_version(stdin)
        .filter(|v| version::is_supported(v))
        .unwrap_or_else(|| version::LATEST.to_string());
    let fail = |e: Error| Outcome {
        stdout: Some(e.to_json(&err_version)),
        exit_code: 1,
        open: LeftOpen::default(),
    };
    // Tests only (debug builds): a bug's path, to see it still reach the runtime as CNI
    // JSON (src/main.rs replaces std's start-up; tests/it/protocol/env.rs).
    #[cfg(debug_assertions)]
    if std::env::var_os("ACADEMY_TEST_PANIC").is_some() {
        panic!("ACADEMY_TEST_PANIC is set");
    }
    let env = match env {
        Ok(Some(env)) => env,
        Ok(None) => return None,
        Err(e) => return Some(fail(e)),
    };
    let mut open = LeftOpen::default();
    let outcome = dispatch(&env, stdin, &mut open);
    // Whichever invocation comes next releases the networks unused for longer than their
    // releaseUnusedAfter (firewall/network/): one readlink of its node's hint when none is due.
    crate::firewall::network::release_expired();
    Some(match outcome {
        Ok(stdout) => Outcome {
            stdout,
            exit_code: 0,
            open,
        },
        Err(e) => fail(e),
    })
}

fn dispatch(env: &Env, stdin: &[u8], open: &mut LeftOpen) -> Result<Option<String>> {
    if env.command == Command::Version {
        return Ok(Some(version_reply(stdin)));
    }
    // A DEL's config ADD would refuse still finds what to remove, but is not one to
    // rebuild a network's state from.
    let (conf, whole) = if env.command == Command::Del {
        match Config::parse(stdin) {
            Ok(conf) => (conf, true),
            Err(_) => (Config::parse_for_del(stdin)?, false),
        }
    } else {
        (Config::parse(stdin)?, true)
    };
    let min = match env.command {
        Command::Check => "0.4.0",
        Command::Gc | Command::Status => "1.1.0",
        _ => "0.0.0",
    };
    if !version::at_least(&conf.cni_version, min) {
        return Err(Error::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "{} needs cniVersion {min} or later, but the config says {}",
                env.command.name(),
                conf.cni_version
            ),
        ));
    }
    // Before the verb: a binary replaced under running containers brings the network to
    // its own state first (a read of one small file when it is there already), so CHECK
    // and STATUS answer from that state, not from the older release's.
    if whole {
        let mode = match env.command {
            Command::Add => upgrade::Mode::Add,
            _ => upgrade::Mode::Verb,
        };
        upgrade::on_invocation(&conf, mode);
    }
    match env.command {
        Command::Add => {
            attachment::check_alias_fits(&conf.name, &env.container_id, &env.ifname)?;
            let result = add::add(env, &conf, open)?;
            Ok(Some(result.to_json(&conf.cni_version).to_string()))
        }
        Command::Del => del::del(env, &conf).map(|()| None),
        Command::Check => check::check(env, &conf).map(|()| None),
        Command::Gc => gc::gc(env, &conf).map(|()| None),
        Command::Status => status::status(env, &conf).map(|()| None),
        Command::Version => unreachable!("answered above"),
    }
}

/// The error printed when academy itself failed (a panic): libcni's ErrInternal code.
pub fn internal_error(stdin: &[u8]) -> String {
    let version = config::peek_version(stdin)
        .filter(|v| version::is_supported(v))
        .unwrap_or_else(|| version::LATEST.to_string());
    Error::new(code::INTERNAL, "academy hit an internal error (a bug)")
        .details("its message is on stderr; please report it. A DEL for this attachment cleans up whatever was made")
        .to_json(&version)
}

/// VERSION succeeds whatever stdin holds: runtimes probe with dummy input.
fn version_reply(stdin: &[u8]) -> String {
    let asked = config::peek_version(stdin).unwrap_or_else(|| version::LATEST.to_string());
    json!({ "cniVersion": asked, "supportedVersions": version::SUPPORTED }).to_string()
}
