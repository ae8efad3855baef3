//! The lab: one test's own netns, bridge, network, subnet, data dir, NETCONFPATH and
//! CNI_PATH, as a guard whose Drop removes all of it even when the test panics; the
//! attachments made in it, the calls and configs that reach the plugin, and what the
//! plugin's store holds.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{json, Value};

use super::alloc::Slot;
use super::kernel::{host_links, ip, netns_exists};
use super::process::{plugin, run, run_quiet, Call, Out};

/// Where cnitool (libcni) caches results, machine-wide.
pub const RESULTS_DIR: &str = "/var/lib/cni/results";
/// host-local's default store, academy's too in the ipam form without dataDir.
pub const HOST_LOCAL_STORE: &str = "/var/lib/cni/networks";

/// Labs alive in this test run. Only when the last goes are academy's shared tables
/// deleted: every test's ADDs happen while it holds a lab.
static LIVE_LABS: Mutex<usize> = Mutex::new(0);

/// The container id cnitool gives a netns path: "cnitool-" + hex of the first 10 bytes
/// of sha512(path), path as given (no symlink resolution).
pub fn cnitool_container_id(netns_path: &str) -> String {
    let out = Call::bare().stdin(netns_path).spawn("sha512sum", &[]);
    assert_eq!(out.code, 0, "sha512sum failed:\n{out}");
    format!("cnitool-{}", &out.stdout[..20])
}

/// Identifies one attachment: container id, ifname and the netns (by name).
#[derive(Debug, Clone)]
pub struct Attach {
    pub cid: String,
    pub ifname: String,
    pub netns: String,
}

impl Attach {
    pub fn netns_path(&self) -> String {
        netns_path(&self.netns)
    }
}

/// The path runtimes and cnitool use for a named netns.
pub fn netns_path(name: &str) -> String {
    format!("/var/run/netns/{name}")
}

/// A test's own piece of the host, removed by Drop even when the test panics.
pub struct Lab {
    /// Its share of addresses and names (see [`Slot`]).
    pub slot: Slot,
    /// The CNI network name, unique per test and process.
    pub network: String,
    /// The lab's main netns (name); more can be made with [`Lab::add_netns`].
    pub netns: String,
    pub bridge: String,
    /// Container id for direct invocations.
    pub cid: String,
    /// "10.A.n": the lab's /24 without its last octet.
    pub prefix: String,
    pub root: PathBuf,
    pub data_dir: PathBuf,
    /// NETCONFPATH for cnitool.
    pub conf_dir: PathBuf,
    /// CNI_PATH: a symlink "academy" to the built plugin, plus any wrapper a test writes.
    pub bin_dir: PathBuf,
    extra_netns: Mutex<Vec<String>>,
    /// Keys added to every config of [`Lab::config`] (e.g. ipMasq).
    extra_config: Mutex<serde_json::Map<String, Value>>,
}

