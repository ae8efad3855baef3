//! The text of `academy help`, `academy help SUBCOMMAND` (= `academy SUBCOMMAND --help`)
//! and `academy --version`, from definitions.rs.

use super::definitions::{self, Command, Flag};

/// Where help text is wrapped: a terminal's 80 columns.
const WIDTH: usize = 80;

/// `academy help`: every subcommand in one line, the global options, where to look next.
pub fn overview() -> String {
    let mut text = String::from(
        "usage: academy SUBCOMMAND [ARGS...]\n       academy help [SUBCOMMAND]\n       academy --version\n\n",
    );
    for paragraph in definitions::OVERVIEW {
        text.push_str(&wrap(paragraph, "", ""));
        text.push('\n');
    }
    text.push_str("subcommands:\n");
    for c in definitions::visible() {
        text.push_str(&wrap(
            c.summary,
            &format!("  {:<13}", c.name),
            &" ".repeat(15),
        ));
    }
    text.push_str("\noptions:\n");
    for (short, long, help) in definitions::GLOBAL_FLAGS {
        text.push_str(&item(&format!("{short}, {long}"), help));
    }
    text.push_str("\nacademy help SUBCOMMAND (or academy SUBCOMMAND --help) gives its flags.\n");
    text
}

/// `academy help NAME`: its usage line, its description and each flag.
pub fn command(c: &Command) -> String {
    let mut text = format!("{}\n", usage(c));
    if !c.aliases.is_empty() {
        text.push_str(&format!(
            "       (also: academy {})\n",
            c.aliases.join(", academy ")
        ));
    }
    text.push('\n');
    for paragraph in c.description {
        text.push_str(&wrap(paragraph, "", ""));
        text.push('\n');
    }
    text.push_str("options:\n");
    for flag in c.flags {
        text.push_str(&item(&flag_words(flag), flag.help));
    }
    text.push_str(&item("-h, --help", "print this help"));
    text
}

/// The usage line a usage error ends with; a long synopsis goes on below, under
/// "academy", broken only between its bracketed groups.
pub fn usage(c: &Command) -> String {
    let first = format!("usage: academy {}", c.name);
    let indent = " ".repeat("usage:".len());
    let mut text = String::new();
    let mut line = first;
    for group in groups(c.synopsis) {
        if line.len() + 1 + group.len() > WIDTH && line != indent {
            text.push_str(&line);
            text.push('\n');
            line = indent.clone();
        }
        line.push(' ');
        line.push_str(group);
    }
    text.push_str(&line);
    text
}

/// `a [b | c [d]] e` as `a`, `[b | c [d]]`, `e`: the words at bracket depth 0.
fn groups(synopsis: &str) -> Vec<&str> {
    let mut groups = Vec::new();
    let (mut depth, mut start) = (0usize, None);
    for (i, ch) in synopsis.char_indices() {
        match ch {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ' ' if depth == 0 => {
                if let Some(s) = start.take() {
                    groups.push(&synopsis[s..i]);
                }
                continue;
            }
            _ => {}
        }
        start.get_or_insert(i);
    }
    if let Some(s) = start {
        groups.push(&synopsis[s..]);
    }
    groups
}

/// `--flag VALUE`, as help and the man page name a flag.
pub fn flag_words(flag: &Flag) -> String {
    match &flag.value {
        Some(v) => format!("{} {}", flag.name, v.name),
        None => flag.name.to_string(),
    }
}

/// `academy --version`: the version, the commit (build.rs) and the CNI versions spoken.
pub fn version() -> String {
    format!(
        "academy {}\ngit commit {}\nCNI versions {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("ACADEMY_GIT_COMMIT"),
        crate::cni::version::SUPPORTED.join(", ")
    )
}

/// A term and its help: on one line when the term is short, else the help below it.
fn item(term: &str, help: &str) -> String {
    const TERM: usize = 24;
    let indent = " ".repeat(TERM + 2);
    if term.len() < TERM {
        let first = format!("  {term:<TERM$}");
        wrap(help, &first, &indent)
    } else {
        format!("  {term}\n{}", wrap(help, &indent, &indent))
    }
}

/// `text` filled to WIDTH columns, the first line after `first`, the others after `rest`.
fn wrap(text: &str, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_lines_fit_and_keep_every_word() {
        let text = "one two three four five six seven eight nine ten ".repeat(20);
        let wrapped = wrap(&text, "  x  ", "     ");
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= WIDTH),
            "{wrapped}"
        );
        assert!(wrapped.starts_with("  x  one two"));
        assert!(wrapped.lines().skip(1).all(|l| l.starts_with("     ")));
        let words: Vec<&str> = wrapped.split_whitespace().skip(1).collect();
        assert_eq!(words, text.split_whitespace().collect::<Vec<_>>());
    }

    #[test]
    fn a_long_synopsis_breaks_between_groups() {
        assert_eq!(
            groups("A [--b X | --c [--d Y]...] [--e]"),
            ["A", "[--b X | --c [--d Y]...]", "[--e]"]
        );
        let install = definitions::find("install").unwrap();
        assert_eq!(
            usage(install),
            "usage: academy install [--bin-dir DIR] [--conf-dir DIR]\n       [--conflist FILE | --template [--cluster-cidr CIDR[,CIDR]]...]"
        );
        assert_eq!(
            usage(definitions::find("man").unwrap()),
            "usage: academy man"
        );
    }

    #[test]
    fn each_subcommand_s_help_names_each_of_its_flags() {
        for c in definitions::COMMANDS {
            let text = command(c);
            assert!(
                text.starts_with(&format!("usage: academy {}", c.name)),
                "{text}"
            );
            for flag in c.flags {
                assert!(
                    text.contains(&format!("\n  {}", flag_words(flag))),
                    "{text}"
                );
            }
            assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        }
        let text = overview();
        for c in definitions::visible() {
            assert!(text.contains(&format!("\n  {:<13}", c.name)), "{text}");
        }
        assert!(
            !text.contains("\n  man "),
            "a hidden subcommand is listed:\n{text}"
        );
    }

    #[test]
    fn the_version_names_the_commit_and_every_cni_version() {
        let text = version();
        assert!(text.starts_with(&format!("academy {}\n", env!("CARGO_PKG_VERSION"))));
        let commit = text
            .lines()
            .nth(1)
            .unwrap()
            .strip_prefix("git commit ")
            .unwrap();
        let sha = commit
            .strip_suffix(" (with uncommitted changes)")
            .unwrap_or(commit);
        assert!(
            sha == "unknown" || (sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit())),
            "{text}"
        );
        assert!(text.contains("1.1.0") && text.contains("0.3.0"), "{text}");
    }
}
