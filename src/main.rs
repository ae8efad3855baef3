//! The academy binary: read the CNI environment and stdin, run, print, exit.

use std::io::{Read, Write};

use academy::cni::env::Env;
use academy::plugin;

mod install;

fn main() {
    // `academy install ...` for a node's installer; a runtime always sets CNI_COMMAND.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "install") && std::env::var_os("CNI_COMMAND").is_none() {
        std::process::exit(install::run(&args[2..]));
    }
    let env = Env::from_lookup(|name| std::env::var(name).ok());
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
