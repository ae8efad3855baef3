//! A full pool heals itself: ADD frees old leaks (and only those) when it finds no free
//! address.

use std::time::Duration;

use super::*;
use crate::common::*;
use serde_json::json;

#[test]
fn a_full_pool_heals_itself_from_old_leaks_only() {
    let lab = Lab::new("lkheal");
    let conf = config(&lab, json!({"reclaimLeakedAfter": 30}));
    let (w1, w2) = (attach(&lab, "w1"), attach(&lab, "w2"));
    let (k1, k2) = (attach(&lab, "k1"), attach(&lab, "k2"));
    let wired = [wire(&lab, &w1, &conf), wire(&lab, &w2, &conf)];
    let leaked1 = leak(&lab, &k1, &conf);
    let leaked2 = leak(&lab, &k2, &conf);

    // Full, and both leaks are younger than reclaimLeakedAfter: as an ADD still in flight
    // would be. Nothing is taken; the ADD fails with 110 as before.
    let n1 = attach(&lab, "n1");
    let before = store(&lab);
    let out = lab.call_for("ADD", &n1).config(&conf).run();
    assert_cni_error(&out, 110, &["no free address"]);
    assert_eq!(store(&lab), before, "a young leak was taken");

    let status = || {
        Call::bare()
            .env("CNI_COMMAND", "STATUS")
            .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
            .config(&conf)
            .run()
    };
    assert_cni_error(&status(), 50, &["no free address"]);

    // One leak is now older than the grace period: STATUS says ADD can be served, and
    // the next ADD takes its address, saying so on stderr. The young one stays.
    make_old(&lab, &leaked1, Duration::from_secs(120));
    let out = status();
    out.expect_silent_success("STATUS of a full pool with an old leak");
    assert!(
        out.stderr.contains("will be reclaimed by the next ADD"),
        "{out}"
    );
    assert_eq!(
        holder_of(&lab, &leaked1),
        Some(format!("{}\r\neth0", k1.cid)),
        "STATUS freed it"
    );
    let out = lab.call_for("ADD", &n1).config(&conf).run();
    let r = out.expect_result("ADD into a pool with an old leak");
    assert_result_valid(&lab, &r, &n1, "1.1.0", Some(&leaked1));
    assert!(
        out.stderr.contains(&leaked1)
            && out.stderr.contains(&k1.cid)
            && out.stderr.contains("reclaimLeakedAfter"),
        "ADD does not say what it reclaimed:\n{out}"
    );
    assert!(
        !out.stderr.contains(&leaked2),
        "the young leak is named:\n{out}"
    );
    assert_eq!(
        holder_of(&lab, &leaked2),
        Some(format!("{}\r\neth0", k2.cid))
    );
    assert!(
        !store(&lab).contains(&format!("holders/{}:eth0", k1.cid)),
        "the reclaimed attachment's holder index is left: {:?}",
        store(&lab)
    );

    // reclaimLeakedAfter 0 switches healing off, whatever the leak's age.
    make_old(&lab, &leaked2, Duration::from_secs(3600));
    let n2 = attach(&lab, "n2");
    let off = config(&lab, json!({"reclaimLeakedAfter": 0}));
    let out = lab.call_for("ADD", &n2).config(&off).run();
    assert_cni_error(&out, 110, &["no free address"]);
    assert_eq!(
        holder_of(&lab, &leaked2),
        Some(format!("{}\r\neth0", k2.cid))
    );
    // Without the key, the default (60 s) heals it.
    let out = lab
        .call_for("ADD", &n2)
        .config(&config(&lab, json!({})))
        .run();
    let r = out.expect_result("ADD with the default reclaimLeakedAfter");
    assert_eq!(result_address(&r), leaked2, "{out}");

    // The wired attachments were never touched.
    for (a, addr) in [(&w1, &wired[0]), (&w2, &wired[1])] {
        assert_eq!(holder_of(&lab, addr), Some(format!("{}\r\neth0", a.cid)));
        assert!(link_exists(&hostveth(a)));
        assert_reaches_gateway(&lab, a);
    }
    assert_reaches_gateway(&lab, &n1);
    assert_reaches_gateway(&lab, &n2);
    // The killed runtimes' late DELs find nothing of theirs and succeed quietly.
    for k in [&k1, &k2] {
        lab.call_for("DEL", k)
            .config(&conf)
            .run()
            .expect_silent_success("late DEL of a reclaimed attachment");
    }
    assert_eq!(
        holder_of(&lab, &leaked1),
        Some(format!("{}\r\neth0", n1.cid))
    );
}
