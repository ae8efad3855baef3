//! A podman of a test's own: image and container stores (--root, --runroot) and config
//! (CONTAINERS_CONF, HOME) in one test folder, each command under `timeout`, so the
//! machine's podman config, networks, images and containers are not read or changed.

use std::fs;
use std::path::PathBuf;

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

    /// Every container and image of these stores, mounts left in the folder (shm of a
    /// killed container), and the folder. Never panics: it runs from Drop guards.
    pub fn remove_all(&self) {
        let _ = self.run(&["rm", "-f", "-a", "-t", "0"]);
        let _ = self.run(&["rmi", "-a", "-f"]);
        unmount_below(&self.dir);
        let _ = fs::remove_dir_all(&self.dir);
    }
}
