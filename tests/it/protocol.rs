//! The CNI protocol at its edges: bad input of every kind, each answered with one CNI
//! error object (the expected code, a message naming the culprit), no panic, and nothing
//! changed on the host; VERSION and the about text; DEL and CHECK corner cases. Root only.

use crate::common::*;
use serde_json::{json, Value};

/// Runs refusal cases against one lab and collects every failure, so one broken case
/// does not hide the others.
struct Refusals<'a> {
    lab: &'a Lab,
    failures: Vec<String>,
    count: usize,
}

impl<'a> Refusals<'a> {
    fn new(lab: &'a Lab) -> Self {
        Refusals {
            lab,
            failures: Vec::new(),
            count: 0,
        }
    }

    /// `call` must fail with `code` and a msg containing each needle, and leave the
    /// lab's part of the host exactly as it was.
    fn expect(&mut self, case: &str, call: Call, code: u64, needles: &[&str]) {
        self.count += 1;
        let before = self.lab.snapshot();
        let out = call.run();
        let after = self.lab.snapshot();
        let mut problems = Vec::new();
        if let Err(e) = check_cni_error(&out, code, needles) {
            problems.push(e);
        }
        // Validation errors (codes below 100) must touch nothing at all; runtime
        // failures come after the reservation by design, and may leave the store's
        // housekeeping but no reservation.
        let diff = if code < 100 {
            after.diff(&before)
        } else {
            after.diff_allowing_store_housekeeping(&before)
        };
        if !diff.is_empty() {
            problems.push(format!("the host changed:\n{diff}"));
        }
        if !problems.is_empty() {
            self.failures
                .push(format!("[{case}] {}\n{out}", problems.join("\n  ")));
        }
    }

    fn finish(self) {
        assert!(self.count > 0);
        assert!(
            self.failures.is_empty(),
            "{} of {} cases failed:\n\n{}",
            self.failures.len(),
            self.count,
            self.failures.join("\n\n")
        );
    }
}

#[test]
fn env_errors_name_the_variable() {
    let lab = Lab::new("env");
    let mut r = Refusals::new(&lab);
    let add = || lab.call("ADD");

    for var in ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS"] {
        r.expect(&format!("ADD without {var}"), add().without(var), 4, &[var]);
        r.expect(
            &format!("ADD with empty {var}"),
            add().env(var, ""),
            4,
            &[var],
        );
    }
    for var in ["CNI_CONTAINERID", "CNI_NETNS"] {
        r.expect(
            &format!("CHECK without {var}"),
            lab.call("CHECK").without(var),
            4,
            &[var],
        );
    }
    for var in ["CNI_CONTAINERID", "CNI_IFNAME"] {
        r.expect(
            &format!("DEL without {var}"),
            lab.call("DEL").without(var),
            4,
            &[var],
        );
    }

    let long_id = "a".repeat(201);
    for cid in [
        "-lead", ".lead", "_lead", "a b", "a/b", "../x", "a:b", "é", "a;b", "a\nb", &long_id,
    ] {
        let case = format!("ADD with CNI_CONTAINERID {cid:?}");
        r.expect(
            &case,
            add().env("CNI_CONTAINERID", cid),
            4,
            &["CNI_CONTAINERID"],
        );
    }
    r.expect(
        "DEL with CNI_CONTAINERID a/b",
        lab.call("DEL").env("CNI_CONTAINERID", "a/b"),
        4,
        &["CNI_CONTAINERID"],
    );

    let long_if = "x".repeat(16);
    for ifname in [
        long_if.as_str(),
        "a/b",
        "a:b",
        "a b",
        "a\tb",
        ".",
        "..",
        " eth0",
    ] {
        let case = format!("ADD with CNI_IFNAME {ifname:?}");
        r.expect(&case, add().env("CNI_IFNAME", ifname), 4, &["CNI_IFNAME"]);
    }
    r.expect(
        "DEL with CNI_IFNAME of 16 bytes",
        lab.call("DEL").env("CNI_IFNAME", &long_if),
        4,
        &["CNI_IFNAME"],
    );

    // CNI_ARGS: malformed items and unusable IP=/MAC= values (other keys are ignored).
    for args in [
        "garbage",
        "IP=nonsense",
        "IP=10.0.0.1/99",
        "MAC=zz:zz",
        "K8S_POD_NAME=x;junk",
    ] {
        let case = format!("ADD with CNI_ARGS {args:?}");
        r.expect(&case, add().env("CNI_ARGS", args), 4, &["CNI_ARGS"]);
    }
    // A well-formed IP= outside the network: refused at reservation (111), naming it.
    let outside = "IP=10.250.250.5";
    r.expect(
        outside,
        add().env("CNI_ARGS", outside),
        111,
        &["10.250.250.5"],
    );

    for command in ["ATTACH", "add", "DELETE", "ADD "] {
        let case = format!("CNI_COMMAND {command:?}");
        r.expect(
            &case,
            add().env("CNI_COMMAND", command),
            4,
            &["CNI_COMMAND"],
        );
    }
    r.finish();
}

