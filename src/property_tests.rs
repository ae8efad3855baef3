//! Property-based tests (issue 14): random and mutated configs, environments (bytes
//! included) and prevResults fed to the parsing and validation code. No root needed: only
//! the pure parsers run, nothing touches the kernel or a store.
//!
//! For every input: no panic, and every rejection is a CNI error with the well-known code
//! of its kind (stdin: 1, 2, 6 or 7; environment: 4; prevResult: 7) and a message. Where
//! a value is printed and read back, it round-trips: a result printed in version V parses
//! back to the same result.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::cni::env::{Command, Env};
use crate::cni::result::{CniResult, Interface, IpConfig, RouteEntry};
use crate::cni::{version, Error};
use crate::config::{Config, Requests};
use ipnetwork::IpNetwork;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Codes a config on stdin may be refused with.
const CONFIG_CODES: &[u32] = &[1, 2, 6, 7];

fn assert_cni_error(e: &Error, codes: &[u32], input: &dyn std::fmt::Debug) {
    assert!(
        codes.contains(&e.code),
        "code {} (not one of {codes:?}) for {input:?}: {e}",
        e.code
    );
    assert!(!e.msg.trim().is_empty(), "empty message for {input:?}");
    // The error must print as the CNI error object.
    let printed: Value = serde_json::from_str(&e.to_json("1.1.0")).unwrap();
    assert_eq!(printed["code"], json!(e.code));
}

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        interesting_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Strings near what the parsers look for: addresses, prefixes, edge values.
fn interesting_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("10.0.0.0/24".to_string()),
        Just("10.0.0.0".to_string()),
        Just("10.0.0.255".to_string()),
        Just("10.0.0.1".to_string()),
        Just("fd00::/64".to_string()),
        Just("fd00::".to_string()),
        Just("0.0.0.0/0".to_string()),
        Just("10.0.0.0/31".to_string()),
        Just("255.255.255.255/32".to_string()),
        Just("host-local".to_string()),
        Just("1.1.0".to_string()),
        Just("../..".to_string()),
        Just("a:b/c".to_string()),
        (any::<[u8; 4]>(), 0u8..=33).prop_map(|(a, p)| format!("{}/{p}", Ipv4Addr::from(a))),
        any::<[u8; 4]>().prop_map(|a| Ipv4Addr::from(a).to_string()),
        (any::<u128>(), 0u8..=129).prop_map(|(a, p)| format!("{}/{p}", Ipv6Addr::from(a))),
    ]
}

/// The edges of the valid configs' subnets: network, broadcast, first and last host.
fn subnet_edges() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "10.98.0.0",
        "10.98.0.255",
        "10.98.0.1",
        "10.98.0.254",
        "10.5.0.0",
        "10.5.0.7",
        "10.5.0.1",
        "10.22.0.0",
        "10.22.255.255",
        "fd22::",
        "10.98.0.0/24",
        "10.5.0.0/29",
    ])
    .prop_map(str::to_string)
}

/// Keys of the config and its nested blocks, plus noise.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "cniVersion",
            "name",
            "type",
            "bridge",
            "subnet",
            "gateway",
            "rangeStart",
            "rangeEnd",
            "testAddress",
            "dataDir",
            "isGateway",
            "isDefaultGateway",
            "mtu",
            "hairpinMode",
            "promiscMode",
            "forceAddress",
            "ipMasq",
            "vlan",
            "vlanTrunk",
            "minID",
            "maxID",
            "id",
            "preserveDefaultVlan",
            "portIsolation",
            "ipam",
            "ranges",
            "routes",
            "dst",
            "gw",
            "dns",
            "args",
            "cni",
            "ips",
            "mac",
            "runtimeConfig",
            "ipRanges",
            "prevResult",
            "interfaces",
            "cni.dev/valid-attachments",
            "containerID",
            "ifname",
            "resolvConf",
            "priority",
            "table",
            "scope",
            "advmss",
            "enabledad",
            "disableContainerInterface",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z]{1,8}",
    ]
}

