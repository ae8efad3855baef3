//! `academy install`: puts this binary into a CNI bin folder, and a conflist or the
//! containerd conf_template into a CNI config folder, the way a DaemonSet's init
//! container does it on every node (deploy/kubernetes/, docs/kubernetes.md).
//!
//! Every file is written as a temp file in its destination folder, fsync'd, then renamed
//! over the old one:
//! - a runtime executing the old binary keeps its inode (the old file is never opened
//!   for writing, which would fail with ETXTBSY or corrupt a running plugin), and the
//!   next invocation gets the whole new binary, never a half-copied one;
//! - containerd 1.6 ignores files moved into its conf_dir from another folder (it
//!   watches for writes, not creates), but sees a rename within the folder.
//!
//! A destination that already has the same bytes and mode is left alone, so running
//! the installer again (every pod restart) changes nothing. Then the conf dir's academy
//! networks are swept of what a rollback's DEL left (orphans.rs) and brought to this
//! release's state (firewall/upgrade.rs). Not a CNI verb:
//! a runtime always sets CNI_COMMAND and passes no arguments, and main.rs only comes
//! here (through cli/) when CNI_COMMAND is unset.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;

use super::nat::networks_in;
use super::orphans::{self, Swept};
use super::{CliError, Parsed};
use crate::config::Config;
use crate::firewall::upgrade::{self, Mode, Step, STATE_VERSION};

/// academy's containerd conf_template (dual stack through .PodCIDRRanges).
const TEMPLATE: &str = include_str!("../../conflists/containerd-template.conflist.tmpl");
/// The template's line after which `--cluster-cidr` puts the masquerade's keys.
const MASQ_ANCHOR: &str = "      \"isDefaultGateway\": true,\n";
/// Its file name in the config folder: containerd's libcni only loads *.conf,
/// *.conflist and *.json from conf_dir, so the template itself is never read as a network.
pub const TEMPLATE_NAME: &str = "academy.conflist.tmpl";

#[derive(Debug, PartialEq)]
struct Options {
    bin_dir: PathBuf,
    conf_dir: PathBuf,
    config: Option<ConfigSource>,
    /// `--cluster-cidr`: the template's nonMasqueradeCIDRs (and ipMasq on).
    cluster_cidrs: Vec<IpNetwork>,
}

#[derive(Debug, PartialEq)]
enum ConfigSource {
    Conflist(PathBuf),
    Template,
}

/// What happened to one destination file.
#[derive(Debug, PartialEq)]
enum Outcome {
    Installed,
    Unchanged,
}

/// Runs `academy install` with its checked flags.
pub fn run(p: &Parsed) -> Result<(), CliError> {
    let options = options(p).map_err(CliError::Usage)?;
    install(&options).map_err(CliError::Failed)
}

fn options(p: &Parsed) -> Result<Options, String> {
    let folder = |flag: &str, default: &str| PathBuf::from(p.value(flag).unwrap_or(default));
    let config = match (p.value("--conflist"), p.has("--template")) {
        (Some(_), true) => return Err("give one of --conflist FILE and --template".into()),
        (Some(file), false) => Some(ConfigSource::Conflist(PathBuf::from(file))),
        (None, true) => Some(ConfigSource::Template),
        (None, false) => None,
    };
    let mut o = Options {
        bin_dir: folder("--bin-dir", "/opt/cni/bin"),
        conf_dir: folder("--conf-dir", "/etc/cni/net.d"),
        config,
        cluster_cidrs: Vec::new(),
    };
    for list in p.values("--cluster-cidr") {
        for cidr in cluster_cidrs(list)? {
            if !o.cluster_cidrs.contains(&cidr) {
                o.cluster_cidrs.push(cidr);
            }
        }
    }
    if !o.cluster_cidrs.is_empty() && o.config != Some(ConfigSource::Template) {
        return Err("--cluster-cidr goes with --template (a conflist given with --conflist is installed as it is)".into());
    }
    Ok(o)
}