#[test]
fn stdin_and_config_errors_name_the_field() {
    let lab = Lab::new("conf");
    let mut r = Refusals::new(&lab);
    let v = "1.0.0";
    let add = |config: Value| lab.call("ADD").config(&config);

    // stdin that is not one JSON object: 6, decode failure.
    let good = lab.config(v).to_string();
    let not_json: Vec<(&str, Vec<u8>)> = vec![
        ("empty stdin", b"".to_vec()),
        ("truncated", good.as_bytes()[..good.len() / 2].to_vec()),
        ("a list", b"[]".to_vec()),
        ("null", b"null".to_vec()),
        ("a string", b"\"academy\"".to_vec()),
        ("a number", b"42".to_vec()),
        ("not UTF-8", vec![0xff, 0xfe, 0x7b]),
        ("trailing garbage", format!("{good} garbage").into_bytes()),
        ("two objects", format!("{good}{good}").into_bytes()),
    ];
    for (case, bytes) in not_json {
        r.expect(case, lab.call("ADD").stdin(bytes.clone()), 6, &["JSON"]);
        r.expect(
            &format!("DEL, {case}"),
            lab.call("DEL").stdin(bytes),
            6,
            &["JSON"],
        );
    }

    // Fields of the reference bridge plugin that academy does not implement, switched
    // on: 2, named. (Their "off" values are accepted, so a reference config that spells
    // them out still works.)
    let unsupported: &[(&str, Value)] = &[
        ("macspoofchk", json!(true)),
        ("enabledad", json!(true)),
        ("disableContainerInterface", json!(true)),
    ];
    for (key, value) in unsupported {
        r.expect(
            &format!("{key}: {value}"),
            add(lab.config_with(v, key, value.clone())),
            2,
            &[key],
        );
    }
    // ipMasq is implemented; its backend can only be one of the reference's two names.
    r.expect(
        "ipMasqBackend: ebtables",
        add(lab.config_with(v, "ipMasqBackend", json!("ebtables"))),
        7,
        &["ipMasqBackend"],
    );

    // The ipam-block form: bad blocks are 7, host-local keys academy lacks are 2.
    let ipam_form = |ipam: Value| {
        let mut c = lab.config_without(v, "subnet");
        c.as_object_mut().unwrap().remove("gateway");
        c["ipam"] = ipam;
        c
    };
    let subnet = lab.subnet();
    let ipam_cases: Vec<(&str, Value, u64, &str)> = vec![
        (
            "ipam and subnet both",
            lab.config_with(v, "ipam", json!({"type": "host-local"})),
            7,
            "ipam",
        ),
        (
            "ipam not an object",
            ipam_form(json!("host-local")),
            7,
            "ipam",
        ),
        (
            "ipam without type",
            ipam_form(json!({ "subnet": subnet })),
            7,
            "ipam.type",
        ),
        (
            "ipam type a path",
            ipam_form(json!({ "type": "../x" })),
            7,
            "ipam.type",
        ),
        (
            "ipam without ranges",
            ipam_form(json!({ "type": "host-local" })),
            7,
            "ipam",
        ),
        (
            "ipam.routes not a list",
            ipam_form(json!({ "type": "host-local", "subnet": subnet, "routes": 5 })),
            7,
            "ipam.routes",
        ),
        (
            "ipam.resolvConf",
            ipam_form(
                json!({ "type": "host-local", "subnet": subnet, "resolvConf": "/etc/resolv.conf" }),
            ),
            2,
            "ipam.resolvConf",
        ),
    ];
    for (case, config, code, needle) in ipam_cases {
        r.expect(case, add(config), code, &[needle]);
    }
    // Addresses and MAC asked for in the config (args.cni, runtimeConfig): 7, named.
    let requests: &[(&str, Value, &str)] = &[
        (
            "args",
            json!({ "cni": { "ips": "10.0.0.5" } }),
            "args.cni.ips",
        ),
        ("args", json!({ "cni": { "ips": [5] } }), "args.cni.ips"),
        (
            "args",
            json!({ "cni": { "ips": ["nonsense"] } }),
            "args.cni.ips",
        ),
        ("args", json!({ "cni": { "mac": "zz" } }), "args.cni.mac"),
        (
            "runtimeConfig",
            json!({ "ips": ["nonsense"] }),
            "runtimeConfig.ips",
        ),
        (
            "runtimeConfig",
            json!({ "mac": "01:02" }),
            "runtimeConfig.mac",
        ),
    ];
    for (key, value, needle) in requests {
        let case = format!("{key}: {value}");
        r.expect(
            &case,
            add(lab.config_with(v, key, value.clone())),
            7,
            &[needle],
        );
    }
    let mut both = lab.config(v);
    both["hairpinMode"] = json!(true);
    both["promiscMode"] = json!(true);
    r.expect(
        "hairpinMode and promiscMode",
        add(both),
        7,
        &["hairpinMode"],
    );

    // Missing required fields: 7, named.
    for key in ["cniVersion", "name", "subnet"] {
        r.expect(
            &format!("no {key}"),
            add(lab.config_without(v, key)),
            7,
            &[key],
        );
    }

    // Every field with a bad value or type: 7, named.
    let (net, bcast, gw) = (lab.ip(0), lab.ip(255), lab.gateway());
    let file = lab.root.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let bad: Vec<(&str, Value)> = vec![
        ("cniVersion", json!(1)),
        ("cniVersion", json!(null)),
        ("name", json!("../x")),
        ("name", json!("a/b")),
        ("name", json!("")),
        ("name", json!(".hidden")),
        ("name", json!("x".repeat(129))),
        ("name", json!(5)),
        ("bridge", json!("")),
        ("bridge", json!("this-name-is-too-long")),
        ("bridge", json!("a/b")),
        ("bridge", json!("a b")),
        ("bridge", json!("a:b")),
        ("bridge", json!("..")),
        ("bridge", json!(3)),
        ("subnet", json!("nonsense")),
        ("subnet", json!("10.1.2.0/33")),
        ("subnet", json!(format!("{}/24", lab.ip(5)))),
        ("subnet", json!(format!("{}/31", lab.ip(0)))),
        ("subnet", json!(24)),
        ("gateway", json!("10.250.250.1")),
        ("gateway", json!(net)),
        ("gateway", json!(bcast)),
        ("gateway", json!("nope")),
        ("gateway", json!(1)),
        ("testAddress", json!("10.250.250.5/24")),
        ("testAddress", json!(format!("{gw}/24"))),
        ("testAddress", json!(format!("{net}/24"))),
        ("testAddress", json!(format!("{bcast}/24"))),
        ("testAddress", json!(format!("{}/16", lab.ip(5)))),
        ("testAddress", json!("x")),
        ("testAddress", json!(5)),
        ("mtu", json!("1500")),
        ("mtu", json!(20)),
        ("mtu", json!(-1)),
        ("mtu", json!(1500.5)),
        ("mtu", json!(70000)),
        ("mtu", json!(true)),
        ("isGateway", json!("yes")),
        ("isGateway", json!(1)),
        ("dataDir", json!("relative/dir")),
        ("dataDir", json!(5)),
        ("rangeStart", json!("10.250.250.5")),
        ("rangeEnd", json!("x")),
        ("cni.dev/valid-attachments", json!("all")),
        ("cni.dev/valid-attachments", json!([{ "id": "x" }])),
    ];
    for (key, value) in bad {
        let case = format!("{key}: {value}");
        r.expect(&case, add(lab.config_with(v, key, value)), 7, &[key]);
    }
    let mut reversed = lab.config(v);
    reversed["rangeStart"] = json!(lab.ip(200));
    reversed["rangeEnd"] = json!(lab.ip(100));
    r.expect(
        "rangeStart after rangeEnd",
        add(reversed),
        7,
        &["rangeStart"],
    );
    let mut empty = lab.config(v);
    empty["rangeStart"] = json!(bcast);
    r.expect("range with no address", add(empty), 7, &["range"]);

    // A dataDir that is a file: an I/O failure (5) naming the path, before any wiring.
    let on_file = lab.config_with(v, "dataDir", json!(file.to_str().unwrap()));
    r.expect(
        "dataDir is a file",
        add(on_file),
        5,
        &[file.to_str().unwrap()],
    );
    r.finish();
}