/// Configs academy accepts, in both forms, as starting points for mutation.
fn valid_configs() -> Vec<Value> {
    vec![
        json!({"cniVersion": "1.0.0", "name": "n", "type": "academy", "bridge": "br0",
               "subnet": "10.98.0.0/24", "gateway": "10.98.0.1", "testAddress": "10.98.0.20"}),
        json!({"cniVersion": "1.1.0", "name": "n", "type": "academy", "bridge": "cni0",
               "isGateway": true, "isDefaultGateway": true, "mtu": 1500,
               "ipam": {"type": "host-local",
                        "ranges": [[{"subnet": "10.22.0.0/16", "rangeStart": "10.22.1.10",
                                     "rangeEnd": "10.22.1.250"}], [{"subnet": "fd22::/64"}]],
                        "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/run/x"},
               "runtimeConfig": {"ips": ["10.22.1.20"], "mac": "02:00:00:00:00:01"},
               "args": {"cni": {"ips": ["fd22::9"]}},
               "cni.dev/valid-attachments": [{"containerID": "c", "ifname": "eth0"}]}),
        json!({"cniVersion": "0.4.0", "name": "n", "type": "academy",
               "ipam": {"type": "host-local", "subnet": "10.5.0.0/29", "gateway": "10.5.0.6"},
               "prevResult": {"cniVersion": "0.4.0", "interfaces": [{"name": "x"}],
                              "ips": [{"version": "4", "address": "10.5.0.2/29", "interface": 0}]}}),
    ]
}

