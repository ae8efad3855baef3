//! Ports published by academy under the runtimes: `podman run -p` on the network
//! `podman network create` writes, converted by `academy convert`; a hostPort through
//! containerd's CRI on the shipped conf_template.

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use nix::fcntl::Flock;
use serde_json::Value;

use super::{exchange, host_ports, reach};
use crate::common::*;
use crate::cri::containerd::Containerd;
use crate::cri::{template_for, RemoveOnDrop};

/// The podman test's lock: podman's network namespaces share /run/netns.
const PODMAN_LOCK: &str = "/run/academy-podman-test.lock";

/// Podman's network namespaces (podman 4 names them netns-<uuid>).
fn podman_netns() -> BTreeSet<String> {
    fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("netns-") || n.starts_with("cni-"))
        .collect()
}

/// Removes the test's containers, image, folder and the namespaces podman left, then
/// the lab's own guard runs.
struct PodmanGuard {
    podman: PrivatePodman,
    netns_before: BTreeSet<String>,
    _lock: Flock<fs::File>,
}

impl Drop for PodmanGuard {
    fn drop(&mut self) {
        self.podman.remove_all();
        for ns in podman_netns().difference(&self.netns_before) {
            let _ = run_quiet("ip", &["netns", "delete", ns]);
        }
    }
}

#[test]
fn portmap_podman_run_p_on_a_converted_network_answers_outside_host_and_containers() {
    let lab = Lab::new("pmpod");
    let out = Outside::new(&lab);
    let guard = PodmanGuard {
        _lock: lock_file(PODMAN_LOCK),
        netns_before: podman_netns(),
        podman: PrivatePodman {
            dir: lab.root.join("podman"),
        },
    };
    let p = &guard.podman;
    let (plugins, confs) = (p.dir.join("cni-bin"), p.dir.join("net.d"));
    for d in [&plugins, &confs, &p.dir.join("tmp")] {
        fs::create_dir_all(d).expect("create test folder");
    }
    p.write_conf(&plugins, &confs);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_academy"), plugins.join("academy")).unwrap();
    std::os::unix::fs::symlink("/usr/lib/cni/firewall", plugins.join("firewall")).unwrap();
    p.build_image();

    // The network as podman writes it, its shared bridge name changed to the lab's,
    // then converted by academy.
    let v6 = format!("{}::/64", lab.slot.v6_prefix());
    let subnet = lab.subnet();
    let create = [
        "network",
        "create",
        "--subnet",
        &subnet,
        "--ipv6",
        "--subnet",
        &v6,
        &lab.network,
    ];
    let created = retried_while_links_vanish(|| p.run(&create));
    assert_eq!(created.code, 0, "podman network create:\n{created}");
    let file = confs.join(format!("{}.conflist", lab.network));
    let mut list: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    list["plugins"][0]["bridge"] = Value::from(lab.bridge.as_str());
    fs::write(&file, list.to_string()).unwrap();
    let converted = run(
        plugin(),
        &["convert", file.to_str().unwrap(), "--in-place"],
        &[],
    );
    assert_eq!(
        converted.code, 0,
        "academy convert --in-place:\n{converted}"
    );
    let list: Value = serde_json::from_str(&fs::read_to_string(&file).unwrap()).unwrap();
    let types: Vec<&str> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["type"].as_str())
        .collect();
    assert_eq!(types, ["academy"], "converted: {list}");

    let port = host_ports(&lab);
    p.must(&[
        "run",
        "-d",
        "--name",
        "academy-pm-web",
        "--network",
        &lab.network,
        "-p",
        &format!("{port}:80"),
        IMAGE,
        "sh",
        "-c",
        "while true; do echo hello | nc -l -p 80; done",
    ]);
    let published = nft::published(&lab.network);
    assert_eq!(published.len(), 2, "a v4 and a v6 mapping: {published:?}");
    assert!(
        published
            .iter()
            .all(|e| e.contains(&format!("tcp . {port} -> ")) && e.contains(" . 80 ")),
        "{published:?}"
    );
    let answer = |from: Option<&str>, addr: &str| reach(from, addr, port, Duration::from_secs(10));
    assert_eq!(
        answer(Some(&out.netns), &out.host_v4),
        "hello",
        "-p from the outside, v4"
    );
    assert_eq!(
        answer(Some(&out.netns), &out.host_v6),
        "hello",
        "-p from the outside, v6"
    );
    assert_eq!(
        answer(None, &out.host_v4),
        "hello",
        "-p from the host's own address"
    );
    assert_eq!(
        answer(None, "127.0.0.1"),
        "hello",
        "-p from the host on 127.0.0.1"
    );
    let from_container = p.must(&[
        "run",
        "--rm",
        "--network",
        &lab.network,
        IMAGE,
        "sh",
        "-c",
        &format!("echo | nc -w 5 {} {port}", out.host_v4),
    ]);
    assert!(
        from_container.contains("hello"),
        "-p from a second container:\n{from_container}"
    );

    p.must(&["rm", "-f", "-t", "0", "academy-pm-web"]);
    assert_eq!(
        nft::published(&lab.network),
        BTreeSet::new(),
        "published after rm"
    );
    assert_eq!(
        nft::elements(&lab.network),
        BTreeSet::new(),
        "masquerade after rm"
    );
    assert!(lab.lab_veths().is_empty(), "veths after rm");
    p.must(&["network", "rm", &lab.network]);
}

