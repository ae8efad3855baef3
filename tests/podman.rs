//! academy under a real runtime: Debian 12's podman 4.3 with the CNI network backend.
//!
//! What cnitool cannot show: podman discovering academy in a plugin folder, probing it
//! with VERSION, invoking ADD and DEL the way a runtime really does (DEL also from the
//! `podman container cleanup` process that conmon starts when a container exits on its
//! own, and DEL without prevResult after a failed ADD), and academy's error reaching the
//! user through podman's own output. A shim named `academy` in the plugin folder records
//! each call and runs the real binary, so the test can say who called and how.
//!
//! Needs root. Installs podman, runc and busybox-static from Debian's packages when
//! they are missing, and fails (never skips) when it cannot. podman's config comes from
//! CONTAINERS_CONF (a test-written containers.conf), its image and container stores
//! from --root/--runroot, its CNI configs from network_config_dir, all in one test
//! folder: the machine's own podman config, networks and images are not read or
//! changed. What podman 4.3 keeps in fixed machine-wide places is network namespaces
//! (/run/netns), libcni's result cache (/var/lib/cni/results) and an image blob-info
//! cache (/var/lib/containers/cache). A Drop guard removes the containers, the image,
//! the test folder, the bridges, academy's host veths, the test networks' cached
//! results and any network namespace the test left, also when an assertion fails.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The network the rounds run on: a /29, so .2 to .6 are the container addresses.
const NET: &str = "academy-podman";
const BRIDGE: &str = "acpod0";
const SUBNET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 202, 1, 0), 29);
const GATEWAY: &str = "10.202.1.1";

/// The network of the full-subnet case: a range of one address.
const FULL_NET: &str = "academy-podman-full";
const FULL_BRIDGE: &str = "acpod1";
const FULL_SUBNET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 202, 2, 0), 29);
const FULL_GATEWAY: &str = "10.202.2.1";
const FULL_ONLY: &str = "10.202.2.2";

const IMAGE: &str = "localhost/academy-podman-busybox:test";
const PACKAGES: [&str; 3] = ["podman", "runc", "busybox-static"];
/// Serializes runs of this test on one machine (the names above are fixed).
const LOCK: &str = "/run/academy-podman-test.lock";
/// Seconds one podman command may take before `timeout` ends it.
const STEP_TIMEOUT: &str = "180";

/// A container command that ends at once on SIGTERM (so `podman stop` needs no SIGKILL).
const IDLE: &str = "trap 'exit 0' TERM; sleep 600 & wait";

fn check_output(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command that must succeed and returns its stdout.
fn must(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = check_output(cmd);
    assert!(out.status.success(), "{shown} failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ip(args: &[&str]) -> Output {
    check_output(Command::new("ip").args(args))
}

fn package_installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .map(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).contains("install ok installed")
        })
        .unwrap_or(false)
}

