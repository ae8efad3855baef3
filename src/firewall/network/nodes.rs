//! Which nodes (network namespaces, by inode) still exist, for the records a node left
//! behind when it went (a test's node netns deleted, a VM's netns torn down): the
//! kernel frees a netns, and every nf_tables object in it, once no process and no bind
//! mount holds it, so such a record has nothing left to release and is dropped.
//!
//! Without /sys, a netns is seen alive through what holds it: a bind mount (an nsfs
//! mount in this process's mount table, as `ip netns add` makes under /run/netns) or a
//! process in it (/proc/<pid>/ns/net). A holder academy cannot see (a mount in another
//! mount namespace with no process of it in the netns) makes a live node look gone: its
//! record is dropped, and its objects then wait for the network's next use or a GC, as
//! before records existed. Asked by GC and `academy restore` for the files of other
//! nodes (network/), never by an invocation's usual path; /proc is read only for a
//! node that no mount holds.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;

/// Which of `nodes` (netns inodes) are held by a mount or a process, or None when /proc
/// cannot be read (then no node is taken for gone). The mounts first: one read of
/// mountinfo finds every node made by `ip netns add` or a runtime's bind mount, and
/// /proc (a stat per process, hundreds on a busy host: most of a GC's time with 50 valid
/// attachments) is walked only for a node no mount holds, and only until it is found.
pub(super) fn alive(nodes: &HashSet<u64>) -> Option<HashSet<u64>> {
    let mut alive: HashSet<u64> = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()?
        .lines()
        .filter_map(mounted_netns)
        .filter(|n| nodes.contains(n))
        .collect();
    if alive.len() == nodes.len() {
        return Some(alive);
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        // A process that exits meanwhile is simply not counted.
        let Ok(ns) = std::fs::metadata(entry.path().join("ns/net")) else {
            continue;
        };
        if nodes.contains(&ns.ino()) && alive.insert(ns.ino()) && alive.len() == nodes.len() {
            break;
        }
    }
    Some(alive)
}

/// The netns inode of a mountinfo line that bind-mounts one ("... net:[4026532] /run/netns/x ... - nsfs ...").
fn mounted_netns(line: &str) -> Option<u64> {
    let (mount, fs) = line.split_once(" - ")?;
    if !fs.starts_with("nsfs ") {
        return None;
    }
    let root = mount.split(' ').nth(3)?;
    root.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_mounted_netns_is_read_from_mountinfo() {
        let line = "612 29 0:4 net:[4026532842] /run/netns/node1 rw,nosuid,nodev,noexec,relatime shared:5 - nsfs nsfs rw";
        assert_eq!(mounted_netns(line), Some(4026532842));
        let other = "613 29 0:4 mnt:[4026532843] /run/x rw shared:5 - nsfs nsfs rw";
        assert_eq!(mounted_netns(other), None);
        let disk = "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw";
        assert_eq!(mounted_netns(disk), None);
    }

    #[test]
    fn this_process_s_netns_is_alive_and_a_made_up_one_is_not() {
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        // Not an inode a netns can have here: nsfs inodes are the process's own range.
        let gone = u64::MAX;
        let alive = alive(&HashSet::from([own, gone])).unwrap();
        assert_eq!(alive, HashSet::from([own]));
    }
}
