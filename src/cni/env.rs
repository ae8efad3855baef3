//! The CNI_* environment: read once, validated per command before anything else runs.

use crate::cni::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn name(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }
}

/// Longest container id academy accepts: it becomes part of a file name (255 bytes) and
/// of the host veth's alias (255 bytes), and runtimes use 64.
const MAX_CONTAINER_ID: usize = 200;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    pub command: Command,
    pub container_id: String,
    /// Empty when not given (DEL may come without it).
    pub netns: String,
    pub ifname: String,
    pub args: String,
    pub path: String,
}

impl Env {
    /// Reads and validates the environment through `get` (std::env::var in the binary).
    /// Ok(None) when CNI_COMMAND is absent: a person ran the binary by hand.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Env>> {
        let command = match get("CNI_COMMAND").as_deref() {
            None | Some("") => return Ok(None),
            Some("ADD") => Command::Add,
            Some("DEL") => Command::Del,
            Some("CHECK") => Command::Check,
            Some("GC") => Command::Gc,
            Some("STATUS") => Command::Status,
            Some("VERSION") => Command::Version,
            Some(other) => {
                return Err(
                    Error::env(format!("CNI_COMMAND {other:?} is not a CNI command"))
                        .details("use one of ADD, DEL, CHECK, GC, STATUS, VERSION"),
                )
            }
        };
        let var = |name: &str| get(name).unwrap_or_default();
        let env = Env {
            command,
            container_id: var("CNI_CONTAINERID"),
            netns: var("CNI_NETNS"),
            ifname: var("CNI_IFNAME"),
            args: var("CNI_ARGS"),
            path: var("CNI_PATH"),
        };
        env.validate()?;
        Ok(Some(env))
    }

    /// VERSION is answered whatever else the environment holds (runtimes probe with dummy
    /// values); GC and STATUS name no attachment; the others need one.
    fn validate(&self) -> Result<()> {
        let (needs_attachment, needs_netns) = match self.command {
            Command::Version | Command::Gc | Command::Status => return Ok(()),
            Command::Add | Command::Check => (true, true),
            Command::Del => (true, false),
        };
        if needs_attachment {
            validate_container_id(&self.container_id)?;
            validate_ifname(&self.ifname)?;
        }
        if needs_netns && self.netns.is_empty() {
            return Err(missing("CNI_NETNS", self.command));
        }
        Ok(())
    }
}

fn missing(var: &str, command: Command) -> Error {
    Error::env(format!(
        "{var} is required for {} but is not set",
        command.name()
    ))
}

/// The spec's charset: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
pub fn validate_container_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::env("CNI_CONTAINERID is required but is not set"));
    }
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !first_ok || !rest_ok {
        return Err(Error::env(format!(
            "CNI_CONTAINERID {id:?} is not a valid container id"
        ))
        .details("it must start with a letter or digit and contain only letters, digits, '_', '.' and '-'"));
    }
    if id.len() > MAX_CONTAINER_ID {
        return Err(Error::env(format!(
            "CNI_CONTAINERID is {} characters long; academy accepts at most {MAX_CONTAINER_ID}",
            id.len()
        )));
    }
    Ok(())
}

/// The kernel's rules for an interface name, checked before any request is made.
pub fn validate_ifname(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::env("CNI_IFNAME is required but is not set"));
    }
    if let Some(why) = interface_name_problem(name) {
        return Err(Error::env(format!("CNI_IFNAME {name:?} {why}")));
    }
    Ok(())
}

/// Why `name` cannot be a Linux interface name, or None when it can.
pub fn interface_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > 15 {
        Some("is longer than 15 bytes, the kernel's limit for interface names")
    } else if name == "." || name == ".." {
        Some("is not a usable interface name ('.' and '..' are reserved)")
    } else if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c == '\0')
    {
        Some("contains '/', ':', NUL or whitespace, which interface names may not")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> Result<Option<Env>> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn no_command_means_run_by_hand() {
        assert_eq!(env(&[]), Ok(None));
    }

    #[test]
    fn version_ignores_everything_else() {
        let e = env(&[
            ("CNI_COMMAND", "VERSION"),
            ("CNI_IFNAME", "a/b"),
            ("CNI_CONTAINERID", "!"),
        ]);
        assert_eq!(e.unwrap().unwrap().command, Command::Version);
    }

    #[test]
    fn add_requires_each_variable_by_name() {
        let base = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/x"),
            ("CNI_IFNAME", "eth0"),
        ];
        assert!(env(&base).is_ok());
        for skip in 1..base.len() {
            let vars: Vec<_> = base
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, v)| *v)
                .collect();
            let err = env(&vars).unwrap_err();
            assert_eq!(err.code, 4);
            assert!(err.msg.contains(base[skip].0), "{}", err.msg);
        }
    }

    #[test]
    fn del_does_not_need_a_netns() {
        assert!(env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0")
        ])
        .is_ok());
    }

    #[test]
    fn container_id_charset() {
        for ok in ["a", "A9", "abc_def.g-h", "0123"] {
            assert!(validate_container_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "_a", ".a", "a b", "a/b", "a:b", "é"] {
            assert_eq!(validate_container_id(bad).unwrap_err().code, 4, "{bad}");
        }
        assert!(validate_container_id(&"a".repeat(201)).is_err());
    }

    #[test]
    fn ifname_rules() {
        for ok in ["eth0", "net1", "a", "x".repeat(15).as_str(), "a.b", "a-b_c"] {
            assert!(validate_ifname(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "a\tb", &"x".repeat(16)] {
            assert_eq!(validate_ifname(bad).unwrap_err().code, 4, "{bad:?}");
        }
    }

    #[test]
    fn unknown_command_is_code_4() {
        let err = env(&[("CNI_COMMAND", "ATTACH")]).unwrap_err();
        assert_eq!(err.code, 4);
        assert!(err.msg.contains("ATTACH"));
    }
}
