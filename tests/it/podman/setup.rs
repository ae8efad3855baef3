//! The test's own podman: its config (through CONTAINERS_CONF), the shim that records
//! each call of academy, the two networks' conflists, the image, and the guard that
//! undoes all of it.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::Flock;
use serde_json::json;

use super::*;

/// The podman of this test (own config and stores, see [`PrivatePodman`]) and its own
/// CNI config folder.
impl PrivatePodman {
    pub(super) fn plugin_dir(&self) -> PathBuf {
        self.dir.join("cni-bin")
    }
    pub(super) fn conf_dir(&self) -> PathBuf {
        self.dir.join("net.d")
    }
    pub(super) fn call_log(&self) -> PathBuf {
        self.dir.join("calls.log")
    }

    /// The calls the shim recorded, each a map of its fields.
    pub(super) fn calls(&self) -> Vec<RecordedCall> {
        fs::read_to_string(self.call_log())
            .unwrap_or_default()
            .lines()
            .map(|line| {
                let (fields, parent) = line.split_once(" parent=").unwrap_or((line, ""));
                let field = |k: &str| {
                    fields
                        .split(' ')
                        .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                        .unwrap_or("")
                        .to_owned()
                };
                RecordedCall {
                    command: field("cmd"),
                    container: field("cid"),
                    netns: field("netns"),
                    path: field("path"),
                    prev_result: field("prev") == "yes",
                    status: field("rc"),
                    parent: parent.trim().to_owned(),
                }
            })
            .collect()
    }

    pub(super) fn containers(&self) -> Vec<String> {
        self.must(&["ps", "-a", "-q", "--no-trunc"])
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// One invocation of academy by podman, as the shim recorded it.
#[derive(Debug)]
pub(super) struct RecordedCall {
    pub(super) command: String,
    pub(super) container: String,
    pub(super) netns: String,
    pub(super) path: String,
    pub(super) prev_result: bool,
    pub(super) status: String,
    pub(super) parent: String,
}

/// Undoes everything the test made, whatever state it stopped in: podman's containers,
/// image, network namespaces and folder here, then the two labs' own guards.
pub(super) struct Guard {
    pub(super) podman: PrivatePodman,
    pub(super) netns_before: BTreeSet<String>,
    pub(super) _lock: Flock<fs::File>,
    pub(super) net: Lab,
    pub(super) full: Lab,
    /// Last: podman's chained firewall plugin runs in the host's netns.
    pub(super) _chains: FirewallChains,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.podman.remove_all();
        for ns in podman_netns().difference(&self.netns_before) {
            let _ = run_quiet("ip", &["netns", "delete", ns]);
        }
    }
}

pub(super) fn write(path: &Path, content: &str) {
    fs::write(path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

pub(super) fn set_up(podman: &PrivatePodman, net: &Lab, full: &Lab) {
    for d in [
        podman.plugin_dir(),
        podman.conf_dir(),
        podman.dir.join("tmp"),
    ] {
        fs::create_dir_all(&d).expect("create test folder");
    }
    // academy itself sits outside the plugin folder; what podman finds there under the
    // name "academy" is a shim that records each call (command, container, netns,
    // whether stdin had a prevResult, who called, exit status) and runs academy with the
    // same arguments, environment and stdin.
    let real = podman.dir.join("academy-real");
    copy_executable(env!("CARGO_BIN_EXE_academy"), &real);
    let shim = podman.plugin_dir().join("academy");
    write(
        &shim,
        &format!(
            r#"#!/bin/sh
input=$(cat)
case $input in *'"prevResult"'*) prev=yes ;; *) prev=no ;; esac
printf '%s' "$input" | '{real}' "$@"
rc=$?
printf 'cmd=%s cid=%s netns=%s path=%s prev=%s rc=%s parent=%s\n' "$CNI_COMMAND" "$CNI_CONTAINERID" \
  "$CNI_NETNS" "$CNI_PATH" "$prev" "$rc" "$(tr '\0' ' ' </proc/$PPID/cmdline)" >>'{log}'
exit $rc
"#,
            real = real.display(),
            log = podman.call_log().display(),
        ),
    );
    fs::set_permissions(&shim, fs::Permissions::from_mode(0o755)).expect("chmod shim");

    podman.write_conf(&podman.plugin_dir(), &podman.conf_dir());

    for (lab, range) in [
        (net, json!({})),
        (
            full,
            json!({"rangeStart": full_only(full), "rangeEnd": full_only(full)}),
        ),
    ] {
        let mut plugin = json!({
            "type": "academy",
            "bridge": lab.bridge,
            "subnet": subnet_29(lab),
            "gateway": lab.gateway(),
            "dataDir": lab.data_dir,
        });
        for (k, v) in range.as_object().unwrap() {
            plugin[k] = v.clone();
        }
        let list = json!({ "cniVersion": "1.0.0", "name": lab.network, "plugins": [plugin] });
        write(
            &podman.conf_dir().join(format!("{}.conflist", lab.network)),
            &serde_json::to_string_pretty(&list).unwrap(),
        );
    }
}
