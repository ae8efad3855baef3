//! containerd 1.6 as one node's runtime: started inside the node's netns and with the
//! node's own /var/lib/cni and /run/academy ([`ClusterNode::command`]), so the academy it
//! runs for each pod sees the node as its host.
//! Its own root, state, sockets, runc root and CNI folders are under the node's folder;
//! `conf_template` is the node's `academy.conflist.tmpl`, which `academy install
//! --template --cluster-cidr` writes there. Driven through tests/it/cri/cri_client.py.
//!
//! cri/containerd.rs starts containerd in the host's netns and cannot be told otherwise,
//! hence this second launcher (same settings, same pause image recipe, same client).
//! containerd's mounts (pod netns files, rootfs) are made in the private mount namespace
//! it runs in, so the test reaches a pod's netns through its pause process
//! (`/proc/PID/ns/net`); that namespace and its mounts go with the last of its processes.
//!
//! Drop, also after a failed assertion: every sandbox stopped and removed through the CRI
//! (so academy's DELs run), containerd stopped by its PID, then this containerd's shims
//! (by the socket path in their command line) and the pause processes the test saw (by
//! PID, if still the pause) are killed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use super::ClusterNode;
use crate::common::*;

const PAUSE_IMAGE: &str = "localhost/academy-cluster-pause:test";
/// Debian's python3: it has python3-grpcio and python3-protobuf (scripts/setup.sh).
const PYTHON: &str = "/usr/bin/python3";
const CLIENT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/cri");

const PAUSE_C: &str = r#"#include <signal.h>
#include <unistd.h>
static void done(int sig) { (void)sig; _exit(0); }
int main(void) {
  signal(SIGTERM, done);
  signal(SIGINT, done);
  for (;;) pause();
}
"#;

fn must(program: &str, args: &[&str]) -> String {
    let out = run(program, args, &[]);
    assert_eq!(out.code, 0, "{program} {} failed:\n{out}", args.join(" "));
    out.stdout
}

fn text(p: &Path) -> String {
    p.to_str().expect("a UTF-8 test folder").to_string()
}

/// A pod as the CRI reports it.
#[derive(Debug, Clone)]
pub struct CriPod {
    pub id: String,
    pub ip: String,
    pub pid: i32,
}

impl CriPod {
    /// The pod's netns, through its pause process (containerd's netns file is in its
    /// own mount namespace).
    pub fn netns(&self) -> String {
        format!("/proc/{}/ns/net", self.pid)
    }
}

pub struct NodeContainerd {
    pub dir: PathBuf,
    child: Option<Child>,
    /// Pause PIDs seen in sandbox statuses: killed in Drop if still running.
    pauses: Mutex<Vec<i32>>,
}

impl NodeContainerd {
    /// containerd in `node`, CNI bin and conf folders the node's, conf_template the
    /// node's `academy.conflist.tmpl` (it must exist before UpdateRuntimeConfig).
    pub fn start(node: &ClusterNode) -> NodeContainerd {
        let dir = node.root.join("containerd");
        for sub in ["image/layer", "stubs"] {
            fs::create_dir_all(dir.join(sub)).expect("create the containerd folder");
        }
        let mut c = NodeContainerd {
            dir,
            child: None,
            pauses: Mutex::new(Vec::new()),
        };
        must(
            "protoc",
            &[
                &format!("-I{CLIENT_DIR}"),
                &format!("--python_out={}", text(&c.dir.join("stubs"))),
                &format!("{CLIENT_DIR}/api.proto"),
            ],
        );
        c.write_config(node);
        c.spawn(node);
        c.import_pause_image();
        c
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn write_config(&self, node: &ClusterNode) {
        let d = self.dir.display();
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
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
    bin_dir = "{bin}"
    conf_dir = "{conf}"
    max_conf_num = 1
    conf_template = "{conf}/academy.conflist.tmpl"
"#,
            bin = node.bin().display(),
            conf = node.conf().display(),
        );
        fs::write(self.dir.join("config.toml"), config).unwrap();
    }