/// One `--cluster-cidr` value: prefixes, comma-separated, as the controller manager's
/// `--cluster-cidr` takes them (`10.244.0.0/16,fd00:10:244::/56`).
fn cluster_cidrs(list: &str) -> Result<Vec<IpNetwork>, String> {
    list.split(',')
        .map(str::trim)
        .map(|text| {
            let cidr: IpNetwork = text
                .parse()
                .ok()
                .filter(|_| text.contains('/'))
                .ok_or_else(|| {
                    format!("--cluster-cidr {text:?} is not a CIDR (e.g. 10.244.0.0/16)")
                })?;
            if cidr.network() != cidr.ip() {
                return Err(format!(
                    "--cluster-cidr {text:?} has host bits set; did you mean {}/{}?",
                    cidr.network(),
                    cidr.prefix()
                ));
            }
            Ok(cidr)
        })
        .collect()
}

/// The template to install: the shipped one, or with `cluster` the same with
/// `"ipMasq": true` and `"nonMasqueradeCIDRs"` after `isDefaultGateway`, so a pod's
/// traffic to another node's pods keeps its address and the rest is masqueraded.
fn template(cluster: &[IpNetwork]) -> String {
    if cluster.is_empty() {
        return TEMPLATE.to_string();
    }
    let list: Vec<String> = cluster.iter().map(|c| format!("\"{c}\"")).collect();
    let keys = format!(
        "      \"ipMasq\": true,\n      \"nonMasqueradeCIDRs\": [{}],\n",
        list.join(", ")
    );
    TEMPLATE.replacen(MASQ_ANCHOR, &format!("{MASQ_ANCHOR}{keys}"), 1)
}

fn install(o: &Options) -> Result<(), String> {
    // Read everything first: nothing is written unless every source is good.
    let binary = fs::read("/proc/self/exe")
        .map_err(|e| format!("cannot read this binary (/proc/self/exe): {e}; is /proc mounted?"))?;
    let config = match &o.config {
        None => None,
        Some(ConfigSource::Template) => Some((
            TEMPLATE_NAME.to_string(),
            template(&o.cluster_cidrs).into_bytes(),
        )),
        Some(ConfigSource::Conflist(file)) => Some(read_conflist(file)?),
    };
    report(
        &o.bin_dir.join("academy"),
        put(&o.bin_dir, "academy", &binary, 0o755)?,
    );
    if let Some((name, bytes)) = config {
        report(
            &o.conf_dir.join(&name),
            put(&o.conf_dir, &name, &bytes, 0o644)?,
        );
    }
    bring_networks_up_to_date(&o.conf_dir);
    Ok(())
}

/// Once the new binary is in place: the academy networks of the conf dir get this
/// release's state now (upgrade.rs), not at their next CNI call, which may be hours
/// away on a quiet node. Whatever their records say: a downgrade and upgrade again would
/// leave a current record on state the older binary made. A network without attachments
/// here has nothing to bring up to date and is not named. Never fails the install: the
/// binary is in, and each network's next invocation tries again.
fn bring_networks_up_to_date(conf_dir: &Path) {
    // No conf dir (yet) or none readable: no network to look at.
    let Ok(confs) = networks_in(conf_dir) else {
        return;
    };
    for conf in &confs {
        // First: what a rollback's DEL left goes before anything is put back around it.
        report_sweep(conf, orphans::sweep(conf));
        match upgrade::bring_up_to_date(conf, Mode::Install) {
            Ok(Step::Brought { from, restored }) if !restored.is_empty() => {
                say(&upgrade::brought(&conf.name, from, &restored))
            }
            Ok(Step::Brought { .. }) => say(&format!(
                "network {}: up to date (state version {STATE_VERSION}), nothing missing",
                conf.name
            )),
            Ok(Step::Current | Step::NoAttachments) => {}
            Err(e) => eprintln!(
                "academy install: network {} not brought up to state version {STATE_VERSION}: {e}; its next invocation or `academy restore` tries again",
                conf.name
            ),
        }
    }
}

/// One line per network the sweep removed something from (stdout: done), or could not
/// judge or finish (stderr: the operator's CNI GC or the next install does it).
fn report_sweep(conf: &Config, swept: Swept) {
    match swept {
        Swept::Removed { removed, errors } => {
            if !removed.is_empty() {
                say(&format!(
                    "network {}: removed what no reservation or host veth owns (an older release's DEL leaves it after a rollback): {}",
                    conf.name,
                    removed.join(", ")
                ));
            }
            for e in errors {
                eprintln!(
                    "academy install: network {}: the sweep of what no reservation owns failed: {e}; the next install, or CNI GC with the valid attachments, removes it",
                    conf.name
                );
            }
        }
        Swept::LeftAlone(None) => {}
        Swept::LeftAlone(Some(why)) => eprintln!(
            "academy install: network {}: not swept of what no reservation owns, because {why}",
            conf.name
        ),
    }
}

