//! What academy's command line is, as data: every subcommand with its synopsis, operands,
//! flags and help text. The parser (args.rs), `academy help`, the man page (man.rs) and
//! the bash completion (completion.rs) all read this one table, so they cannot disagree.
//!
//! Help text is written as unwrapped paragraphs: help.rs wraps them for a terminal and
//! groff fills them in the man page.

/// One subcommand: `academy NAME SYNOPSIS`.
pub struct Command {
    pub name: &'static str,
    /// Older names still accepted; help and the man page say them, completion offers them.
    pub aliases: &'static [&'static str],
    /// Everything after the name, as the usage line shows it (with the alternatives the
    /// flags alone cannot say: `[--dry-run | --in-place]`).
    pub synopsis: &'static str,
    pub operand: Option<Operand>,
    pub flags: &'static [Flag],
    /// One line, for the list of subcommands.
    pub summary: &'static str,
    /// The paragraphs of its own help and man page section.
    pub description: &'static [&'static str],
    /// Left out of `academy help`'s list, the man page and completion (it makes them).
    pub hidden: bool,
}

/// The positional arguments of a subcommand.
pub struct Operand {
    pub value: Value,
    pub required: bool,
    /// More than one may be given.
    pub many: bool,
}

/// A `--flag`, with or without a value (`--flag VALUE` or `--flag=VALUE`).
pub struct Flag {
    pub name: &'static str,
    pub value: Option<Value>,
    /// Given more than once, each value counts; otherwise a second one is refused.
    pub repeatable: bool,
    pub help: &'static str,
}

/// The value of a flag or operand: its name in usage lines and what completes it.
pub struct Value {
    pub name: &'static str,
    pub kind: ValueKind,
}

pub enum ValueKind {
    File,
    Dir,
    /// Free text (a duration, a CIDR): nothing to complete.
    Text,
    /// One of these words.
    OneOf(&'static [&'static str]),
}

/// The options of `academy` itself, before any subcommand.
pub const GLOBAL_FLAGS: &[(&str, &str, &str)] = &[
    (
        "-h",
        "--help",
        "print the list of subcommands (after a subcommand: its own help)",
    ),
    (
        "-V",
        "--version",
        "print academy's version, the git commit it was built from and the CNI versions it speaks",
    ),
];

pub const ABOUT: &str = "a CNI plugin for Linux bridge networking with a built-in file-backed IPAM";

/// The man page's and `academy help`'s opening paragraphs.
pub const OVERVIEW: &[&str] = &[
    "academy is a CNI plugin: a container runtime (podman, containerd, cnitool) runs it with CNI_COMMAND set and the network config on stdin, and it answers in CNI JSON on stdout. Run without CNI_COMMAND, it is a tool for the node's operator: the subcommands below. Run with neither CNI_COMMAND nor arguments, it prints its name and the CNI versions it speaks.",
    "CONFLIST is a network's own .conflist (or single-plugin .conf): its academy plugin gives the network name, the address store and the bridge, exactly as ADD sees them.",
];

/// What the exit status says, for every subcommand.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "success"),
    ("1", "the work failed (the reason is on stderr)"),
    ("2", "the command line is wrong: an unknown subcommand or flag, a missing or extra argument, a bad value (the reason is on stderr, nothing is changed)"),
];

const CONFLIST: Value = Value {
    name: "CONFLIST",
    kind: ValueKind::File,
};
const ONE_CONFLIST: Option<Operand> = Some(Operand {
    value: CONFLIST,
    required: true,
    many: false,
});
const CONF_DIR: Flag = Flag {
    name: "--conf-dir",
    value: Some(Value {
        name: "DIR",
        kind: ValueKind::Dir,
    }),
    repeatable: false,
    help: "the CNI config folder whose academy networks are meant (default /etc/cni/net.d)",
};
const DRY_RUN: Flag = Flag {
    name: "--dry-run",
    value: None,
    repeatable: false,
    help: "print what would change and change nothing",
};

/// The shells `academy completions` writes a script for.
pub const SHELLS: &[&str] = &["bash"];

