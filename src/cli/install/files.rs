//! A file put in place as an installer must: a temp file in the destination folder,
//! fsync'd, renamed over the old one, and nothing written when the bytes and mode are
//! already there (see the module's comment).

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::say;

/// What happened to one destination file.
#[derive(Debug, PartialEq)]
pub(super) enum Outcome {
    Installed,
    Unchanged,
}

/// A conflist to install: its file name and bytes, after checking it is a network
/// configuration list a runtime can load (a JSON object with a name and plugins).
pub(super) fn read_conflist(file: &Path) -> Result<(String, Vec<u8>), String> {
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
pub(super) fn put(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<Outcome, String> {
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

/// A fresh folder of the unit tests' own.
#[cfg(test)]
pub(super) fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("academy-install-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
