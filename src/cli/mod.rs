//! The operator's subcommands: `academy SUBCOMMAND ARGS...`, typed by a person or run by a
//! script, never by a runtime: main.rs comes here only when CNI_COMMAND is unset and there
//! are arguments (a runtime always sets CNI_COMMAND; no arguments prints the about text).
//!
//! What the command line may be is the table of definitions.rs; args.rs checks a command
//! line against it before a subcommand runs, and `help`, the man page (man.rs) and the
//! bash completion (completion.rs) are written from it. Messages go to stderr as plain
//! text, so stdout holds only what was asked for; exit status 0 on success, 1 when the
//! work failed, 2 when the command line is wrong.

mod advertisements;
mod args;
mod completion;
mod convert;
mod definitions;
mod help;
mod install;
mod leaks;
mod man;
mod metrics;
mod nat;
mod network_view;
mod node_look;
mod repairs;
mod status;
mod watch;

use serde_json::{Map, Value};

pub use args::Parsed;

use crate::config::Config;

/// Why a subcommand failed.
#[derive(Debug)]
pub enum CliError {
    /// The command line is wrong: the message and the usage line are printed, exit 2.
    Usage(String),
    /// The work failed: the message is printed, exit 1.
    Failed(String),
}

type Run = fn(&Parsed) -> Result<(), CliError>;

/// The code of each subcommand of definitions::COMMANDS (a test checks that each has one).
fn runner(name: &str) -> Option<Run> {
    Some(match name {
        "convert" => convert::run,
        "install" => install::run,
        "list" => leaks::list,
        "reclaim" => leaks::reclaim,
        "restore" => nat::restore,
        "status" => status::run,
        "watch" => watch::run,
        "completions" => |_| {
            // The only shell args.rs lets through (definitions::SHELLS).
            print!("{}", completion::bash());
            Ok(())
        },
        "man" => |_| {
            print!("{}", man::page());
            Ok(())
        },
        _ => return None,
    })
}

/// main.rs's entry: the arguments after the program name. Returns the exit status.
pub fn main(args: impl Iterator<Item = std::ffi::OsString>) -> i32 {
    let args: Option<Vec<String>> = args.map(|a| a.into_string().ok()).collect();
    match args {
        Some(args) => run(&args),
        None => usage_error("arguments must be UTF-8"),
    }
}

/// Runs `academy ARGS` (without the program name). Returns the exit status.
pub fn run(args: &[String]) -> i32 {
    let Some(first) = args.first() else {
        return usage_error("no subcommand given");
    };
    match first.as_str() {
        "-h" | "--help" => return say(&help::overview()),
        "-V" | "--version" => return say(&help::version()),
        "help" => return help_of(&args[1..]),
        _ => {}
    }
    let Some(command) = definitions::find(first) else {
        return usage_error(&if first.starts_with('-') {
            format!("unknown option {first:?}")
        } else {
            format!("unknown subcommand {first:?}")
        });
    };
    let rest = &args[1..];
    // Help wins over anything else on the line, as people type it to learn what is wrong;
    // after `--` it is an operand.
    if rest
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
    {
        return say(&help::command(command));
    }
    let run = runner(command.name).expect("every subcommand has its runner");
    match Parsed::new(rest, command).and_then(|parsed| run(&parsed)) {
        Ok(()) => 0,
        Err(CliError::Usage(msg)) => {
            eprintln!("academy {}: {msg}", command.name);
            eprintln!("{}", help::usage(command));
            eprintln!("(academy help {} for more)", command.name);
            2
        }
        Err(CliError::Failed(msg)) => {
            eprintln!("academy {}: {msg}", command.name);
            1
        }
    }
}

/// `academy help [SUBCOMMAND]`.
fn help_of(args: &[String]) -> i32 {
    match args {
        [] => say(&help::overview()),
        [name] => match definitions::find(name) {
            Some(command) => say(&help::command(command)),
            None => usage_error(&format!("unknown subcommand {name:?}")),
        },
        [_, extra, ..] => usage_error(&format!(
            "unexpected argument {extra:?} (academy help takes one SUBCOMMAND)"
        )),
    }
}

fn say(text: &str) -> i32 {
    print!("{text}");
    0
}

/// A wrong first word: what was wrong, and what would be right, on stderr.
fn usage_error(msg: &str) -> i32 {
    let names: Vec<&str> = definitions::visible().map(|c| c.name).collect();
    eprintln!("academy: {msg}");
    eprintln!(
        "usage: academy SUBCOMMAND [ARGS...]   (subcommands: {})",
        names.join(", ")
    );
    eprintln!("(academy help for more)");
    2
}

/// The network an operator names by its conflist: the plugin of type academy in it,
/// with the list's cniVersion and name, parsed as a runtime's config would be (so the
/// network name, store and bridge are exactly what ADD uses). A single-plugin `.conf`
/// of type academy is accepted too.
pub fn load_network(path: &str) -> Result<Config, CliError> {
    let bytes = read_input(path, "conflist", 16 << 20)?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::Failed(format!("{path} is not valid JSON: {e}")))?;
    let Value::Object(list) = value else {
        return Err(CliError::Failed(format!("{path} is not a JSON object")));
    };
    let plugin = match list.get("plugins") {
        Some(Value::Array(plugins)) => academy_plugin(path, &list, plugins)?,
        Some(_) => return Err(CliError::Failed(format!("{path}: plugins must be a list"))),
        None if list.get("type").and_then(Value::as_str) == Some(crate::plugin::NAME) => {
            list.clone()
        }
        None => {
            return Err(CliError::Failed(format!(
            "{path} is neither a conflist (no plugins list) nor a network config of type academy"
        )))
        }
    };
    let bytes = serde_json::to_vec(&Value::Object(plugin)).expect("a JSON map serialises");
    Config::parse(&bytes).map_err(|e| {
        CliError::Failed(format!(
            "{path}: its academy plugin config is not valid: {e}"
        ))
    })
}