#[test]
fn version_and_prev_result_errors() {
    let lab = Lab::new("ver");
    let mut r = Refusals::new(&lab);

    for bad in [
        "0.1.0",
        "0.2.0",
        "2.0.0",
        "1.0",
        "1.0.0-rc1",
        "0.4.0 ",
        "latest",
    ] {
        let conf = lab.config(bad);
        r.expect(
            &format!("ADD cniVersion {bad:?}"),
            lab.call("ADD").config(&conf),
            1,
            &[bad],
        );
        r.expect(
            &format!("DEL cniVersion {bad:?}"),
            lab.call("DEL").config(&conf),
            1,
            &[bad],
        );
    }
    r.expect(
        "ADD cniVersion \"\"",
        lab.call("ADD").config(&lab.config("")),
        1,
        &["cniVersion"],
    );

    // CHECK exists from 0.4.0 on, GC and STATUS from 1.1.0 on.
    let prev = json!({ "cniVersion": "0.3.1", "interfaces": [], "ips": [] });
    for v in ["0.3.0", "0.3.1"] {
        let conf = lab.config_with(v, "prevResult", prev.clone());
        r.expect(
            &format!("CHECK in {v}"),
            lab.call("CHECK").config(&conf),
            1,
            &["CHECK", v],
        );
    }
    for (command, v) in [("GC", "1.0.0"), ("STATUS", "0.4.0")] {
        let case = format!("{command} in {v}");
        r.expect(
            &case,
            lab.call(command).config(&lab.config(v)),
            1,
            &[command, v],
        );
    }

    // CHECK needs a well-formed prevResult that names the attachment.
    r.expect(
        "CHECK without prevResult",
        lab.call("CHECK").config(&lab.config("1.0.0")),
        7,
        &["prevResult"],
    );
    let malformed = [
        json!({ "ips": [{ "address": "nonsense" }] }),
        json!({ "interfaces": 5 }),
        json!({ "interfaces": [{ "mac": "02:00:00:00:00:01" }] }),
        json!({ "routes": [{ "gw": "10.0.0.1" }] }),
        // Well-formed, but about another interface.
        json!({ "interfaces": [{ "name": "net9", "sandbox": lab.netns_path() }] }),
    ];
    for p in malformed {
        let case = format!("CHECK with prevResult {p}");
        let conf = lab.config_with("1.0.0", "prevResult", p);
        r.expect(&case, lab.call("CHECK").config(&conf), 7, &["prevResult"]);
    }
    r.finish();
}