fn apt_get(args: &[&str]) -> Output {
    check_output(
        Command::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=300"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// podman, runc and busybox-static from Debian's packages, when missing. Fails the test
/// with apt's own output when they cannot be installed.
fn ensure_packages() {
    let missing: Vec<&str> = PACKAGES
        .into_iter()
        .filter(|p| !package_installed(p))
        .collect();
    if missing.is_empty() {
        return;
    }
    eprintln!("podman test: installing {missing:?} with apt-get");
    let mut install = vec!["install", "-y"];
    install.extend(&missing);
    let first = apt_get(&install);
    if first.status.success() {
        return;
    }
    // The package lists may be missing or stale: refresh them once and retry.
    let update = apt_get(&["update"]);
    let second = apt_get(&install);
    assert!(
        second.status.success(),
        "podman test: cannot install {missing:?} from Debian's packages, and the test needs them \
         (podman 4.3 with the CNI backend, runc, a static busybox for the image).\n\
         apt-get install: {}\napt-get update: {}\napt-get install again: {}",
        text(&first),
        text(&update),
        text(&second)
    );
}

fn in_subnet(addr: Ipv4Addr, (net, prefix): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX << (32 - prefix);
    u32::from(addr) & mask == u32::from(net) & mask
}

/// The IPv4 address in `ip -4 -o addr show dev eth0` output, with its prefix length.
fn parse_inet(output: &str) -> (Ipv4Addr, u8) {
    let cidr = output
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .unwrap_or_else(|| panic!("no inet address in:\n{output}"));
    let (addr, prefix) = cidr.split_once('/').expect("address/prefix");
    (
        addr.parse().expect("IPv4 address"),
        prefix.parse().expect("prefix length"),
    )
}

fn assert_pinged(output: &str, gateway: &str) {
    assert!(
        output.contains(&format!("PING {gateway} ")) && output.contains("1 packets received"),
        "the container did not ping its gateway {gateway}:\n{output}"
    );
}

/// Podman's network namespaces (podman 4 names them netns-<uuid>, older ones cni-<uuid>).
fn podman_netns() -> BTreeSet<String> {
    let Ok(dir) = fs::read_dir("/run/netns") else {
        return BTreeSet::new();
    };
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("netns-") || n.starts_with("cni-"))
        .collect()
}

/// `ip -j link show [args]` as (ifname, ifalias) pairs.
fn links(args: &[&str]) -> Vec<(String, String)> {
    let mut all = vec!["-j", "link", "show"];
    all.extend(args);
    let out = ip(&all);
    assert!(out.status.success(), "ip {all:?}: {}", text(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j output");
    list.as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|l| {
            let field = |k: &str| l.get(k).and_then(|v| v.as_str()).unwrap_or("").to_owned();
            (field("ifname"), field("ifalias"))
        })
        .collect()
}

fn bridge_ports(bridge: &str) -> Vec<String> {
    links(&["master", bridge])
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// Host links academy made for `network` (its alias is academy:<network>:<cid>:<ifname>).
fn academy_veths(network: &str) -> Vec<String> {
    let prefix = format!("academy:{network}:");
    links(&[])
        .into_iter()
        .filter(|(_, alias)| alias.starts_with(&prefix))
        .map(|(n, _)| n)
        .collect()
}

fn link_exists(name: &str) -> bool {
    ip(&["link", "show", "dev", name]).status.success()
}

/// The podman of this test: own config, own stores, own CNI config folder.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn plugin_dir(&self) -> PathBuf {
        self.dir.join("cni-bin")
    }
    fn conf_dir(&self) -> PathBuf {
        self.dir.join("net.d")
    }
    fn data_dir(&self) -> PathBuf {
        self.dir.join("academy-data")
    }
    fn call_log(&self) -> PathBuf {
        self.dir.join("calls.log")
    }

    /// The calls the shim recorded, each a map of its fields.
    fn calls(&self) -> Vec<Call> {
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
                Call {
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

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "10", STEP_TIMEOUT, "podman"])
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("runroot"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env_remove("CONTAINERS_STORAGE_CONF")
            .env_remove("CONTAINER_HOST")
            .env_remove("CONTAINER_CONNECTION");
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        check_output(&mut self.cmd(args))
    }

    fn must(&self, args: &[&str]) -> String {
        must(&mut self.cmd(args))
    }

    /// Files of `network`'s store named after an address, as (address, content).
    fn reservations(&self, network: &str) -> Vec<(String, String)> {
        let Ok(dir) = fs::read_dir(self.data_dir().join(network)) else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .parse::<std::net::IpAddr>()
                    .is_ok()
            })
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read_to_string(e.path()).unwrap_or_default(),
                )
            })
            .collect()
    }

    fn holders(&self, network: &str) -> Vec<String> {
        let Ok(dir) = fs::read_dir(self.data_dir().join(network).join("holders")) else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    fn containers(&self) -> Vec<String> {
        self.must(&["ps", "-a", "-q", "--no-trunc"])
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// One invocation of academy by podman, as the shim recorded it.
#[derive(Debug)]
struct Call {
    command: String,
    container: String,
    netns: String,
    path: String,
    prev_result: bool,
    status: String,
    parent: String,
}

/// Undoes everything the test made, whatever state it stopped in.
struct Guard {
    podman: Podman,
    netns_before: BTreeSet<String>,
    _lock: fs::File,
}

fn remove_network_leftovers() {
    for (network, bridge) in [(NET, BRIDGE), (FULL_NET, FULL_BRIDGE)] {
        for veth in academy_veths(network) {
            let _ = ip(&["link", "del", "dev", &veth]);
        }
        if link_exists(bridge) {
            let _ = ip(&["link", "del", "dev", bridge]);
        }
        if let Ok(dir) = fs::read_dir("/var/lib/cni/results") {
            let prefix = format!("{network}-");
            for entry in dir.filter_map(|e| e.ok()) {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let p = &self.podman;
        let _ = p.run(&["rm", "-f", "-a", "-t", "0"]);
        let _ = p.run(&["rmi", "-a", "-f"]);
        remove_network_leftovers();
        for ns in podman_netns().difference(&self.netns_before) {
            let _ = ip(&["netns", "delete", ns]);
        }
        // Mounts podman may have left inside the folder (shm of a killed container).
        if let Ok(mounts) = fs::read_to_string("/proc/self/mounts") {
            let mut points: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter(|m| Path::new(m).starts_with(&p.dir))
                .collect();
            points.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in points {
                let _ = Command::new("umount").args(["-l", m]).status();
            }
        }
        let _ = fs::remove_dir_all(&p.dir);
    }
}

fn lock() -> fs::File {
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .unwrap_or_else(|e| panic!("cannot open {LOCK}: {e}"));
    // SAFETY: flock on a file descriptor this function owns.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {LOCK}: {}", std::io::Error::last_os_error());
    file
}

fn write(path: &Path, content: &str) {
    let mut f = fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(content.as_bytes()).expect("write");
}

/// The test's podman folder: plugin dir with academy, containers.conf, two conflists.
fn set_up(podman: &Podman) {
    for d in [
        podman.plugin_dir(),
        podman.conf_dir(),
        podman.data_dir(),
        podman.dir.join("tmp"),
    ] {
        fs::create_dir_all(&d).expect("create test folder");
    }
    // academy itself sits outside the plugin folder; what podman finds there under the
    // name "academy" is a shim that records each call (command, container, netns,
    // whether stdin had a prevResult, who called, exit status) and runs academy with the
    // same arguments, environment and stdin.
    let real = podman.dir.join("academy-real");
    fs::copy(env!("CARGO_BIN_EXE_academy"), &real).expect("copy academy");
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

    // Capped below this process's hard limits: podman's defaults for root (nofile 1048576,
    // nproc from pid_max) make runc's setrlimit fail with EPERM without CAP_SYS_RESOURCE.
    let cap = |resource, wanted: u64| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct given.
        let rc = unsafe { libc::getrlimit(resource, &mut lim) };
        assert_eq!(rc, 0, "getrlimit");
        wanted.min(lim.rlim_max)
    };
    let nofile = cap(libc::RLIMIT_NOFILE, 1024);
    let nproc = cap(libc::RLIMIT_NPROC, 1024);
    let dir = podman.dir.display();
    write(
        &podman.dir.join("containers.conf"),
        &format!(
            r#"# Written by academy's tests/podman.rs; read only through CONTAINERS_CONF.
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
            plugins = podman.plugin_dir().display(),
            confs = podman.conf_dir().display(),
        ),
    );

    let data = podman.data_dir();
    let data = data.display();
    write(
        &podman.conf_dir().join(format!("{NET}.conflist")),
        &format!(
            r#"{{
  "cniVersion": "1.0.0",
  "name": "{NET}",
  "plugins": [
    {{
      "type": "academy",
      "bridge": "{BRIDGE}",
      "subnet": "{}/{}",
      "gateway": "{GATEWAY}",
      "dataDir": "{data}"
    }}
  ]
}}
"#,
            SUBNET.0, SUBNET.1
        ),
    );
    write(
        &podman.conf_dir().join(format!("{FULL_NET}.conflist")),
        &format!(
            r#"{{
  "cniVersion": "1.0.0",
  "name": "{FULL_NET}",
  "plugins": [
    {{
      "type": "academy",
      "bridge": "{FULL_BRIDGE}",
      "subnet": "{}/{}",
      "gateway": "{FULL_GATEWAY}",
      "rangeStart": "{FULL_ONLY}",
      "rangeEnd": "{FULL_ONLY}",
      "dataDir": "{data}"
    }}
  ]
}}
"#,
            FULL_SUBNET.0, FULL_SUBNET.1
        ),
    );
}

