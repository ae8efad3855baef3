//! A private "node": a netns of the lab's own in which academy runs as if it were the
//! host (`ip netns exec <node> academy`), so a test may flush or delete academy's
//! nf_tables table, or plant foreign objects in it, without touching the host's, where
//! other tests and processes keep theirs (nf_tables is per netns).

use std::collections::BTreeSet;

use super::kernel::netns_link_names;
use super::lab::{Attach, Lab};
use super::nft::{elements_in, nft_in, rule_comments_in};
use super::process::{plugin, run, Call, Out, TestHold};

pub struct Node<'a> {
    pub lab: &'a Lab,
    pub ns: String,
}

impl<'a> Node<'a> {
    /// A node netns owned (and deleted) by the lab; its loopback up.
    pub fn new(lab: &'a Lab) -> Node<'a> {
        Node::new_named(lab, "node")
    }

    /// A second (third...) node of the lab: netns "<lab netns>-<suffix>".
    pub fn new_named(lab: &'a Lab, suffix: &str) -> Node<'a> {
        let ns = lab.add_netns(suffix);
        run("ip", &["-n", &ns, "link", "set", "lo", "up"], &[]);
        Node { lab, ns }
    }

    /// The plugin run inside the node with the call's environment and stdin.
    pub fn run(&self, call: &Call) -> Out {
        call.spawn("ip", &["netns", "exec", &self.ns, plugin()])
    }

    /// `verb` for an attachment, with `config` on stdin, inside the node.
    pub fn call(&self, verb: &str, a: &Attach, config: &serde_json::Value) -> Out {
        self.run(&self.lab.call_for(verb, a).config(config))
    }

    /// `academy ARGS` (a subcommand) inside the node.
    pub fn academy(&self, args: &[&str]) -> Out {
        let mut all = vec!["netns", "exec", &self.ns, plugin()];
        all.extend_from_slice(args);
        run("ip", &all, &[])
    }

    /// `nft ARGS` inside the node; panics when it fails.
    pub fn nft(&self, args: &[&str]) -> Out {
        let out = nft_in(Some(&self.ns), args);
        assert_eq!(out.code, 0, "nft {}:\n{out}", args.join(" "));
        out
    }

    /// The network's elements in the node, as "address comment".
    pub fn elements(&self) -> BTreeSet<String> {
        elements_in(Some(&self.ns), &self.lab.network)
    }

    /// The comments of academy's rules for the network's set of `family` in the node.
    pub fn rules(&self, family: &str) -> Vec<String> {
        rule_comments_in(Some(&self.ns), &self.lab.network, family)
    }

    /// The node's link names.
    pub fn links(&self) -> Vec<String> {
        netns_link_names(&self.ns)
    }

    /// `academy restore` of the lab's conf dir in the node, held by the debug build's
    /// test hook `hook` (src/firewall/mod.rs: ACADEMY_TEST_HOLD_RESTORE before its lock,
    /// ..._LOCKED after its first read of the attachments) while `during` runs, then let
    /// go; its exit status and stderr. Let go and reaped even if an assertion fails.
    pub fn restore_held(
        &self,
        hook: &str,
        during: impl FnOnce(),
    ) -> (std::process::ExitStatus, String) {
        use std::io::Read;
        use std::process::{Child, Command, Stdio};
        use std::time::Duration;
        /// Lets the restore go and reaps it, however the test goes on.
        struct Reaped<'h>(Child, &'h TestHold);
        impl Drop for Reaped<'_> {
            fn drop(&mut self) {
                self.1.release();
                let _ = self.0.wait();
            }
        }
        let hold = TestHold::new(&self.lab.data_dir, "hold-restore");
        let mut restore = Reaped(
            Command::new("ip")
                .args(["netns", "exec", &self.ns, plugin(), "restore", "--conf-dir"])
                .arg(&self.lab.conf_dir)
                .env(hook, hold.path())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            &hold,
        );
        assert!(
            hold.reached(Duration::from_secs(20)),
            "the restore never reached its hold"
        );
        during();
        hold.release();
        let mut err = String::new();
        if let Some(mut e) = restore.0.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (restore.0.wait().unwrap(), err)
    }
}
