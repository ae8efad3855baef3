//! ipMasq end to end, on the real default networks of podman and containerd with only
//! `type` changed (plus the names that keep a test's network its own), against an
//! "outside" the test makes: a netns joined to the host by a veth, with no route back to
//! any pod subnet. An answer from it proves the masquerade; its listener sees the
//! host's address. Packets go only to addresses of the test's own namespaces.

use std::collections::BTreeSet;

use crate::common::*;
use serde_json::{json, Value};

/// The reference plugins a podman or containerd network chains after the bridge.
const CHAINED: &[&str] = &["portmap", "firewall", "tuning"];
const DEBIAN_PLUGINS: &str = "/usr/lib/cni";

/// The lab's IPv6 pod subnet, beside its IPv4 one.
fn pod_v6(lab: &Lab) -> String {
    format!("{}::/64", lab.slot.v6_prefix())
}

/// Puts the chained reference plugins beside academy in the lab's CNI_PATH; the
/// firewall plugin among them runs in the host's netns, hence the guard of its chains.
fn link_chained_plugins(lab: &Lab) -> FirewallChains {
    for p in CHAINED {
        let _ = std::os::unix::fs::symlink(format!("{DEBIAN_PLUGINS}/{p}"), lab.bin_dir.join(p));
    }
    FirewallChains::hold()
}

/// `list` with the bridge plugin's type changed to academy and the bridge renamed to the
/// lab's (podman's cni-podmanN and containerd's cni0 are shared names), written as the
/// lab's only conflist.
fn install_as_academy(lab: &Lab, mut list: Value) -> Value {
    assert_eq!(
        list["plugins"][0]["type"], "bridge",
        "not a bridge conflist: {list}"
    );
    let plugin = &mut list["plugins"][0];
    plugin["type"] = json!("academy");
    plugin["bridge"] = json!(lab.bridge);
    std::fs::write(lab.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
    list
}

fn ips_of(result: &Value) -> Vec<String> {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|ip| {
            let a = ip["address"].as_str().unwrap();
            a.split('/').next().unwrap().to_string()
        })
        .collect()
}

/// The whole outside check for one attachment in the lab's netns: v4 and v6 reach the
/// outside and are seen as the host; the published port answers the outside; without
/// its set element the container cannot reach the outside (the masquerade is what
/// carries it), and CHECK says so.
fn prove_outbound(lab: &Lab, out: &Outside, result: &Value, host_port: u16, cid: &str) {
    let addrs = ips_of(result);
    assert_eq!(addrs.len(), 2, "a v4 and a v6 address expected: {result}");
    let want: BTreeSet<String> = addrs
        .iter()
        .map(|a| format!("{a} {}", owner_comment(&lab.network, cid, "eth0")))
        .collect();
    assert_eq!(nft::elements(&lab.network), want, "set elements after ADD");
    assert!(nft::has_rule(&lab.network, "v4") && nft::has_rule(&lab.network, "v6"));

    assert!(
        ping_eventually(&lab.netns, &out.far_v4),
        "v4 ping to the outside"
    );
    assert!(
        ping_eventually(&lab.netns, &out.far_v6),
        "v6 ping to the outside"
    );
    let (got, peer) = peer_seen(&out.netns, &out.far_v4, 8081, &lab.netns);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", out.host_v4.as_str())
    );
    let (got, peer) = peer_seen(&out.netns, &out.far_v6, 8081, &lab.netns);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", out.host_v6.as_str())
    );

    // The port published through the chained portmap, from the outside.
    let (got, _) = {
        let listener = listen(&lab.netns, "0.0.0.0", 8080);
        let got = connect(&out.netns, &out.host_v4, host_port);
        let seen = listener.wait_with_output().unwrap();
        (got, seen)
    };
    assert_eq!(got, "hello", "published port {host_port} from the outside");

    // Negative control: without the element, the outside has no way back.
    let v4 = &addrs[0];
    let set = format!("{}-v4", lab.network);
    run(
        "nft",
        &[
            "delete",
            "element",
            "inet",
            "academy",
            &set,
            &format!("{{ {v4} }}"),
        ],
        &[],
    );
    assert!(
        !ping_from(&lab.netns, &out.far_v4, 2),
        "reached the outside unmasqueraded"
    );
}

/// A host port for the lab's published port, unique per lab and process.
fn host_port(lab: &Lab) -> u16 {
    20000 + (std::process::id() % 20000) as u16 + u16::from(lab.slot.n)
}

