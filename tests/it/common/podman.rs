//! A podman of a test's own: image and container stores (--root, --runroot) and config
//! (CONTAINERS_CONF, HOME) in one test folder, each command under `timeout`, so the
//! machine's podman config, networks, images and containers are not read or changed.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use nix::sys::resource::{getrlimit, Resource};

use super::host::unmount_below;
use super::process::{run, Out};

/// The image every podman test runs, made by [`PrivatePodman::build_image`].
pub const IMAGE: &str = "localhost/academy-podman-busybox:test";
/// What the podman tests run besides academy; `make setup` installs them.
const PACKAGES: [&str; 3] = ["podman", "runc", "busybox-static"];
/// Serializes runs of the podman tests on one machine, also across processes: podman's
/// network namespaces share /run/netns, and the tests compare what is there before and
/// after.
pub const PODMAN_LOCK: &str = "/run/academy-podman-test.lock";

/// podman, runc and busybox-static, or a failure that says to run `make setup`.
pub fn require_podman_packages() {
    let installed = |p: &str| {
        run("dpkg-query", &["-W", "-f=${Status}", p], &[])
            .stdout
            .contains("install ok installed")
    };
    let missing: Vec<&str> = PACKAGES.into_iter().filter(|p| !installed(p)).collect();
    assert!(
        missing.is_empty(),
        "the podman test needs {missing:?} (podman 4.3 with the CNI backend, runc, a static \
         busybox for the image): run `make setup`"
    );
}

/// Podman's network namespaces (podman 4 names them netns-<uuid>, older ones cni-<uuid>).
pub fn podman_netns() -> BTreeSet<String> {
    let Ok(dir) = fs::read_dir("/run/netns") else {
        return BTreeSet::new();
    };
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("netns-") || n.starts_with("cni-"))
        .collect()
}

/// Seconds one podman command may take before `timeout` ends it.
const STEP_TIMEOUT: &str = "180";

pub struct PrivatePodman {
    /// The test folder: stores under root/ and runroot/, config in containers.conf.
    pub dir: PathBuf,
}

impl PrivatePodman {
    /// `podman ARGS` with this folder's stores and config. The environment is only PATH,
    /// CONTAINERS_CONF and a HOME inside the folder.
    pub fn run(&self, args: &[&str]) -> Out {
        let (root, runroot) = (self.dir.join("root"), self.dir.join("runroot"));
        let mut all = vec![
            "-k",
            "10",
            STEP_TIMEOUT,
            "podman",
            "--root",
            root.to_str().unwrap(),
            "--runroot",
            runroot.to_str().unwrap(),
            "--storage-driver",
            "vfs",
        ];
        all.extend_from_slice(args);
        let conf = self.dir.join("containers.conf");
        let env = [
            ("CONTAINERS_CONF", conf.to_str().unwrap()),
            ("HOME", self.dir.to_str().unwrap()),
        ];
        run("timeout", &all, &env)
    }

    /// `podman ARGS`, which must succeed; its stdout.
    pub fn must(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.code, 0, "podman {} failed:\n{out}", args.join(" "));
        out.stdout
    }

    /// Writes the containers.conf of this podman: the CNI backend with plugins from
    /// `plugins` and network configs in `confs`, everything else in the folder.
    pub fn write_conf(&self, plugins: &Path, confs: &Path) {
        // Capped below this process's hard limits: podman's defaults for root (nofile
        // 1048576, nproc from pid_max) make runc's setrlimit fail with EPERM without
        // CAP_SYS_RESOURCE.
        let cap = |resource, wanted: u64| {
            let (_, hard) = getrlimit(resource).expect("getrlimit");
            wanted.min(hard)
        };
        let nofile = cap(Resource::RLIMIT_NOFILE, 1024);
        let nproc = cap(Resource::RLIMIT_NPROC, 1024);
        let dir = self.dir.display();
        let conf = format!(
            r#"# Written by academy's tests; read only through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]

[network]
network_backend = "cni"
cni_plugin_dirs = ["{plugins}"]
network_config_dir = "{confs}"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{dir}/events.log"
tmp_dir = "{dir}/tmp"
volume_path = "{dir}/volumes"
"#,
            plugins = plugins.display(),
            confs = confs.display(),
        );
        fs::write(self.dir.join("containers.conf"), conf).expect("write containers.conf");
    }

    /// A busybox image made locally (no registry is reachable): `podman import` of a
    /// rootfs tarball holding the static busybox and the applets the tests call.
    pub fn build_image(&self) {
        let rootfs = self.dir.join("rootfs");
        fs::create_dir_all(rootfs.join("bin")).expect("rootfs");
        fs::copy("/bin/busybox", rootfs.join("bin/busybox"))
            .expect("copy /bin/busybox (busybox-static)");
        for applet in ["sh", "ip", "ping", "sleep", "cat", "true", "nc", "echo"] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))
                .expect("symlink");
        }
        let tarball = self.dir.join("rootfs.tar");
        let out = run(
            "tar",
            &[
                "-C",
                rootfs.to_str().unwrap(),
                "-cf",
                tarball.to_str().unwrap(),
                ".",
            ],
            &[],
        );
        assert_eq!(out.code, 0, "tar of the image's rootfs failed:\n{out}");
        self.must(&["import", tarball.to_str().expect("utf-8 path"), IMAGE]);
    }

    /// Every container and image of these stores, mounts left in the folder (shm of a
    /// killed container), and the folder. Never panics: it runs from Drop guards.
    pub fn remove_all(&self) {
        let _ = self.run(&["rm", "-f", "-a", "-t", "0"]);
        let _ = self.run(&["rmi", "-a", "-f"]);
        unmount_below(&self.dir);
        let _ = fs::remove_dir_all(&self.dir);
    }
}
