//! The store's unit tests, on a temp dir: allocation, release and GC here; requests,
//! refusals, hostile files and concurrency in edges.rs.

use std::collections::HashSet;
use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;
use crate::cni::code;
use crate::ipam::{Holder, Pool};

/// A per-test directory under the system temp dir, removed even when the test panics.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "academy-ipam-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test may have made a directory read-only; make it removable again.
        let _ = fs::set_permissions(self.0.join("harness"), fs::Permissions::from_mode(0o700));
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pool(subnet: &str, gw: &str) -> Pool {
    Pool::new(subnet.parse().unwrap(), Some(ip(gw)), None, None).unwrap()
}

fn h(id: &str) -> Holder {
    Holder::new(id, "eth0")
}

fn open(t: &TempDir) -> Store {
    Store::open(&t.0, "harness").unwrap()
}

/// Reservation files (names that are addresses), sorted.
fn reservations(store: &Store) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(store.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.parse::<IpAddr>().is_ok())
        .collect();
    v.sort();
    v
}

/// Every entry in the store and in holders/, for "left as it was" checks.
fn everything(store: &Store) -> Vec<String> {
    let mut v = Vec::new();
    for (dir, prefix) in [
        (store.dir().to_path_buf(), ""),
        (store.dir().join("holders"), "holders/"),
    ] {
        for e in fs::read_dir(dir).unwrap() {
            v.push(format!(
                "{prefix}{}",
                e.unwrap().file_name().to_string_lossy()
            ));
        }
    }
    v.sort();
    v
}

fn write(store: &Store, name: &str, content: &str) {
    fs::write(store.dir().join(name), content).unwrap();
}

fn read(store: &Store, name: &str) -> String {
    fs::read_to_string(store.dir().join(name)).unwrap()
}

#[test]
fn network_gateway_broadcast_never_handed_out() {
    let t = TempDir::new("excl");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    let got: Vec<String> = (0..5)
        .map(|i| s.reserve(&h(&format!("c{i}")), &p).unwrap().to_string())
        .collect();
    assert_eq!(
        got,
        [
            "10.98.1.2",
            "10.98.1.3",
            "10.98.1.4",
            "10.98.1.5",
            "10.98.1.6"
        ]
    );
}

