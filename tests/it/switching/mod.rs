//! Switching a node (issue 25, "Done when"): the SAME scenario run on the reference
//! chain podman 4.3 writes (bridge with ipMasq + host-local, portmap, firewall, tuning:
//! Debian's plugins 1.1.1 under cnitool) and on what `academy convert` makes of that
//! conflist (one academy entry, under cnitool too), each in a private node netns of its
//! own whose iptables FORWARD policy drops (Docker's), with a neighbour that routes the
//! pod subnet through the node and an outside with no route back. Each test prints its
//! rows as a table and asserts that academy is never weaker: its outcome is the
//! reference's, or the safe one (blocked where blocking is the guarantee, working where
//! working is), and the row says which. docs/switching.md holds a real run's table.
//!
//! - `forward`: the FORWARD policy (unpublished port, published port, outbound,
//!   hairpin) and the loopback guard (a crafted frame to 127.0.0.1);
//! - `reload`: `iptables-save | iptables-restore`, then `iptables -F FORWARD`, and the
//!   remedy each side offers;
//! - `flush`: `nft flush ruleset`, and the remedy each side offers (academy's
//!   `restore` and `academy watch`, the reference's next ADD);
//! - `isolation`: two `--opt isolate=true` networks (isolation.rs's outcome table).
//! - `live`: the reference's containers on a node converted under them: academy's
//!   repairs cover them once the runtime's DEL and ADD have made them academy's.
//!
//! Every iptables and nf_tables change is made in a node netns the test made (the
//! reference's rules and academy's die with it); packets go only between namespaces
//! the test made; servers and watches are processes of the test's own, killed by PID
//! by their guards.

mod flush;
mod forward;
mod isolation;
mod live;
mod reload;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;
use crate::forward::{answers, dropping_node, iptables, Peer, Server};

/// The container port published (as [`HOST_PORT`] of the node), the one left
/// unpublished, and the outside's server port.
pub const PUBLISHED: u16 = 8080;
pub const HOST_PORT: u16 = 18080;
pub const UNPUBLISHED: u16 = 2222;
pub const OUTSIDE_PORT: u16 = 2323;

/// How long a probe expected to pass may take to (a port settling); one expected to be
/// blocked is one try of 2 s.
const SETTLE: Duration = Duration::from_secs(3);

/// Which side of the comparison a site runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Side {
    Reference,
    Academy,
}

/// The network podman 4.3 writes for `podman network create` with the CNI backend (a
/// real run's file, `--opt isolate=true` left out), on the lab's name, bridge and
/// subnet.
pub fn podman_list(lab: &Lab) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": lab.network,
        "plugins": [
            {"type": "bridge", "bridge": lab.bridge, "isGateway": true, "ipMasq": true,
             "hairpinMode": true,
             "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}],
                      "ranges": [[{"subnet": lab.subnet(), "gateway": lab.gateway()}]]},
             "capabilities": {"ips": true}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "firewall", "backend": ""},
            {"type": "tuning"}
        ]
    })
}

/// One side's node: a netns whose FORWARD policy drops, the neighbour and the outside
/// behind it, the network's conflist (podman's, or academy's converted one) in a conf
/// dir of its own, and two containers: `a` publishing [`HOST_PORT`] to its
/// [`PUBLISHED`], `b` publishing nothing. Servers answer in `a` (both ports) and in the
/// outside until the site is dropped.
pub struct Site<'a> {
    pub side: Side,
    pub lab: &'a Lab,
    pub node: Node<'a>,
    pub neighbour: Peer,
    pub outside: Peer,
    pub conf_dir: PathBuf,
    pub a: Attach,
    pub a_v4: String,
    pub b: Attach,
    /// What `academy convert` said on stderr (academy's side).
    pub convert_notes: String,
    _servers: Vec<Server>,
}

