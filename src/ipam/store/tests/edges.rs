//! The store at its edges: requested addresses, refusals of hostile or foreign files,
//! IPv6, fallbacks, STATUS, concurrency.

use super::*;

#[test]
fn reserve_requested_rules() {
    let t = TempDir::new("req");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    assert_eq!(
        s.reserve_requested(&h("a"), &p, ip("10.98.0.9")).unwrap(),
        ip("10.98.0.9")
    );
    assert_eq!(read(&s, "holders/a:eth0"), "10.98.0.9\nruntime none\n");
    // Idempotent for the same holder, without duplicating the index line.
    assert_eq!(
        s.reserve_requested(&h("a"), &p, ip("10.98.0.9")).unwrap(),
        ip("10.98.0.9")
    );
    assert_eq!(read(&s, "holders/a:eth0"), "10.98.0.9\nruntime none\n");

    let e = s
        .reserve_requested(&h("b"), &p, ip("10.98.0.9"))
        .unwrap_err();
    assert_eq!(e.code, code::ADDRESS_UNAVAILABLE);
    assert_eq!(
        e.msg,
        "network harness: requested address 10.98.0.9 is already held by container a (interface eth0)"
    );
    assert!(!s.dir().join("holders/b:eth0").exists());

    for (bad, why) in [
        ("10.98.0.1", "gateway"),
        ("10.98.0.0", "network address"),
        ("10.98.0.255", "broadcast"),
        ("10.99.0.5", "outside subnet"),
        ("fd00::5", "outside subnet"),
    ] {
        let e = s.reserve_requested(&h("b"), &p, ip(bad)).unwrap_err();
        assert_eq!(e.code, code::ADDRESS_UNAVAILABLE);
        assert!(e.msg.contains(bad) && e.msg.contains(why), "{}", e.msg);
    }
    assert_eq!(reservations(&s), ["10.98.0.9"]);
    // A requested address is freed by holder like any other.
    assert_eq!(s.release(&h("a")).unwrap(), [ip("10.98.0.9")]);
}

#[test]
fn store_dir_is_private_and_name_is_checked() {
    let t = TempDir::new("open");
    let s = Store::open(&t.0.join("deeper/data"), "harness").unwrap();
    assert_eq!(s.dir(), t.0.join("deeper/data/harness"));
    for d in [s.dir().to_path_buf(), s.dir().join("holders")] {
        assert_eq!(
            fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }
    for bad in ["../x", "..", ".", "", "a/b", "a\0b"] {
        let e = Store::open(&t.0, bad).unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG, "{bad:?}");
    }
    let names: Vec<_> = fs::read_dir(&t.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["deeper"]);
}

#[test]
fn world_writable_or_symlinked_store_refused() {
    let t = TempDir::new("perm");
    let dir = t.0.join("harness");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let e = Store::open(&t.0, "harness").unwrap_err();
    assert_eq!(e.code, code::IO_FAILURE);
    assert!(e.msg.contains("writable by group or others"), "{}", e.msg);
    assert!(e.details.contains("chmod 0700"), "{}", e.details);
    for mode in [0o770, 0o720] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(
            Store::open(&t.0, "harness").unwrap_err().code,
            code::IO_FAILURE
        );
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let s = Store::open(&t.0, "harness").unwrap();
    drop(s);
    fs::set_permissions(dir.join("holders"), fs::Permissions::from_mode(0o777)).unwrap();
    let e = Store::open(&t.0, "harness").unwrap_err();
    assert!(e.msg.contains("harness/holders"), "{}", e.msg);
    fs::set_permissions(dir.join("holders"), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&dir, Some(4242), None).unwrap();
    let e = Store::open(&t.0, "harness").unwrap_err();
    assert!(e.msg.contains("owned by uid 4242"), "{}", e.msg);
    assert!(e.details.contains("chown"), "{}", e.details);
    std::os::unix::fs::chown(&dir, Some(0), None).unwrap();

    // holders/ as a symlink to a folder outside the store is refused, never followed.
    fs::remove_dir(dir.join("holders")).unwrap();
    fs::create_dir(t.0.join("outside")).unwrap();
    fs::write(t.0.join("outside/victim:eth0"), "x").unwrap();
    std::os::unix::fs::symlink(t.0.join("outside"), dir.join("holders")).unwrap();
    let e = Store::open(&t.0, "harness").unwrap_err();
    assert_eq!(e.code, code::IO_FAILURE);
    assert!(
        e.msg.contains("holders") && e.msg.contains("symlink"),
        "{}",
        e.msg
    );
    assert!(t.0.join("outside/victim:eth0").exists());

    fs::create_dir(t.0.join("real")).unwrap();
    std::os::unix::fs::symlink(t.0.join("real"), t.0.join("link")).unwrap();
    assert_eq!(
        Store::open(&t.0, "link").unwrap_err().code,
        code::IO_FAILURE
    );
}