/// A JSON path step: an object key or an array index.
#[derive(Debug, Clone)]
enum Mutation {
    Set(Vec<String>, Value),
    Remove(Vec<String>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let path = || prop::collection::vec(key(), 1..4);
    // The fields validation is about, set to near-miss values: random paths alone
    // would almost never reach them.
    let known = prop::sample::select(vec![
        "subnet",
        "gateway",
        "rangeStart",
        "rangeEnd",
        "testAddress",
        "ipam.subnet",
        "ipam.gateway",
        "ipam.rangeStart",
        "ipam.rangeEnd",
        "ipam.ranges.subnet",
        "ipam.ranges.gateway",
        "ipam.ranges.rangeStart",
        "ipam.routes.dst",
        "ipam.routes.gw",
        "runtimeConfig.ips",
        "runtimeConfig.ipRanges",
        "prevResult.ips.interface",
        "mtu",
    ])
    .prop_map(|p| p.split('.').map(str::to_string).collect::<Vec<_>>());
    prop_oneof![
        2 => (known, prop_oneof![3 => subnet_edges(), 1 => interesting_text()])
            .prop_map(|(p, v)| Mutation::Set(p, Value::String(v))),
        1 => (path(), any_json()).prop_map(|(p, v)| Mutation::Set(p, v)),
        1 => path().prop_map(Mutation::Remove),
    ]
}

/// Applies `m` along the existing part of its path (arrays: the first element).
fn apply(config: &mut Value, m: &Mutation) {
    let (path, value) = match m {
        Mutation::Set(p, v) => (p, Some(v)),
        Mutation::Remove(p) => (p, None),
    };
    let mut here = config;
    for (i, step) in path.iter().enumerate() {
        while let Value::Array(a) = here {
            if a.is_empty() {
                return;
            }
            here = &mut a[0];
        }
        let Value::Object(map) = here else { return };
        if i + 1 == path.len() {
            match value {
                Some(v) => {
                    map.insert(step.clone(), v.clone());
                }
                None => {
                    map.remove(step);
                }
            }
            return;
        }
        here = map.entry(step.clone()).or_insert_with(|| json!({}));
    }
}

// ---------------------------------------------------------------------------------------
// Config
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn config_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = Config::parse(&bytes) {
            assert_cni_error(&e, CONFIG_CODES, &bytes);
        }
    }

    #[test]
    fn config_json_never_panics(v in any_json()) {
        if let Err(e) = Config::parse(v.to_string().as_bytes()) {
            assert_cni_error(&e, CONFIG_CODES, &v);
        }
    }

    /// Valid configs with a few random edits: accepted, or refused with a config code.
    /// What is accepted keeps the promises validation makes.
    #[test]
    fn mutated_configs_are_accepted_or_refused_cleanly(
        base in prop::sample::select(valid_configs()),
        edits in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut config = base;
        for m in &edits {
            apply(&mut config, m);
        }
        match Config::parse(config.to_string().as_bytes()) {
            Err(e) => assert_cni_error(&e, CONFIG_CODES, &config),
            Ok(c) => {
                prop_assert!(version::is_supported(&c.cni_version));
                prop_assert!(!c.name.is_empty() && !c.name.contains('/'));
                if let Some(b) = c.builtin() {
                    prop_assert!(b.data_dir.is_absolute());
                    for pool in b.pools() {
                        let subnet = pool.subnet();
                        prop_assert!(pool.size() > 0);
                        if let Some(g) = pool.gateway() {
                            // Item 5: never the network or the broadcast address.
                            prop_assert!(subnet.contains(g), "{config}");
                            prop_assert_ne!(g, subnet.network(), "{}", config);
                            if subnet.is_ipv4() {
                                prop_assert_ne!(g, subnet.broadcast(), "{}", config);
                            }
                        }
                    }
                }
                // Parsing is a function of the bytes.
                prop_assert_eq!(Config::parse(&c.raw).unwrap(), c);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------

const VARS: &[&str] = &[
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
];

fn env_value() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        Just(None),
        prop::sample::select(vec![
            "ADD",
            "DEL",
            "CHECK",
            "GC",
            "STATUS",
            "VERSION",
            "c1",
            "eth0",
            "/var/run/netns/x",
            "",
            "a/b",
            "x".repeat(16).leak(),
            "IP=10.0.0.5;MAC=02:00:00:00:00:01",
        ])
        .prop_map(|s| Some(s.as_bytes().to_vec())),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Any bytes in any variable: a command, nothing (run by hand), or code 4.
    #[test]
    fn any_environment_is_read_or_refused_with_code_4(
        values in prop::collection::vec(env_value(), VARS.len()),
    ) {
        let map: HashMap<&str, Vec<u8>> = VARS
            .iter()
            .zip(&values)
            .filter_map(|(k, v)| v.clone().map(|v| (*k, v)))
            .collect();
        match Env::from_lookup(|k| map.get(k).cloned()) {
            Err(e) => assert_cni_error(&e, &[4], &map),
            Ok(None) => prop_assert!(map.get("CNI_COMMAND").is_none_or(|c| c.is_empty())),
            Ok(Some(env)) => {
                if matches!(env.command, Command::Add | Command::Check | Command::Del) {
                    prop_assert!(!env.container_id.is_empty());
                    prop_assert!(!env.ifname.is_empty() && env.ifname.len() <= 15);
                }
                // CNI_ARGS is kept byte for byte.
                let sent = map.get("CNI_ARGS").cloned().unwrap_or_default();
                prop_assert_eq!(env.args, sent);
            }
        }
    }

    /// CNI_ARGS as bytes: parsed or code 4, never a panic.
    #[test]
    fn any_cni_args_is_parsed_or_refused_with_code_4(
        bytes in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        if let Err(e) = Requests::default().with_cni_args(&bytes) {
            assert_cni_error(&e, &[4], &bytes);
        }
    }

    /// A requested IP= is never dropped, whatever bytes the other keys hold.
    #[test]
    fn ip_in_cni_args_survives_any_other_key(
        addr in any::<[u8; 4]>(),
        before in prop::collection::vec((("[A-Z_]{1,8}"), prop::collection::vec(any::<u8>(), 0..12)), 0..3),
        after in prop::collection::vec((("[A-Z_]{1,8}"), prop::collection::vec(any::<u8>(), 0..12)), 0..3),
    ) {
        let ip = IpAddr::V4(Ipv4Addr::from(addr));
        let pair = |(k, v): &(String, Vec<u8>)| {
            let v: Vec<u8> = v.iter().copied().filter(|b| *b != b';').collect();
            (k != "IP" && k != "MAC").then(|| [k.as_bytes(), b"=", &v].concat())
        };
        let mut items: Vec<Vec<u8>> = before.iter().filter_map(pair).collect();
        items.push(format!("IP={ip}").into_bytes());
        items.extend(after.iter().filter_map(pair));
        let args = items.join(&b';');
        let r = Requests::default().with_cni_args(&args).unwrap();
        prop_assert_eq!(r.ips, vec![ip]);
    }
}

// ---------------------------------------------------------------------------------------
// prevResult
// ---------------------------------------------------------------------------------------

fn any_net() -> impl Strategy<Value = IpNetwork> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..=32).prop_map(|(a, p)| IpNetwork::new(
            IpAddr::V4(Ipv4Addr::from(a)),
            p
        )
        .unwrap()),
        (any::<u128>(), 0u8..=128).prop_map(|(a, p)| IpNetwork::new(
            IpAddr::V6(Ipv6Addr::from(a)),
            p
        )
        .unwrap()),
    ]
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
    ]
}