impl Lab {
    /// A lab on the next free [`Slot`] (its subnet and names), with its netns created and
    /// a cnitool conflist for cniVersion 1.0.0 written. `tag` (short) only makes its
    /// names readable in `ip` output and logs.
    pub fn new(tag: &str) -> Lab {
        *LIVE_LABS.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        let slot = Slot::take();
        let root = std::env::temp_dir().join(slot.name("academy-it", tag));
        let lab = Lab {
            network: slot.name("t", tag),
            netns: slot.name("ac", tag),
            bridge: slot.link_name("acb"),
            cid: slot.id(tag),
            prefix: slot.v4_prefix(),
            data_dir: root.join("data"),
            conf_dir: root.join("net.d"),
            bin_dir: root.join("bin"),
            root,
            extra_netns: Mutex::new(Vec::new()),
            extra_config: Mutex::new(serde_json::Map::new()),
            slot,
        };
        // Leftovers of a killed earlier run with the same pid would only confuse us.
        lab.cleanup();
        for d in [&lab.data_dir, &lab.conf_dir, &lab.bin_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(plugin(), lab.bin_dir.join("academy")).unwrap();
        ip(&["netns", "add", &lab.netns]);
        lab.write_conflist("1.0.0", "academy", json!({}));
        lab
    }

    pub fn netns_path(&self) -> String {
        netns_path(&self.netns)
    }

    pub fn subnet(&self) -> String {
        format!("{}.0/24", self.prefix)
    }

    pub fn gateway(&self) -> String {
        self.ip(1)
    }

    pub fn ip(&self, host: u8) -> String {
        format!("{}.{host}", self.prefix)
    }

    /// Another netns owned (and deleted) by this lab: "ac-<tag>-<pid>-<suffix>".
    pub fn add_netns(&self, suffix: &str) -> String {
        let name = format!("{}-{suffix}", self.netns);
        ip(&["netns", "add", &name]);
        self.extra_netns.lock().unwrap().push(name.clone());
        name
    }

    /// The default attachment of direct invocations: the lab's cid, eth0, its netns.
    pub fn attach(&self) -> Attach {
        Attach {
            cid: self.cid.clone(),
            ifname: "eth0".into(),
            netns: self.netns.clone(),
        }
    }

    /// Another attachment of direct invocations, in a netns of its own: container id
    /// "<lab cid>-<suffix>", eth0, netns "<lab netns>-<suffix>" (see [`Lab::add_netns`]).
    pub fn attachment(&self, suffix: &str) -> Attach {
        Attach {
            cid: format!("{}-{suffix}", self.cid),
            ifname: "eth0".into(),
            netns: self.add_netns(suffix),
        }
    }

    /// The attachment cnitool makes in a netns for an ifname.
    pub fn cnitool_attach(&self, netns: &str, ifname: &str) -> Attach {
        Attach {
            cid: cnitool_container_id(&netns_path(netns)),
            ifname: ifname.into(),
            netns: netns.into(),
        }
    }

    /// The flat ("seed") network config, always with the lab's own dataDir, and with
    /// `releaseUnusedAfter` 0: a test that ends with its network's last DEL finds the
    /// network's own objects gone at once (network_grace.rs tests the grace).
    pub fn config(&self, version: &str) -> Value {
        let mut c = json!({
            "cniVersion": version,
            "name": self.network,
            "type": "academy",
            "bridge": self.bridge,
            "subnet": self.subnet(),
            "gateway": self.gateway(),
            "dataDir": self.data_dir.to_str().unwrap(),
            "releaseUnusedAfter": 0,
        });
        for (k, v) in self.extra_config.lock().unwrap().iter() {
            match v {
                Value::Null => drop(c.as_object_mut().unwrap().remove(k)),
                _ => c[k] = v.clone(),
            }
        }
        c
    }

    /// From now on every [`Lab::config`] has `key` set to `value` (removed for null,
    /// e.g. `subnet` and `gateway` of a lab that speaks the ipam form).
    pub fn always_config(&self, key: &str, value: Value) {
        let mut extra = self.extra_config.lock().unwrap();
        extra.insert(key.to_string(), value);
    }

    /// The lab's config with `key` set to `value` (JSON text).
    pub fn config_with(&self, version: &str, key: &str, value: Value) -> Value {
        let mut c = self.config(version);
        c[key] = value;
        c
    }

    /// The lab's config without `key`.
    pub fn config_without(&self, version: &str, key: &str) -> Value {
        let mut c = self.config(version);
        c.as_object_mut().unwrap().remove(key);
        c
    }

    /// (Re)writes the lab's only conflist as CNI 1.1.0 with `entry` as its one plugin,
    /// and returns the config a runtime gives that plugin (the list's version and name
    /// in it).
    pub fn install_entry(&self, entry: Value) -> Value {
        let list = json!({"cniVersion": "1.1.0", "name": self.network, "plugins": [entry.clone()]});
        std::fs::write(self.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
        let mut config = entry;
        config["cniVersion"] = json!("1.1.0");
        config["name"] = json!(self.network);
        config
    }

    /// (Re)writes the lab's only conflist: one plugin of `plugin_type` with the lab's
    /// bridge/subnet/gateway/dataDir, plus the fields of `extra`.
    pub fn write_conflist(&self, version: &str, plugin_type: &str, extra: Value) {
        let mut plugin = json!({
            "type": plugin_type,
            "bridge": self.bridge,
            "subnet": self.subnet(),
            "gateway": self.gateway(),
            "dataDir": self.data_dir.to_str().unwrap(),
        });
        if plugin_type == "academy" {
            plugin["releaseUnusedAfter"] = json!(0); // as in `config`
        }
        for (k, v) in extra.as_object().unwrap() {
            plugin[k] = v.clone();
        }
        let list = json!({ "cniVersion": version, "name": self.network, "plugins": [plugin] });
        std::fs::write(self.conf_dir.join("10-lab.conflist"), list.to_string()).unwrap();
    }

    /// Writes an executable shell script `name` into the lab's CNI_PATH.
    pub fn install_script(&self, name: &str, body: &str) {
        let path = self.bin_dir.join(name);
        let tmp = self.bin_dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    /// A direct invocation of `command` for the lab's default attachment with the lab's
    /// config in cniVersion 1.1.0 on stdin.
    pub fn call(&self, command: &str) -> Call {
        self.call_for(command, &self.attach())
    }

    pub fn call_for(&self, command: &str, a: &Attach) -> Call {
        Call::bare()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", &a.cid)
            .env("CNI_NETNS", &a.netns_path())
            .env("CNI_IFNAME", &a.ifname)
            .env("CNI_PATH", self.bin_dir.to_str().unwrap())
            .config(&self.config("1.1.0"))
    }

    /// `cnitool VERB <network> /var/run/netns/<netns>` with the lab's CNI_PATH and
    /// NETCONFPATH, plus `env` (e.g. CNI_IFNAME; a CNI_PATH there replaces the lab's).
    pub fn cnitool(&self, verb: &str, netns: &str, env: &[(&str, &str)]) -> Out {
        let path = netns_path(netns);
        let mut all = vec![
            ("CNI_PATH", self.bin_dir.to_str().unwrap()),
            ("NETCONFPATH", self.conf_dir.to_str().unwrap()),
        ];
        all.extend_from_slice(env);
        run(
            "/usr/local/bin/cnitool",
            &[verb, &self.network, &path],
            &all,
        )
    }

    /// cnitool's cached results for this lab's network.
    pub fn cached_results(&self) -> BTreeSet<String> {
        let prefix = format!("{}-", self.network);
        std::fs::read_dir(RESULTS_DIR)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect()
    }

    /// Host links that belong to this lab: the alias names its network, or the bridge
    /// is their master. Each as "name alias master kind".
    pub fn lab_links(&self) -> BTreeSet<String> {
        host_links()
            .iter()
            .filter(|l| self.labels(l) || l["master"].as_str() == Some(self.bridge.as_str()))
            .map(|l| {
                format!(
                    "{} {} {} {}",
                    l["ifname"].as_str().unwrap_or("?"),
                    l["ifalias"].as_str().unwrap_or("-"),
                    l["master"].as_str().unwrap_or("-"),
                    l["linkinfo"]["info_kind"].as_str().unwrap_or("-"),
                )
            })
            .collect()
    }

    /// Host veths labelled as this lab's (alias "academy:<network>:...").
    pub fn lab_veths(&self) -> Vec<String> {
        host_links()
            .iter()
            .filter(|l| self.labels(l))
            .filter_map(|l| l["ifname"].as_str().map(str::to_string))
            .collect()
    }

    /// Whether a link (from `ip -j link`) carries an academy alias naming this lab's network.
    fn labels(&self, link: &Value) -> bool {
        let alias_prefix = format!("academy:{}:", self.network);
        link["ifalias"]
            .as_str()
            .is_some_and(|a| a.starts_with(&alias_prefix))
    }

    /// Deletes everything the lab may have made. Never panics.
    fn cleanup(&self) {
        let mut names = vec![self.netns.clone()];
        if let Ok(extra) = self.extra_netns.lock() {
            names.extend(extra.iter().cloned());
        }
        // The netns' inodes name their nodes' records and bridge locks: removed while the
        // netns still exist. Once one is deleted the kernel may give its inode to a
        // parallel test's new node, whose records would then go with this lab's.
        let nodes: Vec<String> = names
            .iter()
            .filter_map(|n| std::fs::metadata(format!("/run/netns/{n}")).ok())
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m).to_string())
            .collect();
        remove_node_files(&nodes);
        for n in &names {
            if netns_exists(n) {
                let _ = run_quiet("ip", &["netns", "del", n]);
            }
        }
        // Host veths survive a netns deletion when the container end was moved elsewhere,
        // and a deleted netns takes a moment to take its peers with it.
        let alias_prefix = format!("academy:{}:", self.network);
        let out = run_quiet("ip", &["-d", "-j", "link", "show"]).map(|o| o.stdout);
        let links: Vec<Value> = out
            .and_then(|s| serde_json::from_str(s.trim()).ok())
            .and_then(|v: Value| v.as_array().cloned())
            .unwrap_or_default();
        for l in &links {
            let ours = l["ifalias"]
                .as_str()
                .is_some_and(|a| a.starts_with(&alias_prefix))
                || l["master"].as_str() == Some(self.bridge.as_str());
            if let (true, Some(name)) = (ours, l["ifname"].as_str()) {
                let _ = run_quiet("ip", &["link", "del", name]);
            }
        }
        if links
            .iter()
            .any(|l| l["ifname"].as_str() == Some(self.bridge.as_str()))
        {
            let _ = run_quiet("ip", &["link", "del", &self.bridge]);
        }
        let _ = std::fs::remove_dir_all(&self.root);
        // The host-local form's default store, and the network's nf_tables objects.
        let _ = std::fs::remove_dir_all(Path::new(HOST_LOCAL_STORE).join(&self.network));
        super::nft::remove_network(&self.network, &self.bridge);
        // The network locks, unused-network records and state versions (upgrade.rs) of
        // its networks (the lab's name, and names it prefixes): no process of the lab
        // holds them any more.
        let net = &self.network;
        let named = |name: &str, suffix: &str| {
            name == format!("{net}{suffix}") || name.starts_with(&format!("{net}-"))
        };
        remove_files_in(NETWORK_LOCKS, |name| {
            named(name, ".lock")
                || name.starts_with(&format!("{net}.unused"))
                || name.starts_with(&format!("{net}@"))
                || (name.starts_with(&format!("{net}.")) && name.contains(".state"))
        });
        // The removal locks of its networks (src/firewall/network/locks.rs).
        remove_files_in(REMOVAL_LOCKS, |name| named(name, ".lock"));
        // The bridge locks of its bridge (src/firewall/network/locks.rs).
        remove_bridge_locks(|name| name.starts_with(&format!("{}@", self.bridge)));
        super::nft_bridge::remove_mac_filter_objects(net);
        // What `academy watch` recorded of its networks' repairs (src/cli/repairs.rs).
        remove_files_in(WATCH_RECORDS, |name| named(name, ".last-repair"));
        remove_files_in(RESULTS_DIR, |name| name.starts_with(&format!("{net}-")));
    }
}

/// Where academy keeps its per-network locks and records (src/firewall/network/).
const NETWORK_LOCKS: &str = "/run/academy/networks";
/// Where academy keeps its per-bridge locks (src/firewall/network/locks.rs).
const BRIDGE_LOCKS: &str = "/run/academy/bridges";
const REMOVAL_LOCKS: &str = "/run/academy/networks/removals";

/// The files of network `name`'s release records and due markers, of every node
/// (`<name>@<node>.unused`, `<name>@<node>.<due ms>.due`).
pub fn release_records_of(name: &str) -> Vec<String> {
    std::fs::read_dir(NETWORK_LOCKS)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with(&format!("{name}@")))
        .collect()
}