#[test]
fn ipv6_basics() {
    let t = TempDir::new("v6");
    let s = open(&t);
    let p = pool("fd00:98::/64", "fd00:98::1");
    assert_eq!(s.reserve(&h("a"), &p).unwrap(), ip("fd00:98::2"));
    assert_eq!(s.reserve(&h("b"), &p).unwrap(), ip("fd00:98::3"));
    assert_eq!(reservations(&s), ["fd00:98::2", "fd00:98::3"]);
    let e = s
        .reserve_requested(&h("c"), &p, ip("fd00:98::"))
        .unwrap_err();
    assert_eq!(e.code, code::ADDRESS_UNAVAILABLE);
    assert_eq!(
        s.reserve_requested(&h("c"), &p, ip("fd00:98::ffff:ffff:ffff:ffff"))
            .unwrap(),
        ip("fd00:98::ffff:ffff:ffff:ffff")
    );
    assert_eq!(s.release(&h("a")).unwrap(), [ip("fd00:98::2")]);
}

#[test]
fn named_temp_fallback_works_and_leaves_no_temp() {
    let t = TempDir::new("fallback");
    let s = open(&t);
    s.no_tmpfile.store(true, Ordering::Relaxed);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    // Take .3 behind the allocator's back so the loop hits EEXIST-free probing and linking.
    write(&s, "10.98.1.3", "someone\r\neth0");
    assert_eq!(s.reserve(&h("a"), &p).unwrap(), ip("10.98.1.2"));
    assert_eq!(s.reserve(&h("b"), &p).unwrap(), ip("10.98.1.4"));
    assert_eq!(read(&s, "10.98.1.4"), "b\r\neth0");
    assert!(s.status(std::slice::from_ref(&p)).is_ok());
    assert!(
        everything(&s).iter().all(|n| !n.contains(".tmp.")),
        "{:?}",
        everything(&s)
    );
}