/// A busybox image made locally (no registry is reachable): `podman import` of a rootfs
/// tarball holding the static busybox and the applets the test calls.
fn build_image(podman: &Podman) {
    let rootfs = podman.dir.join("rootfs");
    fs::create_dir_all(rootfs.join("bin")).expect("rootfs");
    fs::copy("/bin/busybox", rootfs.join("bin/busybox"))
        .expect("copy /bin/busybox (busybox-static)");
    for applet in ["sh", "ip", "ping", "sleep", "cat", "true"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).expect("symlink");
    }
    let tarball = podman.dir.join("rootfs.tar");
    must(
        Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&tarball)
            .arg("."),
    );
    podman.must(&["import", tarball.to_str().expect("utf-8 path"), IMAGE]);
}

/// After a container is gone: academy's store, the bridge and the netns are clean.
fn assert_clean(guard: &Guard, network: &str, bridge: &str, when: &str) {
    let p = &guard.podman;
    assert_eq!(
        p.containers(),
        Vec::<String>::new(),
        "{when}: podman still lists containers"
    );
    assert_eq!(
        p.reservations(network),
        Vec::new(),
        "{when}: {network}'s store still holds addresses"
    );
    assert_eq!(
        p.holders(network),
        Vec::<String>::new(),
        "{when}: {network}'s holders/ is not empty"
    );
    assert!(link_exists(bridge), "{when}: bridge {bridge} is gone");
    assert_eq!(
        bridge_ports(bridge),
        Vec::<String>::new(),
        "{when}: bridge {bridge} still has ports"
    );
    assert_eq!(
        academy_veths(network),
        Vec::<String>::new(),
        "{when}: academy host veths left"
    );
    let left: Vec<_> = podman_netns()
        .difference(&guard.netns_before)
        .cloned()
        .collect();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "{when}: network namespaces left in /run/netns"
    );
}

