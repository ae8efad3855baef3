//! The operator's subcommands: `academy SUBCOMMAND ARGS...`, typed by a person or run by a
//! script, never by a runtime: main.rs comes here only when CNI_COMMAND is unset and there
//! are arguments (a runtime always sets CNI_COMMAND; no arguments prints the about text).
//!
//! A subcommand is one row of [`SUBCOMMANDS`]. Messages go to stderr as plain text; exit
//! status 0 on success, 1 when the work failed, 2 when the command line is wrong.

mod convert;
mod install;
mod leaks;
mod nat;
mod watch;

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::config::Config;

struct Subcommand {
    name: &'static str,
    /// Arguments after the name, for the usage line.
    args: &'static str,
    about: &'static str,
    run: fn(&[String]) -> Result<(), CliError>,
}

const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        name: "convert",
        args: "CONFLIST [--dry-run | --in-place]",
        about: "print CONFLIST with its reference bridge (+ portmap, bare tuning) collapsed into one academy entry; --dry-run shows the diff, --in-place rewrites the file",
        run: convert::run,
    },
    Subcommand {
        name: "install",
        args: "[--bin-dir DIR] [--conf-dir DIR] [--conflist FILE | --template]",
        about: "copy this binary (and a conflist, or containerd's conf_template) into a node's CNI folders, each atomically",
        run: install::run,
    },
    Subcommand {
        name: "list",
        args: "CONFLIST [--json]",
        about: "one line per reservation: address, container, interface, age, wired or leaked",
        run: leaks::list,
    },
    Subcommand {
        name: "reclaim",
        args: "CONFLIST [--older-than DURATION | --keep-ids FILE [--older-than DURATION]] [--dry-run]",
        about: "free leaked reservations (or every attachment not in FILE) and what academy made for them",
        run: leaks::reclaim,
    },
    Subcommand {
        name: "restore-nat",
        args: "[--conf-dir DIR | CONFLIST...]",
        about: "put back the outbound NAT (ipMasq) of every academy network in DIR (default /etc/cni/net.d) from the address store, in one batch",
        run: nat::restore,
    },
    Subcommand {
        name: "watch",
        args: "[--conf-dir DIR]",
        about: "run until SIGTERM or SIGINT: at start and within a second of each nf_tables change by another program (nft flush ruleset, a deleted table, an iptables reload), put back what restore-nat does for every academy network in DIR (default /etc/cni/net.d, read again each time)",
        run: watch::run,
    },
];

/// Why a subcommand failed.
#[derive(Debug)]
pub enum CliError {
    /// The command line is wrong: the message and the usage line are printed, exit 2.
    Usage(String),
    /// The work failed: the message is printed, exit 1.
    Failed(String),
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
    if matches!(first.as_str(), "help" | "-h" | "--help") {
        print!("{}", help());
        return 0;
    }
    let Some(sub) = SUBCOMMANDS.iter().find(|s| s.name == first) else {
        return usage_error(&format!("unknown subcommand {first:?}"));
    };
    if args[1..].iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: academy {} {}\n  {}", sub.name, sub.args, sub.about);
        return 0;
    }
    match (sub.run)(&args[1..]) {
        Ok(()) => 0,
        Err(CliError::Usage(msg)) => {
            eprintln!("academy {}: {msg}", sub.name);
            eprintln!("usage: academy {} {}", sub.name, sub.args);
            2
        }
        Err(CliError::Failed(msg)) => {
            eprintln!("academy {}: {msg}", sub.name);
            1
        }
    }
}

fn usage_error(msg: &str) -> i32 {
    eprintln!("academy: {msg}\n");
    eprint!("{}", help());
    2
}

fn help() -> String {
    let mut text = String::from(
        "usage: academy SUBCOMMAND ARGS   (as a CNI plugin it is run with CNI_COMMAND set)\n\nsubcommands:\n",
    );
    for s in SUBCOMMANDS {
        text.push_str(&format!(
            "  academy {} {}\n      {}\n",
            s.name, s.args, s.about
        ));
    }
    text.push_str("\nCONFLIST is the network's own .conflist (or .conf): its academy plugin gives the network name, store and bridge.\n");
    text
}

/// The positional arguments and flags of a command line. `spec` names each flag and
/// whether it takes a value (`--flag VALUE` or `--flag=VALUE`); anything else starting
/// with '-' is refused.
pub struct Parsed {
    pub positional: Vec<String>,
    flags: HashMap<&'static str, Option<String>>,
}

impl Parsed {
    pub fn new(args: &[String], spec: &[(&'static str, bool)]) -> Result<Parsed, CliError> {
        let mut parsed = Parsed {
            positional: Vec::new(),
            flags: HashMap::new(),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if !arg.starts_with('-') || arg == "-" {
                parsed.positional.push(arg.clone());
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            let Some(&(flag, takes_value)) = spec.iter().find(|(f, _)| *f == name) else {
                let known: Vec<&str> = spec.iter().map(|(f, _)| *f).collect();
                return Err(CliError::Usage(format!(
                    "unknown flag {name:?} (this subcommand takes {})",
                    known.join(", ")
                )));
            };
            let value = match (takes_value, inline) {
                (true, Some(v)) => Some(v),
                (true, None) => Some(
                    it.next()
                        .cloned()
                        .ok_or_else(|| CliError::Usage(format!("{flag} needs a value")))?,
                ),
                (false, Some(_)) => return Err(CliError::Usage(format!("{flag} takes no value"))),
                (false, None) => None,
            };
            if parsed.flags.insert(flag, value).is_some() {
                return Err(CliError::Usage(format!("{flag} is given twice")));
            }
        }
        Ok(parsed)
    }

    pub fn has(&self, flag: &str) -> bool {
        self.flags.contains_key(flag)
    }

    pub fn value(&self, flag: &str) -> Option<&str> {
        self.flags.get(flag).and_then(|v| v.as_deref())
    }

    /// The one positional argument the subcommand takes.
    pub fn single(&self, what: &str) -> Result<&str, CliError> {
        match self.positional.as_slice() {
            [one] => Ok(one),
            [] => Err(CliError::Usage(format!("{what} is missing"))),
            [_, extra, ..] => Err(CliError::Usage(format!(
                "unexpected argument {extra:?} (one {what} only)"
            ))),
        }
    }
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
    fn flags_in_both_forms_and_bad_ones_refused() {
        let spec = [("--json", false), ("--older-than", true)];
        let p = Parsed::new(
            &strings(&["a.conflist", "--older-than", "5m", "--json"]),
            &spec,
        )
        .unwrap();
        assert_eq!(p.single("CONFLIST").unwrap(), "a.conflist");
        assert_eq!(p.value("--older-than"), Some("5m"));
        assert!(p.has("--json"));
        let p = Parsed::new(&strings(&["--older-than=1h", "x"]), &spec).unwrap();
        assert_eq!(p.value("--older-than"), Some("1h"));
        for bad in [
            &["x", "--nope"][..],
            &["x", "--older-than"],
            &["x", "--json=yes"],
            &["x", "--json", "--json"],
        ] {
            assert!(
                matches!(Parsed::new(&strings(bad), &spec), Err(CliError::Usage(_))),
                "{bad:?}"
            );
        }
        let p = Parsed::new(&strings(&["a", "b"]), &spec).unwrap();
        assert!(matches!(p.single("CONFLIST"), Err(CliError::Usage(_))));
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
