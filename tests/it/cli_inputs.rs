//! Files an operator names to `academy list` and `reclaim --keep-ids` (issue 19): a FIFO
//! with no writer, or anything else that is not a file, is refused at once with a
//! message saying what it is, instead of blocking the command forever; a pipe with a
//! writer (`--keep-ids <(crictl pods -q)`) is still read.

use crate::common::*;

/// `timeout 5 academy ARGS`: a hang fails the test instead of wedging the run.
fn academy_bounded(args: &[&str]) -> Out {
    let mut all = vec!["5", plugin()];
    all.extend_from_slice(args);
    let out = run("timeout", &all, &[]);
    assert_ne!(out.code, 124, "academy {} hung:\n{out}", args.join(" "));
    out
}

fn fifo(lab: &Lab, name: &str) -> String {
    let path = lab.root.join(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn a_fifo_or_a_folder_given_as_a_file_is_refused_at_once() {
    let lab = Lab::new("clififo");
    lab.write_conflist("1.1.0", "academy", serde_json::json!({}));
    let list = lab.conf_dir.join("10-lab.conflist");
    let list = list.to_str().unwrap();
    let pipe = fifo(&lab, "conflist.fifo");
    let out = academy_bounded(&["list", &pipe]);
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stderr.contains("FIFO"), "{out}");

    let ids = fifo(&lab, "ids.fifo");
    let out = academy_bounded(&["reclaim", list, "--keep-ids", &ids, "--dry-run"]);
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stderr.contains("FIFO"), "{out}");

    let folder = lab.root.to_str().unwrap();
    let out = academy_bounded(&["list", folder]);
    assert_eq!(out.code, 1, "{out}");
    assert!(
        out.stderr.contains("a directory, not a regular file"),
        "{out}"
    );
}

#[test]
fn keep_ids_from_a_pipe_with_a_writer_is_read() {
    let lab = Lab::new("clipipe");
    lab.write_conflist("1.1.0", "academy", serde_json::json!({}));
    let list = lab.conf_dir.join("10-lab.conflist");
    let script = format!(
        "exec {} reclaim {} --keep-ids <(sleep 0.2; echo some-container) --dry-run",
        plugin(),
        list.display()
    );
    let out = run("timeout", &["5", "bash", "-c", &script], &[]);
    assert_eq!(out.code, 0, "{out}");
}