#[test]
fn unusable_netns_paths() {
    let lab = Lab::new("nspath");
    let mut r = Refusals::new(&lab);
    let missing = format!("/var/run/netns/ac-nonexistent-{}", std::process::id());
    let cases: &[(&str, &[&str])] = &[
        (&missing, &["CNI_NETNS", &missing, "does not exist"]),
        ("relative-netns", &["CNI_NETNS"]),
        ("/etc/hostname", &["not a network namespace"]),
        ("/tmp", &["not a network namespace"]),
        ("/dev/null", &["not a network namespace"]),
        // pid 1's netns: the host's own, or (in a sandbox where pid 1 is not ours to
        // open) unreadable; 102 naming CNI_NETNS either way.
        ("/proc/1/ns/net", &["CNI_NETNS"]),
        ("/proc/self/ns/net", &["host"]),
    ];
    for (path, needles) in cases {
        let case = format!("ADD in {path}");
        r.expect(&case, lab.call("ADD").env("CNI_NETNS", path), 102, needles);
    }
    r.finish();
}

/// A namespace file of another kind (uts, ipc) is on nsfs like a netns, so the nsfs
/// test alone passes it. It must be refused as unusable (102) before anything is made.
#[test]
fn netns_of_another_kind_is_refused_as_unusable() {
    let lab = Lab::new("nskind");
    let mut r = Refusals::new(&lab);
    for path in ["/proc/self/ns/uts", "/proc/self/ns/ipc"] {
        let case = format!("ADD in {path}");
        r.expect(
            &case,
            lab.call("ADD").env("CNI_NETNS", path),
            102,
            &["CNI_NETNS"],
        );
    }
    r.finish();
}

