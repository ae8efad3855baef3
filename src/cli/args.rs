//! A subcommand's arguments checked against its row of definitions.rs: every flag known
//! and given as often as it may be, a value where one is due, the operands as many as the
//! subcommand takes. Anything wrong is a usage error naming the argument (exit 2), before
//! the subcommand does anything.

use std::collections::HashMap;

use super::definitions::{Command, Flag, ValueKind};
use super::CliError;

/// The operands and flags of a command line that passed its definition.
#[derive(Debug)]
pub struct Parsed {
    operands: Vec<String>,
    /// Each flag given, with its values in order (none for a flag without a value).
    flags: HashMap<&'static str, Vec<String>>,
}

impl Parsed {
    /// `args` are those after the subcommand's name. `--` ends the flags: what follows
    /// is an operand even when it starts with '-'.
    pub fn new(args: &[String], command: &Command) -> Result<Parsed, CliError> {
        let mut parsed = Parsed {
            operands: Vec::new(),
            flags: HashMap::new(),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                parsed.operands.extend(it.by_ref().cloned());
                break;
            }
            if !arg.starts_with('-') || arg == "-" {
                parsed.operands.push(arg.clone());
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            let flag = known_flag(command, name)?;
            let value = match (&flag.value, inline) {
                (Some(_), Some(v)) => Some(v),
                (Some(v), None) => Some(it.next().cloned().ok_or_else(|| {
                    CliError::Usage(format!("{} needs a value ({})", flag.name, v.name))
                })?),
                (None, Some(_)) => {
                    return Err(CliError::Usage(format!("{} takes no value", flag.name)))
                }
                (None, None) => None,
            };
            if parsed.flags.contains_key(flag.name) && !flag.repeatable {
                return Err(CliError::Usage(format!("{} is given twice", flag.name)));
            }
            parsed.flags.entry(flag.name).or_default().extend(value);
        }
        parsed.check_operands(command)?;
        Ok(parsed)
    }

    fn check_operands(&self, command: &Command) -> Result<(), CliError> {
        let Some(operand) = &command.operand else {
            return match self.operands.first() {
                Some(extra) => Err(CliError::Usage(format!(
                    "unexpected argument {extra:?} (academy {} takes no operand)",
                    command.name
                ))),
                None => Ok(()),
            };
        };
        let name = operand.value.name;
        match self.operands.as_slice() {
            [] if operand.required => return Err(CliError::Usage(format!("{name} is missing"))),
            [_, extra, ..] if !operand.many => {
                return Err(CliError::Usage(format!(
                    "unexpected argument {extra:?} (one {name} only)"
                )))
            }
            _ => {}
        }
        if let ValueKind::OneOf(words) = operand.value.kind {
            if let Some(bad) = self.operands.iter().find(|o| !words.contains(&o.as_str())) {
                return Err(CliError::Usage(format!(
                    "{name} {bad:?} is not one of {}",
                    words.join(", ")
                )));
            }
        }
        Ok(())
    }

    pub fn has(&self, flag: &str) -> bool {
        self.flags.contains_key(flag)
    }

