//! The command line's conventions (issue 32): `--version`, `help [SUBCOMMAND]` and
//! `--help` on stdout with exit 0; usage errors on stderr with exit 2 and nothing on
//! stdout; academy(8) that groff formats without a warning; a bash completion that bash
//! parses and that offers every subcommand. And with CNI_COMMAND set, none of it: the
//! arguments are a runtime's business and ignored.

use crate::common::*;

/// Every subcommand a person is shown; `academy help` must list exactly these.
const SUBCOMMANDS: &[&str] = &[
    "convert",
    "install",
    "list",
    "reclaim",
    "restore",
    "status",
    "watch",
    "completions",
];

fn academy(args: &[&str]) -> Out {
    run(plugin(), args, &[])
}

#[test]
fn version_names_the_version_the_commit_and_the_cni_versions() {
    let git = which("git");
    let head = run(
        &git,
        &["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"],
        &[],
    );
    assert_eq!(head.code, 0, "{head}");
    for flag in ["--version", "-V"] {
        let out = academy(&[flag]);
        assert_eq!(out.code, 0, "{out}");
        assert!(out.stderr.is_empty(), "{out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            lines[0],
            format!("academy {}", env!("CARGO_PKG_VERSION")),
            "{out}"
        );
        let commit = lines[1].strip_prefix("git commit ").expect("a commit line");
        assert_eq!(
            commit.split(' ').next(),
            Some(head.stdout.trim()),
            "the binary says another commit than HEAD:\n{out}"
        );
        assert_eq!(
            lines[2], "CNI versions 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0",
            "{out}"
        );
    }
}