/// CNI_IFNAME already in the netns (a plain eth0, or lo): 101, and nothing of the ADD
/// left behind.
#[test]
fn ifname_already_in_the_netns() {
    let lab = Lab::new("iftaken");
    // One good ADD/DEL first: the bridge (shared, never deleted) and the store folder
    // exist from then on, so the snapshot compares against that steady state.
    lab.call("ADD").run().expect_result("first ADD");
    lab.call("DEL").run().expect_silent_success("first DEL");

    let mut r = Refusals::new(&lab);
    add_plain_link(Some(&lab.netns), "eth0", "eth0-peer");
    r.expect("eth0 exists in the netns", lab.call("ADD"), 101, &["eth0"]);
    r.expect(
        "CNI_IFNAME=lo",
        lab.call("ADD").env("CNI_IFNAME", "lo"),
        101,
        &["lo"],
    );
    ip(&["-n", &lab.netns, "link", "del", "eth0"]); // a veth takes its peer with it

    r.finish();
}

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

    let mut r = Refusals::new(&lab);
    r.expect("host veth name taken", lab.call("ADD"), 103, &[&veth]);
    r.finish();
    assert!(
        exists(),
        "the failed ADD deleted a link that is not academy's"
    );
}

/// A container another network already routes by default: 104, nothing of the ADD left.
#[test]
fn default_route_already_in_the_netns() {
    let lab = Lab::new("rtaken");
    lab.call("ADD").run().expect_result("first ADD");
    lab.call("DEL").run().expect_silent_success("first DEL");
    // Another network's interface and default route, inside the lab's own netns only.
    add_plain_link(Some(&lab.netns), "other0", "other0-peer");
    ip(&["-n", &lab.netns, "link", "set", "other0", "up"]);
    ip(&[
        "-n",
        &lab.netns,
        "addr",
        "add",
        "192.0.2.2/24",
        "dev",
        "other0",
    ]);
    ip(&[
        "-n",
        &lab.netns,
        "route",
        "add",
        "default",
        "via",
        "192.0.2.1",
    ]);
    let mut r = Refusals::new(&lab);
    r.expect(
        "a default route exists",
        lab.call("ADD"),
        104,
        &["default route"],
    );
    r.finish();
}