fn any_result() -> impl Strategy<Value = CniResult> {
    let interface = (
        "[a-z0-9]{1,15}",
        any::<[u8; 6]>(),
        prop::option::of(68u32..65536),
        prop::option::of("/[a-z/]{1,20}"),
    )
        .prop_map(|(name, mac, mtu, sandbox)| Interface {
            name,
            mac: crate::cni::result::format_mac(mac),
            mtu,
            sandbox: sandbox.unwrap_or_default(),
        });
    (
        prop::collection::vec(interface, 0..4),
        prop::collection::vec(
            (
                any_net(),
                prop::option::of(any_ip()),
                any::<prop::sample::Index>(),
                any::<bool>(),
            ),
            0..4,
        ),
        prop::collection::vec((any_net(), prop::option::of(any_ip())), 0..4),
    )
        .prop_map(|(interfaces, ips, routes)| CniResult {
            ips: ips
                .into_iter()
                .map(|(address, gateway, index, has)| IpConfig {
                    address,
                    gateway,
                    interface: (has && !interfaces.is_empty())
                        .then(|| index.index(interfaces.len())),
                })
                .collect(),
            routes: routes
                .into_iter()
                .map(|(dst, gw)| RouteEntry::new(dst, gw))
                .collect(),
            interfaces,
            dns: None,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any JSON as a prevResult: read, or refused with code 7.
    #[test]
    fn any_prev_result_is_read_or_refused_with_code_7(v in any_json()) {
        match CniResult::from_json(&v) {
            Err(e) => assert_cni_error(&e, &[7], &v),
            Ok(r) => {
                prop_assert!(v.is_object());
                for ip in &r.ips {
                    prop_assert!(ip.interface.is_none_or(|i| i < r.interfaces.len()));
                }
            }
        }
    }

    /// A result printed in version V, as text, parses back to the same result (the MTU
    /// is printed from 1.1.0 on only).
    #[test]
    fn results_round_trip_in_every_version(
        result in any_result(),
        v in prop::sample::select(version::SUPPORTED.to_vec()),
    ) {
        let text = result.to_json(v).to_string();
        let back = CniResult::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        let mut want = result;
        if !version::at_least(v, "1.1.0") {
            want.interfaces.iter_mut().for_each(|i| i.mtu = None);
        }
        prop_assert_eq!(back, want);
    }
}
