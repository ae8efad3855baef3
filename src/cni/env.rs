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
    /// CNI_ARGS as the runtime sent it: bytes, since only the keys academy reads (IP=,
    /// MAC=) need to be text, and a delegated IPAM plugin gets them unchanged.
    pub args: Vec<u8>,
    pub path: String,
}

impl Env {
    /// Reads and validates the environment through `get` (the variable's bytes; in the
    /// binary, std::env::var_os). Ok(None) when CNI_COMMAND is absent: a person ran the
    /// binary by hand. A variable that must be text and is not UTF-8 is code 4 naming it,
    /// never read as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<Vec<u8>>) -> Result<Option<Env>> {
        let command = match get("CNI_COMMAND").as_deref() {
            None | Some(b"") => return Ok(None),
            Some(b"ADD") => Command::Add,
            Some(b"DEL") => Command::Del,
            Some(b"CHECK") => Command::Check,
            Some(b"GC") => Command::Gc,
            Some(b"STATUS") => Command::Status,
            Some(b"VERSION") => Command::Version,
            Some(other) => {
                return Err(Error::env(format!(
                    "CNI_COMMAND {:?} is not a CNI command",
                    String::from_utf8_lossy(other)
                ))
                .details("use one of ADD, DEL, CHECK, GC, STATUS, VERSION"))
            }
        };
        let mut not_text = None;
        let mut text = |name: &'static str| match String::from_utf8(get(name).unwrap_or_default()) {
            Ok(s) => s,
            Err(e) => {
                not_text.get_or_insert((name, String::from_utf8_lossy(e.as_bytes()).into_owned()));
                String::new()
            }
        };
        let env = Env {
            command,
            container_id: text("CNI_CONTAINERID"),
            netns: text("CNI_NETNS"),
            ifname: text("CNI_IFNAME"),
            path: text("CNI_PATH"),
            args: get("CNI_ARGS").unwrap_or_default(),
        };
        // VERSION is answered whatever the rest holds (see validate).
        if let (Some((name, lossy)), false) = (not_text, command == Command::Version) {
            return Err(
                Error::env(format!("{name} {lossy:?} is not valid UTF-8")).details(format!(
                    "academy reads {name} as text; fix the runtime's value"
                )),
            );
        }
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
        let map: HashMap<String, Vec<u8>> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        Env::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn non_utf8_is_named_never_unset() {
        let base: Vec<(&str, Vec<u8>)> = vec![
            ("CNI_COMMAND", b"ADD".to_vec()),
            ("CNI_CONTAINERID", b"c1".to_vec()),
            ("CNI_NETNS", b"/x".to_vec()),
            ("CNI_IFNAME", b"eth0".to_vec()),
            ("CNI_PATH", b"/opt".to_vec()),
        ];
        let with = |var: &str, value: &[u8]| {
            let mut map: HashMap<String, Vec<u8>> = base
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            map.insert(var.to_string(), value.to_vec());
            Env::from_lookup(|k| map.get(k).cloned())
        };
        for var in [
            "CNI_COMMAND",
            "CNI_CONTAINERID",
            "CNI_NETNS",
            "CNI_IFNAME",
            "CNI_PATH",
        ] {
            let err = with(var, b"a\xffb").unwrap_err();
            assert_eq!(err.code, 4, "{var}");
            assert!(err.msg.contains(var), "{var}: {}", err.msg);
            assert!(!err.msg.contains("not set"), "{var}: {}", err.msg);
        }
        // CNI_ARGS stays bytes; VERSION ignores everything else.
        let env = with("CNI_ARGS", b"K=\xff;IP=10.0.0.1").unwrap().unwrap();
        assert_eq!(env.args, b"K=\xff;IP=10.0.0.1");
        let v = with("CNI_COMMAND", b"VERSION").unwrap().unwrap();
        assert_eq!(v.command, Command::Version);
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