#[test]
fn ipmasq_podman_network_create_conflist_reaches_the_outside() {
    let lab = Lab::new("mqpod");
    let out = Outside::new(&lab);
    let _chains = link_chained_plugins(&lab);
    let dir = lab.root.join("podman-net");
    let v6 = pod_v6(&lab);
    let created = retried_while_links_vanish(|| {
        run(
            "podman",
            &[
                "--network-backend",
                "cni",
                "--network-config-dir",
                dir.to_str().unwrap(),
                "network",
                "create",
                "--subnet",
                &lab.subnet(),
                "--ipv6",
                "--subnet",
                &v6,
                &lab.network,
            ],
            &[],
        )
    });
    assert_eq!(created.code, 0, "podman network create: {created}");
    let file = dir.join(format!("{}.conflist", lab.network));
    let list: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let list = install_as_academy(&lab, list);
    assert_eq!(
        list["plugins"][0]["ipMasq"], true,
        "podman's network sets ipMasq"
    );

    let port = host_port(&lab);
    let caps =
        json!({"portMappings": [{"hostPort": port, "containerPort": 8080, "protocol": "tcp"}]});
    let caps = caps.to_string();
    let added = lab.cnitool("add", &lab.netns, &[("CAP_ARGS", &caps)]);
    let result = added.expect_result("cnitool add on podman's conflist");
    let cid = cnitool_container_id(&lab.netns_path());
    prove_outbound(&lab, &out, &result, port, &cid);

    let check = lab.cnitool("check", &lab.netns, &[("CAP_ARGS", &caps)]);
    assert_ne!(
        check.code, 0,
        "CHECK must report the removed element:\n{check}"
    );
    assert!(check.all().contains("not in nf_tables set"), "{check}");

    let del = lab.cnitool("del", &lab.netns, &[("CAP_ARGS", &caps)]);
    assert_eq!(del.code, 0, "cnitool del: {del}");
    assert_eq!(
        nft::elements(&lab.network),
        BTreeSet::new(),
        "elements after DEL"
    );
    assert!(lab.lab_veths().is_empty());
    let store = std::path::Path::new(HOST_LOCAL_STORE).join(&lab.network);
    let left: Vec<_> = std::fs::read_dir(&store)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains('.') && !n.starts_with("last_reserved_ip"))
        .collect();
    assert!(
        left.is_empty(),
        "reservations left in {}: {left:?}",
        store.display()
    );
}

/// containerd's documented default network (containerd's docs/cri/config.md,
/// 10-containerd-net.conflist).
fn containerd_default() -> Value {
    json!({
      "cniVersion": "1.0.0",
      "name": "containerd-net",
      "plugins": [
        {
          "type": "bridge",
          "bridge": "cni0",
          "isGateway": true,
          "ipMasq": true,
          "promiscMode": true,
          "ipam": {
            "type": "host-local",
            "ranges": [
              [{ "subnet": "10.88.0.0/16" }],
              [{ "subnet": "2001:4860:4860::/64" }]
            ],
            "routes": [
              { "dst": "0.0.0.0/0" },
              { "dst": "::/0" }
            ]
          }
        },
        {
          "type": "portmap",
          "capabilities": {"portMappings": true}
        }
      ]
    })
}

#[test]
fn ipmasq_containerd_default_conflist_reaches_the_outside_and_gc_clears_it() {
    let lab = Lab::new("mqctrd");
    let out = Outside::new(&lab);
    let _chains = link_chained_plugins(&lab);
    let mut list = containerd_default();
    // The test's own name and subnets (2001:4860:4860::/64 is a real, routed prefix).
    list["name"] = json!(lab.network);
    list["plugins"][0]["ipam"]["ranges"] =
        json!([[{ "subnet": lab.subnet() }], [{ "subnet": pod_v6(&lab) }]]);
    install_as_academy(&lab, list.clone());

    let port = host_port(&lab);
    let caps =
        json!({"portMappings": [{"hostPort": port, "containerPort": 8080, "protocol": "tcp"}]});
    let caps = caps.to_string();
    let added = lab.cnitool("add", &lab.netns, &[("CAP_ARGS", &caps)]);
    let result = added.expect_result("cnitool add on containerd's default conflist");
    let cid = cnitool_container_id(&lab.netns_path());
    prove_outbound(&lab, &out, &result, port, &cid);

    // GC (CNI 1.1) of academy's own plugin config with nothing valid: the element left
    // after the negative control goes, with the reservations and the veth.
    let mut plugin = list["plugins"][0].clone();
    plugin["type"] = json!("academy");
    plugin["bridge"] = json!(lab.bridge);
    plugin["name"] = json!(lab.network);
    plugin["cniVersion"] = json!("1.1.0");
    plugin["cni.dev/valid-attachments"] = json!([]);
    let gc = Call::bare()
        .env("CNI_COMMAND", "GC")
        .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
        .config(&plugin)
        .run();
    gc.expect_silent_success("GC with no valid attachment");
    assert_eq!(
        nft::elements(&lab.network),
        BTreeSet::new(),
        "elements after GC"
    );
    assert!(lab.lab_veths().is_empty(), "veths after GC");
    let del = lab.cnitool("del", &lab.netns, &[("CAP_ARGS", &caps)]);
    assert_eq!(del.code, 0, "the runtime's late DEL: {del}");
}

