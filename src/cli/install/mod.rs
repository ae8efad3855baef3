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
//! networks are swept of what a rollback's DEL left and brought to this release's state
//! (networks.rs). Not a CNI verb:
//! a runtime always sets CNI_COMMAND and passes no arguments, and main.rs only comes
//! here (through cli/) when CNI_COMMAND is unset.
//!
//! - `files.rs`: a file put in place by temp file, fsync and rename, unless current;
//! - `template.rs`: the containerd conf_template, with `--cluster-cidr`'s keys;
//! - `networks.rs`: the conf dir's networks after the binary is in (the sweep of
//!   `orphans.rs`, then upgrade.rs's bring-up).

mod files;
mod networks;
mod orphans;
mod template;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;

use super::{CliError, Parsed};
use files::{put, read_conflist, Outcome};
use networks::bring_networks_up_to_date;
use template::{cluster_cidrs, template, TEMPLATE_NAME};

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

    #[test]
    fn conflists_are_checked_before_anything_is_written() {
        let d = files::temp_dir("conflist");
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
        let (list, conf) = template::rendered(&text, "10.244.1.0/24");
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
