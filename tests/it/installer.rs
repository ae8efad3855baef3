//! The node installer image: `Containerfile` (FROM scratch, the static release binary)
//! built with podman from this repository alone (no registry), then run the way the
//! DaemonSet's init container runs it (deploy/kubernetes/academy.yaml), with folders of
//! this test bind-mounted where the host's /opt/cni/bin and /etc/cni/net.d would be.
//!
//! Needs root, `make setup` (podman, runc) and `make build` (the image holds
//! target/release/academy, the static binary; `make test` builds it first). podman runs
//! on its own stores and config under the test folder (--root, --runroot,
//! CONTAINERS_CONF) with no network, so the machine's images and containers are not
//! read or changed. A Drop guard removes the image, the test folder and any process the
//! test started, also when an assertion fails.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::SystemTime;

use nix::fcntl::Flock;

use crate::common::*;

const IMAGE: &str = "localhost/academy-installer:test";
/// Serialises the tests that build the image, in this process and across processes.
const LOCK: &str = "/run/academy-installer-test.lock";
const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn release_binary() -> PathBuf {
    Path::new(REPO).join("target/release/academy")
}

/// The static release binary, and not older than the sources it is built from: the
/// image must hold the code under test.
fn fresh_release_binary() -> Vec<u8> {
    let bin = release_binary();
    let built = fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}; run `make build` first", bin.display()));
    let newest_source = newest_mtime(&Path::new(REPO).join("src"))
        .max(newest_mtime(&Path::new(REPO).join("Cargo.toml")))
        .max(newest_mtime(&Path::new(REPO).join("Cargo.lock")));
    assert!(
        built >= newest_source,
        "{} is older than the sources; run `make build` (make test does)",
        bin.display()
    );
    let ldd = run("ldd", &[bin.to_str().unwrap()], &[]);
    let says = ldd.all();
    assert!(
        says.contains("statically linked") || says.contains("not a dynamic executable"),
        "{} is not static, so it cannot run in a FROM scratch image; build it with `make build`:\n{says}",
        bin.display()
    );
    fs::read(&bin).unwrap()
}

fn newest_mtime(path: &Path) -> SystemTime {
    let meta = fs::metadata(path).unwrap();
    let mut newest = meta.modified().unwrap();
    if meta.is_dir() {
        for entry in fs::read_dir(path).unwrap().flatten() {
            newest = newest.max(newest_mtime(&entry.path()));
        }
    }
    newest
}

/// This test's podman (own stores and config, see [`PrivatePodman`]), the host's two
/// CNI folders as test folders, and the ConfigMap's folder.
struct Installer {
    podman: PrivatePodman,
    host_bin: PathBuf,
    host_conf: PathBuf,
    config: PathBuf,
    /// Processes the test started (stand-ins for a runtime executing the old binary).
    children: Vec<Child>,
    _lock: Flock<fs::File>,
}

impl Installer {
    fn new() -> Installer {
        let lock = lock_file(LOCK);
        let dir = std::env::temp_dir().join(Slot::take().name("academy-it", "installer"));
        let _ = fs::remove_dir_all(&dir);
        let p = Installer {
            host_bin: dir.join("host/opt/cni/bin"),
            host_conf: dir.join("host/etc/cni/net.d"),
            config: dir.join("config"),
            podman: PrivatePodman { dir },
            children: Vec::new(),
            _lock: lock,
        };
        let dir = &p.podman.dir;
        for d in [&p.host_bin, &p.host_conf, &p.config, &dir.join("tmp")] {
            fs::create_dir_all(d).unwrap();
        }
        // What this VM needs (as the podman module found): runc with cgroupfs, events in
        // a file, ulimits no higher than the hard limits here.
        let d = dir.display();
        fs::write(
            dir.join("containers.conf"),
            format!(
                r#"[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{d}/events.log"
tmp_dir = "{d}/tmp"
volume_path = "{d}/volumes"
"#
            ),
        )
        .unwrap();
        p
    }

    /// The image, built from this repository's Containerfile (no registry).
    fn build_image(&self) {
        let containerfile = format!("{REPO}/Containerfile");
        self.podman
            .must(&["build", "-q", "-t", IMAGE, "-f", &containerfile, REPO]);
    }

    /// The DaemonSet's init container: the image with the host folders mounted where
    /// deploy/kubernetes/academy.yaml mounts them, and ARGS (none: the image's CMD).
    fn run_installer(&self, args: &[&str]) -> Out {
        let mounts = [
            format!("{}:/host/opt/cni/bin", self.host_bin.display()),
            format!("{}:/host/etc/cni/net.d", self.host_conf.display()),
            format!("{}:/config:ro", self.config.display()),
        ];
        let mut all = vec!["run", "--rm", "--network", "none"];
        for m in &mounts {
            all.extend(["-v", m]);
        }
        all.push(IMAGE);
        all.extend(args);
        self.podman.run(&all)
    }
}

