//! A private containerd for the CRI tests (tests/it/cri.rs): its own root, state, gRPC
//! and ttrpc sockets, runc state, CNI bin and conf folders, all under one folder of the
//! test's [`Lab`] (whose network, bridge, subnet and data dir the pods get); driven
//! through tests/it/cri/cri_client.py, a CRI v1 client.
//!
//! Settings this machine needs (see the config below): restrict_oom_score_adj (no
//! CAP_SYS_RESOURCE), no AppArmor or SELinux, runc with cgroupfs, and sandbox netns files
//! kept under the private state folder. The pause image cannot be pulled: a static C
//! sleeper is wrapped into a docker-archive tar and imported into namespace k8s.io under
//! the exact `sandbox_image` name, which stops containerd 1.6 from trying a pull.
//!
//! Drop, also after a failed assertion: every sandbox is stopped and removed through the
//! CRI (so containerd runs academy's DELs), containerd is stopped by its PID, then
//! whatever is still left is removed by hand: shims of this containerd (found by the
//! socket path in their command line, killed by PID), mounts under its folder; last the
//! lab's own guard removes academy's veths for the network, the bridge, the network's
//! masquerade, libcni's cached results and the folders.
//!
//! What containerd keeps in fixed machine-wide places: shim sockets under
//! /run/containerd/s and libcni's result cache /var/lib/cni/results.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::fcntl::Flock;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::common::*;

pub const PAUSE_IMAGE: &str = "localhost/academy-cri-pause:test";
/// Only Debian's python3 has python3-grpcio and python3-protobuf (scripts/setup.sh);
/// a `python3` first on PATH (pyenv, a venv) may not.
const PYTHON: &str = "/usr/bin/python3";
/// tests/it/cri: the CRI client and the .proto it is generated from.
const CLIENT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/cri");

/// A pause process: sleeps until SIGTERM or SIGINT, then exits 0 (so StopPodSandbox
/// needs no SIGKILL).
const PAUSE_C: &str = r#"#include <signal.h>
#include <unistd.h>
static void done(int sig) { (void)sig; _exit(0); }
int main(void) {
  signal(SIGTERM, done);
  signal(SIGINT, done);
  for (;;) pause();
}
"#;

/// Records every call containerd makes to academy (verb, CNI_NETNS, whether stdin
/// carried a prevResult, CNI_ARGS), then runs the real binary with the same stdin.
const RECORDER: &str = r#"#!/bin/sh
input=$(cat)
if printf '%s' "$input" | jq -e 'has("prevResult")' >/dev/null 2>&1; then prev=yes; else prev=no; fi
printf '%s\t%s\t%s\t%s\n' "$CNI_COMMAND" "${CNI_NETNS:-}" "$prev" "${CNI_ARGS:-}" >>"@LOG@"
printf '%s' "$input" | exec "@ACADEMY@" "$@"
"#;

/// Runs a program that must succeed (clean environment, see [`run`]); its stdout.
fn must(program: &str, args: &[&str]) -> String {
    let out = run(program, args, &[]);
    assert_eq!(out.code, 0, "{program} {} failed:\n{out}", args.join(" "));
    out.stdout
}

