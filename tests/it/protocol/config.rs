//! stdin and the network config: what is not one JSON object (6), the reference's keys
//! academy does not implement (2), and every bad block, field or value (7), each named.

use serde_json::{json, Value};

use super::*;

const V: &str = "1.0.0";

fn add(lab: &Lab, config: Value) -> Call {
    lab.call("ADD").config(&config)
}

/// stdin that is not one JSON object: 6, decode failure, for ADD and DEL alike.
#[test]
fn stdin_that_is_not_one_json_object() {
    let lab = Lab::new("conf");
    let good = lab.config(V).to_string();
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
    let mut table = Vec::new();
    for (case, bytes) in not_json {
        table.push(refusal(
            case,
            lab.call("ADD").stdin(bytes.clone()),
            6,
            &["JSON"],
        ));
        table.push(refusal(
            format!("DEL, {case}"),
            lab.call("DEL").stdin(bytes),
            6,
            &["JSON"],
        ));
    }
    refuse_all(&lab, table);
}

/// Fields of the reference bridge plugin with values it would refuse too: 7, named. (Every
/// key is implemented; their "off" values are accepted, so a reference config that
/// spells them out still works.) ipMasq's backend can only be one of the reference's two
/// names: 7.
#[test]
fn bad_reference_field_values_are_refused() {
    let lab = Lab::new("confref");
    let bad: Vec<(&str, Value, &str)> = vec![
        ("vlan", json!(5000), "VLAN ID 5000"),
        ("vlanTrunk", json!([{ "id": 5000 }]), "5000"),
        ("vlanTrunk", json!([{ "minID": 5 }]), "maxID"),
        ("portIsolation", json!("yes"), "portIsolation"),
        ("macspoofchk", json!("yes"), "macspoofchk"),
    ];
    let mut table: Vec<Refusal> = bad
        .into_iter()
        .map(|(key, value, needle)| {
            refusal(
                format!("{key}: {value}"),
                add(&lab, lab.config_with(V, key, value)),
                7,
                &[needle],
            )
        })
        .collect();
    table.push(refusal(
        "ipMasqBackend: ebtables",
        add(&lab, lab.config_with(V, "ipMasqBackend", json!("ebtables"))),
        7,
        &["ipMasqBackend"],
    ));
    refuse_all(&lab, table);
}

/// The ipam-block form: bad blocks are 7, host-local keys academy lacks are 2.
#[test]
fn bad_ipam_blocks_are_named() {
    let lab = Lab::new("confipam");
    let ipam_form = |ipam: Value| {
        let mut c = lab.config_without(V, "subnet");
        c.as_object_mut().unwrap().remove("gateway");
        c["ipam"] = ipam;
        c
    };
    let subnet = lab.subnet();
    let table = vec![
        refusal(
            "ipam and subnet both",
            add(
                &lab,
                lab.config_with(V, "ipam", json!({"type": "host-local"})),
            ),
            7,
            &["ipam"],
        ),
        refusal(
            "ipam not an object",
            add(&lab, ipam_form(json!("host-local"))),
            7,
            &["ipam"],
        ),
        refusal(
            "ipam without type",
            add(&lab, ipam_form(json!({ "subnet": subnet }))),
            7,
            &["ipam.type"],
        ),
        refusal(
            "ipam type a path",
            add(&lab, ipam_form(json!({ "type": "../x" }))),
            7,
            &["ipam.type"],
        ),
        refusal(
            "ipam without ranges",
            add(&lab, ipam_form(json!({ "type": "host-local" }))),
            7,
            &["ipam"],
        ),
        refusal(
            "ipam.routes not a list",
            add(
                &lab,
                ipam_form(json!({ "type": "host-local", "subnet": subnet, "routes": 5 })),
            ),
            7,
            &["ipam.routes"],
        ),
        refusal(
            "ipam.resolvConf not absolute",
            add(
                &lab,
                ipam_form(
                    json!({ "type": "host-local", "subnet": subnet, "resolvConf": "etc/resolv.conf" }),
                ),
            ),
            7,
            &["ipam.resolvConf"],
        ),
        refusal(
            "a route key academy cannot apply",
            add(
                &lab,
                ipam_form(
                    json!({ "type": "host-local", "subnet": subnet, "routes": [{"dst": "10.0.0.0/8", "realm": 3}] }),
                ),
            ),
            2,
            &["ipam.routes[0].realm"],
        ),
        refusal(
            "disableContainerInterface with the flat form's default route",
            add(
                &lab,
                lab.config_with(V, "disableContainerInterface", json!(true)),
            ),
            7,
            &["disableContainerInterface"],
        ),
    ];
    refuse_all(&lab, table);
}

/// Addresses and MAC asked for in the config (args.cni, runtimeConfig): 7, named.
#[test]
fn bad_requested_addresses_and_mac_are_named() {
    let lab = Lab::new("confreq");
    let requests: Vec<(&str, Value, &str)> = vec![
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
    let table = requests
        .into_iter()
        .map(|(key, value, needle)| {
            refusal(
                format!("{key}: {value}"),
                add(&lab, lab.config_with(V, key, value)),
                7,
                &[needle],
            )
        })
        .collect();
    refuse_all(&lab, table);
}

/// Missing required fields: 7, named.
#[test]
fn missing_required_fields_are_named() {
    let lab = Lab::new("confmiss");
    let table = ["cniVersion", "name", "subnet"]
        .into_iter()
        .map(|key| {
            refusal(
                format!("no {key}"),
                add(&lab, lab.config_without(V, key)),
                7,
                &[key],
            )
        })
        .collect();
    refuse_all(&lab, table);
}

/// Every field with a bad value or type: 7, named; values that only clash with each
/// other (hairpin and promiscuous mode, a reversed or empty range) too; a dataDir that
/// is a file: an I/O failure (5) naming the path, before any wiring.
#[test]
fn bad_field_values_are_named() {
    let lab = Lab::new("confbad");
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
    let mut table: Vec<Refusal> = bad
        .into_iter()
        .map(|(key, value)| {
            refusal(
                format!("{key}: {value}"),
                add(&lab, lab.config_with(V, key, value)),
                7,
                &[key],
            )
        })
        .collect();
    let mut both = lab.config(V);
    both["hairpinMode"] = json!(true);
    both["promiscMode"] = json!(true);
    table.push(refusal(
        "hairpinMode and promiscMode",
        add(&lab, both),
        7,
        &["hairpinMode"],
    ));
    let mut reversed = lab.config(V);
    reversed["rangeStart"] = json!(lab.ip(200));
    reversed["rangeEnd"] = json!(lab.ip(100));
    table.push(refusal(
        "rangeStart after rangeEnd",
        add(&lab, reversed),
        7,
        &["rangeStart"],
    ));
    let mut empty = lab.config(V);
    empty["rangeStart"] = json!(bcast);
    table.push(refusal(
        "range with no address",
        add(&lab, empty),
        7,
        &["range"],
    ));
    let on_file = lab.config_with(V, "dataDir", json!(file.to_str().unwrap()));
    table.push(refusal(
        "dataDir is a file",
        add(&lab, on_file),
        5,
        &[file.to_str().unwrap()],
    ));
    refuse_all(&lab, table);
}
