//! Who set off a restore: academy's own transactions told from another program's, and
//! the others summed up for the restore's log line and its recorded repair.

use crate::netlink::NftCommit;

/// Whether a transaction is academy's own (its restores, the plugin's verbs): the
/// kernel names the process that committed it.
pub(super) fn ours(commit: &NftCommit, own_name: &str) -> bool {
    commit.process == own_name
}

/// What set off the restore to come, for its log line.
#[derive(Debug, Default)]
pub(super) struct Trigger {
    commits: usize,
    changes: usize,
    by: Vec<String>,
    pub(super) lost: bool,
    /// Network files of the conf dir written, renamed in or removed.
    files: Vec<String>,
}

impl Trigger {
    pub(super) fn commit(&mut self, c: &NftCommit) {
        self.commits += 1;
        self.changes += c.changes;
        let by = format!("{} (pid {})", c.process, c.pid);
        if !self.by.contains(&by) && self.by.len() < 3 {
            self.by.push(by);
        }
    }

    pub(super) fn conf_files(&mut self, names: &[String]) {
        for n in names {
            if !self.files.contains(n) {
                self.files.push(n.clone());
            }
        }
    }

    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.commits > 0 {
            parts.push(format!(
                "{} change(s) in {} transaction(s) by {}",
                self.changes,
                self.commits,
                self.by.join(", ")
            ));
        }
        if self.lost {
            parts.push("lost notifications (ENOBUFS)".into());
        }
        if !self.files.is_empty() {
            parts.push(format!(
                "a change of the conf dir ({})",
                self.files.join(", ")
            ));
        }
        match parts.is_empty() {
            true => "a retry".into(),
            false => parts.join(" and "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// academy's own transactions (its restore's batch, the plugin's ADD) are passed
    /// over; another program's are not.
    #[test]
    fn academy_s_own_transactions_are_passed_over() {
        let commit = |process: &str| NftCommit {
            generation: 7,
            pid: 42,
            process: process.into(),
            changes: 3,
        };
        assert!(ours(&commit("academy"), "academy"));
        for other in ["nft", "iptables-restor", "firewalld", ""] {
            assert!(!ours(&commit(other), "academy"), "{other}");
        }
    }

    #[test]
    fn the_trigger_says_who_changed_what() {
        let mut t = Trigger::default();
        assert_eq!(t.describe(), "a retry");
        for process in ["nft", "nft", "iptables-restor"] {
            t.commit(&NftCommit {
                generation: 1,
                pid: 5,
                process: process.into(),
                changes: 2,
            });
        }
        t.lost = true;
        assert_eq!(
            t.describe(),
            "6 change(s) in 3 transaction(s) by nft (pid 5), iptables-restor (pid 5) and lost notifications (ENOBUFS)"
        );
        let mut t = Trigger::default();
        t.conf_files(&["10-a.conflist".into()]);
        t.conf_files(&["10-a.conflist".into(), "20-b.conf".into()]);
        assert_eq!(
            t.describe(),
            "a change of the conf dir (10-a.conflist, 20-b.conf)"
        );
    }
}
