//! Switching a live network (issue 25, item 4): containers made by the reference chain
//! (bridge with ipMasq + host-local, portmap, firewall; the real plugins under cnitool),
//! then `academy convert --in-place`, then DEL through the new conflist, as containerd
//! 1.6 and cnitool send it. What the reference left for the container must go before
//! its address is freed, with or without its netns; convert says beforehand what is
//! live; --in-place never writes through a planted symlink.
//!
//! Network safety: the only connections go from the host to the lab's own gateway
//! address (the reference's DNAT of a host port unique to the lab) and to the lab's
//! containers, through the lab's bridge. Every iptables rule the reference made for the
//! lab is removed by [`IptablesGuard`] even when a test fails.

use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::*;

/// Debian's plugins folder, which has `firewall` (the lab copy has no firewall).
fn debian_plugins() -> &'static str {
    ["/usr/lib/cni", "/usr/libexec/cni", "/opt/cni/bin"]
        .into_iter()
        .find(|d| Path::new(d).join("firewall").is_file())
        .expect("the reference firewall plugin is not installed: run `make setup` (containernetworking-plugins)")
}

fn cni_path(lab: &Lab) -> String {
    format!(
        "{}:{REFERENCE_BIN}:{}",
        lab.bin_dir.display(),
        debian_plugins()
    )
}

fn tool(lab: &Lab, verb: &str, netns: &str, env: &[(&str, &str)]) -> Out {
    let path = cni_path(lab);
    let mut all = vec![("CNI_PATH", path.as_str())];
    all.extend_from_slice(env);
    lab.cnitool(verb, netns, &all)
}

/// A host port for the lab's DNAT, unique per lab and process.
fn host_port(lab: &Lab) -> u16 {
    30000 + (std::process::id() % 10000) as u16 + u16::from(lab.slot.n)
}

fn conflist(lab: &Lab) -> std::path::PathBuf {
    lab.conf_dir.join("10-lab.conflist")
}

