//! Concurrency: ADD/DEL bursts of listed attachments against back-to-back GCs
//! (guarantees 1 and 2 of the module's list).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::common::*;
use serde_json::json;

#[test]
fn add_del_bursts_racing_gc_keep_valid_attachments_intact() {
    let lab = Lab::new("burst");
    // 16 allocatable addresses for 8 listed attachments and 4 stale ones, so freed
    // addresses are re-reserved within the burst.
    let config = config_with(
        &lab,
        &[
            ("rangeStart", json!(lab.ip(10))),
            ("rangeEnd", json!(lab.ip(25))),
        ],
    );
    let listed: Vec<Attach> = (0..8).map(|i| lab.attachment(&format!("v{i}"))).collect();
    let stale: Vec<Attach> = (0..4).map(|i| lab.attachment(&format!("x{i}"))).collect();
    for a in &stale {
        lab.call_for("ADD", a)
            .config(&config)
            .run()
            .expect_result("stale ADD");
    }
    let valid: Vec<(&str, &str)> = listed.iter().map(|a| (a.cid.as_str(), "eth0")).collect();

    const ROUNDS: usize = 10;
    let live: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    let problems: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let gcs = AtomicUsize::new(0);
    let adds = AtomicUsize::new(0);
    let fail = |m: String| problems.lock().unwrap().push(m);

    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let out = gc_call(&lab, config.clone(), &valid).run();
                if out.code != 0 || !out.stdout.trim().is_empty() {
                    fail(format!("GC failed during the burst:\n{out}"));
                }
                gcs.fetch_add(1, Ordering::SeqCst);
            }
        });
        let workers: Vec<_> = listed
            .chunks(2)
            .map(|pair| {
                let (lab, live, fail, config, adds) = (&lab, &live, &fail, &config, &adds);
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        for a in pair {
                            let out = lab.call_for("ADD", a).config(config).run();
                            if out.code != 0 {
                                fail(format!("{} ADD (round {round}) failed:\n{out}", a.cid));
                                continue;
                            }
                            adds.fetch_add(1, Ordering::SeqCst);
                            let r = out.json();
                            let addr = result_address(&r);
                            if let Some(other) =
                                live.lock().unwrap().insert(addr.clone(), a.cid.clone())
                            {
                                fail(format!("{addr} given to {} while {other} holds it", a.cid));
                            }
                            if holder_of(lab, &addr) != Some(format!("{}\r\neth0", a.cid)) {
                                fail(format!(
                                    "{} lost its reservation {addr} right after ADD",
                                    a.cid
                                ));
                            }
                            if !link_exists(&result_host_veth(&r)) {
                                fail(format!("{} lost its veth right after ADD", a.cid));
                            }
                        }
                        if round + 1 == ROUNDS {
                            break; // the last round's attachments stay, as survivors
                        }
                        for a in pair {
                            let addr = live
                                .lock()
                                .unwrap()
                                .iter()
                                .find(|(_, c)| **c == a.cid)
                                .map(|(ad, _)| ad.clone());
                            if let Some(addr) = &addr {
                                if holder_of(lab, addr) != Some(format!("{}\r\neth0", a.cid)) {
                                    fail(format!(
                                        "{} lost its reservation {addr} before DEL",
                                        a.cid
                                    ));
                                }
                                live.lock().unwrap().remove(addr);
                            }
                            let out = lab.call_for("DEL", a).config(config).run();
                            if out.code != 0 {
                                fail(format!("{} DEL failed:\n{out}", a.cid));
                            }
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    println!(
        "{} ADDs of listed attachments raced {} GCs",
        adds.load(Ordering::SeqCst),
        gcs.load(Ordering::SeqCst)
    );
    let problems = problems.into_inner().unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        gcs.load(Ordering::SeqCst) >= 3,
        "only {} GCs ran during the burst",
        gcs.load(Ordering::SeqCst)
    );
    assert_eq!(adds.load(Ordering::SeqCst), listed.len() * ROUNDS);

    // One more GC with the list: the stale ones are gone, the survivors are intact.
    gc_call(&lab, config.clone(), &valid)
        .run()
        .expect_silent_success("GC after the burst");
    let live = live.into_inner().unwrap();
    assert_eq!(live.len(), listed.len());
    let mut want: Vec<String> = live.keys().cloned().collect();
    want.extend(listed.iter().map(|a| format!("holders/{}:eth0", a.cid)));
    want.sort();
    assert_eq!(
        lab.reservations(),
        want,
        "only the survivors may hold addresses"
    );
    for a in &stale {
        assert!(
            !link_exists(&hostveth_name(&lab, a)),
            "stale {} kept its veth",
            a.cid
        );
    }
    assert_eq!(lab.lab_veths().len(), listed.len());
    for a in listed.iter().take(2) {
        assert!(
            ping_from(&a.netns, &lab.gateway(), 1),
            "{} cannot ping its gateway",
            a.cid
        );
    }

    // A final GC with an empty list, then the runtime's DELs: nothing left.
    gc_call(&lab, config.clone(), &[])
        .run()
        .expect_silent_success("GC []");
    for a in listed.iter().chain(&stale) {
        lab.call_for("DEL", a)
            .config(&config)
            .run()
            .expect_silent_success("DEL after GC");
    }
    assert_eq!(lab.reservations(), Vec::<String>::new());
    assert_eq!(lab.lab_veths(), Vec::<String>::new());
}

/// The derived host veth name of an attachment, read from the kernel through its alias.
fn hostveth_name(lab: &Lab, a: &Attach) -> String {
    let alias = format!("academy:{}:{}:{}", lab.network, a.cid, a.ifname);
    host_links()
        .iter()
        .find(|l| l["ifalias"].as_str() == Some(alias.as_str()))
        .and_then(|l| l["ifname"].as_str())
        .unwrap_or("(none)")
        .to_string()
}