#[test]
fn reservation_file_format_and_hint() {
    let t = TempDir::new("format");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    let a = s.reserve(&Holder::new("abc123", "eth0"), &p).unwrap();
    assert_eq!(a, ip("10.98.0.2"));
    assert_eq!(read(&s, "10.98.0.2"), "abc123\r\neth0");
    let mode = fs::metadata(s.dir().join("10.98.0.2"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(read(&s, "last_reserved_ip.0"), "10.98.0.2");
    assert_eq!(read(&s, "holders/abc123:eth0"), "10.98.0.2\nruntime none\n");
    // A second range set keeps its own hint.
    let p6 = pool("fd00::/64", "fd00::1").with_range_set(1);
    s.reserve(&Holder::new("abc123", "eth0"), &p6).unwrap();
    assert_eq!(read(&s, "last_reserved_ip.1"), "fd00::2");
    assert_eq!(read(&s, "last_reserved_ip.0"), "10.98.0.2");
    assert_eq!(
        read(&s, "holders/abc123:eth0"),
        "10.98.0.2\nfd00::2\nruntime none\n"
    );
    assert!(everything(&s).iter().all(|n| !n.contains(".tmp.")));
}

#[test]
fn range_edges_inclusive_then_full() {
    let t = TempDir::new("range");
    let s = open(&t);
    let p = Pool::new(
        "10.98.0.0/24".parse().unwrap(),
        Some(ip("10.98.0.1")),
        Some(ip("10.98.0.10")),
        Some(ip("10.98.0.12")),
    )
    .unwrap();
    let got: Vec<IpAddr> = (0..3)
        .map(|i| s.reserve(&h(&format!("r{i}")), &p).unwrap())
        .collect();
    assert_eq!(got, [ip("10.98.0.10"), ip("10.98.0.11"), ip("10.98.0.12")]);
    let e = s.reserve(&h("r3"), &p).unwrap_err();
    assert_eq!(e.code, code::ADDRESS_EXHAUSTED);
    assert_eq!(
        e.msg,
        "network harness: no free address in 10.98.0.0/24 (3 of 3 held)"
    );
    assert!(e.details.contains("10.98.0.10-10.98.0.12"), "{}", e.details);
}

#[test]
fn slash30_gives_exactly_one() {
    let t = TempDir::new("s30");
    let s = open(&t);
    let p = pool("10.0.0.0/30", "10.0.0.1");
    assert_eq!(s.reserve(&h("a"), &p).unwrap(), ip("10.0.0.2"));
    let e = s.reserve(&h("b"), &p).unwrap_err();
    assert_eq!(e.code, code::ADDRESS_EXHAUSTED);
    assert_eq!(reservations(&s), ["10.0.0.2"]);
}

#[test]
fn slash29_five_then_exhaustion_leaves_nothing_behind() {
    let t = TempDir::new("s29");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    for i in 0..5 {
        s.reserve(&h(&format!("x{i}")), &p).unwrap();
    }
    let before = everything(&s);
    let e = s.reserve(&h("x5"), &p).unwrap_err();
    assert_eq!(e.code, code::ADDRESS_EXHAUSTED);
    assert_eq!(
        e.msg,
        "network harness: no free address in 10.98.1.0/29 (5 of 5 held)"
    );
    assert!(e.details.contains("DEL") && e.details.contains("GC") && e.details.contains("widen"));
    assert_eq!(everything(&s), before);
    assert_eq!(reservations(&s).len(), 5);
    assert_eq!(s.release(&h("x5")).unwrap(), Vec::<IpAddr>::new());
}

#[test]
fn exhaustion_restores_an_existing_index() {
    let t = TempDir::new("restore");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    for i in 0..5 {
        s.reserve(&h(&format!("x{i}")), &p).unwrap();
    }
    // This holder is in another pool already and lists a candidate it lost earlier.
    write(&s, "holders/y:eth0", "fd00::2\n10.98.1.3\n");
    let before = everything(&s);
    assert_eq!(
        s.reserve(&h("y"), &p).unwrap_err().code,
        code::ADDRESS_EXHAUSTED
    );
    assert_eq!(everything(&s), before);
    assert_eq!(read(&s, "holders/y:eth0"), "fd00::2\n10.98.1.3\n");
}

#[test]
fn round_robin_wraps() {
    let t = TempDir::new("wrap");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    for i in 0..5 {
        s.reserve(&h(&format!("w{i}")), &p).unwrap();
    }
    s.release(&h("w1")).unwrap(); // .3
    s.release(&h("w3")).unwrap(); // .5
                                  // The hint is .6, the range end: the search wraps to .2 (taken), then .3.
    assert_eq!(s.reserve(&h("n1"), &p).unwrap(), ip("10.98.1.3"));
    assert_eq!(s.reserve(&h("n2"), &p).unwrap(), ip("10.98.1.5"));
    s.release(&h("w4")).unwrap(); // .6
    s.release(&h("w0")).unwrap(); // .2
                                  // Hint .5: .6 comes before .2.
    assert_eq!(s.reserve(&h("n3"), &p).unwrap(), ip("10.98.1.6"));
    assert_eq!(s.reserve(&h("n4"), &p).unwrap(), ip("10.98.1.2"));
}

#[test]
fn bad_hints_start_at_range_start() {
    let t = TempDir::new("hint");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    for (i, hint) in [
        "garbage\n",
        "",
        "10.50.0.9",
        "fd00::5",
        &"9".repeat(10_000),
        "10.98.0.255",
    ]
    .iter()
    .enumerate()
    {
        write(&s, "last_reserved_ip.0", hint);
        let a = s.reserve(&h(&format!("h{i}")), &p).unwrap();
        assert_eq!(a, ip("10.98.0.2"), "hint {hint:?}");
        s.release(&h(&format!("h{i}"))).unwrap();
    }
    write(&s, "last_reserved_ip.0", " 10.98.0.40\n");
    assert_eq!(s.reserve(&h("ok"), &p).unwrap(), ip("10.98.0.41"));
}

#[test]
fn the_hint_is_written_whole_whatever_it_replaces() {
    let t = TempDir::new("hintlen");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    // Longer than the next hint (cut to length), as long, shorter (written over), and
    // unreadable garbage (cut).
    for (i, (before, after)) in [
        (" 10.98.0.40\n", "10.98.0.41"),
        ("10.98.0.41", "10.98.0.42"),
        ("10.98.0.9", "10.98.0.10"),
        (&*"9".repeat(10_000), "10.98.0.2"),
    ]
    .into_iter()
    .enumerate()
    {
        write(&s, "last_reserved_ip.0", before);
        let got = s.reserve(&h(&format!("l{i}")), &p).unwrap();
        assert_eq!(got.to_string(), after, "after {before:?}");
        assert_eq!(read(&s, "last_reserved_ip.0"), after, "after {before:?}");
    }
}

#[test]
fn second_reserve_same_holder_returns_same_address() {
    let t = TempDir::new("again");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    let a = s.reserve(&h("same"), &p).unwrap();
    let b = s.reserve(&h("same"), &p).unwrap();
    assert_eq!(a, b);
    assert_eq!(reservations(&s), [a.to_string()]);
    assert_eq!(
        read(&s, "holders/same:eth0"),
        format!("{a}\nruntime none\n")
    );
    // Same container, another interface, is another holder.
    let c = s.reserve(&Holder::new("same", "eth1"), &p).unwrap();
    assert_ne!(a, c);
}

#[test]
fn retry_after_kill_between_index_and_link() {
    let t = TempDir::new("kill");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    // Killed after writing the index, before linking: DEL frees nothing and cleans up.
    write(&s, "holders/k:eth0", "10.98.0.2\n");
    assert_eq!(s.release(&h("k")).unwrap(), Vec::<IpAddr>::new());
    assert!(!s.dir().join("holders/k:eth0").exists());
    // Same, but ADD is retried: the stale candidate is dropped, not duplicated.
    write(&s, "holders/k:eth0", "10.98.0.7\n");
    let a = s.reserve(&h("k"), &p).unwrap();
    assert_eq!(read(&s, "holders/k:eth0"), format!("{a}\nruntime none\n"));
    // Killed after linking: the retry gets the address it already holds.
    assert_eq!(s.reserve(&h("k"), &p).unwrap(), a);
    assert_eq!(reservations(&s).len(), 1);
}

#[test]
fn release_frees_only_own_files_and_is_idempotent() {
    let t = TempDir::new("release");
    let s = open(&t);
    let p4 = pool("10.98.0.0/24", "10.98.0.1");
    let p6 = pool("fd00::/64", "fd00::1").with_range_set(1);
    let a4 = s.reserve(&h("a"), &p4).unwrap();
    let a6 = s.reserve(&h("a"), &p6).unwrap();
    let b4 = s.reserve(&h("b"), &p4).unwrap();
    assert_eq!(s.held_by(&h("a")).unwrap(), [a4, a6]);
    assert_eq!(s.release(&h("a")).unwrap(), [a4, a6]);
    assert_eq!(reservations(&s), [b4.to_string()]);
    assert_eq!(s.held_by(&h("a")).unwrap(), Vec::<IpAddr>::new());
    assert_eq!(s.release(&h("a")).unwrap(), Vec::<IpAddr>::new());
    assert_eq!(s.release(&h("never")).unwrap(), Vec::<IpAddr>::new());
    assert_eq!(s.held_by(&h("b")).unwrap(), [b4]);
}

#[test]
fn release_skips_a_candidate_someone_else_won() {
    let t = TempDir::new("lost");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    let won = s.reserve(&h("winner"), &p).unwrap();
    // The loser's index still names the address it raced for and lost.
    write(&s, "holders/loser:eth0", &format!("{won}\n"));
    assert_eq!(s.held_by(&h("loser")).unwrap(), Vec::<IpAddr>::new());
    assert_eq!(s.release(&h("loser")).unwrap(), Vec::<IpAddr>::new());
    assert_eq!(read(&s, &won.to_string()), "winner\r\neth0");
    assert!(!s.dir().join("holders/loser:eth0").exists());
}

#[test]
fn legacy_id_only_file() {
    let t = TempDir::new("legacy");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    write(&s, "10.98.0.5", "oldid");
    write(&s, "holders/oldid:eth0", "10.98.0.5\n");
    assert_eq!(s.held_by(&h("oldid")).unwrap(), [ip("10.98.0.5")]);
    // reserve_requested of a legacy address by its owner is idempotent.
    assert_eq!(
        s.reserve_requested(&h("oldid"), &p, ip("10.98.0.5"))
            .unwrap(),
        ip("10.98.0.5")
    );
    let e = s
        .reserve_requested(&h("other"), &p, ip("10.98.0.5"))
        .unwrap_err();
    assert_eq!(
        e.msg,
        "network harness: requested address 10.98.0.5 is already held by container oldid"
    );
    assert_eq!(s.release(&h("oldid")).unwrap(), [ip("10.98.0.5")]);
    assert!(reservations(&s).is_empty());
}

#[test]
fn gc_empty_set_frees_all_and_leaves_other_files() {
    let t = TempDir::new("gcall");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    for i in 0..3 {
        s.reserve(&h(&format!("g{i}")), &p).unwrap();
    }
    write(&s, "10.98.0.77", "legacyid");
    write(&s, "lock", "");
    write(&s, "notes.txt", "keep me");
    fs::create_dir(s.dir().join("10.98.0.99")).unwrap(); // an address-named directory is not ours
    let report = s.gc(&HashSet::new());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let mut released: Vec<String> = report
        .released
        .iter()
        .map(|(a, who)| format!("{a} {who}"))
        .collect();
    released.sort();
    assert_eq!(
        released,
        [
            "10.98.0.2 g0:eth0",
            "10.98.0.3 g1:eth0",
            "10.98.0.4 g2:eth0",
            "10.98.0.77 legacyid"
        ]
    );
    assert_eq!(
        everything(&s),
        [
            "10.98.0.99",
            "holders",
            "last_reserved_ip.0",
            "lock",
            "notes.txt"
        ]
    );
}

#[test]
fn gc_keeps_valid_holders() {
    let t = TempDir::new("gckeep");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    let keep = s.reserve(&h("keep"), &p).unwrap();
    let gone = s.reserve(&h("gone"), &p).unwrap();
    let other_if = s.reserve(&Holder::new("keep", "eth1"), &p).unwrap();
    write(&s, "10.98.0.50", "legacykeep");
    let valid: HashSet<(String, String)> = [("keep", "eth0"), ("legacykeep", "net1")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let report = s.gc(&valid);
    assert!(report.errors.is_empty());
    let mut freed: Vec<IpAddr> = report.released.iter().map(|(a, _)| *a).collect();
    freed.sort();
    assert_eq!(freed, [gone, other_if]);
    assert_eq!(
        reservations(&s),
        [keep.to_string(), "10.98.0.50".to_string()]
    );
    assert!(s.dir().join("holders/keep:eth0").exists());
    assert!(!s.dir().join("holders/gone:eth0").exists());
    assert!(!s.dir().join("holders/keep:eth1").exists());
    assert_eq!(s.held_by(&h("keep")).unwrap(), [keep]);
}

#[test]
fn gc_sweeps_only_stale_temp_files() {
    let t = TempDir::new("gctmp");
    let s = open(&t);
    for name in [
        ".tmp.1.2.3",
        "holders/.tmp.4.5.6",
        ".tmp.fresh",
        "holders/.tmp.fresh",
    ] {
        write(&s, name, "x");
    }
    let old = SystemTime::now() - Duration::from_secs(120);
    for name in [".tmp.1.2.3", "holders/.tmp.4.5.6"] {
        fs::File::options()
            .write(true)
            .open(s.dir().join(name))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let report = s.gc(&HashSet::new());
    assert!(report.errors.is_empty() && report.released.is_empty());
    assert_eq!(
        everything(&s),
        [".tmp.fresh", "holders", "holders/.tmp.fresh"]
    );
}

mod edges;
mod records;
