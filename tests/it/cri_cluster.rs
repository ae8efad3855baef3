//! The template `academy install --template --cluster-cidr` writes, under Debian 12's
//! containerd 1.6 (issue 26, items 1 and 7): containerd renders it from the node's pod
//! CIDR, its libcni (1.1.1) ignores `cniVersions` and speaks 1.0.0, the network's
//! masquerade rule leaves the cluster CIDRs alone, and a pod reaches an outside netns
//! that has no route back (only a masqueraded packet is answered). containerd sends
//! ADD and DEL only. See cri.rs for the private containerd each test runs.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::common::nft::rule_comments_in;
use crate::common::*;
use crate::cri::containerd::Containerd;
use crate::cri::RemoveOnDrop;

/// The installed template with this test's network name, bridge and store (as
/// cri.rs's `template_for` does with the shipped one).
fn for_this_test(c: &Containerd, installed: &str) -> String {
    let mut out = installed.to_string();
    for (from, to) in [
        (
            r#""name": "academy","#.to_string(),
            format!(r#""name": "{}","#, c.lab.network),
        ),
        (
            r#""bridge": "cni0","#.to_string(),
            format!(r#""bridge": "{}","#, c.lab.bridge),
        ),
        (
            r#""type": "host-local","#.to_string(),
            format!(
                r#""type": "host-local", "dataDir": "{}","#,
                c.store().display()
            ),
        ),
    ] {
        assert_eq!(out.matches(&from).count(), 1, "{from} in the template");
        out = out.replace(&from, &to);
    }
    out
}

#[test]
fn cri_installed_cluster_template_masquerades_except_to_the_cluster_on_1_0_0() {
    let template =
        std::env::temp_dir().join(Slot::take().name("academy-it", "cri-cluster") + ".tmpl");
    std::fs::write(&template, "{}").unwrap();
    let _template_guard = RemoveOnDrop(template.clone());
    let extra = format!("    conf_template = \"{}\"\n", template.display());
    let c = Containerd::start("cluster", &extra);
    let out = Outside::new(&c.lab);

    // The cluster: this node's pod CIDR and another node's.
    let other_node = format!("{}.0/24", Slot::take().v4_prefix());
    let cluster = format!("{},{other_node}", c.lab.subnet());
    let (bin, conf) = (c.dir.join("install-bin"), c.dir.join("install-conf"));
    for d in [&bin, &conf] {
        std::fs::create_dir_all(d).unwrap();
    }
    let install = run(
        plugin(),
        &[
            "install",
            "--bin-dir",
            bin.to_str().unwrap(),
            "--conf-dir",
            conf.to_str().unwrap(),
            "--template",
            "--cluster-cidr",
            &cluster,
        ],
        &[],
    );
    assert_eq!(install.code, 0, "{install}");
    let installed = std::fs::read_to_string(conf.join("academy.conflist.tmpl")).unwrap();
    std::fs::write(&template, for_this_test(&c, &installed)).unwrap();
    c.cri(&["update-cidr", &c.lab.subnet()]);

    let rendered = std::fs::read_to_string(c.conf_dir().join("10-containerd-net.conflist"))
        .expect("containerd's rendered config");
    let list: Value = serde_json::from_str(&rendered).expect("rendered JSON");
    assert_eq!(list["cniVersion"], "1.0.0", "{rendered}");
    assert_eq!(
        list["cniVersions"],
        serde_json::json!(["1.0.0", "1.1.0"]),
        "{rendered}"
    );
    let plugin = &list["plugins"][0];
    assert_eq!(plugin["ipMasq"], true, "{rendered}");
    assert_eq!(
        plugin["nonMasqueradeCIDRs"],
        serde_json::json!([c.lab.subnet(), other_node]),
        "{rendered}"
    );

    let ids = [c.run_pod("a"), c.run_pod("b")];
    let ips: BTreeSet<String> = ids
        .iter()
        .map(|id| c.status(id)["ip"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(nft::addresses(&c.lab.network), ips, "masquerade set");
    let rules = rule_comments_in(None, &c.lab.network, "v4");
    assert_eq!(
        rules,
        vec![format!(
            "academy ipMasq {}-v4 except {} nonMasqueradeCIDRs {},{other_node}",
            c.lab.network,
            c.lab.subnet(),
            c.lab.subnet()
        )]
    );
    // containerd 1.6's libcni reads cniVersion and ignores cniVersions: the results it
    // cached (academy's ADD output) are 1.0.0.
    for name in c.cached_results() {
        let path = std::path::Path::new(RESULTS_DIR).join(&name);
        let cached: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(cached["result"]["cniVersion"], "1.0.0", "{name}: {cached}");
    }
    assert_eq!(c.cached_results().len(), 2);

    for id in &ids {
        let netns = c.status(id)["netns"].as_str().unwrap().to_string();
        ping_from_path(&netns, &out.far_v4).unwrap();
    }

    for id in &ids {
        c.stop_and_remove(id);
    }
    assert_eq!(nft::addresses(&c.lab.network), BTreeSet::new());
    assert_eq!(c.reservations().len(), 0);
    assert!(c.cached_results().is_empty());
    let commands: BTreeSet<String> = c.plugin_calls().into_iter().map(|c| c.command).collect();
    assert_eq!(
        commands,
        ["ADD", "DEL"].iter().map(|s| s.to_string()).collect(),
        "containerd 1.6 sends ADD and DEL only"
    );
}
