use super::*;

fn parse(json: &str) -> Result<Config> {
    Config::parse(json.as_bytes())
}

const GOOD: &str = r#"{"cniVersion":"1.0.0","name":"harness","type":"academy","bridge":"br-academy","subnet":"10.98.0.0/24","gateway":"10.98.0.1","testAddress":"10.98.0.20/24"}"#;

fn with(base: &str, key: &str, value: &str) -> String {
    let mut v: Value = serde_json::from_str(base).unwrap();
    v[key] = serde_json::from_str(value).unwrap();
    v.to_string()
}

fn builtin(c: &Config) -> &Builtin {
    c.builtin().expect("built-in IPAM")
}

#[test]
fn the_seed_config_parses() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.bridge, "br-academy");
    let b = builtin(&c);
    assert_eq!(b.range_sets.len(), 1);
    assert_eq!(
        b.range_sets[0][0].gateway().unwrap().to_string(),
        "10.98.0.1"
    );
    assert_eq!(
        c.requests.ips,
        vec!["10.98.0.20".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(b.routes.len(), 1, "the flat form always routes by default");
    assert!(c.is_gateway);
    assert_eq!(b.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
}

#[test]
fn bad_fields_name_the_field_and_value() {
    let cases = [
        ("subnet", r#""10.98.0.0/33""#, 7, "subnet"),
        ("subnet", r#""10.98.0.5/24""#, 7, "host bits"),
        ("subnet", r#""10.98.0.0/31""#, 7, "too small"),
        ("gateway", r#""10.97.0.1""#, 7, "not inside"),
        ("gateway", r#""10.98.0.0""#, 7, "network address"),
        ("gateway", r#""10.98.0.255""#, 7, "broadcast"),
        ("gateway", r#""nope""#, 7, "gateway"),
        ("testAddress", r#""10.99.0.5/24""#, 7, "not inside"),
        ("testAddress", r#""10.98.0.1/24""#, 7, "gateway"),
        ("testAddress", r#""10.98.0.5/16""#, 7, "prefix"),
        ("bridge", r#""this-name-is-too-long""#, 7, "15 bytes"),
        ("bridge", r#""a/b""#, 7, "bridge"),
        ("mtu", r#""1500""#, 7, "mtu"),
        ("mtu", "20", 7, "out of range"),
        ("isGateway", r#""yes""#, 7, "isGateway"),
        ("name", r#""../etc""#, 7, "network name"),
        ("name", r#""""#, 7, "network name"),
        ("cniVersion", r#""0.2.0""#, 1, "0.2.0"),
        ("ipMasq", r#""yes""#, 7, "ipMasq"),
        ("ipMasqBackend", r#""ebtables""#, 7, "ipMasqBackend"),
        ("vlan", "5000", 7, "invalid VLAN ID"),
        ("macspoofchk", r#""yes""#, 7, "macspoofchk"),
        ("ingressPolicy", r#""isolated""#, 7, "not implemented"),
        ("ingressPolicy", r#""closed""#, 7, "ingressPolicy"),
        ("ingressPolicy", "true", 7, "ingressPolicy"),
        ("dataDir", r#""relative""#, 7, "absolute"),
        ("ipam", r#"{"type":"host-local"}"#, 7, "both"),
        ("hairpinMode", "true", 0, ""),
        ("rangeStart", r#""10.98.0.200""#, 0, ""),
    ];
    for (key, value, code, needle) in cases {
        let mut conf = with(GOOD, key, value);
        if key == "hairpinMode" {
            conf = with(&conf, "promiscMode", "true");
            let err = parse(&conf).unwrap_err();
            assert!(err.msg.contains("hairpinMode and promiscMode"), "{err}");
            continue;
        }
        if key == "rangeStart" {
            conf = with(&conf, "rangeEnd", r#""10.98.0.100""#);
            let err = parse(&conf).unwrap_err();
            assert_eq!(err.code, 7, "{err}");
            continue;
        }
        let err = parse(&conf).unwrap_err();
        assert_eq!(err.code, code, "{key}={value}: {err}");
        assert!(err.msg.contains(needle), "{key}={value}: {}", err.msg);
    }
}

#[test]
fn ip_masq_and_either_backend_are_accepted() {
    assert!(!parse(GOOD).unwrap().ip_masq);
    for backend in [r#""iptables""#, r#""nftables""#] {
        let conf = with(&with(GOOD, "ipMasq", "true"), "ipMasqBackend", backend);
        assert!(parse(&conf).unwrap().ip_masq, "{backend}");
    }
}

#[test]
fn ingress_policy_same_bridge_isolates_and_open_does_not() {
    assert!(!parse(GOOD).unwrap().same_bridge_ingress);
    for open in ["\"open\"", "\"\"", "null"] {
        let c = parse(&with(GOOD, "ingressPolicy", open)).unwrap();
        assert!(!c.same_bridge_ingress, "{open}");
    }
    let isolated = with(GOOD, "ingressPolicy", "\"same-bridge\"");
    assert!(parse(&isolated).unwrap().same_bridge_ingress);
    // DEL of a config ADD refuses still knows the network was isolated, so that its
    // last DEL releases the isolation.
    let refused = with(&isolated, "vlan", "-3");
    assert!(parse(&refused).is_err());
    let c = Config::parse_for_del(refused.as_bytes()).unwrap();
    assert!(c.same_bridge_ingress);
}

#[test]
fn off_values_of_unsupported_keys_pass() {
    for (key, value) in [("enabledad", "false"), ("macspoofchk", "false")] {
        assert!(parse(&with(GOOD, key, value)).is_ok(), "{key}={value}");
    }
}

#[test]
fn not_json_is_a_decode_failure() {
    assert_eq!(parse("{").unwrap_err().code, 6);
    assert_eq!(parse("[]").unwrap_err().code, 6);
}

#[test]
fn gateway_defaults_to_first_host() {
    let mut v: Value = serde_json::from_str(GOOD).unwrap();
    v.as_object_mut().unwrap().remove("gateway");
    let c = parse(&v.to_string()).unwrap();
    assert_eq!(
        builtin(&c).range_sets[0][0].gateway().unwrap().to_string(),
        "10.98.0.1"
    );
}

#[test]
fn valid_attachments_under_either_key() {
    let c = parse(&with(
        GOOD,
        "cni.dev/attachments",
        r#"[{"containerID":"a","ifname":"eth0"}]"#,
    ))
    .unwrap();
    assert!(c
        .valid_attachments
        .unwrap()
        .contains(&("a".into(), "eth0".into())));
    let c = parse(&with(GOOD, "cni.dev/valid-attachments", "[]")).unwrap();
    assert!(c.valid_attachments.unwrap().is_empty());
    assert!(parse(&with(GOOD, "cni.dev/valid-attachments", r#"[{"id":"a"}]"#)).is_err());
}

const REFERENCE: &str = r#"{"cniVersion":"1.0.0","name":"ref","type":"academy","bridge":"br-ref","isGateway":true,"isDefaultGateway":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"10.90.0.0/24","rangeStart":"10.90.0.10","rangeEnd":"10.90.0.20"}],[{"subnet":"fd90::/64"}]],
  "routes":[{"dst":"192.168.0.0/16"}],"dataDir":"/run/academy-test"}}"#;

#[test]
fn the_reference_form_with_dual_stack_ranges() {
    let c = parse(REFERENCE).unwrap();
    let b = builtin(&c);
    assert_eq!(b.range_sets.len(), 2);
    assert_eq!(b.range_sets[0][0].first().to_string(), "10.90.0.10");
    assert_eq!(b.range_sets[1][0].gateway().unwrap().to_string(), "fd90::1");
    assert_eq!(b.range_sets[1][0].range_set(), 1);
    assert_eq!(b.routes[0].dst.to_string(), "192.168.0.0/16");
    assert_eq!(b.data_dir, PathBuf::from("/run/academy-test"));
    assert!(c.is_gateway && c.is_default_gateway);
}

#[test]
fn reference_defaults_differ_from_the_flat_form() {
    let c = parse(r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipam":{"type":"host-local","subnet":"10.91.0.0/24"}}"#).unwrap();
    assert!(
        !c.is_gateway,
        "the reference plugin's isGateway defaults to false"
    );
    assert!(builtin(&c).routes.is_empty());
    assert_eq!(
        builtin(&c).data_dir,
        PathBuf::from(HOST_LOCAL_DATA_DIR),
        "the host-local form shares host-local's store"
    );
    let c = parse(r#"{"cniVersion":"1.0.0","name":"n","type":"academy","isDefaultGateway":true,"ipam":{"type":"host-local","subnet":"10.91.0.0/24"}}"#).unwrap();
    assert!(c.is_gateway, "isDefaultGateway implies isGateway");
}

#[test]
fn ipam_block_errors() {
    let base = r#"{"cniVersion":"1.0.0","name":"n","type":"academy"}"#;
    let cases = [
        (r#"{"type":"host-local"}"#, 7, "no subnet"),
        (r#"{"subnet":"10.0.0.0/24"}"#, 7, "ipam.type"),
        (
            r#"{"type":"host-local","ranges":[[]]}"#,
            7,
            "empty range set",
        ),
        (
            r#"{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"}]]}"#,
            7,
            "mixes",
        ),
        (
            r#"{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.0.0.0/25"}]]}"#,
            7,
            "overlap",
        ),
        (
            r#"{"type":"host-local","subnet":"10.0.0.0/24","routes":[{"dst":"x"}]}"#,
            7,
            "routes[0].dst",
        ),
        (
            r#"{"type":"host-local","subnet":"10.0.0.0/24","resolvConf":"etc/resolv.conf"}"#,
            7,
            "absolute",
        ),
        (
            r#"{"type":"host-local","subnet":"10.0.0.0/24","routes":[{"dst":"10.1.0.0/16","metric":5}]}"#,
            2,
            "routes[0].metric",
        ),
        (r#"{"type":"../evil"}"#, 7, "plugin name"),
    ];
    for (ipam, code, needle) in cases {
        let err = parse(&with(base, "ipam", ipam)).unwrap_err();
        assert_eq!(err.code, code, "{ipam}: {err}");
        assert!(err.msg.contains(needle), "{ipam}: {}", err.msg);
    }
    // No ipam block, or an empty one: the reference's layer-2 network.
    assert_eq!(parse(base).unwrap().ipam, Ipam::None);
    assert_eq!(parse(&with(base, "ipam", "{}")).unwrap().ipam, Ipam::None);
    let e = parse(&with(base, "ipam", r#"{"subnet":"10.1.0.0/24"}"#)).unwrap_err();
    assert!(e.msg.contains("ipam.type is missing"), "{e}");
    // What needs addresses is refused there, never ignored.
    for key in ["isGateway", "isDefaultGateway", "ipMasq", "forceAddress"] {
        let e = parse(&with(base, key, "true")).unwrap_err();
        assert_eq!(e.code, 7, "{key}: {e}");
        assert!(e.msg.contains(key) && e.msg.contains("layer-2"), "{e}");
        assert_eq!(parse(&with(base, key, "false")).unwrap().ipam, Ipam::None);
    }
    let e = parse(&with(base, "runtimeConfig", r#"{"ips":["10.1.0.5/24"]}"#)).unwrap_err();
    assert!(e.msg.contains("layer-2"), "{e}");
    let c = parse(&with(base, "ipam", r#"{"type":"static"}"#)).unwrap();
    assert_eq!(c.ipam, Ipam::Delegated("static".into()));
}

#[test]
fn runtime_ip_ranges_come_first() {
    let conf = with(
        r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipam":{"type":"host-local","subnet":"10.92.0.0/24"}}"#,
        "runtimeConfig",
        r#"{"ipRanges":[[{"subnet":"10.93.0.0/24"}]]}"#,
    );
    let c = parse(&conf).unwrap();
    let b = builtin(&c);
    assert_eq!(b.range_sets[0][0].subnet().to_string(), "10.93.0.0/24");
    assert_eq!(b.range_sets[1][0].subnet().to_string(), "10.92.0.0/24");
}

#[test]
fn del_reads_where_things_are_from_a_config_add_refuses() {
    let refused = with(&with(GOOD, "vlan", "5000"), "ipMasq", "true");
    assert!(parse(&refused).is_err());
    let c = Config::parse_for_del(refused.as_bytes()).unwrap();
    assert_eq!(c.name, "harness");
    assert!(c.ip_masq);
    assert_eq!(
        c.builtin().unwrap().data_dir,
        PathBuf::from(DEFAULT_DATA_DIR)
    );

    let reference = r#"{"cniVersion":"1.0.0","name":"n","type":"academy","macspoofchk":true,"ipam":{"type":"host-local","subnet":"bad"}}"#;
    let c = Config::parse_for_del(reference.as_bytes()).unwrap();
    assert_eq!(
        c.builtin().unwrap().data_dir,
        PathBuf::from(HOST_LOCAL_DATA_DIR)
    );
    assert!(c.mac_spoof_check, "DEL must still remove the MAC filter");
    let delegated =
        r#"{"cniVersion":"1.0.0","name":"n","type":"academy","vlan":-3,"ipam":{"type":"dhcp"}}"#;
    let c = Config::parse_for_del(delegated.as_bytes()).unwrap();
    assert_eq!(c.ipam, Ipam::Delegated("dhcp".into()));

    // Without a network name nothing can be found: the strict error stands.
    let nameless = r#"{"cniVersion":"1.0.0","type":"academy","vlan":-3}"#;
    assert_eq!(
        Config::parse_for_del(nameless.as_bytes()).unwrap_err(),
        parse(nameless).unwrap_err()
    );
    assert_eq!(Config::parse_for_del(b"not json").unwrap_err().code, 6);
}

#[test]
fn reclaim_leaked_after_defaults_to_60_and_takes_whole_seconds() {
    assert_eq!(parse(GOOD).unwrap().reclaim_leaked_after, 60);
    let off = parse(&with(GOOD, "reclaimLeakedAfter", "0")).unwrap();
    assert_eq!(off.reclaim_leaked_after, 0);
    let long = parse(&with(GOOD, "reclaimLeakedAfter", "3600")).unwrap();
    assert_eq!(long.reclaim_leaked_after, 3600);
    for bad in [r#""60s""#, "-1", "1.5", "true"] {
        let e = parse(&with(GOOD, "reclaimLeakedAfter", bad)).unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG, "{bad}");
        assert!(e.msg.contains("reclaimLeakedAfter"), "{bad}: {}", e.msg);
    }
}

#[test]
fn release_unused_after_defaults_to_60_and_takes_whole_seconds() {
    assert_eq!(parse(GOOD).unwrap().release_unused_after, 60);
    let now = parse(&with(GOOD, "releaseUnusedAfter", "0")).unwrap();
    assert_eq!(now.release_unused_after, 0);
    for bad in [r#""60s""#, "-1", "1.5", "true"] {
        let e = parse(&with(GOOD, "releaseUnusedAfter", bad)).unwrap_err();
        assert_eq!(e.code, code::INVALID_CONFIG, "{bad}");
        assert!(e.msg.contains("releaseUnusedAfter"), "{bad}: {}", e.msg);
    }
}

#[test]
fn container_interface_keys() {
    let reference = r#"{"cniVersion":"1.0.0","name":"n","type":"academy","ipam":{"type":"host-local","subnet":"10.91.0.0/24","resolvConf":"/etc/resolv.conf"}}"#;
    let c = parse(reference).unwrap();
    assert!(!c.enable_dad && !c.disable_container_interface);
    assert_eq!(
        builtin(&c).resolv_conf.as_deref(),
        Some(std::path::Path::new("/etc/resolv.conf"))
    );
    let c = parse(&with(
        &with(reference, "enabledad", "true"),
        "disableContainerInterface",
        "true",
    ))
    .unwrap();
    assert!(c.enable_dad && c.disable_container_interface);
    // Routes cannot go through a down interface: refused before the kernel says so.
    for conf in [
        with(GOOD, "disableContainerInterface", "true"),
        with(
            &with(reference, "isDefaultGateway", "true"),
            "disableContainerInterface",
            "true",
        ),
    ] {
        let e = parse(&conf).unwrap_err();
        assert_eq!(e.code, 7, "{conf}");
        assert!(e.msg.contains("disableContainerInterface"), "{}", e.msg);
    }
    let e = parse(&with(GOOD, "enabledad", "1")).unwrap_err();
    assert_eq!(e.code, 7);
}

#[test]
fn mtu_is_a_number_auto_or_the_kernel_s_default() {
    let mtu = |value: &str| parse(&with(GOOD, "mtu", value)).map(|c| c.mtu);
    assert_eq!(parse(GOOD).unwrap().mtu, Mtu::Kernel);
    assert_eq!(mtu("0").unwrap(), Mtu::Kernel);
    assert_eq!(mtu("null").unwrap(), Mtu::Kernel);
    assert_eq!(mtu("1460").unwrap(), Mtu::Fixed(1460));
    assert_eq!(mtu(r#""auto""#).unwrap(), Mtu::Auto);
    for bad in [r#""Auto""#, r#""1500""#, r#""""#, "1500.5", "true"] {
        let e = mtu(bad).unwrap_err();
        assert_eq!(e.code, 7, "{bad}");
        assert!(e.to_string().contains("\"auto\""), "{bad}: {e}");
    }
}

/// Below 1280 the kernel takes a link's IPv6 addresses: a number there is refused for a
/// network with an IPv6 range only, naming both; "auto" is decided at ADD.
#[test]
fn an_mtu_below_ipv6_s_minimum_is_refused_with_an_ipv6_range() {
    let ranges = r#"{"type":"host-local","ranges":[[{"subnet":"10.98.0.0/24"}],[{"subnet":"fd00:98::/64"}]]}"#;
    let dual = with(
        r#"{"cniVersion":"1.0.0","name":"harness","type":"academy"}"#,
        "ipam",
        ranges,
    );
    let mtu = |base: &str, value: &str| parse(&with(base, "mtu", value)).map(|c| c.mtu);
    let e = mtu(&dual, "1279").unwrap_err();
    assert_eq!(e.code, 7);
    for needle in ["mtu 1279", "below 1280", "IPv6 range fd00:98::/64"] {
        assert!(e.msg.contains(needle), "{needle}: {e}");
    }
    assert_eq!(mtu(&dual, "1280").unwrap(), Mtu::Fixed(1280));
    assert_eq!(mtu(&dual, r#""auto""#).unwrap(), Mtu::Auto);
    assert_eq!(mtu(GOOD, "1279").unwrap(), Mtu::Fixed(1279), "IPv4 only");
}

#[test]
fn non_masquerade_cidrs_are_prefixes_of_either_family_and_need_ip_masq() {
    let masq = with(GOOD, "ipMasq", "true");
    assert!(parse(&masq).unwrap().non_masquerade_cidrs.is_empty());
    let c = parse(&with(
        &masq,
        "nonMasqueradeCIDRs",
        r#"["10.244.0.0/16", "fd00:10:244::/56", "10.244.0.0/16", "10.96.0.0/12"]"#,
    ))
    .unwrap();
    let want: Vec<IpNetwork> = ["10.244.0.0/16", "fd00:10:244::/56", "10.96.0.0/12"]
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(c.non_masquerade_cidrs, want, "in order, repeats dropped");
    // An empty list asks for nothing, with or without ipMasq.
    assert!(parse(&with(GOOD, "nonMasqueradeCIDRs", "[]")).is_ok());

    let cases = [
        (r#""10.244.0.0/16""#, "must be a list"),
        ("[16]", "nonMasqueradeCIDRs[0] must be a string"),
        (r#"["10.244.0.0"]"#, "needs a prefix length"),
        (
            r#"["10.244.0.0/16", "10.244.0.0/33"]"#,
            "nonMasqueradeCIDRs[1]",
        ),
        (r#"["10.244.1.0/16"]"#, "host bits"),
        (r#"["cluster"]"#, "not a CIDR"),
    ];
    for (value, needle) in cases {
        let err = parse(&with(&masq, "nonMasqueradeCIDRs", value)).unwrap_err();
        assert_eq!(err.code, 7, "{value}: {err}");
        assert!(err.msg.contains(needle), "{value}: {}", err.msg);
    }
    // The rule's length: 32 per family pass, 33 do not.
    let many = |n: usize, v6: bool| {
        let list: Vec<String> = (0..n)
            .map(|i| match v6 {
                false => format!("172.{}.0.0/16", 16 + i),
                true => format!("fd00:{i:x}::/32"),
            })
            .collect();
        with(
            &masq,
            "nonMasqueradeCIDRs",
            &serde_json::to_string(&list).unwrap(),
        )
    };
    assert_eq!(
        parse(&many(32, false)).unwrap().non_masquerade_cidrs.len(),
        32
    );
    assert_eq!(
        parse(&many(32, true)).unwrap().non_masquerade_cidrs.len(),
        32
    );
    for v6 in [false, true] {
        let err = parse(&many(33, v6)).unwrap_err();
        assert_eq!(err.code, 7);
        assert!(err.msg.contains("at most 32 per family"), "{err}");
    }
    let err = parse(&with(GOOD, "nonMasqueradeCIDRs", r#"["10.244.0.0/16"]"#)).unwrap_err();
    assert_eq!(err.code, 7, "{err}");
    assert_eq!(err.msg, "nonMasqueradeCIDRs needs ipMasq");
    let off = with(
        &with(GOOD, "ipMasq", "false"),
        "nonMasqueradeCIDRs",
        r#"["10.0.0.0/8"]"#,
    );
    assert_eq!(
        parse(&off).unwrap_err().msg,
        "nonMasqueradeCIDRs needs ipMasq"
    );
    // DEL never needs them, and never refuses over them.
    let c = Config::parse_for_del(with(GOOD, "nonMasqueradeCIDRs", "7").as_bytes()).unwrap();
    assert!(c.non_masquerade_cidrs.is_empty());
}

/// libcni 1.2's version negotiation: a conflist's `cniVersions` beside `cniVersion`.
/// libcni passes each plugin only the negotiated `cniVersion`; a plugin config that
/// carries the list anyway (a single-plugin file) is read by its `cniVersion`.
#[test]
fn a_config_with_cni_versions_is_read_by_its_cni_version() {
    let c = parse(&with(GOOD, "cniVersions", r#"["1.0.0", "1.1.0"]"#)).unwrap();
    assert_eq!(c.cni_version, "1.0.0");
}

/// Issue 31's VLAN lead: with `vlan` and `isGateway` routed traffic goes through
/// `<bridge>.<vid>`, so the FORWARD accepts and the isolation name it beside the bridge,
/// and the loopback guard names it alone; without a VLAN gateway, the bridge only.
#[test]
fn the_firewall_kinds_name_the_interface_routed_traffic_uses() {
    let tagged = parse(&with(GOOD, "vlan", "10")).unwrap();
    assert_eq!(tagged.routed_interface(), "br-academy.10");
    assert_eq!(
        tagged.forwarded_interfaces(),
        ["br-academy", "br-academy.10"]
    );
    let untagged = parse(GOOD).unwrap();
    assert_eq!(untagged.routed_interface(), "br-academy");
    assert_eq!(untagged.forwarded_interfaces(), ["br-academy"]);
    // A VLAN without a gateway on the host routes nothing through <bridge>.<vid>.
    let layer2 = parse(&with(&with(GOOD, "vlan", "10"), "isGateway", "false")).unwrap();
    assert_eq!(layer2.routed_interface(), "br-academy");
    assert_eq!(layer2.forwarded_interfaces(), ["br-academy"]);
}
