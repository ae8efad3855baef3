//! `academy convert --in-place`: the conflist rewritten where it really is, keeping its
//! mode and owner, through an exclusive temporary file.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Rewrites the file `path` names, through a symlink if it is one (the link stays a
/// link), keeping the file's mode and owner. The new text goes to a temporary file in
/// the target's folder, created exclusively under a name no one can guess (pid and 64
/// random bits), never through a symlink: a link planted there is refused (EEXIST), not
/// written through. Then it is renamed over the target, so a reader sees the old file or
/// the new one, never a part. Returns the file rewritten.
pub(super) fn rewrite(path: &Path, text: &str) -> std::io::Result<PathBuf> {
    let target = std::fs::canonicalize(path)?;
    let meta = std::fs::metadata(&target)?;
    let dir = target.parent().unwrap_or(Path::new("/"));
    let base = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut last = None;
    for _ in 0..8 {
        let tmp = dir.join(format!(
            ".{base}.academy-convert.{}.{:016x}",
            std::process::id(),
            random_u64()
        ));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = (|| {
            // Owner first: chown clears set-id bits that the mode then puts back.
            std::os::unix::fs::fchown(&file, Some(meta.uid()), Some(meta.gid()))?;
            file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &target)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        return Ok(target);
    }
    Err(last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists)))
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if !crate::random::fill(&mut bytes) {
        // Without randomness the pid and the clock still vary; O_EXCL keeps it safe.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        return u64::from(nanos) << 32 | u64::from(std::process::id());
    }
    u64::from_ne_bytes(bytes)
}