/// The bytes of a file an operator names (a conflist, a list of ids), at most `limit`.
/// Opened without blocking, so a FIFO with no writer (or a device) cannot hang the
/// command: anything but a regular file or a pipe is refused, and a pipe that gives
/// nothing is said to be one. A pipe with a writer (`<(crictl pods -q)`) is read.
pub fn read_input(path: &str, what: &str, limit: u64) -> Result<Vec<u8>, CliError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let failed = |e: std::io::Error| CliError::Failed(format!("cannot read {what} {path}: {e}"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(failed)?;
    let kind = file.metadata().map_err(failed)?.file_type();
    let pipe = kind.is_fifo();
    if !kind.is_file() && !pipe {
        let name = if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(CliError::Failed(format!(
            "cannot read {what} {path}: it is {name}, not a regular file"
        )));
    }
    if pipe {
        // Blocking again: a writer that is still writing is waited for; with no writer
        // at all the read ends at once.
        let flags = nix::fcntl::OFlag::empty();
        nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(flags))
            .map_err(|e| failed(e.into()))?;
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() as u64 > limit {
        return Err(CliError::Failed(format!(
            "{what} {path} is larger than {limit} bytes"
        )));
    }
    if pipe && bytes.is_empty() {
        return Err(CliError::Failed(format!(
            "cannot read {what} {path}: it is a FIFO (named pipe) and nothing was written to it; give a regular file"
        )));
    }
    Ok(bytes)
}

/// The academy entry of a conflist's plugins, given the list's cniVersion and name as
/// libcni gives them to each plugin.
fn academy_plugin(
    path: &str,
    list: &Map<String, Value>,
    plugins: &[Value],
) -> Result<Map<String, Value>, CliError> {
    let types: Vec<&str> = plugins
        .iter()
        .map(|p| p.get("type").and_then(Value::as_str).unwrap_or("?"))
        .collect();
    let mut ours = plugins
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some(crate::plugin::NAME));
    let (Some(Value::Object(plugin)), None) = (ours.next(), ours.next()) else {
        let n = types.iter().filter(|t| **t == crate::plugin::NAME).count();
        return Err(CliError::Failed(if n == 0 {
            format!(
                "{path} has no plugin of type academy (its plugins: {}); give the conflist of an academy network",
                if types.is_empty() { "none".to_string() } else { types.join(", ") }
            )
        } else {
            format!("{path} has {n} plugins of type academy; academy expects one per network")
        }));
    };
    let mut plugin = plugin.clone();
    for key in ["cniVersion", "name"] {
        if let Some(v) = list.get(key) {
            plugin.insert(key.to_string(), v.clone());
        }
    }
    Ok(plugin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_subcommand_has_its_code_and_a_unique_name() {
        let mut names = Vec::new();
        for c in definitions::COMMANDS {
            assert!(runner(c.name).is_some(), "{} has no runner", c.name);
            names.push(c.name);
            names.extend(c.aliases);
        }
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a name is used twice: {names:?}");
        assert!(!names.contains(&"help"), "help is academy's own");
    }

    #[test]
    fn wrong_command_lines_exit_2_and_help_exits_0() {
        for wrong in [
            &["nope"][..],
            &["--nope"],
            &["list"],
            &["list", "a", "--bogus"],
            &["help", "nope"],
            &["help", "list", "extra"],
            &["completions", "fish"],
        ] {
            assert_eq!(run(&strings(wrong)), 2, "{wrong:?}");
        }
        for right in [
            &["help"][..],
            &["--help"],
            &["help", "restore-nat"],
            &["restore", "--conf-dir", "x", "-h"],
        ] {
            assert_eq!(run(&strings(right)), 0, "{right:?}");
        }
    }

    #[test]
    fn the_academy_plugin_of_a_conflist_gets_the_list_s_name_and_version() {
        let dir = std::env::temp_dir().join(format!("academy-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, v: Value| {
            let p = dir.join(name);
            std::fs::write(&p, v.to_string()).unwrap();
            p.to_string_lossy().into_owned()
        };
        let plugin =
            serde_json::json!({"type": "academy", "bridge": "br9", "subnet": "10.9.0.0/24"});
        let list = write(
            "a.conflist",
            serde_json::json!({"cniVersion": "1.0.0", "name": "n9",
                "plugins": [plugin, {"type": "portmap"}]}),
        );
        let c = load_network(&list).unwrap();
        assert_eq!((c.name.as_str(), c.bridge.as_str()), ("n9", "br9"));

        let other = write(
            "b.conflist",
            serde_json::json!({"cniVersion": "1.0.0", "name": "n9",
                "plugins": [{"type": "bridge"}, {"type": "portmap"}]}),
        );
        match load_network(&other) {
            Err(CliError::Failed(m)) => assert!(
                m.contains("no plugin of type academy") && m.contains("bridge, portmap"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        let garbage = dir.join("c.conflist");
        std::fs::write(&garbage, "{ not json").unwrap();
        assert!(
            matches!(load_network(garbage.to_str().unwrap()), Err(CliError::Failed(m)) if m.contains("not valid JSON"))
        );
        assert!(
            matches!(load_network(dir.join("none").to_str().unwrap()), Err(CliError::Failed(m)) if m.contains("cannot read"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