impl<'a> Site<'a> {
    pub fn new(lab: &'a Lab, side: Side) -> Site<'a> {
        let node = dropping_node(lab);
        let neighbour = Peer::new(lab, &node, "nbr", true);
        let outside = Peer::new(lab, &node, "out", false);
        let conf_dir = lab.root.join("switch.d");
        std::fs::create_dir_all(&conf_dir).unwrap();
        let list = podman_list(lab);
        let mut convert_notes = String::new();
        let text = match side {
            Side::Reference => serde_json::to_string_pretty(&list).unwrap(),
            Side::Academy => {
                let source = lab.root.join("podman.conflist");
                std::fs::write(&source, serde_json::to_string_pretty(&list).unwrap()).unwrap();
                let out = in_node(&node, &[plugin(), "convert", source.to_str().unwrap()]);
                assert_eq!(out.code, 0, "academy convert:\n{out}");
                let converted = out.json();
                let plugins = converted["plugins"].as_array().unwrap();
                assert_eq!(plugins.len(), 1, "convert kept a plugin: {converted}");
                assert_eq!(plugins[0]["type"], "academy", "{converted}");
                convert_notes = out.stderr.clone();
                out.stdout
            }
        };
        std::fs::write(conf_dir.join(format!("{}.conflist", lab.network)), text).unwrap();
        let (a, b) = (lab.attachment("a"), lab.attachment("b"));
        let mut site = Site {
            side,
            lab,
            node,
            neighbour,
            outside,
            conf_dir,
            a,
            a_v4: String::new(),
            b,
            convert_notes,
            _servers: Vec::new(),
        };
        let a = site.a.clone();
        let result = site.add(&a, Some(HOST_PORT));
        site.a_v4 = result_address(&result);
        let b = site.b.clone();
        site.add(&b, None);
        site._servers
            .push(Server::start(&site.a.netns, &[PUBLISHED, UNPUBLISHED]));
        site._servers
            .push(Server::start(&site.outside.netns, &[OUTSIDE_PORT]));
        assert!(
            answers(&site.node.ns, &site.a_v4, UNPUBLISHED, SETTLE),
            "{side:?}: the container's server does not answer the node itself"
        );
        site
    }

    pub fn cni_path(&self) -> String {
        match self.side {
            Side::Reference => format!("{REFERENCE_BIN}:/usr/lib/cni"),
            Side::Academy => self.lab.bin_dir.to_str().unwrap().to_string(),
        }
    }

    /// `cnitool VERB` in the node for `who`, publishing `port` (to [`PUBLISHED`]).
    pub fn cnitool(&self, verb: &str, who: &Attach, port: Option<u16>) -> Out {
        let caps = match port {
            Some(p) => json!({"portMappings": [
                {"hostPort": p, "containerPort": PUBLISHED, "protocol": "tcp"}]}),
            None => json!({}),
        }
        .to_string();
        let (path, cni_path) = (who.netns_path(), self.cni_path());
        let conf_dir = self.conf_dir.to_str().unwrap().to_string();
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.node.ns,
                "/usr/local/bin/cnitool",
                verb,
                &self.lab.network,
                &path,
            ],
            &[
                ("CNI_PATH", &cni_path),
                ("NETCONFPATH", &conf_dir),
                ("CAP_ARGS", &caps),
            ],
        )
    }

    /// ADD through cnitool; the result.
    pub fn add(&self, who: &Attach, port: Option<u16>) -> Value {
        let out = self.cnitool("add", who, port);
        out.expect_result(&format!("{:?}: cnitool add", self.side))
    }

    /// academy's entry of the converted conflist as a CNI 1.1 runtime sends it.
    pub fn entry(&self) -> Value {
        let path = self.conf_dir.join(format!("{}.conflist", self.lab.network));
        let list: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut entry = list["plugins"][0].clone();
        entry["cniVersion"] = json!("1.1.0");
        entry["name"] = list["name"].clone();
        entry
    }

    /// academy's STATUS in the node (CNI 1.1; cnitool 1.1.2 has no status verb).
    pub fn status(&self) -> Out {
        assert_eq!(self.side, Side::Academy);
        let call = Call::bare()
            .env("CNI_COMMAND", "STATUS")
            .env("CNI_PATH", &self.cni_path())
            .config(&self.entry());
        self.node.run(&call)
    }

    /// `academy restore --conf-dir` of the site's conf dir, in the node.
    pub fn restore(&self) -> Out {
        let conf_dir = self.conf_dir.to_str().unwrap();
        let out = self.node.academy(&["restore", "--conf-dir", conf_dir]);
        assert_eq!(out.code, 0, "restore:\n{out}");
        out
    }

    /// Container `a` reaches the outside's server (through the node's masquerade: the
    /// outside has no route back).
    pub fn outbound(&self) -> bool {
        answers(&self.a.netns, &self.outside.far_v4, OUTSIDE_PORT, SETTLE)
    }

    /// Like [`Site::outbound`], one try (for a probe expected to fail).
    pub fn outbound_once(&self) -> bool {
        answers(
            &self.a.netns,
            &self.outside.far_v4,
            OUTSIDE_PORT,
            Duration::ZERO,
        )
    }

    /// The neighbour reaches `a`'s published port on the node's address.
    pub fn published_from_neighbour(&self, settle: bool) -> bool {
        let wait = if settle { SETTLE } else { Duration::ZERO };
        answers(
            &self.neighbour.netns,
            &self.neighbour.node_v4,
            HOST_PORT,
            wait,
        )
    }

    /// Container `b` reaches `a`'s published port on the node's address on the bridge
    /// (DNAT, then forwarded back out of the bridge: hairpin).
    pub fn published_hairpin(&self, settle: bool) -> bool {
        let wait = if settle { SETTLE } else { Duration::ZERO };
        answers(&self.b.netns, &self.lab.gateway(), HOST_PORT, wait)
    }

    /// The neighbour reaches `a`'s unpublished port directly (it routes the pod subnet
    /// through the node).
    pub fn unpublished_from_neighbour(&self) -> bool {
        answers(
            &self.neighbour.netns,
            &self.a_v4,
            UNPUBLISHED,
            Duration::ZERO,
        )
    }

    /// The side's own iptables rules in the node: academy's FORWARD accepts (by their
    /// comment), or the reference's rules in or to its CNI-* chains; and how many rules
    /// are listed twice in one table of one family (a second copy).
    pub fn rule_counts(&self) -> (usize, usize) {
        let (mut own, mut twice) = (0, 0);
        for tool in ["iptables-nft-save", "ip6tables-nft-save"] {
            let out = in_node(&self.node, &[tool]);
            assert_eq!(out.code, 0, "{tool}:\n{out}");
            let mut seen = std::collections::BTreeSet::new();
            let mut table = "";
            for line in out.stdout.lines() {
                if let Some(name) = line.strip_prefix('*') {
                    table = name;
                }
                if !line.starts_with("-A ") {
                    continue;
                }
                if !seen.insert((table, line)) {
                    twice += 1;
                }
                own += usize::from(match self.side {
                    Side::Academy => line.starts_with("-A FORWARD") && line.contains("\"academy: "),
                    Side::Reference => line.contains("CNI-"),
                });
            }
        }
        (own, twice)
    }

    /// `iptables-nft-save | iptables-nft-restore` (and ip6tables') in the node.
    pub fn iptables_reload(&self) {
        for tool in ["iptables", "ip6tables"] {
            let pipe = format!("{tool}-nft-save | {tool}-nft-restore");
            let out = in_node(&self.node, &["sh", "-c", &pipe]);
            assert_eq!(out.code, 0, "{pipe}:\n{out}");
        }
    }

    /// `iptables -F FORWARD` (and ip6tables') in the node; the policy stays DROP.
    pub fn flush_forward(&self) {
        for family in ["4", "6"] {
            let out = iptables(&self.node, family, &["-F", "FORWARD"]);
            assert_eq!(out.code, 0, "{out}");
        }
    }
}

