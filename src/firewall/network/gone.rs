//! What nodes that are gone left in /run: a node netns goes with its nf_tables, not
//! with academy's files about it.

use super::records::{self, node, Entry};
use super::{hints, locks, nodes, LOCK_DIR};

/// What nodes that are gone left on the host: their networks' state versions
/// (`<name>.<node>.state`, upgrade.rs), release records, markers and hints, and their
/// bridges' locks. A node netns goes with everything of academy's in it but these files
/// in /run, which nothing would ever read again. Asked by GC and the restore (one read
/// of mountinfo; /proc only for a node no mount holds), never on ADD's path. Also any
/// node's hint temporary a minute old (a writer killed before its rename). Returns how
/// many files went.
pub(super) fn drop_what_gone_nodes_left() -> usize {
    let Some(here) = node() else {
        return 0;
    };
    // Other nodes' files, found by name; mountinfo is read only if there are some (a
    // host that runs one node never pays for it), /proc only if one of their nodes is
    // not bind-mounted (gone, or held by a process alone).
    let mut theirs: Vec<(std::path::PathBuf, u64)> = Vec::new();
    // And any node's hint temporaries that a killed writer left (hints.rs), by age.
    let mut abandoned = 0;
    for (dir, node_of) in [
        (LOCK_DIR, node_of_record as fn(&str) -> Option<u64>),
        (locks::BRIDGE_LOCK_DIR, node_of_bridge_lock),
    ] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let file = entry.file_name();
            let Some(file) = file.to_str() else { continue };
            if hints::is_temporary(file) {
                let age = entry.metadata().ok().and_then(|m| m.modified().ok());
                let old = age.and_then(|t| t.elapsed().ok()) > Some(hints::ABANDONED);
                if old && std::fs::remove_file(entry.path()).is_ok() {
                    abandoned += 1;
                }
            } else if let Some(n) = node_of(file).filter(|&n| n != here) {
                theirs.push((entry.path(), n));
            }
        }
    }
    if theirs.is_empty() {
        return abandoned;
    }
    let Some(alive) = nodes::alive(&theirs.iter().map(|(_, n)| *n).collect()) else {
        return abandoned;
    };
    let dropped = theirs
        .iter()
        .filter(|(path, n)| !alive.contains(n) && std::fs::remove_file(path).is_ok())
        .count();
    if dropped > 0 {
        crate::log::debug(format_args!(
            "dropped {dropped} record(s) and lock(s) of node netns that are gone"
        ));
    }
    dropped + abandoned
}

/// The node a file of the records' folder belongs to: `<name>.<node>.state`,
/// `<name>@<node>.unused`, `<name>@<node>.<due ms>.due` or `@<node>.next`; None for the
/// network locks (no node in their names) and anything else.
fn node_of_record(file: &str) -> Option<u64> {
    if let Some(node) = hints::node_of(file) {
        return Some(node);
    }
    if let Some(rest) = file.strip_suffix(".state") {
        return rest.rsplit_once('.')?.1.parse().ok();
    }
    match records::entry(file) {
        Entry::Marker(m) => Some(m.node),
        _ => file
            .strip_suffix(".unused")?
            .rsplit_once('@')?
            .1
            .parse()
            .ok(),
    }
}

/// The node of a bridge lock, `<bridge>@<node>.lock`.
fn node_of_bridge_lock(file: &str) -> Option<u64> {
    file.strip_suffix(".lock")?.rsplit_once('@')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_s_node_is_read_from_its_name() {
        assert_eq!(node_of_record("web.x.4026532842.state"), Some(4026532842));
        assert_eq!(node_of_record("web.x@4026532842.unused"), Some(4026532842));
        assert_eq!(
            node_of_record("web.x@4026532842.1700000000123.due"),
            Some(4026532842)
        );
        // A network's lock and an older release's record name no node.
        assert_eq!(node_of_record("@4026532842.next"), Some(4026532842));
        assert_eq!(node_of_record("@hints.lock"), None);
        assert_eq!(node_of_record("web.x.lock"), None);
        assert_eq!(node_of_record("web.x.unused"), None);
        assert_eq!(node_of_bridge_lock("br0@4026532842.lock"), Some(4026532842));
        assert_eq!(node_of_bridge_lock("removals"), None);
    }
}