#[test]
fn bridge_name_taken_by_a_dummy_link() {
    let lab = Lab::new("brtaken");
    add_plain_link(None, &lab.bridge, &format!("{}-p", lab.bridge));
    let mut r = Refusals::new(&lab);
    r.expect(
        "bridge name is a plain link",
        lab.call("ADD"),
        103,
        &[&lab.bridge, "not a bridge"],
    );
    r.finish();
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
    let mut r = Refusals::new(&lab);
    r.expect(
        "no free address",
        lab.call_for("ADD", &other).config(&conf),
        110,
        &[],
    );
    r.expect(
        "testAddress held by another",
        lab.call_for("ADD", &other).config(&fixed),
        111,
        &[&lab.ip(2)],
    );
    r.finish();

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

/// VERSION answers whatever the rest of the environment and stdin hold.
#[test]
fn version_answers_whatever_env_and_stdin() {
    let garbage = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .env("CNI_CONTAINERID", "!! not an id")
        .env("CNI_IFNAME", "a/b/this-is-far-too-long")
        .env("CNI_NETNS", "/nonexistent")
        .env("CNI_ARGS", "garbage;;;")
        .env("CNI_PATH", "");
    let plain = Call::bare().env("CNI_COMMAND", "VERSION");
    let cases: Vec<(&str, Call, &str)> = vec![
        ("garbage env, empty stdin", garbage.clone(), "1.1.0"),
        (
            "garbage env, not JSON",
            garbage.clone().stdin("{{{"),
            "1.1.0",
        ),
        (
            "garbage env, config 0.4.0",
            garbage.stdin(r#"{"cniVersion":"0.4.0"}"#),
            "0.4.0",
        ),
        ("no other env, empty stdin", plain.clone(), "1.1.0"),
        (
            "no other env, config 1.0.0",
            plain.stdin(r#"{"cniVersion":"1.0.0","name":"x"}"#),
            "1.0.0",
        ),
    ];
    for (case, call, version) in cases {
        let out = call.run();
        let v = out.expect_result(case);
        assert_eq!(v["cniVersion"], version, "{case}:\n{out}");
        assert_eq!(v["supportedVersions"], json!(SUPPORTED), "{case}:\n{out}");
        assert_eq!(
            v.as_object().unwrap().len(),
            2,
            "{case}: extra keys:\n{out}"
        );
        assert_eq!(out.stdout.trim().lines().count(), 1, "{case}:\n{out}");
    }
}

/// A person running the binary by hand (no CNI_COMMAND) gets the about text on stderr.
#[test]
fn about_text_without_cni_command() {
    let cases = [
        ("no env at all", Call::bare()),
        ("empty CNI_COMMAND", Call::bare().env("CNI_COMMAND", "")),
        ("stdin ignored", Call::bare().stdin("{not json")),
    ];
    for (case, call) in cases {
        let out = call.run();
        assert_eq!(out.code, 0, "{case}:\n{out}");
        assert!(out.stdout.is_empty(), "{case}: stdout not empty:\n{out}");
        assert!(
            out.stderr.contains("CNI academy plugin v"),
            "{case}:\n{out}"
        );
        assert!(
            out.stderr
                .contains("CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
            "{case}:\n{out}"
        );
    }
}

/// DEL succeeds, silently, whenever there is nothing (left) to delete.
#[test]
fn del_is_silent_when_there_is_nothing_to_delete() {
    let lab = Lab::new("delnone");
    let missing = format!("/var/run/netns/ac-nonexistent-{}", std::process::id());
    let never_added = [
        ("never added", lab.call("DEL")),
        (
            "never added, no CNI_NETNS",
            lab.call("DEL").without("CNI_NETNS"),
        ),
        (
            "never added, netns path missing",
            lab.call("DEL").env("CNI_NETNS", &missing),
        ),
    ];
    for (case, call) in never_added {
        let out = call.run();
        out.expect_silent_success(case);
        assert!(lab.lab_links().is_empty(), "{case}: links appeared");
        assert!(lab.reservations().is_empty(), "{case}: store not empty");
    }

    // The host veth deleted behind the plugin's back: DEL still frees the address.
    let result = lab.call("ADD").run().expect_result("ADD");
    assert_result_valid(&lab, &result, &lab.attach(), "1.1.0", None);
    ip(&[
        "link",
        "del",
        result["interfaces"][1]["name"].as_str().unwrap(),
    ]);
    lab.call("DEL")
        .run()
        .expect_silent_success("DEL, veth already gone");
    assert_unwired(&lab, &lab.attach());
    lab.call("DEL").run().expect_silent_success("second DEL");
}

/// DEL and CHECK with the config carrying prevResult, as runtimes send them; CHECK
/// notices when the attachment is gone.
#[test]
fn del_and_check_with_prev_result_on_stdin() {
    let lab = Lab::new("prev");
    let v = "1.0.0";
    let result = lab
        .call("ADD")
        .config(&lab.config(v))
        .run()
        .expect_result("ADD");
    assert_result_valid(&lab, &result, &lab.attach(), v, None);
    let with_prev = lab.config_with(v, "prevResult", result);

    lab.call("CHECK")
        .config(&with_prev)
        .run()
        .expect_silent_success("CHECK");
    lab.call("DEL")
        .config(&with_prev)
        .run()
        .expect_silent_success("DEL with prevResult");
    assert_unwired(&lab, &lab.attach());

    // After DEL, the same CHECK must report the attachment missing (120), not pass.
    let out = lab.call("CHECK").config(&with_prev).run();
    assert_cni_error(&out, 120, &["missing"]);
    ip(&["netns", "del", &lab.netns]);
    let out = lab.call("CHECK").config(&with_prev).run();
    assert_cni_error(&out, 120, &[&lab.netns_path()]);
    lab.call("DEL")
        .config(&with_prev)
        .run()
        .expect_silent_success("DEL, netns gone");
}