#[test]
fn lost_race_moves_to_next_candidate() {
    let t = TempDir::new("race");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    let mut pending = s
        .pending(&s.dir, b"rival\r\neth0", ".tmp.rival:eth0")
        .unwrap();
    s.link(&mut pending, "10.98.1.2", &h("rival")).unwrap();
    // A taken name gives EEXIST, and the unnamed file stays for the next candidate.
    let mut second = s
        .pending(&s.dir, b"rival2\r\neth0", ".tmp.rival2:eth0")
        .unwrap();
    let e = s.link(&mut second, "10.98.1.2", &h("rival2")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    drop((pending, second));
    assert_eq!(s.reserve(&h("a"), &p).unwrap(), ip("10.98.1.3"));
}

#[test]
fn status_reports_full_and_unwritable() {
    let t = TempDir::new("status");
    let s = open(&t);
    let p = pool("10.0.0.0/30", "10.0.0.1");
    s.status(std::slice::from_ref(&p)).unwrap();
    status(&t.0, "harness", std::slice::from_ref(&p)).unwrap();
    s.reserve(&h("a"), &p).unwrap();
    // The store says what is wrong in its own codes; the STATUS verb makes them 50.
    let e = s.status(std::slice::from_ref(&p)).unwrap_err();
    assert_eq!(e.code, code::ADDRESS_EXHAUSTED);
    assert_eq!(
        e.msg,
        "network harness: no free address in 10.0.0.0/30 (1 of 1 held)"
    );
    assert_eq!(
        status(&t.0, "../x", &[]).unwrap_err().code,
        code::INVALID_CONFIG
    );

    // A data dir that cannot be created.
    write(&s, "plainfile", "");
    let e = status(&s.dir().join("plainfile"), "harness", &[]).unwrap_err();
    assert_eq!(e.code, code::IO_FAILURE);
    assert!(e.msg.contains("plainfile"), "{}", e.msg);

    // A holders/ that cannot take files makes the store unusable, for root too.
    fs::remove_dir_all(s.dir().join("holders")).unwrap();
    write(&s, "holders", "");
    let e = s.status(&[]).unwrap_err();
    assert_eq!(e.code, code::IO_FAILURE);
    assert!(
        e.msg.contains("harness/holders is not writable"),
        "{}",
        e.msg
    );
    let e = s
        .reserve(&h("b"), &pool("10.1.0.0/24", "10.1.0.1"))
        .unwrap_err();
    assert_eq!(e.code, code::IO_FAILURE);
    assert!(e.msg.contains("holder index"), "{}", e.msg);
    // Opened afresh, the store refuses a holders/ that is not a directory.
    let e = status(&t.0, "harness", &[]).unwrap_err();
    assert_eq!(e.code, code::IO_FAILURE);
    assert!(e.msg.contains("harness/holders"), "{}", e.msg);
    fs::remove_file(s.dir().join("holders")).unwrap();
    fs::create_dir(s.dir().join("holders")).unwrap();

    // Root ignores directory permissions, so this half only means something unprivileged.
    if !nix::unistd::geteuid().is_root() {
        fs::set_permissions(s.dir(), fs::Permissions::from_mode(0o500)).unwrap();
        let e = s.status(&[]).unwrap_err();
        assert_eq!(e.code, code::IO_FAILURE);
        assert!(
            e.msg.contains("not writable") && e.msg.contains("harness"),
            "{}",
            e.msg
        );
        let e = s
            .reserve(&h("b"), &pool("10.1.0.0/24", "10.1.0.1"))
            .unwrap_err();
        assert_eq!(e.code, code::IO_FAILURE);
        assert!(e.msg.contains(&s.dir().display().to_string()), "{}", e.msg);
    }
}

#[test]
fn invalid_holder_refused_before_touching_disk() {
    let t = TempDir::new("holder");
    let s = open(&t);
    let p = pool("10.98.0.0/24", "10.98.0.1");
    let bad = Holder::new("../../etc", "eth0");
    assert_eq!(
        s.reserve(&bad, &p).unwrap_err().code,
        code::INVALID_ENVIRONMENT
    );
    assert_eq!(s.release(&bad).unwrap_err().code, code::INVALID_ENVIRONMENT);
    assert_eq!(everything(&s), ["holders"]);
}

#[test]
fn concurrent_reserves_never_share_an_address() {
    let t = TempDir::new("conc");
    let s = Arc::new(open(&t));
    let p = Arc::new(pool("10.98.0.0/24", "10.98.0.1"));
    let threads: Vec<_> = (0..8)
        .map(|th| {
            let (s, p) = (Arc::clone(&s), Arc::clone(&p));
            std::thread::spawn(move || {
                (0..30)
                    .map(|i| s.reserve(&h(&format!("t{th}-{i}")), &p).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let all: Vec<IpAddr> = threads
        .into_iter()
        .flat_map(|j| j.join().unwrap())
        .collect();
    let unique: HashSet<IpAddr> = all.iter().copied().collect();
    assert_eq!(all.len(), 240);
    assert_eq!(unique.len(), 240, "an address was handed out twice");
    assert_eq!(reservations(&s).len(), 240);
    assert_eq!(fs::read_dir(s.dir().join("holders")).unwrap().count(), 240);
    assert!(everything(&s).iter().all(|n| !n.contains(".tmp.")));
    for th in 0..8 {
        for i in 0..30 {
            assert_eq!(s.held_by(&h(&format!("t{th}-{i}"))).unwrap().len(), 1);
        }
    }
}

fn mkfifo(path: &std::path::Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

#[test]
fn fifos_are_never_waited_on() {
    let t = TempDir::new("fifo");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    // At the hint: no hint, and the FIFO stays.
    mkfifo(&s.dir().join("last_reserved_ip.0"));
    assert_eq!(s.reserve(&h("a"), &p).unwrap(), ip("10.98.1.2"));
    s.status(std::slice::from_ref(&p)).unwrap();
    // At an address this holder's index names: not ours, another address is taken.
    fs::write(s.dir().join("holders/b:eth0"), "10.98.1.3\n").unwrap();
    mkfifo(&s.dir().join("10.98.1.3"));
    assert_eq!(s.reserve(&h("b"), &p).unwrap(), ip("10.98.1.4"));
    assert_eq!(s.release(&h("b")).unwrap(), [ip("10.98.1.4")]);
    // Requested, it is code 111 naming what is there.
    let e = s
        .reserve_requested(&h("c"), &p, ip("10.98.1.3"))
        .unwrap_err();
    assert_eq!(e.code, code::ADDRESS_UNAVAILABLE);
    assert!(e.msg.contains("FIFO"), "{}", e.msg);
    // At the holder index: ADD cannot record, code 5; release leaves it and succeeds.
    mkfifo(&s.dir().join("holders/d:eth0"));
    let e = s.reserve(&h("d"), &p).unwrap_err();
    assert_eq!(e.code, code::IO_FAILURE);
    assert!(e.msg.contains("not a regular file"), "{}", e.msg);
    assert_eq!(s.release(&h("d")).unwrap(), Vec::<IpAddr>::new());
    // GC leaves every FIFO alone.
    let report = s.gc(&HashSet::new());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    for f in ["last_reserved_ip.0", "10.98.1.3", "holders/d:eth0"] {
        assert!(fs::symlink_metadata(s.dir().join(f)).is_ok(), "{f} removed");
    }
}

#[test]
fn non_files_at_indexed_addresses_do_not_wedge_release() {
    let t = TempDir::new("nonfile");
    let s = open(&t);
    fs::create_dir(s.dir().join("10.98.1.6")).unwrap();
    fs::write(t.0.join("target"), "a\r\neth0").unwrap();
    std::os::unix::fs::symlink(t.0.join("target"), s.dir().join("10.98.1.7")).unwrap();
    fs::write(s.dir().join("holders/a:eth0"), "10.98.1.6\n10.98.1.7\n").unwrap();
    assert_eq!(s.release(&h("a")).unwrap(), Vec::<IpAddr>::new());
    assert!(s.dir().join("10.98.1.6").is_dir());
    assert!(fs::symlink_metadata(s.dir().join("10.98.1.7")).is_ok());
    assert!(t.0.join("target").exists());
    assert!(!s.dir().join("holders/a:eth0").exists());
}

#[test]
fn release_frees_what_it_linked_after_its_index_vanished() {
    let t = TempDir::new("vanished");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    assert_eq!(s.reserve(&h("a"), &p).unwrap(), ip("10.98.1.2"));
    let five = ip("10.98.1.5");
    assert_eq!(s.reserve_requested(&h("a"), &p, five).unwrap(), five);
    assert_eq!(s.reserve(&h("z"), &p).unwrap(), ip("10.98.1.3"));
    fs::remove_file(s.dir().join("holders/a:eth0")).unwrap();
    assert!(!s.has_index(&h("a")).unwrap());
    assert_eq!(s.release(&h("a")).unwrap(), [ip("10.98.1.2"), five]);
    assert_eq!(reservations(&s), ["10.98.1.3"]);
    // Releasing one holder keeps what the Store remembers of another.
    fs::remove_file(s.dir().join("holders/z:eth0")).unwrap();
    assert_eq!(s.release(&h("z")).unwrap(), [ip("10.98.1.3")]);
    assert!(reservations(&s).is_empty());
    // Another Store (a later DEL) never frees by memory: only by index and content.
    let other = open(&t);
    let b = s.reserve(&h("b"), &p).unwrap();
    assert_eq!(other.release(&h("a")).unwrap(), Vec::<IpAddr>::new());
    assert_eq!(reservations(&s), [b.to_string()]);
}

#[test]
fn a_killed_holder_write_is_replaced_and_removed_by_release() {
    let t = TempDir::new("stale");
    let s = open(&t);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    // What a run killed between writing its index's temp file and renaming it leaves.
    write(&s, "holders/.tmp.a:eth0", "10.98.1.9\n");
    write(&s, ".tmp.a:eth0", "a\r\neth0");
    assert_eq!(s.reserve(&h("a"), &p).unwrap(), ip("10.98.1.2"));
    assert_eq!(s.release(&h("a")).unwrap(), [ip("10.98.1.2")]);
    assert_eq!(everything(&s), ["holders", "last_reserved_ip.0"]);
}

#[test]
fn a_lock_held_by_someone_else_is_not_waited_on_forever() {
    let t = TempDir::new("flock");
    let mut s = open(&t);
    s.lock_wait = Duration::from_millis(200);
    let p = pool("10.98.1.0/29", "10.98.1.1");
    let addr = s.reserve(&h("a"), &p).unwrap();
    let hostile = fs::File::open(s.dir().join(addr.to_string())).unwrap();
    let _held = nix::fcntl::Flock::lock(hostile, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let started = std::time::Instant::now();
    let e = s.release(&h("a")).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(e.code, code::TRY_AGAIN_LATER, "{e}");
    assert!(e.details.contains("lock"), "{e}");
    // Nothing was removed: a retried DEL still finds the index and the reservation.
    assert_eq!(reservations(&s), [addr.to_string()]);
    assert_eq!(s.held_by(&h("a")).unwrap(), [addr]);
    let report = s.gc(&HashSet::new());
    assert_eq!(report.errors.len(), 1);
    assert_eq!(report.errors[0].code, code::TRY_AGAIN_LATER);
}

#[test]
fn release_without_an_index_frees_host_local_s_files_by_content() {
    let t = TempDir::new("hostlocal");
    let s = open(&t);
    // host-local's reservations: the same content, no holder index.
    write(&s, "10.0.0.7", "c1\r\neth0");
    write(&s, "10.0.0.8", "c1\r\neth1");
    write(&s, "10.0.0.9", "c2\r\neth0");
    assert!(s.is_reserved(ip("10.0.0.7")).unwrap());
    assert!(!s.is_reserved(ip("10.0.0.6")).unwrap());
    assert_eq!(
        s.release(&Holder::new("c1", "eth0")).unwrap(),
        vec![ip("10.0.0.7")]
    );
    assert_eq!(reservations(&s), vec!["10.0.0.8", "10.0.0.9"]);
    // An attachment academy indexed is released from its index alone.
    let p = pool("10.0.0.0/24", "10.0.0.1");
    let mine = s.reserve(&h("c3"), &p).unwrap();
    write(&s, "10.0.0.200", "c3\r\neth0");
    assert_eq!(s.release(&h("c3")).unwrap(), vec![mine]);
    assert!(reservations(&s).contains(&"10.0.0.200".to_string()));
}