/// The address podman recorded for a running container on `network`.
fn inspect_address(p: &Podman, name: &str, network: &str) -> String {
    let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
    p.must(&["inspect", "-f", &format, name]).trim().to_owned()
}

fn step(t0: Instant, what: &str) {
    eprintln!("podman test: [{:6.1}s] {what}", t0.elapsed().as_secs_f64());
}

#[test]
fn academy_under_podman() {
    let t0 = Instant::now();
    assert_eq!(
        nix::unistd::geteuid().as_raw(),
        0,
        "the podman test must run as root (it installs packages, runs rootful podman, makes bridges)"
    );
    let lock = lock();
    ensure_packages();
    step(t0, "packages present");
    remove_network_leftovers(); // of an earlier run that was killed before its guard ran

    let dir = std::env::temp_dir().join(format!("academy-podman-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("test folder");
    let guard = Guard {
        podman: Podman { dir },
        netns_before: podman_netns(),
        _lock: lock,
    };
    let p = &guard.podman;
    set_up(p);
    build_image(p);
    step(t0, "image imported");

    // Discovery: podman reads the conflists and names academy as the networks' driver.
    let networks = p.must(&["network", "ls", "--format", "{{.Name}} {{.Driver}}"]);
    for network in [NET, FULL_NET] {
        assert!(
            networks.lines().any(|l| l == format!("{network} academy")),
            "podman network ls does not show {network} with driver academy:\n{networks}"
        );
    }

    // Rounds of `podman run --rm`: address in the subnet, gateway answers, all undone.
    let probe = format!("ip -4 -o addr show dev eth0 && ping -c1 -W2 {GATEWAY}");
    for round in 1..=3 {
        let out = p.must(&[
            "run",
            "--rm",
            "--network",
            NET,
            "--cap-add",
            "NET_RAW",
            IMAGE,
            "sh",
            "-c",
            &probe,
        ]);
        let (addr, prefix) = parse_inet(&out);
        assert!(
            in_subnet(addr, SUBNET),
            "round {round}: {addr} is outside {SUBNET:?}"
        );
        assert_eq!(prefix, SUBNET.1, "round {round}: prefix length of {addr}");
        assert_pinged(&out, GATEWAY);
        assert_clean(&guard, NET, BRIDGE, &format!("after --rm round {round}"));
        step(
            t0,
            &format!("--rm round {round}: {addr}/{prefix}, gateway answered, all undone"),
        );
    }

    // podman's --ip and --mac-address arrive as CNI_ARGS IP= and MAC=: academy must
    // give exactly that address and MAC, through the same store.
    let fixed_ip = format!("{}", Ipv4Addr::from(u32::from(SUBNET.0) + 5));
    let out = p.must(&[
        "run",
        "--rm",
        "--network",
        NET,
        "--ip",
        &fixed_ip,
        "--mac-address",
        "02:00:00:00:ac:05",
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        &format!("ip -o link show dev eth0 && {probe}"),
    ]);
    let (addr, _) = parse_inet(&out);
    assert_eq!(addr.to_string(), fixed_ip, "--ip was not honoured:\n{out}");
    assert!(
        out.contains("02:00:00:00:ac:05"),
        "--mac-address was not honoured:\n{out}"
    );
    assert_pinged(&out, GATEWAY);
    assert_clean(&guard, NET, BRIDGE, "after the --ip/--mac-address round");
    step(
        t0,
        &format!("--ip {fixed_ip} --mac-address round: honoured, all undone"),
    );

    // `podman run -d`, then `podman stop`, then `podman rm`.
    let cid = p.must(&[
        "run",
        "-d",
        "--name",
        "academy-detached",
        "--network",
        NET,
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        IDLE,
    ]);
    let cid = cid.trim();
    let inside = p.must(&[
        "exec",
        "academy-detached",
        "ip",
        "-4",
        "-o",
        "addr",
        "show",
        "dev",
        "eth0",
    ]);
    let (addr, _) = parse_inet(&inside);
    assert!(
        in_subnet(addr, SUBNET),
        "detached: {addr} is outside {SUBNET:?}"
    );
    assert_eq!(
        inspect_address(p, "academy-detached", NET),
        addr.to_string(),
        "podman inspect vs eth0"
    );
    assert_pinged(
        &p.must(&["exec", "academy-detached", "ping", "-c1", "-W2", GATEWAY]),
        GATEWAY,
    );
    let held = p.reservations(NET);
    assert_eq!(held.len(), 1, "detached: store {held:?}");
    assert_eq!(held[0].0, addr.to_string(), "detached: reserved address");
    assert_eq!(
        held[0].1.split("\r\n").collect::<Vec<_>>(),
        vec![cid, "eth0"],
        "detached: reservation content"
    );
    assert_eq!(
        bridge_ports(BRIDGE).len(),
        1,
        "detached: one port on {BRIDGE}"
    );
    p.must(&["stop", "-t", "10", "academy-detached"]);
    assert_eq!(
        p.reservations(NET),
        Vec::new(),
        "after podman stop: store still holds an address"
    );
    assert_eq!(
        bridge_ports(BRIDGE),
        Vec::<String>::new(),
        "after podman stop: ports left"
    );
    p.must(&["rm", "academy-detached"]);
    assert_clean(&guard, NET, BRIDGE, "after podman run -d / stop / rm");
    step(t0, &format!("detached round: {addr}, stop and rm undid it"));

    // A detached container that exits by itself: the DEL comes from the
    // `podman container cleanup` process conmon starts, not from the podman we ran.
    let exits_cid = p.must(&[
        "run",
        "-d",
        "--name",
        "academy-exits",
        "--network",
        NET,
        "--cap-add",
        "NET_RAW",
        IMAGE,
        "sh",
        "-c",
        &probe,
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = p.must(&["inspect", "-f", "{{.State.Status}}", "academy-exits"]);
        if state.trim() == "exited"
            && p.reservations(NET).is_empty()
            && bridge_ports(BRIDGE).is_empty()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the exited container's network was not torn down by podman's cleanup process: state {}, store {:?}, ports {:?}",
            state.trim(),
            p.reservations(NET),
            bridge_ports(BRIDGE)
        );
        sleep(Duration::from_millis(200));
    }
    let logs = p.must(&["logs", "academy-exits"]);
    let (addr, _) = parse_inet(&logs);
    assert!(
        in_subnet(addr, SUBNET),
        "exits-by-itself: {addr} is outside {SUBNET:?}"
    );
    assert_pinged(&logs, GATEWAY);
    assert_eq!(
        p.must(&["inspect", "-f", "{{.State.ExitCode}}", "academy-exits"])
            .trim(),
        "0",
        "exits-by-itself: exit code"
    );
    p.must(&["rm", "academy-exits"]);
    assert_clean(&guard, NET, BRIDGE, "after a container exited by itself");
    step(
        t0,
        &format!("exits-by-itself round: {addr}, cleanup process undid it"),
    );

    // A full subnet: the range holds one address, a running container takes it, and the
    // next `podman run` must fail with academy's own words in podman's output.
    p.must(&[
        "run",
        "-d",
        "--name",
        "academy-holder",
        "--network",
        FULL_NET,
        IMAGE,
        "sh",
        "-c",
        IDLE,
    ]);
    assert_eq!(
        inspect_address(p, "academy-holder", FULL_NET),
        FULL_ONLY,
        "the holder's address"
    );
    let netns_with_holder = podman_netns();
    let failed = p.run(&[
        "run",
        "--rm",
        "--name",
        "academy-no-room",
        "--network",
        FULL_NET,
        IMAGE,
        "true",
    ]);
    let shown = text(&failed);
    assert!(
        !failed.status.success(),
        "podman run on a full subnet succeeded:\n{shown}"
    );
    let expected = format!(
        "network {FULL_NET}: no free address in {}/{}",
        FULL_SUBNET.0, FULL_SUBNET.1
    );
    assert!(
        shown.contains(&expected),
        "podman's output does not carry academy's error text {expected:?}:\n{shown}"
    );
    eprintln!(
        "podman test: what the user saw on a full subnet:\n{}",
        String::from_utf8_lossy(&failed.stderr)
    );
    // The failed ADD (and podman's DEL after it, without prevResult) left nothing behind.
    let held = p.reservations(FULL_NET);
    assert_eq!(held.len(), 1, "after the failed run: store {held:?}");
    assert_eq!(
        held[0].0, FULL_ONLY,
        "after the failed run: the holder's address"
    );
    assert_eq!(
        bridge_ports(FULL_BRIDGE).len(),
        1,
        "after the failed run: ports on {FULL_BRIDGE}"
    );
    assert_eq!(
        podman_netns(),
        netns_with_holder,
        "after the failed run: network namespaces"
    );
    let after_fail = p.containers();
    assert_eq!(
        after_fail.len(),
        1,
        "after the failed run --rm: containers {after_fail:?}"
    );
    p.must(&["stop", "-t", "10", "academy-holder"]);
    p.must(&["rm", "academy-holder"]);
    assert_clean(&guard, FULL_NET, FULL_BRIDGE, "after the full-subnet case");
    step(
        t0,
        "full subnet: academy's error reached the user, nothing left",
    );

    // How podman invoked academy, from the shim's record.
    let calls = p.calls();
    let mut counts = std::collections::BTreeMap::new();
    for c in &calls {
        *counts
            .entry(format!("{} rc={}", c.command, c.status))
            .or_insert(0) += 1;
    }
    eprintln!("podman test: academy's calls: {counts:?}");
    // Discovery: podman probes each plugin with VERSION and dummy CNI_* values.
    assert!(
        calls.iter().any(|c| c.command == "VERSION"
            && c.netns == "dummy"
            && c.path == "dummy"
            && c.status == "0"),
        "no VERSION probe with dummy values answered: {calls:#?}"
    );
    // The self-exiting container's DEL came from `podman container cleanup`.
    let exits_cid = exits_cid.trim();
    let cleanup_del = calls
        .iter()
        .find(|c| c.command == "DEL" && c.container == exits_cid)
        .unwrap_or_else(|| panic!("no DEL for {exits_cid}: {calls:#?}"));
    assert!(
        cleanup_del.parent.contains("container cleanup") && cleanup_del.status == "0",
        "the DEL of the container that exited by itself: {cleanup_del:#?}"
    );
    // The failed ADD: podman then sent DEL without prevResult, and academy accepted it.
    let failed_adds: Vec<&Call> = calls
        .iter()
        .filter(|c| c.command == "ADD" && c.status != "0")
        .collect();
    assert_eq!(failed_adds.len(), 1, "failed ADDs: {failed_adds:#?}");
    let del_after_fail = calls
        .iter()
        .find(|c| c.command == "DEL" && c.container == failed_adds[0].container)
        .unwrap_or_else(|| panic!("no DEL after the failed ADD: {calls:#?}"));
    assert!(
        !del_after_fail.prev_result && del_after_fail.status == "0",
        "the DEL after the failed ADD: {del_after_fail:#?}"
    );
    // Every other call succeeded.
    let other_failures: Vec<&Call> = calls
        .iter()
        .filter(|c| c.status != "0" && c.container != failed_adds[0].container)
        .collect();
    assert!(
        other_failures.is_empty(),
        "academy failed: {other_failures:#?}"
    );

    drop(guard);
    assert!(
        !link_exists(BRIDGE) && !link_exists(FULL_BRIDGE),
        "the guard left a bridge"
    );
    step(t0, "cleaned up");
}