impl Drop for Installer {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.podman.remove_all();
    }
}

fn must_succeed(out: Out, what: &str) -> String {
    assert_eq!(out.code, 0, "{what}:\n{out}");
    out.stdout
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn installer_image_from_scratch_installs_binary_and_template_then_is_idempotent() {
    let binary = fresh_release_binary();
    let p = Installer::new();
    p.build_image();
    // FROM scratch: the image is the binary and nothing else.
    let size = must_succeed(
        p.podman
            .run(&["image", "inspect", "--format", "{{.Size}}", IMAGE]),
        "inspect",
    );
    let size: u64 = size.trim().parse().unwrap();
    assert!(
        size < binary.len() as u64 + 64 * 1024,
        "image is {size} bytes for a {}-byte binary",
        binary.len()
    );

    let out = must_succeed(p.run_installer(&[]), "the installer, first run");
    assert_eq!(
        out,
        "installed /host/opt/cni/bin/academy\ninstalled /host/etc/cni/net.d/academy.conflist.tmpl\n"
    );
    let installed = p.host_bin.join("academy");
    assert_eq!(
        fs::read(&installed).unwrap(),
        binary,
        "the installed binary"
    );
    assert_eq!(fs::metadata(&installed).unwrap().mode() & 0o7777, 0o755);
    let template = p.host_conf.join("academy.conflist.tmpl");
    assert_eq!(
        fs::read_to_string(&template).unwrap(),
        include_str!("../../conflists/containerd-template.conflist.tmpl")
    );
    assert_eq!(names_in(&p.host_bin), ["academy"], "temp files left");
    assert_eq!(
        names_in(&p.host_conf),
        ["academy.conflist.tmpl"],
        "temp files left"
    );

    // The host can run what was installed, as a runtime would.
    let version = Call::bare()
        .env("CNI_COMMAND", "VERSION")
        .spawn(installed.to_str().unwrap(), &[]);
    assert!(version.stdout.contains("supportedVersions"), "{version}");

    // Every pod restart runs the installer again: it must change nothing.
    let inodes = (
        fs::metadata(&installed).unwrap().ino(),
        fs::metadata(&template).unwrap().ino(),
    );
    let out = must_succeed(p.run_installer(&[]), "the installer, second run");
    assert_eq!(
        out,
        "unchanged /host/opt/cni/bin/academy\nunchanged /host/etc/cni/net.d/academy.conflist.tmpl\n"
    );
    assert_eq!(
        inodes,
        (
            fs::metadata(&installed).unwrap().ino(),
            fs::metadata(&template).unwrap().ino()
        ),
        "a second run rewrote a current file"
    );
}

/// Spawns `cmd`, again while exec answers ETXTBSY: another test thread's fork in the
/// instant the copy's write descriptor was open gives its child a copy of that
/// descriptor until the child execs (close-on-exec), and exec of a file open for writing
/// fails. A known race of every threaded program that writes then runs a file.
fn spawn_retrying_etxtbsy(cmd: &mut Command) -> Child {
    for _ in 0..50 {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => return other.expect("spawn the stand-in binary"),
        }
    }
    panic!("exec kept failing with ETXTBSY for a second");
}

#[test]
fn installer_replaces_a_binary_being_executed_and_a_conflist_in_place() {
    let binary = fresh_release_binary();
    let mut p = Installer::new();
    p.build_image();

    // An old "academy" that a runtime is executing right now (a sleep stands in for a
    // long ADD). Writing into it would fail with ETXTBSY; replacing it must not.
    let installed = p.host_bin.join("academy");
    fs::copy("/bin/sleep", &installed).unwrap();
    let old_inode = fs::metadata(&installed).unwrap().ino();
    let running = spawn_retrying_etxtbsy(Command::new(&installed).arg("120"));
    let pid = running.id();
    p.children.push(running);

    let conflist = r#"{ "cniVersion": "1.0.0", "name": "k8s-pod-network",
  "plugins": [ { "type": "academy", "bridge": "cni0", "isGateway": true,
                 "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.244.1.0/24" }]] } } ] }