/// `ARGV` inside the node.
pub fn in_node(node: &Node, argv: &[&str]) -> Out {
    let mut all = vec!["netns", "exec", &node.ns];
    all.extend_from_slice(argv);
    run("ip", &all, &[])
}

/// One row: a probe of a guarantee, what each side did, the safe outcome.
pub struct Row {
    pub test: &'static str,
    pub probe: String,
    /// The words for a probe that got through (true) and one that did not.
    pub words: (&'static str, &'static str),
    /// The outcome that keeps the guarantee.
    pub safe: bool,
    pub reference: bool,
    pub academy: bool,
    /// What was seen beside the outcome (counts, codes, delays).
    pub note: String,
}

/// Rows whose guarantee is that something is blocked (true: it got through).
pub const REACHED: (&str, &str) = ("reached", "blocked");
/// Rows whose guarantee is that something works.
pub const WORKS: (&str, &str) = ("works", "fails");

impl Row {
    pub fn closed(test: &'static str, probe: &str, reference: bool, academy: bool) -> Row {
        Row::new(test, probe, REACHED, false, reference, academy)
    }

    pub fn works(test: &'static str, probe: &str, reference: bool, academy: bool) -> Row {
        Row::new(test, probe, WORKS, true, reference, academy)
    }

    pub fn new(
        test: &'static str,
        probe: &str,
        words: (&'static str, &'static str),
        safe: bool,
        reference: bool,
        academy: bool,
    ) -> Row {
        Row {
            test,
            probe: probe.to_string(),
            words,
            safe,
            reference,
            academy,
            note: String::new(),
        }
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    fn word(&self, seen: bool) -> &'static str {
        if seen {
            self.words.0
        } else {
            self.words.1
        }
    }

    /// same, academy safer (blocks what the reference lets through), academy better
    /// (works where the reference fails), or ACADEMY WEAKER.
    pub fn verdict(&self) -> &'static str {
        match (self.academy == self.reference, self.academy == self.safe) {
            (true, _) => "same",
            (false, true) if !self.safe => "academy safer",
            (false, true) => "academy better",
            (false, false) => "ACADEMY WEAKER",
        }
    }
}

/// The rows as a table (markdown, as docs/switching.md shows it).
pub fn table(rows: &[Row]) -> String {
    let mut text = String::from(
        "| probe | reference chain | academy (converted) | verdict | seen | test |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        text += &format!(
            "| {} | {} | {} | {} | {} | `switching::{}` |\n",
            r.probe.replace('|', "\\|"),
            r.word(r.reference),
            r.word(r.academy),
            r.verdict(),
            r.note.replace('|', "\\|"),
            r.test
        );
    }
    text
}

/// Prints the table and fails on a row where academy is weaker than the reference.
pub fn report(rows: &[Row]) {
    let text = table(rows);
    println!("{text}");
    let weaker: Vec<&str> = rows
        .iter()
        .filter(|r| r.verdict() == "ACADEMY WEAKER")
        .map(|r| r.probe.as_str())
        .collect();
    assert!(
        weaker.is_empty(),
        "academy is weaker than the reference chain on {weaker:?}:\n{text}"
    );
}

/// Two labs, one per side, and their sites.
pub fn labs(tag: &str) -> (Lab, Lab) {
    (Lab::new(&format!("{tag}r")), Lab::new(&format!("{tag}a")))
}