/// containerd's CRI, as kubelet drives it, on the network of the shipped conf_template
/// (conflists/containerd-template.conflist.tmpl, which declares portMappings): a pod's
/// hostPort answers the outside, and StopPodSandbox unpublishes it.
#[test]
fn portmap_cri_host_port_on_the_shipped_template_answers_outside_until_stop() {
    let shipped = include_str!("../../../conflists/containerd-template.conflist.tmpl");
    assert!(shipped.contains(r#""capabilities": {"portMappings": true}"#));
    assert!(shipped.contains(r#""hairpinMode": true"#));
    let template =
        std::env::temp_dir().join(Slot::take().name("academy-it", "pm-template") + ".tmpl");
    fs::write(&template, "{}").unwrap();
    let _template_guard = RemoveOnDrop(template.clone());
    let extra = format!("    conf_template = \"{}\"\n", template.display());
    let c = Containerd::start("pmcri", &extra);
    fs::write(&template, template_for(&c)).unwrap();
    c.cri(&["update-cidr", &c.lab.subnet()]);
    let out = Outside::new(&c.lab);

    let port = host_ports(&c.lab);
    let id = c.cri(&["run", "web", "uid-web", "default", &format!("{port}:8080")])["id"]
        .as_str()
        .expect("sandbox id")
        .to_string();
    let status = c.status(&id);
    let pod_ip = status["ip"].as_str().unwrap().to_string();
    let netns = status["netns"].as_str().unwrap().to_string();
    let published = nft::published(&c.lab.network);
    assert_eq!(published.len(), 1, "{published:?}");
    let entry = published.iter().next().unwrap();
    assert!(
        entry.starts_with(&format!("_ports-v4 tcp . {port} -> {pod_ip} . 8080 ")),
        "{entry}"
    );

    let (got, peer) = exchange(&netns, "0.0.0.0", Some(&out.netns), &out.host_v4, port);
    assert_eq!(
        (got.as_str(), peer.as_str()),
        ("hello", out.far_v4.as_str()),
        "hostPort from the outside"
    );

    c.cri(&["stop", &id]);
    assert_eq!(
        nft::published(&c.lab.network),
        BTreeSet::new(),
        "published after StopPodSandbox"
    );
    c.cri(&["remove", &id]);
    assert!(c.sandboxes().is_empty());
}