/// The reference chain podman writes, on the lab's bridge and subnet.
fn write_reference_list(lab: &Lab) {
    let list = json!({"cniVersion": "1.0.0", "name": lab.network, "plugins": [
        {"type": "bridge", "bridge": lab.bridge, "isGateway": true, "ipMasq": true,
         "ipam": {"type": "host-local", "dataDir": lab.data_dir,
                  "ranges": [[{"subnet": lab.subnet()}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": true}},
        {"type": "firewall", "backend": ""}
    ]});
    std::fs::write(conflist(lab), serde_json::to_string_pretty(&list).unwrap()).unwrap();
}

/// A container the reference made in the lab's netns, publishing `port` to its 80.
struct Made {
    cid: String,
    address: String,
    host_veth: String,
    /// Its per-container chains, read from iptables-save.
    chains: Vec<String>,
}

fn reference_container(lab: &Lab, port: u16) -> Made {
    write_reference_list(lab);
    let caps =
        json!({"portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}]})
            .to_string();
    let result = tool(lab, "add", &lab.netns, &[("CAP_ARGS", &caps)])
        .expect_result("the reference chain's ADD");
    let cid = cnitool_container_id(&lab.netns_path());
    let chains: Vec<String> = save("iptables-save", "nat")
        .lines()
        .filter(|l| l.contains(&format!("id: \\\"{cid}\\\"")))
        .filter_map(|l| {
            target(l)
                .filter(|t| t.starts_with("CNI-"))
                .map(str::to_string)
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        chains.len(),
        2,
        "the reference made its ipMasq and DN chains:\n{}",
        save("iptables-save", "nat")
    );
    Made {
        cid,
        address: result_address(&result),
        host_veth: result_host_veth(&result),
        chains,
    }
}

fn save(program: &str, table: &str) -> String {
    run(program, &["-t", table], &[]).stdout
}

/// The `-j` target of an iptables-save line.
fn target(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == "-j")?;
    words.next()
}

/// iptables-save's words, its quoting undone (`"a \"b\""` is one word `a "b"`).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quoted, mut chars) =
        (Vec::new(), None::<String>, false, line.chars());
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => word.get_or_insert_with(String::new).extend(chars.next()),
            '"' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            c if c.is_whitespace() && !quoted => out.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

/// Removes every iptables rule the reference made for the lab (commented with its
/// network, or the firewall's accepts of its addresses) and the chains they jump to,
/// when the test ends, also on failure. Everything it deletes names the lab.
struct IptablesGuard {
    network: String,
    prefix: String,
    _chains: FirewallChains,
}

impl IptablesGuard {
    fn new(lab: &Lab) -> IptablesGuard {
        let g = IptablesGuard {
            network: lab.network.clone(),
            prefix: lab.prefix.clone(),
            _chains: FirewallChains::hold(),
        };
        g.clean();
        g
    }

    fn clean(&self) {
        for (save, tool) in [
            ("iptables-save", "iptables"),
            ("ip6tables-save", "ip6tables"),
        ] {
            for table in ["nat", "filter"] {
                let Some(out) = run_quiet(save, &["-t", table]) else {
                    continue;
                };
                let mut chains = Vec::new();
                for line in out.stdout.lines().filter(|l| l.starts_with("-A ")) {
                    let named = line.contains(&format!("name: \\\"{}\\\"", self.network));
                    let accepts = line.starts_with("-A CNI-FORWARD ")
                        && (line.contains(&format!("-d {}.", self.prefix))
                            || line.contains(&format!("-s {}.", self.prefix)));
                    if !named && !accepts {
                        continue;
                    }
                    let w = words(line);
                    if let Some(t) = target(line) {
                        if t.starts_with("CNI-") && !t.starts_with("CNI-HOSTPORT-") {
                            chains.push(t.to_string());
                        }
                    }
                    let mut args = vec!["-t", table, "-D"];
                    args.extend(w[1..].iter().map(String::as_str));
                    let _ = run_quiet(tool, &args);
                }
                for c in chains {
                    let _ = run_quiet(tool, &["-t", table, "-F", &c]);
                    let _ = run_quiet(tool, &["-t", table, "-X", &c]);
                }
            }
        }
    }
}

impl Drop for IptablesGuard {
    fn drop(&mut self) {
        self.clean();
    }
}

/// A TCP server in `netns` on 0.0.0.0:80 answering "hello" until killed.
struct Server(Child);

impl Server {
    fn start(netns: &str) -> Server {
        let script = "import socket\n\
             s = socket.socket(socket.AF_INET)\n\
             s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('0.0.0.0', 80)); s.listen(8); s.settimeout(60)\n\
             while True:\n\
             \x20   c, peer = s.accept(); c.sendall(b'hello'); c.close()\n";
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "python3", "-c", script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one connection from the host to addr:port reads ("" for refused or nothing).
fn read_from(addr: &str, port: u16) -> String {
    let to: SocketAddr = format!("{addr}:{port}").parse().unwrap();
    let Ok(mut c) = TcpStream::connect_timeout(&to, Duration::from_secs(2)) else {
        return String::new();
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
    let mut got = String::new();
    let _ = c.read_to_string(&mut got);
    got
}

/// A server in `netns` answers on `address`:80 directly (retrying while it starts).
fn serving(netns: &str, address: &str) -> Server {
    let server = Server::start(netns);
    let deadline = Instant::now() + Duration::from_secs(10);
    while read_from(address, 80) != "hello" {
        assert!(
            Instant::now() < deadline,
            "the server in {netns} never answered on {address}:80"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

fn convert_in_place(lab: &Lab) -> Out {
    let file = conflist(lab);
    let out = run(
        plugin(),
        &["convert", file.to_str().unwrap(), "--in-place"],
        &[],
    );
    assert_eq!(out.code, 0, "academy convert --in-place:\n{out}");
    let list: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let types: Vec<&str> = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["academy"], "converted: {list}");
    out
}

/// Nothing of the reference's iptables state is left for `made`.
fn assert_no_reference_state(made: &Made) {
    let nat = save("iptables-save", "nat");
    for line in nat.lines() {
        assert!(
            !line.contains(&made.cid) && !made.chains.iter().any(|c| line.contains(c.as_str())),
            "left in table nat for {}: {line}\n{nat}",
            made.cid
        );
    }
    let filter = save("iptables-save", "filter");
    assert!(
        !filter.contains(&format!(" {}/32 ", made.address)),
        "the firewall's accepts of {} are left:\n{filter}",
        made.address
    );
}

fn reserved(lab: &Lab, address: &str) -> bool {
    lab.data_dir.join(&lab.network).join(address).exists()
}

#[test]
fn switch_del_with_netns_removes_the_reference_s_state_and_the_old_port_reaches_no_new_container() {
    let _lock = reference_lock();
    let lab = Lab::new("swns");
    let _bridge = ReferenceBridge::new(lab.bridge.clone());
    let _ipt = IptablesGuard::new(&lab);
    let port = host_port(&lab);
    let made = reference_container(&lab, port);
    {
        // The check below can see a delivery: the reference's DNAT works from the host.
        let _server = serving(&lab.netns, &made.address);
        assert_eq!(
            read_from(&lab.gateway(), port),
            "hello",
            "the reference's port"
        );
    }
    convert_in_place(&lab);

    tool(&lab, "del", &lab.netns, &[]).expect_silent_success("DEL through the converted list");
    assert_no_reference_state(&made);
    assert_eq!(
        netns_link_names(&lab.netns),
        ["lo"],
        "the container's interface is left"
    );
    assert!(
        !link_exists(&made.host_veth),
        "host veth {} is left",
        made.host_veth
    );
    assert!(
        !reserved(&lab, &made.address),
        "{} is still reserved",
        made.address
    );

    // The freed address goes to a new container, which the old host port must not reach.
    let new = lab.add_netns("new");
    let ip = format!("IP={}", made.address);
    let result =
        tool(&lab, "add", &new, &[("CNI_ARGS", &ip)]).expect_result("ADD of a new container");
    assert_eq!(result_address(&result), made.address);
    {
        let _server = serving(&new, &made.address);
        assert_eq!(
            read_from(&lab.gateway(), port),
            "",
            "the old host port reached the new container"
        );
    }
    tool(&lab, "del", &new, &[]).expect_silent_success("DEL of the new container");
}

#[test]
fn switch_del_without_netns_removes_the_reference_s_chains_before_freeing_the_address() {
    let _lock = reference_lock();
    let lab = Lab::new("swgone");
    let _bridge = ReferenceBridge::new(lab.bridge.clone());
    let _ipt = IptablesGuard::new(&lab);
    let made = reference_container(&lab, host_port(&lab));
    convert_in_place(&lab);
    ip(&["netns", "del", &lab.netns]);

    tool(&lab, "del", &lab.netns, &[]).expect_silent_success("DEL with the netns gone");
    assert_no_reference_state(&made);
    assert!(
        !reserved(&lab, &made.address),
        "{} is still reserved",
        made.address
    );
    assert!(
        wait_until(Duration::from_secs(5), || !link_exists(&made.host_veth)),
        "host veth {} outlived its netns",
        made.host_veth
    );
}

#[test]
fn switch_convert_lists_the_live_state_before_it_writes() {
    let _lock = reference_lock();
    let lab = Lab::new("swlist");
    let _bridge = ReferenceBridge::new(lab.bridge.clone());
    let _ipt = IptablesGuard::new(&lab);
    let made = reference_container(&lab, host_port(&lab));
    let out = convert_in_place(&lab);
    let warning = &out.stderr;
    let mut needles: Vec<String> = made.chains.clone();
    needles.extend([
        format!("container {}", made.cid),
        format!(
            "dnat name: \\\"{}\\\" id: \\\"{}\\\"",
            lab.network, made.cid
        ),
        format!("reservation {} held by {} eth0", made.address, made.cid),
        format!("firewall plugin's accepts for {}", made.address),
        format!("bridge {} port {}", lab.bridge, made.host_veth),
        "a DEL through the new conflist".into(),
    ]);
    for n in &needles {
        assert!(
            warning.contains(n.as_str()),
            "convert's warning does not say {n:?}:\n{warning}"
        );
    }
    // Said before the file is rewritten.
    let live = warning.find("live state").expect("no live state");
    let rewrote = warning.find("rewrote").expect("no rewrite");
    assert!(live < rewrote, "{warning}");
    tool(&lab, "del", &lab.netns, &[]).expect_silent_success("DEL");
}

#[test]
fn switch_in_place_rewrites_a_symlink_s_target_keeping_mode_and_owner_and_follows_no_planted_link()
{
    let lab = Lab::new("swlink");
    write_reference_list(&lab);
    let real_dir = lab.root.join("real");
    std::fs::create_dir_all(&real_dir).unwrap();
    let target = real_dir.join("10-lab.conflist");
    let link = conflist(&lab);
    std::fs::rename(&link, &target).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::chown(&target, Some(4321), Some(4322)).unwrap();
    // A victim file and symlinks to it at every temporary name a convert could predict:
    // next to the link and next to the target, hidden or not.
    let victim = lab.root.join("victim");
    std::fs::write(&victim, "untouched").unwrap();
    let mut planted = Vec::new();
    for dir in [&lab.conf_dir, &real_dir] {
        for name in [
            "10-lab.conflist.academy-convert.tmp",
            ".10-lab.conflist.academy-convert.tmp",
            "10-lab.conflist.tmp",
            ".10-lab.conflist.tmp",
        ] {
            let p = dir.join(name);
            std::os::unix::fs::symlink(&victim, &p).unwrap();
            planted.push(p);
        }
    }

    run(
        plugin(),
        &["convert", link.to_str().unwrap(), "--in-place"],
        &[],
    );

    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "untouched",
        "written through a planted link"
    );
    for p in &planted {
        let meta = std::fs::symlink_metadata(p).unwrap();
        assert!(
            meta.file_type().is_symlink(),
            "{} was replaced",
            p.display()
        );
    }
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(
        meta.file_type().is_symlink(),
        "the symlink was replaced by a file"
    );
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
    let list: Value = serde_json::from_slice(&std::fs::read(&target).unwrap()).unwrap();
    assert_eq!(
        list["plugins"][0]["type"], "academy",
        "the target was not rewritten: {list}"
    );
    let meta = std::fs::metadata(&target).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640, "mode");
    assert_eq!((meta.uid(), meta.gid()), (4321, 4322), "owner");
    let mut left: Vec<String> = std::fs::read_dir(&real_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("academy-convert") && !n.ends_with(".tmp"))
        .collect();
    left.sort();
    assert_eq!(left, Vec::<String>::new(), "temporary files left");
}