pub const COMMANDS: &[Command] = &[
    Command {
        name: "convert",
        aliases: &[],
        synopsis: "CONFLIST [--dry-run | --in-place]",
        operand: ONE_CONFLIST,
        flags: &[
            Flag {
                help: "print the change as a diff instead of the converted conflist",
                ..DRY_RUN
            },
            Flag {
                name: "--in-place",
                value: None,
                repeatable: false,
                help: "rewrite CONFLIST with the converted one (atomically)",
            },
        ],
        summary: "collapse a reference bridge chain (+ portmap, bare tuning) into one academy entry",
        description: &[
            "Prints CONFLIST with its reference bridge plugin, and the portmap and bare tuning plugins chained after it, collapsed into one academy entry that publishes the ports itself. What it drops and why is printed as notes on stderr, with the live state of the network on this node.",
        ],
        hidden: false,
    },
    Command {
        name: "install",
        aliases: &[],
        synopsis: "[--bin-dir DIR] [--conf-dir DIR] [--conflist FILE | --template [--cluster-cidr CIDR[,CIDR]]...]",
        operand: None,
        flags: &[
            Flag {
                name: "--bin-dir",
                value: Some(Value { name: "DIR", kind: ValueKind::Dir }),
                repeatable: false,
                help: "the CNI bin folder to copy this binary into (default /opt/cni/bin)",
            },
            Flag {
                help: "the CNI config folder for --conflist or --template, whose academy networks are brought up to date (default /etc/cni/net.d)",
                ..CONF_DIR
            },
            Flag {
                name: "--conflist",
                value: Some(Value { name: "FILE", kind: ValueKind::File }),
                repeatable: false,
                help: "also install FILE into the config folder under its own name",
            },
            Flag {
                name: "--template",
                value: None,
                repeatable: false,
                help: "also install academy's containerd conf_template as academy.conflist.tmpl",
            },
            Flag {
                name: "--cluster-cidr",
                value: Some(Value { name: "CIDR[,CIDR]", kind: ValueKind::Text }),
                repeatable: true,
                help: "with --template: masquerade the pods' traffic except to these prefixes (the controller manager's --cluster-cidr, IPv4 and/or IPv6)",
            },
        ],
        summary: "copy this binary (and a conflist, or containerd's conf_template) into a node's CNI folders, each atomically",
        description: &[
            "Copies this academy binary to DIR/academy and, with --conflist, FILE into the config folder under its own name, or with --template, academy's containerd conf_template to academy.conflist.tmpl, the way a DaemonSet's init container does it on every node.",
            "With --cluster-cidr the template masquerades the pods' traffic (\"ipMasq\": true) except to the cluster's pods (\"nonMasqueradeCIDRs\"); without it, the template leaves masquerading off.",
            "Each file is written beside its destination, fsync'd and renamed over it, so a runtime executing the old binary is not disturbed and containerd sees the new config. Files that are already current are left alone.",
            "Then every academy network of the config folder with attachments on this node gets this release's packet-path state at once (what `academy restore` puts back), and its state version is recorded; one line each says what was put back. Without this, a network's first CNI call after the upgrade does it.",
        ],
        hidden: false,
    },
    Command {
        name: "list",
        aliases: &[],
        synopsis: "CONFLIST [--json]",
        operand: ONE_CONFLIST,
        flags: &[Flag {
            name: "--json",
            value: None,
            repeatable: false,
            help: "one JSON object per reservation, for scripts",
        }],
        summary: "one line per reservation: address, container, interface, age, wired or leaked",
        description: &[
            "Lists the network's reservations: address, state (wired: its host veth exists; leaked: it does not), age, interface, host veth name and container id.",
        ],
        hidden: false,
    },
    Command {
        name: "reclaim",
        aliases: &[],
        synopsis: "CONFLIST [--older-than DURATION | --keep-ids FILE [--older-than DURATION]] [--dry-run]",
        operand: ONE_CONFLIST,
        flags: &[
            Flag {
                name: "--older-than",
                value: Some(Value { name: "DURATION", kind: ValueKind::Text }),
                repeatable: false,
                help: "only reservations older than this (90s, 15m, 2h, 7d; default the network's reclaimLeakedAfter, or 60s when that is 0)",
            },
            Flag {
                name: "--keep-ids",
                value: Some(Value { name: "FILE", kind: ValueKind::File }),
                repeatable: false,
                help: "free every attachment whose container id is not in FILE (one per line, as crictl pods -q prints them), wired or not",
            },
            DRY_RUN,
        ],
        summary: "free leaked reservations (or every attachment not in FILE) and what academy made for them",
        description: &[
            "Frees the leaked reservations of the network (those whose host veth is gone), each re-checked under its lock just before it goes, with its holder index and what academy made for it. A wired attachment is never freed by age.",
            "With --keep-ids it is a CNI GC driven by the operator: every attachment whose container id is not in FILE goes, with its host veth. Take the list just before: a pod started after it would be freed too, unless --older-than spares the young. An empty FILE is refused.",
        ],
        hidden: false,
    },
    Command {
        name: "restore",
        aliases: &["restore-nat"],
        synopsis: "[--conf-dir DIR | CONFLIST...]",
        operand: Some(Operand {
            value: CONFLIST,
            required: false,
            many: true,
        }),
        flags: &[CONF_DIR],
        summary: "put back every kind of academy's nf_tables state of every academy network in DIR from the store and the host's links",
        description: &[
            "Puts back every kind of academy's nf_tables state (outbound NAT, published ports, MAC filter, FORWARD accepts, bandwidth, isolation) of every academy network in DIR (default /etc/cni/net.d), or of the networks of the CONFLIST files given, from the address store and the host's links, in one batch per network: after nft flush ruleset, a firewalld or iptables reload, or a deleted table, running containers get it back without a restart.",
            "Published ports and bandwidth rates come from the runtime record each ADD writes in the store, so they come back after a deleted table or nft flush ruleset too. Idempotent: with nothing missing it changes nothing.",
            "Says, per network on stderr, what it put back (\"put back: ...\"), apart from what it could not (\"could not put back: WHAT, because WHY\": a port another container has taken since, an attachment an older academy added, which recorded nothing, a kind the kernel refused), or \"complete, nothing to do\". Exits 1 only when the kernel refused a kind.",
        ],
        hidden: false,
    },
    Command {
        name: "status",
        aliases: &[],
        synopsis: "[--conf-dir DIR] [--json]",
        operand: None,
        flags: &[
            CONF_DIR,
            Flag {
                name: "--json",
                value: None,
                repeatable: false,
                help: "one JSON document with an object per network, for scripts (its shape is documented in docs/operations.md)",
            },
        ],
        summary: "one line per academy network in DIR: its pool used, free and leaked, attachments, state missing, last repair",
        description: &[
            "Prints one line per academy network in DIR (default /etc/cni/net.d): its bridge and ranges, the addresses its pool can hand out, how many are used, free and leaked (reserved for an attachment that is gone, as academy list says), the attachments wired, the kinds of nf_tables state it misses now (what STATUS and CHECK look for), whether it is unused (nothing wired, nothing reserved) and the last repair academy watch made to it.",
            "It only reads: it takes no lock, so no ADD waits on it. Run it in the netns that holds the bridges (the node's); from another one, leaks cannot be judged and show as ?.",
        ],
        hidden: false,
    },
    Command {
        name: "watch",
        aliases: &[],
        synopsis: "[--conf-dir DIR] [--metrics ADDR]",
        operand: None,
        flags: &[
            CONF_DIR,
            Flag {
                name: "--metrics",
                value: Some(Value {
                    name: "ADDR",
                    kind: ValueKind::Text,
                }),
                repeatable: false,
                help: "also serve Prometheus metrics at http://ADDR/metrics (ADDR is IP:PORT, e.g. 127.0.0.1:9604; nothing listens without it)",
            },
        ],
        summary: "run until SIGTERM or SIGINT, putting back what restore does within a second of each nf_tables change by another program",
        description: &[
            "Runs until SIGTERM or SIGINT (exit 0). At start and within a second of each burst of nf_tables changes by another program (nft flush ruleset, a deleted table, an iptables reload, a firewalld restart), runs what restore runs for every academy network in DIR (default /etc/cni/net.d), read again each time; a network file of DIR written, renamed in or removed does the same, so a key turned on for live containers is in place at once. Its own transactions and academy's are passed over; a failed restore is retried after 1, 2, 4 ... 30 s.",
            "With --metrics it also answers GET /metrics on ADDR with the Prometheus text exposition of every network's pool, attachments and missing state, computed at each scrape, and of its own repairs and notifications (docs/operations.md lists them). No client can keep a scrape out: each request has 2 s and 8 KiB of headers, at most 64 connections are open and 32 of one address, and a newcomer takes the slot of the oldest that has asked nothing.",
        ],
        hidden: false,
    },
    Command {
        name: "completions",
        aliases: &[],
        synopsis: "SHELL",
        operand: Some(Operand {
            value: Value {
                name: "SHELL",
                kind: ValueKind::OneOf(SHELLS),
            },
            required: true,
            many: false,
        }),
        flags: &[],
        summary: "print the completion script for SHELL (bash)",
        description: &[
            "Prints a completion script of academy's subcommands, flags and their values for SHELL. make install puts the bash one where bash-completion finds it; by hand: source <(academy completions bash).",
        ],
        hidden: false,
    },
    Command {
        name: "man",
        aliases: &[],
        synopsis: "",
        operand: None,
        flags: &[],
        summary: "print the academy(8) manual page (roff)",
        description: &["Prints the academy(8) manual page in roff, as make build writes it."],
        hidden: true,
    },
];