#[test]
fn help_and_dash_dash_help_print_each_subcommand_s_usage_on_stdout() {
    let overview = academy(&["help"]);
    assert_eq!(overview.code, 0, "{overview}");
    assert!(overview.stderr.is_empty(), "{overview}");
    let listed: Vec<&str> = overview
        .stdout
        .lines()
        .skip_while(|l| *l != "subcommands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(listed, SUBCOMMANDS, "{overview}");
    for flag in ["--help", "-h"] {
        assert_eq!(academy(&[flag]).stdout, overview.stdout);
    }
    for name in SUBCOMMANDS {
        let help = academy(&["help", name]);
        assert_eq!(help.code, 0, "{help}");
        assert!(help.stderr.is_empty(), "{help}");
        assert!(
            help.stdout.starts_with(&format!("usage: academy {name}")),
            "{help}"
        );
        assert!(help.stdout.contains("\n  -h, --help "), "{help}");
        // Help wins wherever it is on the line, even beside a wrong argument.
        for args in [
            &[*name, "--help"][..],
            &[name, "-h"],
            &[name, "--bogus", "-h"],
        ] {
            let out = academy(args);
            assert_eq!(out.code, 0, "{args:?}: {out}");
            assert_eq!(out.stdout, help.stdout, "{args:?}");
        }
    }
    let alias = academy(&["restore-nat", "--help"]);
    assert_eq!(alias.stdout, academy(&["help", "restore"]).stdout);
    assert!(
        alias.stdout.contains("(also: academy restore-nat)"),
        "{alias}"
    );
    for kind in [
        "outbound NAT",
        "published",
        "MAC filter",
        "FORWARD",
        "bandwidth",
        "isolation",
    ] {
        assert!(
            alias.stdout.contains(kind),
            "restore's help omits {kind}:\n{alias}"
        );
    }
}

#[test]
fn usage_errors_exit_2_name_the_culprit_on_stderr_and_print_nothing_on_stdout() {
    let mut cases: Vec<(Vec<&str>, String)> = SUBCOMMANDS
        .iter()
        .map(|name| {
            (
                vec![*name, "--bogus"],
                "unknown flag \"--bogus\"".to_string(),
            )
        })
        .collect();
    cases.extend([
        (
            vec!["frobnicate"],
            "unknown subcommand \"frobnicate\"".into(),
        ),
        (
            vec!["--frobnicate"],
            "unknown option \"--frobnicate\"".into(),
        ),
        (
            vec!["help", "frobnicate"],
            "unknown subcommand \"frobnicate\"".into(),
        ),
        (vec!["list"], "CONFLIST is missing".into()),
        (vec!["list", "a", "b"], "unexpected argument \"b\"".into()),
        (
            vec!["watch", "--conf-dir"],
            "--conf-dir needs a value".into(),
        ),
        (
            vec!["completions", "fish"],
            "SHELL \"fish\" is not one of bash".into(),
        ),
        (
            vec!["restore-nat", "--bogus"],
            "unknown flag \"--bogus\"".into(),
        ),
    ]);
    for (args, culprit) in cases {
        let out = academy(&args);
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert!(out.stdout.is_empty(), "{args:?} printed on stdout:\n{out}");
        assert!(out.stderr.contains(&culprit), "{args:?}: {out}");
        assert!(out.stderr.contains("usage: academy"), "{args:?}: {out}");
    }
}

#[test]
fn restore_nat_still_runs_restore() {
    let lab = Lab::new("cliresto");
    let dir = lab.root.join("empty-conf-dir");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["restore", "restore-nat"] {
        let out = academy(&[name, "--conf-dir", dir.to_str().unwrap()]);
        assert_eq!(out.code, 0, "{name}: {out}");
        assert!(
            out.stderr
                .contains("academy restore: no academy network found"),
            "{name}: {out}"
        );
    }
}

#[test]
fn with_cni_command_set_the_arguments_change_nothing() {
    let version = Call::bare().env("CNI_COMMAND", "VERSION").stdin("{}");
    for args in [&["--version"][..], &["help"], &["--bogus"], &["list", "x"]] {
        let out = version.spawn(plugin(), args);
        assert_eq!(out.code, 0, "{args:?}: {out}");
        let v = out.json();
        assert_eq!(v["supportedVersions"][4], "1.1.0", "{args:?}: {out}");
    }
    // An unknown verb still fails as CNI JSON on stdout, not as a usage error.
    let out = Call::bare()
        .env("CNI_COMMAND", "FROB")
        .spawn(plugin(), &["--version"]);
    assert_eq!(out.code, 1, "{out}");
    assert!(out.json()["code"].is_u64(), "{out}");
}

#[test]
fn the_man_page_formats_without_a_warning_and_has_every_subcommand() {
    let page = academy(&["man"]);
    assert_eq!(page.code, 0, "{page}");
    let groff = which("groff");
    let out = Call::bare()
        .stdin(page.stdout.clone())
        .spawn(&groff, &["-man", "-Tutf8", "-ww", "-P", "-cbou"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.is_empty(), "groff warns:\n{}", out.stderr);
    let text = out.stdout;
    for heading in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "SUBCOMMANDS",
        "EXIT STATUS",
    ] {
        assert!(
            text.contains(&format!("\n{heading}\n")),
            "{heading}:\n{text}"
        );
    }
    assert!(text.starts_with("ACADEMY(8)"), "{text}");
    for name in SUBCOMMANDS {
        assert!(
            text.contains(&format!("\n       academy {name}")),
            "{name}:\n{text}"
        );
    }
    assert!(text.contains("--conf-dir DIR"), "{text}");
    assert!(
        !text.contains("academy man"),
        "the hidden subcommand is in the page"
    );
}

#[test]
fn the_bash_completion_parses_and_completes_subcommands_flags_and_values() {
    let lab = Lab::new("clicompl");
    let script = lab.root.join("academy.bash");
    let out = academy(&["completions", "bash"]);
    assert_eq!(out.code, 0, "{out}");
    std::fs::write(&script, &out.stdout).unwrap();
    let bash = which("bash");
    let parsed = run(&bash, &["-n", script.to_str().unwrap()], &[]);
    assert_eq!(parsed.code, 0, "bash -n: {parsed}");
    std::fs::create_dir_all(lab.root.join("confs")).unwrap();
    // What completion offers for a line, as bash-completion calls the function.
    let offered = |words: &[&str]| {
        let program = format!(
            "source {}; cd {}; COMP_WORDS=({}); COMP_CWORD={}; _academy; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display(),
            lab.root.display(),
            words.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" "),
            words.len() - 1
        );
        let out = run(&bash, &["-c", &program], &[]);
        assert_eq!(out.code, 0, "{words:?}: {out}");
        // printf prints one empty line for an empty COMPREPLY.
        let lines = out.stdout.lines().filter(|l| !l.is_empty());
        lines.map(String::from).collect::<Vec<_>>()
    };
    let first = offered(&["academy", ""]);
    for word in SUBCOMMANDS
        .iter()
        .chain(&["help", "restore-nat", "--version", "-V"])
    {
        assert!(
            first.iter().any(|w| w == word),
            "{word} not offered: {first:?}"
        );
    }
    assert!(!first.iter().any(|w| w == "man"), "{first:?}");
    assert_eq!(
        offered(&["academy", "re"]),
        ["reclaim", "restore", "restore-nat"]
    );
    assert_eq!(
        offered(&["academy", "restore", "--"]),
        ["--conf-dir", "--help"]
    );
    assert_eq!(
        offered(&["academy", "watch", "--conf-dir", "con"]),
        ["confs"]
    );
    assert_eq!(offered(&["academy", "completions", ""]), ["bash"]);
    assert_eq!(offered(&["academy", "help", "w"]), ["watch"]);
    assert!(offered(&["academy", "reclaim", "x", "--older-than", ""]).is_empty());
}