    /// The value of a flag given once.
    pub fn value(&self, flag: &str) -> Option<&str> {
        self.flags
            .get(flag)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// Every value of a repeatable flag, in the order given.
    pub fn values(&self, flag: &str) -> &[String] {
        self.flags.get(flag).map_or(&[], Vec::as_slice)
    }

    pub fn operands(&self) -> &[String] {
        &self.operands
    }

    /// The operand of a subcommand that takes exactly one (new() made sure it is there).
    pub fn operand(&self) -> &str {
        self.operands
            .first()
            .expect("a subcommand whose operand is required has one")
    }
}

fn known_flag(command: &Command, name: &str) -> Result<&'static Flag, CliError> {
    // `command` is a row of the static table; its flags live as long.
    let flags: &'static [Flag] = command.flags;
    flags.iter().find(|f| f.name == name).ok_or_else(|| {
        let known: Vec<&str> = flags.iter().map(|f| f.name).collect();
        CliError::Usage(if known.is_empty() {
            format!(
                "unknown flag {name:?} (academy {} takes none)",
                command.name
            )
        } else {
            format!(
                "unknown flag {name:?} (academy {} takes {})",
                command.name,
                known.join(", ")
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::definitions::{Operand, Value};

    const TEXT: Option<Value> = Some(Value {
        name: "N",
        kind: ValueKind::Text,
    });
    const SAMPLE: Command = Command {
        name: "sample",
        aliases: &[],
        synopsis: "WORD... [--json] [--older-than N] [--tag N]...",
        operand: Some(Operand {
            value: Value {
                name: "WORD",
                kind: ValueKind::OneOf(&["a", "b", "-x"]),
            },
            required: true,
            many: true,
        }),
        flags: &[
            Flag {
                name: "--json",
                value: None,
                repeatable: false,
                help: "",
            },
            Flag {
                name: "--older-than",
                value: TEXT,
                repeatable: false,
                help: "",
            },
            Flag {
                name: "--tag",
                value: TEXT,
                repeatable: true,
                help: "",
            },
        ],
        summary: "",
        description: &[],
        hidden: true,
    };

    fn parse(args: &[&str], command: &Command) -> Result<Parsed, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Parsed::new(&args, command).map_err(|e| match e {
            CliError::Usage(m) => m,
            CliError::Failed(m) => panic!("a parse fails only as a usage error: {m}"),
        })
    }

    #[test]
    fn flags_in_both_forms_repeated_where_allowed_and_operands_after_dashdash() {
        let p = parse(
            &[
                "a",
                "--older-than",
                "5m",
                "--json",
                "--tag=x",
                "--tag",
                "y",
                "--",
                "-x",
            ],
            &SAMPLE,
        )
        .unwrap();
        assert_eq!(p.operands(), ["a", "-x"]);
        assert_eq!(p.operand(), "a");
        assert_eq!(p.value("--older-than"), Some("5m"));
        assert!(p.has("--json") && !p.has("--nope"));
        assert_eq!(p.values("--tag"), ["x", "y"]);
        assert_eq!(p.values("--older-than"), ["5m"]);
        assert!(p.values("--json").is_empty());
        let p = parse(&["--older-than=1h", "b"], &SAMPLE).unwrap();
        assert_eq!(p.value("--older-than"), Some("1h"));
    }

    #[test]
    fn each_wrong_line_is_a_usage_error_naming_what_is_wrong() {
        for (bad, needle) in [
            (&["a", "--nope"][..], "unknown flag \"--nope\""),
            (&["a", "--nope=1"], "unknown flag \"--nope\""),
            (&["a", "-n"], "unknown flag \"-n\""),
            (&["a", "--older-than"], "--older-than needs a value (N)"),
            (&["a", "--json=yes"], "--json takes no value"),
            (&["a", "--json", "--json"], "--json is given twice"),
            (&["a", "--older-than=1", "--older-than=2"], "given twice"),
            (&[], "WORD is missing"),
            (&["c"], "WORD \"c\" is not one of a, b, -x"),
        ] {
            let e = parse(bad, &SAMPLE).unwrap_err();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
        let list = crate::cli::definitions::find("list").unwrap();
        let e = parse(&["a", "b"], list).unwrap_err();
        assert!(
            e.contains("unexpected argument \"b\" (one CONFLIST only)"),
            "{e}"
        );
        let e = parse(&["a", "--bogus"], list).unwrap_err();
        assert!(e.contains("(academy list takes --json)"), "{e}");
        let watch = crate::cli::definitions::find("watch").unwrap();
        let e = parse(&["x"], watch).unwrap_err();
        assert!(e.contains("takes no operand"), "{e}");
        let man = crate::cli::definitions::find("man").unwrap();
        let e = parse(&["--x"], man).unwrap_err();
        assert!(e.contains("takes none"), "{e}");
    }
}
