//! Gives the binary the git commit it is built from (`academy --version`), as
//! ACADEMY_GIT_COMMIT: HEAD's full hash, with " (with uncommitted changes)" when tracked
//! files differ from it, or "unknown" where there is no repository of this crate (a
//! source tarball, a build context without .git) or no git.

use std::path::Path;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = dir.as_str();
    let top = git(dir, &["rev-parse", "--show-toplevel"]);
    // Only this crate's own repository: not one that happens to contain its folder.
    let ours = top.is_some_and(|top| same_folder(&top, dir));
    let commit = if ours { head(dir) } else { None };
    println!(
        "cargo:rustc-env=ACADEMY_GIT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    // Run again when HEAD moves (a commit, a checkout) and when a source changes (it may
    // make the tree dirty or clean). Files that do not exist are not named: cargo would
    // then run this script, and rebuild the crate, on every build.
    for name in ["HEAD", "packed-refs"] {
        watch(git(dir, &["rev-parse", "--git-path", name]), dir);
    }
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch(git(dir, &["rev-parse", "--git-path", &branch]), dir);
    }
    for path in ["build.rs", "src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={path}");
    }
}

fn head(dir: &str) -> Option<String> {
    let sha = git(dir, &["rev-parse", "HEAD"])?;
    // --no-optional-locks: status would otherwise rewrite the index's stat cache.
    let changed = git(
        dir,
        &[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )?;
    Some(if changed.is_empty() {
        sha
    } else {
        format!("{sha} (with uncommitted changes)")
    })
}

fn same_folder(a: &str, b: &str) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn watch(path: Option<String>, dir: &str) {
    if let Some(path) = path {
        let path = Path::new(dir).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// git's trimmed stdout, or None when git is missing or fails.
fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
