//! A podman of a test's own: image and container stores (--root, --runroot) and config
//! (CONTAINERS_CONF, HOME) in one test folder, each command under `timeout`, so the
//! machine's podman config, networks, images and containers are not read or changed.

use std::fs;
use std::path::{Path, PathBuf};

use nix::sys::resource::{getrlimit, Resource};

use super::host::unmount_below;
use super::process::{run, Out};

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

    /// Writes the folder's containers.conf: the CNI backend with `plugins` and `confs`
    /// as its folders, runc, cgroupfs, and ulimits capped below this process's hard
    /// limits (podman's defaults for root make runc's setrlimit fail with EPERM
    /// without CAP_SYS_RESOURCE).
    pub fn configure(&self, plugins: &Path, confs: &Path) {
        for d in [plugins, confs, &self.dir.join("tmp")] {
            fs::create_dir_all(d).expect("create test folder");
        }
        let cap = |resource, wanted: u64| wanted.min(getrlimit(resource).expect("getrlimit").1);
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

    /// Imports `image`: a rootfs holding the static busybox (busybox-static) and
    /// `applets`, as no registry is reachable.
    pub fn import_busybox(&self, image: &str, applets: &[&str]) {
        let rootfs = self.dir.join("rootfs");
        fs::create_dir_all(rootfs.join("bin")).expect("rootfs");
        fs::copy("/bin/busybox", rootfs.join("bin/busybox"))
            .expect("copy /bin/busybox (busybox-static)");
        for applet in applets {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))
                .expect("symlink");
        }
        let tarball = self.dir.join("rootfs.tar");
        let (root, tar) = (rootfs.to_str().unwrap(), tarball.to_str().unwrap());
        let out = run("tar", &["-C", root, "-cf", tar, "."], &[]);
        assert_eq!(out.code, 0, "tar of the image's rootfs failed:\n{out}");
        self.must(&["import", tar, image]);
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