"#;
    fs::write(p.config.join("10-academy.conflist"), conflist).unwrap();
    let args = [
        "--bin-dir",
        "/host/opt/cni/bin",
        "--conf-dir",
        "/host/etc/cni/net.d",
        "--conflist",
        "/config/10-academy.conflist",
    ];
    let out = must_succeed(
        p.run_installer(&args),
        "the installer over a running binary",
    );
    assert_eq!(
        out,
        "installed /host/opt/cni/bin/academy\ninstalled /host/etc/cni/net.d/10-academy.conflist\n"
    );
    assert_eq!(fs::read(&installed).unwrap(), binary, "the new binary");
    assert_ne!(
        fs::metadata(&installed).unwrap().ino(),
        old_inode,
        "replaced, not rewritten"
    );
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(
        exe.to_string_lossy().ends_with("(deleted)"),
        "the running process should still execute the old, now unlinked, file: {}",
        exe.display()
    );
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "the running old binary died"
    );
    let conf = p.host_conf.join("10-academy.conflist");
    assert_eq!(fs::read_to_string(&conf).unwrap(), conflist);

    // A changed ConfigMap: the conflist is replaced by a rename inside the folder.
    let conf_inode = fs::metadata(&conf).unwrap().ino();
    let changed = conflist.replace("10.244.1.0/24", "10.244.2.0/24");
    fs::write(p.config.join("10-academy.conflist"), &changed).unwrap();
    let out = must_succeed(
        p.run_installer(&args),
        "the installer with a changed conflist",
    );
    assert_eq!(
        out,
        "unchanged /host/opt/cni/bin/academy\ninstalled /host/etc/cni/net.d/10-academy.conflist\n"
    );
    assert_eq!(fs::read_to_string(&conf).unwrap(), changed);
    assert_ne!(fs::metadata(&conf).unwrap().ino(), conf_inode);
    assert_eq!(
        names_in(&p.host_conf),
        ["10-academy.conflist"],
        "temp files left"
    );

    // A broken conflist changes nothing, and says what is wrong.
    fs::write(p.config.join("10-academy.conflist"), "{ not json").unwrap();
    let out = p.run_installer(&args);
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stderr.contains("is not JSON"), "{out}");
    assert_eq!(fs::read_to_string(&conf).unwrap(), changed);
}

/// deploy/kubernetes/academy.yaml as JSON (Debian's python3-yaml reads it).
fn manifest() -> serde_json::Value {
    let path = Path::new(REPO).join("deploy/kubernetes/academy.yaml");
    let out = run(
        "/usr/bin/python3",
        &[
            "-c",
            "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))",
            path.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(
        out.code,
        0,
        "{} (make setup installs python3-yaml):\n{out}",
        path.display()
    );
    let docs = out.json();
    assert_eq!(docs.as_array().map(Vec::len), Some(1), "one object: {docs}");
    docs[0].clone()
}

/// The DaemonSet runs the installer the way the tests above do: the image's own CMD
/// (so the podman runs stand for it), into the host folders a runtime reads, on the
/// host network, on every node.
#[test]
fn installer_daemonset_mounts_the_host_cni_folders_the_image_writes() {
    let ds = manifest();
    assert_eq!(ds["kind"], "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostNetwork"], true,
        "the pod network needs academy first"
    );
    assert!(
        pod["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["operator"] == "Exists" && t.get("key").is_none()),
        "it must run on not-ready, tainted nodes too: {}",
        pod["tolerations"]
    );
    let init = &pod["initContainers"][0];
    let containerfile = fs::read_to_string(Path::new(REPO).join("Containerfile")).unwrap();
    let cmd = containerfile
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD line in Containerfile");
    let cmd: serde_json::Value = serde_json::from_str(cmd).expect("CMD in exec form");
    assert_eq!(init["args"], cmd, "the DaemonSet's args vs the image's CMD");

    // Each folder the args name is mounted from the host path a runtime reads.
    let host_path = |mount: &str| -> String {
        let volume = init["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == mount)
            .unwrap_or_else(|| panic!("nothing mounted at {mount}"))["name"]
            .clone();
        let v = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == volume)
            .unwrap_or_else(|| panic!("no volume {volume}"));
        v["hostPath"]["path"].as_str().unwrap().to_string()
    };
    let args: Vec<&str> = cmd
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let after = |flag: &str| args[args.iter().position(|a| *a == flag).unwrap() + 1];
    assert_eq!(host_path(after("--bin-dir")), "/opt/cni/bin");
    assert_eq!(host_path(after("--conf-dir")), "/etc/cni/net.d");
}

/// `academy install ... | head` must not turn a closed stdout into a panic: the files
/// were installed, and the exit status says so.
#[test]
fn installer_output_into_a_closed_pipe_is_not_a_failure() {
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    drop(read_end); // every write to write_end now fails with EPIPE
    let dir = std::env::temp_dir().join(Slot::take().name("academy-it", "installer-pipe"));
    fs::create_dir_all(&dir).unwrap();
    let out = Out::from(
        Command::new(plugin())
            .args(["install", "--bin-dir"])
            .arg(&dir)
            .env_remove("CNI_COMMAND")
            .stdout(std::process::Stdio::from(write_end))
            .output()
            .unwrap(),
    );
    let installed = dir.join("academy").exists();
    fs::remove_dir_all(&dir).unwrap();
    assert!(installed, "{out}");
    assert_eq!(out.code, 0, "{out}");
    assert_no_panic(&out, "academy install into a closed pipe");
}
