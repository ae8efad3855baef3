//! What another owner holds: a link that is not academy's on the host veth name (103,
//! and DEL leaves it alone), a plain link on the bridge's name (103), the last address
//! (110) and a requested address (111), each refused without touching the other owner.

use serde_json::json;

use super::*;

/// A link that is not academy's sits on the name academy derives for the attachment's
/// host veth (labelled with the lab's network only so the guard removes it). DEL must
/// leave it alone and succeed; ADD must refuse with 103 and leave it alone too.
#[test]
fn foreign_link_on_the_host_veth_name_is_kept() {
    let lab = Lab::new("foreign");
    let result = lab.call("ADD").run().expect_result("first ADD");
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();
    lab.call("DEL").run().expect_silent_success("first DEL");

    add_plain_link(None, &veth, &format!("{}-p", lab.bridge));
    let alias = format!("academy:{}:foreign", lab.network);
    ip(&["link", "set", "dev", &veth, "alias", &alias]);
    let exists = || run("ip", &["link", "show", "dev", &veth], &[]).code == 0;

    lab.call("DEL")
        .run()
        .expect_silent_success("DEL with a foreign link on the name");
    assert!(exists(), "DEL deleted a link that is not academy's");

    refuse_all(
        &lab,
        vec![refusal(
            "host veth name taken",
            lab.call("ADD"),
            103,
            &[&veth],
        )],
    );
    assert!(
        exists(),
        "the failed ADD deleted a link that is not academy's"
    );
}

#[test]
fn bridge_name_taken_by_a_dummy_link() {
    let lab = Lab::new("brtaken");
    add_plain_link(None, &lab.bridge, &format!("{}-p", lab.bridge));
    refuse_all(
        &lab,
        vec![refusal(
            "bridge name is a plain link",
            lab.call("ADD"),
            103,
            &[&lab.bridge, "not a bridge"],
        )],
    );
}

/// A /30 has one address for containers: the second ADD gets 110, a testAddress held by
/// another container gets 111, and both work once the first is deleted.
#[test]
fn address_exhausted_and_address_taken() {
    let lab = Lab::new("full");
    let mut conf = lab.config("1.0.0");
    conf["subnet"] = json!(format!("{}/30", lab.ip(0)));
    let first = lab
        .call("ADD")
        .config(&conf)
        .run()
        .expect_result("first ADD");
    assert_eq!(first["ips"][0]["address"], format!("{}/30", lab.ip(2)));

    let other = Attach {
        cid: format!("{}-b", lab.cid),
        ifname: "eth0".into(),
        netns: lab.add_netns("b"),
    };
    let mut fixed = conf.clone();
    fixed["testAddress"] = json!(format!("{}/30", lab.ip(2)));
    refuse_all(
        &lab,
        vec![
            refusal(
                "no free address",
                lab.call_for("ADD", &other).config(&conf),
                110,
                &[],
            ),
            refusal(
                "testAddress held by another",
                lab.call_for("ADD", &other).config(&fixed),
                111,
                &[&lab.ip(2)],
            ),
        ],
    );

    lab.call("DEL")
        .config(&conf)
        .run()
        .expect_silent_success("DEL of the first");
    let second = lab.call_for("ADD", &other).config(&fixed).run();
    assert_eq!(
        second.expect_result("ADD once freed")["ips"][0]["address"],
        format!("{}/30", lab.ip(2))
    );
    lab.call_for("DEL", &other)
        .config(&conf)
        .run()
        .expect_silent_success("DEL of the second");
    assert_unwired(&lab, &other);
}
