//! The bash completion script, from definitions.rs: `academy completions bash` prints it
//! and `make build` writes it to target/release/academy.bash. It completes subcommand
//! names (aliases too), each subcommand's flags, the values of flags (folders, files, or
//! nothing for free text) and operands.

use super::definitions::{self, Command, Value, ValueKind};

pub fn bash() -> String {
    let mut names: Vec<&str> = Vec::new();
    for c in definitions::visible() {
        names.push(c.name);
        names.extend(c.aliases);
    }
    let mut first: Vec<&str> = names.clone();
    first.push("help");
    for (short, long, _) in definitions::GLOBAL_FLAGS {
        first.extend([*short, *long]);
    }
    let mut script = format!(
        r#"# bash completion for academy(8); written by `academy completions bash` from the
# table its command line is parsed with.

_academy_files() {{ compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")); }}
_academy_dirs() {{ compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$cur")); }}
_academy_words() {{ COMPREPLY=($(compgen -W "$1" -- "$cur")); }}

_academy() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    COMPREPLY=()
    if ((COMP_CWORD == 1)); then
        _academy_words '{first}'
        return
    fi
    case ${{COMP_WORDS[1]}} in
    help)
        ((COMP_CWORD == 2)) && _academy_words '{names}'
        ;;
"#,
        first = first.join(" "),
        names = names.join(" "),
    );
    for c in definitions::visible() {
        script.push_str(&subcommand(c));
    }
    script.push_str("    esac\n}\n\ncomplete -F _academy academy\n");
    script
}

/// One subcommand's case: a flag's value after that flag, else its flags after a '-',
/// else its operand.
fn subcommand(c: &Command) -> String {
    let mut patterns = vec![c.name];
    patterns.extend(c.aliases);
    let mut case = format!("    {})\n", patterns.join("|"));
    let valued: Vec<_> = c
        .flags
        .iter()
        .filter_map(|f| f.value.as_ref().map(|v| (f.name, v)))
        .collect();
    if !valued.is_empty() {
        case.push_str("        case $prev in\n");
        for (name, value) in valued {
            case.push_str(&format!("        {name}) {}; return ;;\n", complete(value)));
        }
        case.push_str("        esac\n");
    }
    let mut flags: Vec<&str> = c.flags.iter().map(|f| f.name).collect();
    flags.extend(["-h", "--help"]);
    case.push_str(&format!(
        "        if [[ $cur == -* ]]; then\n            _academy_words '{}'\n",
        flags.join(" ")
    ));
    if let Some(operand) = &c.operand {
        case.push_str(&format!(
            "        else\n            {}\n",
            complete(&operand.value)
        ));
    }
    case.push_str("        fi\n        ;;\n");
    case
}

/// The command that fills COMPREPLY with candidates for `value`.
fn complete(value: &Value) -> String {
    match value.kind {
        ValueKind::File => "_academy_files".into(),
        ValueKind::Dir => "_academy_dirs".into(),
        ValueKind::Text => ":".into(),
        ValueKind::OneOf(words) => format!("_academy_words '{}'", words.join(" ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script puts names and words between single quotes as they are: none may
    /// need quoting.
    #[test]
    fn every_word_the_script_quotes_is_plain() {
        let plain = |w: &str| w.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-');
        for c in definitions::COMMANDS {
            assert!(
                plain(c.name) && c.aliases.iter().all(|a| plain(a)),
                "{}",
                c.name
            );
            for f in c.flags {
                assert!(plain(f.name), "{}", f.name);
            }
            let values = c.flags.iter().filter_map(|f| f.value.as_ref());
            for v in values.chain(c.operand.as_ref().map(|o| &o.value)) {
                if let ValueKind::OneOf(words) = v.kind {
                    assert!(words.iter().all(|w| plain(w)), "{words:?}");
                }
            }
        }
    }

    #[test]
    fn each_visible_subcommand_has_its_case() {
        let script = bash();
        for c in definitions::COMMANDS {
            let case = format!("\n    {}", c.name);
            assert_eq!(script.contains(&case), !c.hidden, "{}", c.name);
        }
        assert!(script.contains("    restore|restore-nat)\n"), "{script}");
        assert!(script.contains("        --conf-dir) _academy_dirs; return ;;\n"));
    }
}