#[test]
fn ipmasq_thirty_parallel_adds_get_distinct_addresses_and_elements() {
    let lab = Lab::new("mqpar");
    lab.always_config("ipMasq", json!(true));
    let attachments: Vec<Attach> = (0..30)
        .map(|i| Attach {
            cid: format!("{}-{i}", lab.cid),
            ifname: "eth0".into(),
            netns: lab.add_netns(&i.to_string()),
        })
        .collect();
    let results: Vec<Out> = std::thread::scope(|s| {
        let handles: Vec<_> = attachments
            .iter()
            .map(|a| s.spawn(|| lab.call_for("ADD", a).run()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut addresses = BTreeSet::new();
    let mut want = BTreeSet::new();
    for (a, out) in attachments.iter().zip(&results) {
        let result = out.expect_result("parallel ADD with ipMasq");
        let ip = ips_of(&result).remove(0);
        want.insert(format!(
            "{ip} {}",
            owner_comment(&lab.network, &a.cid, "eth0")
        ));
        addresses.insert(ip);
    }
    assert_eq!(addresses.len(), 30, "distinct addresses: {addresses:?}");
    assert_eq!(nft::elements(&lab.network), want);
    assert!(ping_from(&attachments[7].netns, &lab.gateway(), 1));

    std::thread::scope(|s| {
        for a in &attachments {
            s.spawn(|| {
                lab.call_for("DEL", a)
                    .run()
                    .expect_silent_success("parallel DEL")
            });
        }
    });
    assert_eq!(nft::elements(&lab.network), BTreeSet::new());
    assert!(lab.lab_veths().is_empty());
    assert_eq!(lab.reservations(), Vec::<String>::new());
}

#[test]
fn del_with_keys_add_refuses_still_removes_everything() {
    let lab = Lab::new("mqdel");
    let mut config = lab.config_with("1.0.0", "ipMasq", json!(true));
    let a = lab.attach();
    let call = |command: &str, c: &Value| lab.call_for(command, &a).config(c).run();
    call("ADD", &config).expect_result("ADD with ipMasq");
    assert_eq!(nft::elements(&lab.network).len(), 1);
    // The runtime's copy of the config now has keys academy does not implement and a
    // value ADD refuses: DEL still tears the attachment down and exits 0.
    config["vlan"] = json!(5000);
    config["macspoofchk"] = json!(true);
    config["mtu"] = json!(20);
    call("DEL", &config).expect_silent_success("DEL with refused keys");
    assert_eq!(nft::elements(&lab.network), BTreeSet::new());
    assert!(lab.lab_veths().is_empty());
    assert_eq!(lab.reservations(), Vec::<String>::new());
    call("DEL", &config).expect_silent_success("DEL again");
}

/// With `ipam.type` host-local and no dataDir, academy uses host-local's own store: an
/// address the reference plugin gave is never given again after `type` is switched.
#[test]
fn host_local_form_shares_the_reference_store() {
    let lab = Lab::new("mqshare");
    let _ = std::os::unix::fs::symlink("/opt/cni/lab-bin/bridge", lab.bin_dir.join("bridge"));
    let _ = std::os::unix::fs::symlink(
        "/opt/cni/lab-bin/host-local",
        lab.bin_dir.join("host-local"),
    );
    let list = |kind: &str| {
        json!({"cniVersion": "1.0.0", "name": lab.network, "plugins": [{
            "type": kind, "bridge": lab.bridge, "isGateway": true,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": lab.subnet()}]]}
        }]})
    };
    let write = |kind: &str| {
        std::fs::write(lab.conf_dir.join("10-lab.conflist"), list(kind).to_string()).unwrap()
    };
    write("bridge");
    let by_reference = lab
        .cnitool("add", &lab.netns, &[])
        .expect_result("reference ADD");
    write("academy");
    let second = lab.add_netns("b");
    let by_academy = lab
        .cnitool("add", &second, &[])
        .expect_result("academy ADD");
    let (r, a) = (ips_of(&by_reference), ips_of(&by_academy));
    assert_ne!(r, a, "the same address twice");
    let store = std::path::Path::new(HOST_LOCAL_STORE).join(&lab.network);
    for ip in r.iter().chain(&a) {
        assert!(
            store.join(ip).is_file(),
            "{ip} not reserved in {}",
            store.display()
        );
    }
    assert_eq!(lab.cnitool("del", &second, &[]).code, 0);
    write("bridge");
    assert_eq!(lab.cnitool("del", &lab.netns, &[]).code, 0);
}