fn write(path: &Path, content: &str) {
    fs::write(path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// One call containerd made to academy, as the recorder logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCall {
    pub command: String,
    pub netns: String,
    pub prev_result: bool,
    pub args: String,
}

/// Serializes runs of the same CRI test across processes, like the other tests that
/// share a machine-wide resource (containerd's shims under /run/containerd).
fn lock(tag: &str) -> Flock<fs::File> {
    lock_file(&format!("/run/academy-cri-{tag}.lock"))
}

pub struct Containerd {
    /// containerd's folder, inside the lab's.
    pub dir: PathBuf,
    child: Option<Child>,
    /// Extra lines for the CRI plugin's [cni] table (e.g. conf_template).
    cni_extra: String,
    /// The pods' network: its name, bridge, subnet and academy's store (its data dir).
    /// Dropped after containerd's own cleanup, then the lock.
    pub lab: Lab,
    _lock: Flock<fs::File>,
}

impl Containerd {
    /// A private containerd with academy (behind the call recorder) and the reference
    /// loopback plugin in its CNI bin folder, the pause image imported, and no conflist
    /// yet: the test writes one with [`Containerd::write_conflist`] or lets a
    /// conf_template write it. Waits for the lock of `tag` first.
    pub fn start(tag: &str, cni_extra: &str) -> Containerd {
        let lock = lock(tag);
        let lab = Lab::new(tag);
        let dir = lab.root.join("containerd");
        for sub in ["bin", "net.d", "image/layer", "stubs", "logs"] {
            fs::create_dir_all(dir.join(sub)).expect("create the test folder");
        }
        let mut c = Containerd {
            dir,
            child: None,
            cni_extra: cni_extra.to_string(),
            lab,
            _lock: lock,
        };
        c.install_plugins();
        c.generate_stubs();
        c.write_config();
        c.spawn();
        c.import_pause_image();
        c
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    pub fn conf_dir(&self) -> PathBuf {
        self.dir.join("net.d")
    }

    /// academy's dataDir for this test: the lab's, so the lab's store readers apply.
    pub fn store(&self) -> &Path {
        &self.lab.data_dir
    }

    fn install_plugins(&self) {
        let bin = self.dir.join("bin");
        let recorder = RECORDER
            .replace("@LOG@", &self.dir.join("calls.log").display().to_string())
            .replace("@ACADEMY@", env!("CARGO_BIN_EXE_academy"));
        write(&bin.join("academy"), &recorder);
        fs::set_permissions(bin.join("academy"), fs::Permissions::from_mode(0o755)).unwrap();
        // libcni's loopback network (containerd adds it to every pod) runs this binary.
        // make setup installs it.
        copy_executable("/opt/cni/lab-bin/loopback", bin.join("loopback"));
    }

    fn generate_stubs(&self) {
        must(
            "protoc",
            &[
                &format!("-I{CLIENT_DIR}"),
                &format!("--python_out={}", self.dir.join("stubs").display()),
                &format!("{CLIENT_DIR}/api.proto"),
            ],
        );
    }

    fn write_config(&self) {
        let d = self.dir.display();
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
# opt writes to /opt/containerd; the others are snapshotters this test does not use.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd-ttrpc.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/bin"
    conf_dir = "{d}/net.d"
    max_conf_num = 1
{extra}
"#,
            extra = self.cni_extra
        );
        write(&self.dir.join("config.toml"), &config);
    }

    /// Starts containerd and waits until its CRI answers (Version).
    fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("{e}");
        }
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("logs/containerd.log"))
            .map_err(|e| format!("containerd log: {e}"))?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start containerd (make setup installs it): {e}"))?;
        self.child = Some(child);
        let t0 = Instant::now();
        loop {
            if self.socket().exists() && self.try_cri(&["version"]).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                self.child = None;
                return Err(format!(
                    "containerd exited at start ({status}):\n{}",
                    self.log_tail()
                ));
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "containerd's CRI did not answer within 60 s:\n{}",
                    self.log_tail()
                ));
            }
            sleep(Duration::from_millis(100));
        }
    }

    /// Stops containerd by its PID (SIGTERM, then SIGKILL after 20 s) and waits for it.
    pub fn stop_daemon(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // The PID of a child this guard spawned and has not reaped.
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let t0 = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// containerd stopped and started again on the same root and state: what a node
    /// sees when containerd is upgraded or crashes. The shims and pods keep running.
    pub fn restart(&mut self) {
        self.stop_daemon();
        self.spawn();
    }

    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("logs/containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn import_pause_image(&self) {
        let img = self.dir.join("image");
        let path = |p: &Path| p.to_str().expect("a UTF-8 test folder").to_string();
        let (layer, layer_tar) = (path(&img.join("layer")), path(&img.join("layer.tar")));
        let source = self.dir.join("pause.c");
        write(&source, PAUSE_C);
        must(
            "gcc",
            &[
                "-static",
                "-Os",
                "-o",
                &format!("{layer}/pause"),
                &path(&source),
            ],
        );
        must(
            "tar",
            &[
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "-C",
                &layer,
                "-cf",
                &layer_tar,
                "pause",
            ],
        );
        let digest = must("sha256sum", &[&layer_tar]);
        let digest = digest.split_whitespace().next().expect("sha256sum output");
        let config = serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": { "Entrypoint": ["/pause"] },
            "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{digest}")] },
        });
        write(&img.join("config.json"), &config.to_string());
        let manifest = serde_json::json!([{
            "Config": "config.json", "RepoTags": [PAUSE_IMAGE], "Layers": ["layer.tar"],
        }]);
        write(&img.join("manifest.json"), &manifest.to_string());
        let archive = path(&self.dir.join("pause-image.tar"));
        must(
            "tar",
            &[
                "-C",
                &path(&img),
                "-cf",
                &archive,
                "manifest.json",
                "config.json",
                "layer.tar",
            ],
        );
        must(
            "ctr",
            &[
                "-a",
                &path(&self.socket()),
                "-n",
                "k8s.io",
                "images",
                "import",
                &archive,
            ],
        );
    }

    /// A conflist in containerd's conf_dir, written as an installer must: a temp file
    /// inside the folder, then a rename (containerd 1.6 ignores files moved in).
    pub fn write_conflist(&self, conflist: &Value) {
        let tmp = self.conf_dir().join(".10-academy.conflist.tmp");
        write(&tmp, &serde_json::to_string_pretty(conflist).unwrap());
        fs::rename(&tmp, self.conf_dir().join("10-academy.conflist")).expect("rename conflist");
    }

    /// One CRI call through the Python client: Ok(JSON answer) or Err(the gRPC error's
    /// JSON, or the client's own output when it failed otherwise).
    pub fn try_cri(&self, args: &[&str]) -> Result<Value, String> {
        self.invoke(args).0
    }

    /// [`Containerd::cri`] and how long the gRPC call itself took, in seconds (the
    /// client's start-up, hundreds of ms on a loaded machine, left out).
    pub fn timed_cri(&self, args: &[&str]) -> (Value, f64) {
        let (answer, seconds) = self.invoke(args);
        let answer =
            answer.unwrap_or_else(|e| panic!("CRI {args:?} failed: {e}\n{}", self.log_tail()));
        (
            answer,
            seconds.expect("the client reports the call's duration"),
        )
    }

    fn invoke(&self, args: &[&str]) -> (Result<Value, String>, Option<f64>) {
        let (socket, stubs) = (self.socket(), self.dir.join("stubs"));
        let mut all = vec![
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/cri/cri_client.py"),
            "--socket",
            socket.to_str().unwrap(),
            "--stubs",
            stubs.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let out = run(PYTHON, &all, &[]);
        let seconds = out
            .stderr
            .lines()
            .rev()
            .find_map(|l| l.split_once(" seconds=")?.1.parse::<f64>().ok());
        let answer = match serde_json::from_str::<Value>(out.stdout.trim()) {
            Ok(v) if out.code == 0 => Ok(v),
            Ok(v) if v.get("error").is_some() => Err(v.to_string()),
            _ => Err(format!("cri_client.py {args:?}:\n{out}")),
        };
        (answer, seconds)
    }

    pub fn cri(&self, args: &[&str]) -> Value {
        self.try_cri(args)
            .unwrap_or_else(|e| panic!("CRI {args:?} failed: {e}\n{}", self.log_tail()))
    }

    /// RunPodSandbox for pod `name` (namespace "default"); the sandbox id.
    pub fn run_pod(&self, name: &str) -> String {
        let uid = format!("uid-{name}");
        self.cri(&["run", name, &uid, "default"])["id"]
            .as_str()
            .expect("sandbox id")
            .to_string()
    }

    pub fn status(&self, id: &str) -> Value {
        self.cri(&["status", id])
    }

    pub fn stop_and_remove(&self, id: &str) {
        self.cri(&["stop", id]);
        self.cri(&["remove", id]);
    }

    pub fn sandboxes(&self) -> Vec<String> {
        match self.try_cri(&["list"]) {
            Ok(Value::Array(ids)) => ids
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Every call containerd made to academy so far, in order.
    pub fn plugin_calls(&self) -> Vec<PluginCall> {
        fs::read_to_string(self.dir.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.splitn(4, '\t').collect();
                PluginCall {
                    command: f[0].to_string(),
                    netns: f.get(1).unwrap_or(&"").to_string(),
                    prev_result: f.get(2) == Some(&"yes"),
                    args: f.get(3).unwrap_or(&"").to_string(),
                }
            })
            .collect()
    }

    /// academy's reservations for the network: address -> holder (container id).
    pub fn reservations(&self) -> BTreeMap<String, String> {
        address_files(&self.lab)
            .into_iter()
            .map(|addr| {
                let holder = holder_of(&self.lab, &addr).unwrap_or_default();
                let cid = holder.split("\r\n").next().unwrap_or("").to_string();
                (addr, cid)
            })
            .collect()
    }

    /// academy's holder index files for the network (one per attachment).
    pub fn holder_files(&self) -> Vec<String> {
        self.lab
            .reservations()
            .into_iter()
            .filter(|r| r.starts_with("holders/"))
            .collect()
    }

    /// Host veths academy labelled for this network (alias academy:<network>:...).
    pub fn academy_veths(&self) -> Vec<String> {
        self.lab.lab_veths()
    }

    /// Ports of the test's bridge.
    pub fn bridge_ports(&self) -> Vec<String> {
        bridge_ports(&self.lab.bridge)
    }

    /// libcni's cached results for this network (containerd writes them on ADD).
    pub fn cached_results(&self) -> BTreeSet<String> {
        self.lab.cached_results()
    }

    /// PIDs of containerd shims serving this containerd (their -address is our socket).
    fn own_shims(&self) -> Vec<i32> {
        let socket = self.socket().display().to_string();
        fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                args.first()
                    .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"))
                    && args.contains(&socket.as_bytes())
            })
            .collect()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Sandboxes first, through the CRI, so containerd runs academy's DELs. A test that
        // failed mid-restart may have left containerd down: bring it back for this.
        if self.child.is_none() && self.dir.join("config.toml").exists() {
            if let Err(e) = self.try_spawn() {
                eprintln!("cri cleanup: containerd did not restart ({e}); removing by hand");
            }
        }
        if self.child.is_some() {
            for id in self.sandboxes() {
                let _ = self.try_cri(&["stop", &id]);
                let _ = self.try_cri(&["remove", &id]);
            }
        }
        self.stop_daemon();
        for pid in self.own_shims() {
            // A shim of this test's containerd, found by its socket path.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        unmount_below(&self.dir);
        // The lab's guard (a field, dropped next) removes the rest: veths, bridge,
        // masquerade, cached results, folders.
    }
}