/// The subcommand called `name` (or by one of its aliases).
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS
        .iter()
        .find(|c| c.name == name || c.aliases.contains(&name))
}

/// The subcommands a person is shown.
pub fn visible() -> impl Iterator<Item = &'static Command> {
    COMMANDS.iter().filter(|c| !c.hidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written synopsis and the flags the parser accepts say the same.
    #[test]
    fn each_synopsis_names_exactly_its_flags_and_operand() {
        for c in COMMANDS {
            let mut named: Vec<&str> = c
                .synopsis
                .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '-'))
                .filter(|w| w.starts_with("--"))
                .collect();
            named.sort_unstable();
            named.dedup();
            let mut flags: Vec<&str> = c.flags.iter().map(|f| f.name).collect();
            flags.sort_unstable();
            assert_eq!(named, flags, "academy {}", c.name);
            for f in c.flags {
                if let Some(v) = &f.value {
                    assert!(
                        c.synopsis.contains(&format!("{} {}", f.name, v.name)),
                        "{}",
                        f.name
                    );
                }
            }
            if let Some(o) = &c.operand {
                assert!(c.synopsis.contains(o.value.name), "academy {}", c.name);
            }
            assert!(
                !c.summary.is_empty() && !c.description.is_empty(),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn find_knows_names_and_aliases_only() {
        assert_eq!(find("restore-nat").map(|c| c.name), Some("restore"));
        assert_eq!(find("restore").map(|c| c.name), Some("restore"));
        assert!(find("nope").is_none() && find("").is_none());
        assert!(visible().all(|c| !c.hidden));
    }
}
