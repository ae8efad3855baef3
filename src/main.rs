//! The academy binary: read the CNI environment and stdin, run, print, exit.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;

use academy::plugin;

fn main() {
    // An operator's subcommand (`academy list ...`): never when a runtime calls, since a
    // runtime always sets CNI_COMMAND. No arguments still prints the about text below.
    if std::env::var_os("CNI_COMMAND").is_none() && std::env::args_os().len() > 1 {
        std::process::exit(academy::cli::main(std::env::args_os().skip(1)));
    }
    // Bytes, not String: one non-UTF-8 byte must not make a variable read as unset.
    let env = plugin::Env::from_lookup(|name| std::env::var_os(name).map(OsString::into_vec));
    let mut stdin = Vec::new();
    // Read once, whole; a person running the binary by hand gets the about text instead.
    if !matches!(env, Ok(None)) {
        if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
            eprintln!("academy: cannot read stdin: {e}");
        }
    }
    // A bug must still reach the runtime as CNI JSON, not as a bare exit status 101.
    let outcome = std::panic::catch_unwind(|| plugin::run(env, &stdin)).unwrap_or_else(|_| {
        Some(plugin::Outcome {
            stdout: Some(plugin::internal_error(&stdin)),
            exit_code: 1,
        })
    });
    let Some(outcome) = outcome else {
        eprintln!("{}", plugin::about());
        return;
    };
    if let Some(text) = outcome.stdout {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
    std::process::exit(outcome.exit_code);
}