    fn spawn(&mut self, node: &ClusterNode) {
        let log = fs::File::create(self.dir.join("containerd.log")).unwrap();
        let config = text(&self.dir.join("config.toml"));
        let child = node
            .command("containerd", &["--config", &config])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start containerd (make setup installs it)");
        self.child = Some(child);
        let t0 = Instant::now();
        loop {
            if self.socket().exists() && self.try_cri(&["version"]).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.as_mut().unwrap().try_wait() {
                self.child = None;
                panic!(
                    "containerd exited at start ({status}):\n{}",
                    self.log_tail()
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "containerd's CRI did not answer within 60 s:\n{}",
                self.log_tail()
            );
            sleep(Duration::from_millis(100));
        }
    }

    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The pause image, a static C sleeper, imported under `sandbox_image` (no registry).
    fn import_pause_image(&self) {
        let img = self.dir.join("image");
        let (layer, layer_tar) = (text(&img.join("layer")), text(&img.join("layer.tar")));
        let source = self.dir.join("pause.c");
        fs::write(&source, PAUSE_C).unwrap();
        let pause = format!("{layer}/pause");
        must("gcc", &["-static", "-Os", "-o", &pause, &text(&source)]);
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
        let digest = digest.split_whitespace().next().unwrap();
        let config = serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": { "Entrypoint": ["/pause"] },
            "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{digest}")] },
        });
        fs::write(img.join("config.json"), config.to_string()).unwrap();
        let manifest = serde_json::json!([{
            "Config": "config.json", "RepoTags": [PAUSE_IMAGE], "Layers": ["layer.tar"],
        }]);
        fs::write(img.join("manifest.json"), manifest.to_string()).unwrap();
        let archive = text(&self.dir.join("pause-image.tar"));
        let img = text(&img);
        let files = ["manifest.json", "config.json", "layer.tar"];
        let mut args = vec!["-C", img.as_str(), "-cf", archive.as_str()];
        args.extend(files);
        must("tar", &args);
        let socket = text(&self.socket());
        must(
            "ctr",
            &["-a", &socket, "-n", "k8s.io", "images", "import", &archive],
        );
    }

    /// One CRI call: Ok(the answer) or Err(the error).
    pub fn try_cri(&self, args: &[&str]) -> Result<Value, String> {
        let (socket, stubs) = (text(&self.socket()), text(&self.dir.join("stubs")));
        let client = format!("{CLIENT_DIR}/cri_client.py");
        let mut all = vec![client.as_str(), "--socket", &socket, "--stubs", &stubs];
        all.extend_from_slice(args);
        let out = run(PYTHON, &all, &[]);
        match serde_json::from_str::<Value>(out.stdout.trim()) {
            Ok(v) if out.code == 0 => Ok(v),
            _ => Err(format!("cri_client.py {args:?}:\n{out}")),
        }
    }

    pub fn cri(&self, args: &[&str]) -> Value {
        self.try_cri(args)
            .unwrap_or_else(|e| panic!("CRI {args:?} failed: {e}\n{}", self.log_tail()))
    }

    /// RunPodSandbox for pod `name` with host ports ("HOST:CONTAINER", TCP), then its
    /// status: ready, with an address and a pause PID.
    pub fn run_pod(&self, name: &str, ports: &[&str]) -> CriPod {
        let uid = format!("uid-{name}");
        let mut args = vec!["run", name, &uid, "default"];
        args.extend_from_slice(ports);
        let id = self.cri(&args)["id"]
            .as_str()
            .expect("sandbox id")
            .to_string();
        let st = self.cri(&["status", &id]);
        assert_eq!(st["state"], "SANDBOX_READY", "{st}");
        let pid = st["pid"].as_i64().expect("pause pid") as i32;
        self.pauses.lock().unwrap().push(pid);
        CriPod {
            id,
            ip: st["ip"].as_str().expect("pod ip").to_string(),
            pid,
        }
    }

    pub fn stop_and_remove(&self, pod: &CriPod) {
        self.cri(&["stop", &pod.id]);
        self.cri(&["remove", &pod.id]);
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

    /// PIDs of the shims serving this containerd (their -address is our socket).
    fn own_shims(&self) -> Vec<i32> {
        let socket = text(&self.socket());
        pids_whose_cmdline(|args| {
            args.first()
                .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"))
                && args.contains(&socket.as_bytes())
        })
    }
}

/// PIDs of processes whose argv (split at NULs) satisfies `matches`.
fn pids_whose_cmdline(matches: impl Fn(&[&[u8]]) -> bool) -> Vec<i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            matches(&args)
        })
        .collect()
}

impl Drop for NodeContainerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            for id in self.sandboxes() {
                let _ = self.try_cri(&["stop", &id]);
                let _ = self.try_cri(&["remove", &id]);
            }
        }
        if let Some(mut child) = self.child.take() {
            // The PID of the containerd this guard spawned and has not reaped.
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
        for pid in self.own_shims() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for pid in self.pauses.lock().map(|p| p.clone()).unwrap_or_default() {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.starts_with(b"/pause\0") {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}
