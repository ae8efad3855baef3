//! A live node switched: the reference chain's containers, then `academy convert
//! --in-place` under them. They keep working through the reference's rules, but
//! academy's repairs know only the containers academy added: after `nft flush
//! ruleset`, `academy restore` gives such a container nothing back, until the
//! runtime's DEL and ADD through the new conflist make it academy's.

use super::*;

#[test]
fn containers_made_before_the_switch_are_repaired_once_added_again() {
    let lab = Lab::new("swlive");
    let mut site = Site::new(&lab, Side::Reference);
    let conflist = site.conf_dir.join(format!("{}.conflist", lab.network));
    let out = in_node(
        &site.node,
        &[
            plugin(),
            "convert",
            conflist.to_str().unwrap(),
            "--in-place",
        ],
    );
    assert_eq!(out.code, 0, "academy convert --in-place:\n{out}");
    site.side = Side::Academy;
    assert!(
        site.outbound(),
        "the reference's container, after the switch"
    );

    site.node.nft(&["flush", "ruleset"]);
    let restored = site.restore();
    let before_readd = site.outbound();
    let status = site.status();
    println!("STATUS then: exit {}", status.code);
    println!(
        "restore with only the reference's containers:\n{}",
        restored.stderr
    );
    // It cannot repair them, but it says so, naming them and the remedy.
    assert!(
        restored.stderr.contains("academy did not make")
            && restored.stderr.contains("DEL and ADD those containers"),
        "restore kept quiet about the reference's containers:\n{}",
        restored.stderr
    );

    let a = site.a.clone();
    let del = site.cnitool("del", &a, Some(HOST_PORT));
    assert_eq!(del.code, 0, "DEL through the converted conflist:\n{del}");
    println!("DEL of a container the reference made:\n{}", del.stderr);
    let result = site.add(&a, Some(HOST_PORT));
    site.a_v4 = result_address(&result);
    site.node.nft(&["flush", "ruleset"]);
    site.restore();
    let after_readd = site.outbound();
    println!(
        "container made by the reference, nft flush ruleset + restore: outbound {}; \
         after DEL and ADD through the converted conflist: {}",
        if before_readd { "works" } else { "fails" },
        if after_readd { "works" } else { "fails" }
    );
    assert!(
        !before_readd,
        "restore repaired a container academy did not add: docs/switching.md says it does not"
    );
    assert!(
        after_readd,
        "the container, academy's since its ADD, was not repaired"
    );
}
