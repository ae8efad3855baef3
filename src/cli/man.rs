//! academy(8), the manual page, in roff with the man macros, from definitions.rs:
//! `academy man` prints it and `make build` writes it to target/release/academy.8.

use super::definitions::{self, Command};
use super::help::flag_words;

pub fn page() -> String {
    let mut roff = format!(
        ".TH ACADEMY 8 \"\" \"academy {}\" \"System Administration\"\n",
        env!("CARGO_PKG_VERSION")
    );
    // Flags and paths are long words: hyphenated or stretched to a justified line they
    // read worse than a ragged right margin.
    roff.push_str(".nh\n.ad l\n");
    roff.push_str(&format!(
        ".SH NAME\nacademy \\- {}\n",
        text(definitions::ABOUT)
    ));
    roff.push_str(".SH SYNOPSIS\n.B academy\n.I SUBCOMMAND\n.RI [ ARGS ...]\n.br\n");
    roff.push_str(".B academy help\n.RI [ SUBCOMMAND ]\n.br\n.B academy \\-\\-version\n");
    roff.push_str(".SH DESCRIPTION\n");
    for paragraph in definitions::OVERVIEW {
        roff.push_str(&format!(".PP\n{}\n", text(paragraph)));
    }
    roff.push_str(".SH OPTIONS\n");
    for (short, long, help) in definitions::GLOBAL_FLAGS {
        roff.push_str(&format!(
            ".TP\n.BR {} \", \" {}\n{}\n",
            text(short),
            text(long),
            text(help)
        ));
    }
    roff.push_str(".SH SUBCOMMANDS\n");
    for c in definitions::visible() {
        roff.push_str(&subcommand(c));
    }
    roff.push_str(".SH EXIT STATUS\n");
    for (status, meaning) in definitions::EXIT_STATUS {
        roff.push_str(&format!(".TP\n.B {status}\n{}\n", text(meaning)));
    }
    roff.push_str(concat!(
        ".SH ENVIRONMENT\n.TP\n.B CNI_COMMAND\n",
        "Set by a runtime: academy is then a CNI plugin (ADD, DEL, CHECK, GC, STATUS, VERSION), ",
        "reads its network config on stdin and answers in CNI JSON on stdout; ",
        "its arguments are ignored and none of the subcommands runs.\n",
        ".SH FILES\n.TP\n.I /etc/cni/net.d\n",
        "The CNI config folder restore and watch read by default, and install writes into.\n",
        ".TP\n.I /opt/cni/bin/academy\nWhere install copies the binary by default.\n",
        ".SH SEE ALSO\n.BR nft (8),\n.BR podman-network (1),\n.BR containerd (8)\n",
    ));
    roff
}

/// One subcommand: its synopsis as the tag, then its description and flags.
fn subcommand(c: &Command) -> String {
    // .TP takes the one line after it as the tag.
    let mut roff = format!(".TP\n\\fBacademy {}\\fR", text(c.name));
    if !c.synopsis.is_empty() {
        roff.push(' ');
        roff.push_str(&synopsis(c.synopsis));
    }
    roff.push('\n');
    let mut paragraphs = c.description.iter();
    if let Some(first) = paragraphs.next() {
        roff.push_str(&format!("{}\n", text(first)));
    }
    if !c.aliases.is_empty() {
        roff.push_str(&format!("(Also called {}.)\n", text(&c.aliases.join(", "))));
    }
    for paragraph in paragraphs {
        roff.push_str(&format!(".IP\n{}\n", text(paragraph)));
    }
    if !c.flags.is_empty() {
        roff.push_str(".RS\n");
        for flag in c.flags {
            roff.push_str(&format!(
                ".TP\n.B {}\n{}\n",
                text(&flag_words(flag)),
                text(flag.help)
            ));
        }
        roff.push_str(".RE\n");
    }
    roff
}

/// A synopsis in the man page's convention: flags in bold, what the user replaces in
/// italics, brackets and bars as they are.
fn synopsis(synopsis: &str) -> String {
    let mut roff = String::new();
    let mut rest = synopsis;
    while let Some(ch) = rest.chars().next() {
        let word_char = |c: char| c.is_ascii_alphanumeric() || c == '-';
        let len = if word_char(ch) {
            rest.find(|c| !word_char(c)).unwrap_or(rest.len())
        } else {
            ch.len_utf8()
        };
        let (token, tail) = rest.split_at(len);
        if token.starts_with('-') {
            roff.push_str(&format!("\\fB{}\\fR", escape(token)));
        } else if word_char(ch) {
            roff.push_str(&format!("\\fI{}\\fR", escape(token)));
        } else {
            roff.push_str(&escape(token));
        }
        rest = tail;
    }
    roff
}

/// Text as roff prints it literally: a backslash is roff's escape and a '-' would be a
/// hyphen (not the minus a flag is typed with) ...
fn escape(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

/// ... and a line starting with '.' or '\'' would be read as a request.
fn text(s: &str) -> String {
    let escaped = escape(s);
    let mut out = String::new();
    for (i, line) in escaped.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_specials_are_escaped() {
        assert_eq!(text("--conf-dir"), "\\-\\-conf\\-dir");
        assert_eq!(text(".conflist"), "\\&.conflist");
        assert_eq!(text("a\\b"), "a\\eb");
    }

    #[test]
    fn a_synopsis_has_its_flags_in_bold_and_its_values_in_italics() {
        assert_eq!(
            synopsis("CONFLIST [--older-than DURATION]..."),
            "\\fICONFLIST\\fR [\\fB\\-\\-older\\-than\\fR \\fIDURATION\\fR]..."
        );
    }

    #[test]
    fn the_page_has_every_section_and_visible_subcommand() {
        let page = page();
        for section in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "SUBCOMMANDS",
            "EXIT STATUS",
        ] {
            assert!(page.contains(&format!("\n.SH {section}\n")), "{section}");
        }
        for c in definitions::COMMANDS {
            assert_eq!(
                page.contains(&format!("\n.TP\n\\fBacademy {}\\fR", text(c.name))),
                !c.hidden,
                "{}",
                c.name
            );
        }
        // No request line is made from help text by accident.
        for line in page.lines() {
            assert!(!line.starts_with('\''), "{line}");
        }
    }
}