fn report(path: &Path, outcome: Outcome) {
    let what = match outcome {
        Outcome::Installed => "installed",
        Outcome::Unchanged => "unchanged",
    };
    say(&format!("{what} {}", path.display()));
}

/// One line on stdout; a closed stdout (`| head`) is not the installer's failure.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// A conflist to install: its file name and bytes, after checking it is a network
/// configuration list a runtime can load (a JSON object with a name and plugins).
fn read_conflist(file: &Path) -> Result<(String, Vec<u8>), String> {
    let bytes = fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not JSON: {e}; give a CNI conflist", file.display()))?;
    let has_name = doc.get("name").is_some_and(|n| n.is_string());
    let has_plugins = doc.get("plugins").is_some_and(|p| p.is_array());
    if !has_name || !has_plugins {
        return Err(format!(
            "{} is not a conflist: it needs a \"name\" string and a \"plugins\" list",
            file.display()
        ));
    }
    let name = file
        .file_name()
        .and_then(OsStr::to_str)
        .filter(|n| n.ends_with(".conflist"))
        .ok_or_else(|| {
            format!(
                "{}: name the file *.conflist (runtimes load a list only by that extension)",
                file.display()
            )
        })?;
    Ok((name.to_string(), bytes))
}

/// Writes `bytes` to `dir/name` with `mode` atomically, unless it is already there.
fn put(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<Outcome, String> {
    let dest = dir.join(name);
    sweep_stale_temps(dir, name);
    if is_current(&dest, bytes, mode) {
        return Ok(Outcome::Unchanged);
    }
    if !dir.is_dir() {
        return Err(format!(
            "{} is not a folder; mount the host's folder there (or create it)",
            dir.display()
        ));
    }
    // Hidden, and unique per process, so two installers never write the same temp file
    // and no runtime picks it up as a plugin or a config.
    let tmp = dir.join(format!("{}{}", temp_prefix(name), std::process::id()));
    let written = write_synced(&tmp, bytes, mode).and_then(|()| {
        fs::rename(&tmp, &dest)?;
        // The rename itself is durable only once the folder is synced.
        fs::File::open(dir)?.sync_all()
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", dest.display()));
    }
    Ok(Outcome::Installed)
}

fn temp_prefix(name: &str) -> String {
    format!(".{name}.academy-install.")
}

/// A killed installer (OOM, a node drain, SIGKILL) leaves its temp file: a full copy of
/// the binary (2.3 MB). Removes those of earlier installers: a temp file is stale when
/// its installer's pid is this process's own (an earlier container's pid 1, say), no
/// process has that pid, or it is older than a minute (the pid was reused; writing one
/// takes milliseconds). A live concurrent installer's file is left alone. Best effort.
fn sweep_stale_temps(dir: &Path, name: &str) {
    let prefix = temp_prefix(name);
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let old = entry
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(60));
        let dead = pid == std::process::id() || !Path::new(&format!("/proc/{pid}")).exists();
        if (dead || old) && fs::remove_file(entry.path()).is_ok() {
            say(&format!(
                "removed {}, left by an installer that was killed",
                entry.path().display()
            ));
        }
    }
}

fn is_current(dest: &Path, bytes: &[u8], mode: u32) -> bool {
    let Ok(meta) = fs::symlink_metadata(dest) else {
        return false;
    };
    meta.is_file()
        && meta.permissions().mode() & 0o7777 == mode
        && meta.len() == bytes.len() as u64
        && fs::read(dest).is_ok_and(|old| old == bytes)
}

fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    // The umask may have narrowed the mode given at create.
    f.set_permissions(fs::Permissions::from_mode(mode))?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options of `academy install ARGS`, or the usage error args.rs or options() gives.
    fn parse(list: &[&str]) -> Result<Options, String> {
        let list: Vec<String> = list.iter().map(|a| a.to_string()).collect();
        let install = crate::cli::definitions::find("install").unwrap();
        match Parsed::new(&list, install) {
            Ok(p) => options(&p),
            Err(CliError::Usage(m) | CliError::Failed(m)) => Err(m),
        }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("academy-install-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn defaults_are_the_kubernetes_node_folders() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.bin_dir, Path::new("/opt/cni/bin"));
        assert_eq!(o.conf_dir, Path::new("/etc/cni/net.d"));
        assert_eq!(o.config, None);
    }

    #[test]
    fn usage_errors() {
        assert!(parse(&["--bin-dir"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["--bogus"]).unwrap_err().contains("--bogus"));
        let both = parse(&["--template", "--conflist", "x.conflist"]).unwrap_err();
        assert!(both.contains("one of"), "{both}");
        let twice = parse(&["--template", "--template"]).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
    }

    #[test]
    fn put_replaces_by_rename_and_then_leaves_the_file_alone() {
        let d = temp_dir("put");
        assert_eq!(
            put(&d, "academy", b"one", 0o755).unwrap(),
            Outcome::Installed
        );
        let first = fs::metadata(d.join("academy")).unwrap();
        assert_eq!(first.permissions().mode() & 0o7777, 0o755);
        assert_eq!(
            put(&d, "academy", b"one", 0o755).unwrap(),
            Outcome::Unchanged
        );

        // A reader holding the old file keeps its bytes: the new content is a new inode.
        let held = fs::File::open(d.join("academy")).unwrap();
        assert_eq!(
            put(&d, "academy", b"two", 0o755).unwrap(),
            Outcome::Installed
        );
        use std::os::unix::fs::MetadataExt;
        assert_ne!(
            held.metadata().unwrap().ino(),
            fs::metadata(d.join("academy")).unwrap().ino()
        );
        assert_eq!(fs::read(d.join("academy")).unwrap(), b"two");
        // A mode change alone is a change too.
        assert_eq!(
            put(&d, "academy", b"two", 0o700).unwrap(),
            Outcome::Installed
        );
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("academy")],
            "no temp file left"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn put_removes_the_temp_files_of_killed_installers_only() {
        let d = temp_dir("stale");
        fs::write(d.join("academy"), b"same").unwrap();
        fs::set_permissions(d.join("academy"), fs::Permissions::from_mode(0o755)).unwrap();
        // Past any pid_max (4194304): no such process. And this process's own pid.
        let dead = d.join(".academy.academy-install.4999999");
        let own = d.join(format!(".academy.academy-install.{}", std::process::id()));
        // A live installer's (pid 1 always exists), fresh: kept.
        let live = d.join(".academy.academy-install.1");
        let other = d.join(".other.academy-install.4999999");
        for f in [&dead, &own, &live, &other] {
            fs::write(f, b"partial").unwrap();
        }
        assert_eq!(
            put(&d, "academy", b"same", 0o755).unwrap(),
            Outcome::Unchanged
        );
        assert!(!dead.exists() && !own.exists(), "stale temp files left");
        assert!(live.exists(), "a live installer's temp file was removed");
        assert!(other.exists(), "another file's temp was removed");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn put_into_a_missing_folder_says_so() {
        let d = temp_dir("missing").join("not-there");
        let e = put(&d, "academy", b"x", 0o755).unwrap_err();
        assert!(e.contains("is not a folder"), "{e}");
        fs::remove_dir_all(d.parent().unwrap()).unwrap();
    }

    #[test]
    fn conflists_are_checked_before_anything_is_written() {
        let d = temp_dir("conflist");
        fs::write(d.join("bad.conflist"), "{").unwrap();
        fs::write(d.join("list.json"), r#"{"name":"n","plugins":[]}"#).unwrap();
        fs::write(d.join("flat.conflist"), r#"{"name":"n","type":"academy"}"#).unwrap();
        fs::write(d.join("10-a.conflist"), r#"{"name":"n","plugins":[]}"#).unwrap();
        assert!(read_conflist(&d.join("bad.conflist"))
            .unwrap_err()
            .contains("not JSON"));
        assert!(read_conflist(&d.join("list.json"))
            .unwrap_err()
            .contains("*.conflist"));
        assert!(read_conflist(&d.join("flat.conflist"))
            .unwrap_err()
            .contains("plugins"));
        assert_eq!(
            read_conflist(&d.join("10-a.conflist")).unwrap().0,
            "10-a.conflist"
        );

        let bin = d.join("bin");
        fs::create_dir(&bin).unwrap();
        let o = Options {
            bin_dir: bin.clone(),
            conf_dir: d.clone(),
            config: Some(ConfigSource::Conflist(d.join("bad.conflist"))),
            cluster_cidrs: Vec::new(),
        };
        assert!(install(&o).is_err());
        assert!(
            !bin.join("academy").exists(),
            "the binary was copied before the check"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_template_asks_containerd_for_every_pod_cidr_range() {
        assert!(
            TEMPLATE.contains("range $i, $range := .PodCIDRRanges"),
            "{TEMPLATE}"
        );
        assert!(TEMPLATE.contains(r#""type": "academy""#), "{TEMPLATE}");
    }

    /// The template as containerd renders it for one pod CIDR, parsed as libcni hands
    /// the academy entry to the plugin (the list's cniVersion and name injected).
    fn rendered(template: &str, pod_cidr: &str) -> (serde_json::Value, crate::config::Config) {
        let start = template.find("{{- range").expect("the range block");
        let end = template.find("{{- end}}").expect("its end") + "{{- end}}".len();
        let text = format!(
            "{}[{{ \"subnet\": \"{pod_cidr}\" }}]{}",
            &template[..start],
            &template[end..]
        );
        let list: serde_json::Value = serde_json::from_str(&text).expect("rendered JSON");
        let mut plugin = list["plugins"][0].clone();
        plugin["cniVersion"] = list["cniVersion"].clone();
        plugin["name"] = list["name"].clone();
        let conf = crate::config::Config::parse(plugin.to_string().as_bytes()).unwrap();
        (list, conf)
    }

    /// CNI 1.1's version negotiation: libcni 1.2 and later take the highest of
    /// cniVersions it knows (1.1.0); older ones read cniVersion (1.0.0) and ignore it.
    #[test]
    fn the_template_declares_cni_versions_beside_cni_version() {
        let (list, conf) = rendered(TEMPLATE, "10.244.1.0/24");
        assert_eq!(list["cniVersion"], "1.0.0");
        assert_eq!(list["cniVersions"], serde_json::json!(["1.0.0", "1.1.0"]));
        assert_eq!(template(&[]), TEMPLATE);
        // Without --cluster-cidr, no masquerade (as before).
        assert!(!conf.ip_masq && conf.non_masquerade_cidrs.is_empty());
    }

    #[test]
    fn cluster_cidrs_make_the_template_masquerade_except_to_the_cluster() {
        let o = parse(&[
            "--template",
            "--cluster-cidr",
            "10.244.0.0/16,fd00:10:244::/56",
            "--cluster-cidr",
            "10.244.0.0/16",
            "--cluster-cidr",
            "10.96.0.0/12",
        ])
        .unwrap();
        let want: Vec<IpNetwork> = ["10.244.0.0/16", "fd00:10:244::/56", "10.96.0.0/12"]
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        assert_eq!(o.cluster_cidrs, want);
        let text = template(&o.cluster_cidrs);
        assert!(
            text.contains(concat!(
                "      \"isDefaultGateway\": true,\n",
                "      \"ipMasq\": true,\n",
                "      \"nonMasqueradeCIDRs\": [\"10.244.0.0/16\", \"fd00:10:244::/56\", \"10.96.0.0/12\"],\n"
            )),
            "{text}"
        );
        let (list, conf) = rendered(&text, "10.244.1.0/24");
        assert_eq!(list["cniVersions"], serde_json::json!(["1.0.0", "1.1.0"]));
        assert!(conf.ip_masq);
        assert_eq!(conf.non_masquerade_cidrs, want);

        for (bad, needle) in [
            (
                &["--template", "--cluster-cidr", "10.244.0.0"][..],
                "not a CIDR",
            ),
            (
                &["--template", "--cluster-cidr", "10.244.0.0/16,"],
                "not a CIDR",
            ),
            (
                &["--template", "--cluster-cidr", "10.244.1.0/16"],
                "host bits",
            ),
            (&["--template", "--cluster-cidr"], "needs a value"),
            (&["--cluster-cidr", "10.244.0.0/16"], "goes with --template"),
            (
                &[
                    "--conflist",
                    "a.conflist",
                    "--cluster-cidr",
                    "10.244.0.0/16",
                ],
                "goes with --template",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
    }
}