/// The records, markers, hints and bridge locks of the nodes whose netns inodes are
/// `nodes` (`...@<node>.<...>`), whatever their network.
fn remove_node_files(nodes: &[String]) {
    remove_files_in(NETWORK_LOCKS, |name| {
        nodes.iter().any(|node| name.contains(&format!("@{node}.")))
    });
    remove_bridge_locks(|name| {
        nodes
            .iter()
            .any(|node| name.ends_with(&format!("@{node}.lock")))
    });
}

/// Removes the bridge locks (`<bridge>@<node>.lock`) whose names `which` picks: a test
/// that made a bridge of its own outside a lab (nothing holds them once it is gone).
pub fn remove_bridge_locks(which: impl Fn(&str) -> bool) {
    remove_files_in(BRIDGE_LOCKS, which);
}

/// Removes the files of folder `dir` whose names `which` picks (a missing folder has none).
fn remove_files_in(dir: &str, which: impl Fn(&str) -> bool) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if which(&entry.file_name().to_string_lossy()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
/// Where `academy watch` records each network's last repair (src/cli/repairs.rs).
const WATCH_RECORDS: &str = "/run/academy/watch";

impl Drop for Lab {
    fn drop(&mut self) {
        self.cleanup();
        self.slot.release();
        // The tables are shared: the last lab of the run removes them, while no other
        // lab (whose test may be in the middle of an ADD) can start.
        let mut live = LIVE_LABS.lock().unwrap_or_else(|p| p.into_inner());
        *live = live.saturating_sub(1);
        if *live == 0 {
            super::nft::remove_table_if_unused();
            super::nft_bridge::remove_table_if_unused();
        }
    }
}

/// `lab.config("1.1.0")` with `key: value` pairs set.
pub fn config_with(lab: &Lab, pairs: &[(&str, Value)]) -> Value {
    let mut c = lab.config("1.1.0");
    for (k, v) in pairs {
        c[*k] = v.clone();
    }
    c
}

/// GC as a CNI 1.1 runtime sends it: no attachment variables, the valid list in the config.
pub fn gc_call(lab: &Lab, config: Value, valid: &[(&str, &str)]) -> Call {
    let list: Vec<Value> = valid
        .iter()
        .map(|(cid, ifname)| json!({"containerID": cid, "ifname": ifname}))
        .collect();
    let mut config = config;
    config["cni.dev/valid-attachments"] = Value::Array(list);
    Call::bare()
        .env("CNI_COMMAND", "GC")
        .env("CNI_PATH", lab.bin_dir.to_str().unwrap())
        .config(&config)
}

pub fn gc(lab: &Lab, valid: &[(&str, &str)]) -> Out {
    gc_call(lab, lab.config("1.1.0"), valid).run()
}

/// The container address an ADD result reports (without the prefix).
pub fn result_address(result: &Value) -> String {
    result["ips"][0]["address"]
        .as_str()
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("")
        .to_string()
}

/// The host veth an ADD result reports.
pub fn result_host_veth(result: &Value) -> String {
    result["interfaces"][1]["name"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The network's part of academy's owner comments, as src/attachment.rs writes it: the
/// name's first 20 bytes, '#', and 12 hex digits of its SHA-256 (read here with
/// coreutils' sha256sum, so the test does not share academy's code for it).
pub fn network_key(network: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(network.as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("sha256sum's output");
    let digest = String::from_utf8_lossy(&out.stdout)[..12].to_string();
    let mut end = network.len().min(20);
    while !network.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}#{digest}", &network[..end])
}

/// The owner comment of `network`'s attachment (container `cid`, interface `ifname`).
pub fn owner_comment(network: &str, cid: &str, ifname: &str) -> String {
    format!("{}:{cid}:{ifname}", network_key(network))
}
