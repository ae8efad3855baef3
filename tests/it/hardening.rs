//! Hardening (issue 14): what a hostile or unlucky host can put in academy's way, and the
//! fast, clear error (or the harmless success) it must get instead of a hang, a leak or a
//! write outside the store. Root only; each test reproduces one defect of the red-team
//! pass and fails without its fix.
//!
//! | n   | test                                                        | item |
//! |-----|-------------------------------------------------------------|------|
//! | 150 | fifo_at_the_hint_is_ignored_not_waited_on                   | 1    |
//! | 151 | fifo_at_a_holder_index_fails_add_fast_and_del_leaves_it     | 1    |
//! | 152 | fifo_at_a_reservation_named_in_the_index_is_not_ours        | 1    |
//! | 153 | fifo_as_cni_netns_is_refused_at_once                        | 1    |
//! | 154 | symlinked_holders_is_never_followed                         | 2    |
//! | 155 | store_not_private_to_the_running_user_is_refused            | 2    |
//! | 156 | add_undone_after_its_index_vanished_frees_its_reservation   | 3    |
//! | 157 | non_utf8_environment_is_honoured_or_refused_by_name         | 4    |
//! | 158 | ipam_gateway_at_network_or_broadcast_is_refused_up_front    | 5    |
//! | 159 | owner_alias_too_long_is_refused_before_the_kernel           | 6    |
//! | 160 | directory_or_symlink_at_an_indexed_address_does_not_wedge_del | 7  |
//! | 161 | requesting_the_gateway_says_so                              | 8    |
//! | 162 | garbage_reservation_content_is_escaped_and_capped           | 8    |
//! | 163 | prev_result_must_be_an_object_with_valid_interface_indexes  | 8    |
//! | 164 | read_only_store_undo_does_not_warn_about_an_index_never_made | 8   |
//! | 165 | stale_holder_temp_of_a_killed_add_goes_with_its_del         | 8    |
//! | 166 | a_failing_ipam_plugin_s_output_is_capped                    | 8 (class) |

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;
use serde_json::json;

/// Longer than any healthy invocation here; a hang is killed at this bound.
const BOUND_SECS: &str = "15";

/// Runs the call under `timeout`, so a hang fails the test instead of wedging it.
fn run_bounded(call: &Call, what: &str) -> Out {
    let out = call.spawn(
        "timeout",
        &["-s", "KILL", BOUND_SECS, env!("CARGO_BIN_EXE_academy")],
    );
    assert!(
        out.code != 137 && out.code != -9,
        "{what} hung (killed after {BOUND_SECS} s):\n{out}"
    );
    out
}

fn mkfifo(path: &Path) {
    let out = run("mkfifo", &[path.to_str().unwrap()], &[]);
    assert_eq!(out.code, 0, "mkfifo {}: {out}", path.display());
}

fn index_path(lab: &Lab, a: &Attach) -> PathBuf {
    store_dir(lab)
        .join("holders")
        .join(format!("{}:{}", a.cid, a.ifname))
}

/// Creates the lab's store (and holders/) the way academy does: one ADD and its DEL.
fn make_store(lab: &Lab) {
    lab.call("ADD")
        .run()
        .expect_result("ADD to create the store");
    lab.call("DEL").run().expect_silent_success("DEL");
    assert!(store_dir(lab).join("holders").is_dir());
}

fn no_lab_links(lab: &Lab, when: &str) {
    let links = lab.lab_links();
    assert!(links.is_empty(), "{when}: links left: {links:?}");
}

// ---------------------------------------------------------------------------------------
// Item 1: FIFOs
// ---------------------------------------------------------------------------------------

/// The hint is only a hint: a FIFO there is ignored (never opened for a blocking read),
/// ADD and STATUS succeed at once and leave it alone.
#[test]
fn fifo_at_the_hint_is_ignored_not_waited_on() {
    let lab = Lab::new("hfifohint");
    make_store(&lab);
    let hint = store_dir(&lab).join("last_reserved_ip.0");
    let _ = std::fs::remove_file(&hint);
    mkfifo(&hint);
    let out = run_bounded(&lab.call("ADD"), "ADD with a FIFO at the hint");
    out.expect_result("ADD with a FIFO at the hint");
    run_bounded(&lab.call("STATUS"), "STATUS with a FIFO at the hint")
        .expect_silent_success("STATUS");
    run_bounded(&lab.call("DEL"), "DEL").expect_silent_success("DEL");
    let kind = std::fs::symlink_metadata(&hint).unwrap().file_type();
    assert!(kind.is_fifo(), "the FIFO at the hint was replaced");
}

/// A FIFO where the attachment's holder index belongs: ADD fails at once with code 5
/// naming it, and DEL (nothing of academy's to free) succeeds and leaves it.
#[test]
fn fifo_at_a_holder_index_fails_add_fast_and_del_leaves_it() {
    let lab = Lab::new("hfifoidx");
    make_store(&lab);
    let index = index_path(&lab, &lab.attach());
    mkfifo(&index);
    let out = run_bounded(&lab.call("ADD"), "ADD with a FIFO at its index");
    assert_cni_error(&out, 5, &["holders", "not a regular file"]);
    no_lab_links(&lab, "after the refused ADD");
    let out = run_bounded(&lab.call("DEL"), "DEL with a FIFO at its index");
    out.expect_silent_success("DEL with a FIFO at its index");
    assert!(index.exists(), "DEL removed a FIFO academy did not make");
    assert!(address_files(&lab).is_empty(), "{:?}", lab.reservations());
}

/// A FIFO at an address the attachment's own index names: not academy's reservation, so
/// ADD takes another address and DEL succeeds, both at once, and the FIFO stays.
#[test]
fn fifo_at_a_reservation_named_in_the_index_is_not_ours() {
    let lab = Lab::new("hfifores");
    make_store(&lab);
    let a = lab.attach();
    std::fs::write(index_path(&lab, &a), format!("{}\n", lab.ip(5))).unwrap();
    let fifo = store_dir(&lab).join(lab.ip(5));
    mkfifo(&fifo);
    let out = run_bounded(&lab.call("ADD"), "ADD with a FIFO at its indexed address");
    let result = out.expect_result("ADD with a FIFO at its indexed address");
    assert_ne!(result_address(&result), lab.ip(5));
    run_bounded(&lab.call("DEL"), "DEL").expect_silent_success("DEL");
    assert!(fifo.exists(), "the FIFO was removed");
    // A DEL with the FIFO still named by a leftover index must not hang either.
    std::fs::write(index_path(&lab, &a), format!("{}\n", lab.ip(5))).unwrap();
    run_bounded(&lab.call("DEL"), "second DEL").expect_silent_success("second DEL");
    assert!(fifo.exists(), "the FIFO was removed");
}

/// A FIFO as CNI_NETNS: ADD and CHECK fail at once with code 102 (the reference does too).
#[test]
fn fifo_as_cni_netns_is_refused_at_once() {
    let lab = Lab::new("hfifons");
    let fifo = lab.root.join("netns-fifo");
    mkfifo(&fifo);
    for verb in ["ADD", "CHECK"] {
        let call = lab
            .call(verb)
            .env("CNI_NETNS", fifo.to_str().unwrap())
            .config(&json!({
                "cniVersion": "1.1.0", "name": lab.network, "type": "academy",
                "bridge": lab.bridge, "subnet": lab.subnet(),
                "dataDir": lab.data_dir.to_str().unwrap(),
                "prevResult": {"cniVersion": "1.1.0", "interfaces": [], "ips": []}
            }));
        let out = run_bounded(&call, &format!("{verb} with a FIFO as CNI_NETNS"));
        assert_cni_error(&out, 102, &["CNI_NETNS", "not a network namespace"]);
    }
    no_lab_links(&lab, "after the refused ADD");
    assert!(lab.reservations().is_empty(), "{:?}", lab.reservations());
}

// ---------------------------------------------------------------------------------------
// Item 2: symlinks and ownership in the store
// ---------------------------------------------------------------------------------------

/// holders/ replaced by a symlink to a folder outside the store: GC must not delete the
/// file there (it did, for a name with ':'), ADD must not write its index there (it did);
/// both refuse the store with code 5.
#[test]
fn symlinked_holders_is_never_followed() {
    let lab = Lab::new("hholders");
    make_store(&lab);
    let outside = lab.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("victim:eth0"), "keep me").unwrap();
    let holders = store_dir(&lab).join("holders");
    std::fs::remove_dir(&holders).unwrap();
    std::os::unix::fs::symlink(&outside, &holders).unwrap();

    let out = gc(&lab, &[]);
    assert_cni_error(&out, 5, &["holders"]);
    assert!(
        outside.join("victim:eth0").exists(),
        "GC deleted a file outside the store"
    );
    let out = lab.call("ADD").run();
    assert_cni_error(&out, 5, &["holders"]);
    let outside_now: Vec<String> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(outside_now, ["victim:eth0"], "ADD wrote outside the store");
    no_lab_links(&lab, "after the refused ADD");
    // A symlink at a reservation name is not followed either: DEL leaves it.
    assert!(address_files(&lab).is_empty());
}

/// A network directory or holders/ that someone else owns, or that others may write,
/// lets them forge or free reservations: refused with code 5, saying what to fix.
#[test]
fn store_not_private_to_the_running_user_is_refused() {
    let lab = Lab::new("hprivate");
    make_store(&lab);
    let dir = store_dir(&lab);
    let holders = dir.join("holders");
    let cases: [(&Path, &str); 3] = [(&dir, "chmod"), (&holders, "chmod"), (&dir, "chown")];
    for (path, how) in cases {
        if how == "chmod" {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o770)).unwrap();
        } else {
            std::os::unix::fs::chown(path, Some(65534), None).unwrap();
        }
        let out = lab.call("ADD").run();
        let err = assert_cni_error(&out, 5, &[path.to_str().unwrap()]);
        assert!(
            err["details"].as_str().unwrap().contains(how),
            "the details do not say to {how}: {err}"
        );
        assert!(lab.lab_links().is_empty());
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(path, Some(0), Some(0)).unwrap();
    }
    lab.call("ADD")
        .run()
        .expect_result("ADD once private again");
    lab.call("DEL").run().expect_silent_success("DEL");
}

// ---------------------------------------------------------------------------------------
// Item 3: the undo of an ADD whose index vanished
// ---------------------------------------------------------------------------------------

/// The holder index is removed (as a GC that does not list the attachment, or a racing
/// DEL, would) while ADD is held just before linking its reservation. ADD then fails
/// with code 11; its undo must remove the reservation it linked itself (it used to stay,
/// and no DEL could free it), and the message must say what happened.
#[test]
fn add_undone_after_its_index_vanished_frees_its_reservation() {
    let lab = Lab::new("hrace");
    make_store(&lab);
    let a = lab.attach();
    let index = index_path(&lab, &a);
    // The reservation is ADD's first linkat (O_TMPFILE via /proc, or a named temp).
    let inject = Inject {
        syscall: "linkat".into(),
        when: 1,
        action: Action::Delay(1_500_000),
    };
    let file = lab.root.join("add.trace");
    let mut add = start_strace(&lab.call("ADD"), &file, "linkat", Some(&inject));
    assert!(
        wait_until(Duration::from_secs(10), || index.exists()),
        "ADD never wrote its index"
    );
    std::fs::remove_file(&index).unwrap();
    assert!(add.running(), "ADD finished before the index was removed");
    let out = add.finish();
    assert_cni_error(&out, 11, &["holder index"]);
    assert!(
        address_files(&lab).is_empty(),
        "the undone ADD left its reservation: {:?}",
        lab.reservations()
    );
    no_lab_links(&lab, "after the undone ADD");
}

// ---------------------------------------------------------------------------------------
// Item 4: the environment as bytes
// ---------------------------------------------------------------------------------------

/// Runs the plugin with the call's variables, `raw` (bytes, not necessarily UTF-8) on
/// top, and the call's stdin.
fn run_raw(call: &Call, raw: &[(&str, &[u8])]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_academy"));
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(&call.vars);
    for (k, v) in raw {
        cmd.env(k, OsStr::from_bytes(v));
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(&call.stdin);
    drop(stdin);
    Out::from(child.wait_with_output().unwrap())
}

#[test]
fn non_utf8_environment_is_honoured_or_refused_by_name() {
    let lab = Lab::new("hbytes");
    // A non-UTF-8 byte in another key of CNI_ARGS: IP= and MAC= are still honoured.
    let mut args = format!(
        "IgnoreUnknown=1;IP={};MAC=02:00:00:aa:bb:cc;K8S_POD_NAME=",
        lab.ip(9)
    )
    .into_bytes();
    args.extend_from_slice(b"p\xffod");
    let out = run_raw(&lab.call("ADD"), &[("CNI_ARGS", &args)]);
    let result = out.expect_result("ADD with a non-UTF-8 pod name in CNI_ARGS");
    assert_eq!(
        result_address(&result),
        lab.ip(9),
        "IP= was dropped: {result}"
    );
    assert_eq!(
        result["interfaces"][2]["mac"], "02:00:00:aa:bb:cc",
        "MAC= was dropped"
    );
    run_raw(&lab.call("DEL"), &[("CNI_ARGS", &args)]).expect_silent_success("DEL");

    // A non-UTF-8 byte inside IP=: never dropped silently, code 4 naming CNI_ARGS.
    let mut bad_ip = format!("IP={}", lab.ip(9)).into_bytes();
    bad_ip.push(0xfe);
    let out = run_raw(&lab.call("ADD"), &[("CNI_ARGS", &bad_ip)]);
    assert_cni_error(&out, 4, &["CNI_ARGS"]);
    assert!(lab.reservations().is_empty(), "{:?}", lab.reservations());

    // CNI_COMMAND: code 4 and JSON, not exit 0 with nothing on stdout.
    let out = run_raw(&lab.call("ADD"), &[("CNI_COMMAND", b"AD\xffD")]);
    assert_cni_error(&out, 4, &["CNI_COMMAND"]);
    // CNI_CONTAINERID: invalid, not "not set".
    let out = run_raw(&lab.call("ADD"), &[("CNI_CONTAINERID", b"c\xff1")]);
    let err = assert_cni_error(&out, 4, &["CNI_CONTAINERID"]);
    assert!(!err["msg"].as_str().unwrap().contains("not set"), "{err}");
    for var in ["CNI_NETNS", "CNI_IFNAME", "CNI_PATH"] {
        let out = run_raw(&lab.call("ADD"), &[(var, b"x\xff")]);
        assert_cni_error(&out, 4, &[var]);
    }
    no_lab_links(&lab, "after the refused ADDs");
    assert!(lab.reservations().is_empty(), "{:?}", lab.reservations());
}

// ---------------------------------------------------------------------------------------
// Item 5: the gateway in the ipam form
// ---------------------------------------------------------------------------------------

#[test]
fn ipam_gateway_at_network_or_broadcast_is_refused_up_front() {
    let lab = Lab::new("hgw");
    for (gw, what) in [
        (lab.ip(0), "network address"),
        (lab.ip(255), "broadcast address"),
    ] {
        let range = json!({"subnet": lab.subnet(), "gateway": gw});
        for ipam in [
            json!({"type": "host-local", "subnet": lab.subnet(), "gateway": gw,
                   "dataDir": lab.data_dir.to_str().unwrap()}),
            json!({"type": "host-local", "ranges": [[range]],
                   "dataDir": lab.data_dir.to_str().unwrap()}),
        ] {
            let config = json!({
                "cniVersion": "1.1.0", "name": lab.network, "type": "academy",
                "bridge": lab.bridge, "isGateway": true, "isDefaultGateway": true,
                "ipam": ipam,
            });
            let out = lab.call("ADD").config(&config).run();
            assert_cni_error(&out, 7, &["gateway", &gw, what]);
            assert!(
                !link_exists(&lab.bridge),
                "the kernel was touched before validation"
            );
            assert!(lab.reservations().is_empty());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Item 6: the owner alias
// ---------------------------------------------------------------------------------------

#[test]
fn owner_alias_too_long_is_refused_before_the_kernel() {
    let lab = Lab::new("halias");
    let long_name = format!("{}-{}", lab.network, "n".repeat(120 - lab.network.len()));
    let long_id = format!("{}{}", lab.cid, "c".repeat(190 - lab.cid.len()));
    let mut config = lab.config("1.1.0");
    config["name"] = json!(long_name);
    let out = lab
        .call("ADD")
        .env("CNI_CONTAINERID", &long_id)
        .config(&config)
        .run();
    assert_cni_error(&out, 4, &["CNI_CONTAINERID", "255"]);
    assert!(!link_exists(&lab.bridge), "the kernel was touched");
    assert!(
        !lab.data_dir.join(&long_name).exists()
            || std::fs::read_dir(lab.data_dir.join(&long_name).join("holders"))
                .map(|d| d.count() == 0)
                .unwrap_or(true),
        "a reservation was made"
    );
    let _ = std::fs::remove_dir_all(lab.data_dir.join(&long_name));
    // DEL of such an attachment (never added) is a silent success.
    lab.call("DEL")
        .env("CNI_CONTAINERID", &long_id)
        .config(&config)
        .run()
        .expect_silent_success("DEL");
}

// ---------------------------------------------------------------------------------------
// Item 7: non-files at indexed addresses
// ---------------------------------------------------------------------------------------

#[test]
fn directory_or_symlink_at_an_indexed_address_does_not_wedge_del() {
    let lab = Lab::new("hnotfile");
    make_store(&lab);
    let a = lab.attach();
    let dir = store_dir(&lab);
    std::fs::create_dir(dir.join(lab.ip(6))).unwrap();
    let target = lab.root.join("target");
    std::fs::write(&target, format!("{}\r\n{}", a.cid, a.ifname)).unwrap();
    std::os::unix::fs::symlink(&target, dir.join(lab.ip(7))).unwrap();
    std::fs::write(
        index_path(&lab, &a),
        format!("{}\n{}\n", lab.ip(6), lab.ip(7)),
    )
    .unwrap();
    lab.call("DEL")
        .run()
        .expect_silent_success("DEL with a directory and a symlink at its addresses");
    assert!(dir.join(lab.ip(6)).is_dir(), "DEL removed a directory");
    assert!(
        std::fs::symlink_metadata(dir.join(lab.ip(7))).is_ok() && target.exists(),
        "DEL removed the symlink or its target"
    );
    assert!(!index_path(&lab, &a).exists(), "the index stayed");
}

// ---------------------------------------------------------------------------------------
// Item 8: the smaller ones
// ---------------------------------------------------------------------------------------

#[test]
fn requesting_the_gateway_says_so() {
    let lab = Lab::new("hreqgw");
    for (ip, why) in [
        (lab.gateway(), "gateway"),
        (lab.ip(0), "network address"),
        (lab.ip(255), "broadcast address"),
    ] {
        let out = lab.call("ADD").env("CNI_ARGS", &format!("IP={ip}")).run();
        let err = assert_cni_error(&out, 111, &[&ip, why]);
        assert!(
            !err["msg"].as_str().unwrap().contains("in no range"),
            "{err}"
        );
    }
    assert!(lab.reservations().is_empty());
    no_lab_links(&lab, "after the refused ADDs");
}

#[test]
fn garbage_reservation_content_is_escaped_and_capped() {
    let lab = Lab::new("hgarbage");
    make_store(&lab);
    let mut garbage = b"\x1b[31mEVIL\x07\n".to_vec();
    garbage.extend(std::iter::repeat_n(b'A', 3000));
    std::fs::write(store_dir(&lab).join(lab.ip(9)), &garbage).unwrap();
    let out = lab
        .call("ADD")
        .env("CNI_ARGS", &format!("IP={}", lab.ip(9)))
        .run();
    let err = assert_cni_error(&out, 111, &[&lab.ip(9)]);
    let msg = err["msg"].as_str().unwrap();
    assert!(
        !msg.chars().any(|c| c.is_control()),
        "control characters in the message: {msg:?}"
    );
    assert!(msg.len() < 400, "{} bytes of message: {msg:?}", msg.len());
}

#[test]
fn prev_result_must_be_an_object_with_valid_interface_indexes() {
    let lab = Lab::new("hprev");
    let cases = [
        json!(5),
        json!(["a"]),
        json!({"cniVersion": "1.1.0", "interfaces": [{"name": "x"}],
               "ips": [{"address": format!("{}/24", lab.ip(50)), "interface": 7}]}),
    ];
    for prev in cases {
        let config = lab.config_with("1.1.0", "prevResult", prev.clone());
        let out = lab.call("ADD").config(&config).run();
        assert_cni_error(&out, 7, &["prevResult"]);
        no_lab_links(&lab, &format!("ADD with prevResult {prev}"));
        assert!(lab.reservations().is_empty());
    }
}

/// A guard that unmounts a tmpfs (before the lab removes its folder).
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn read_only_store_undo_does_not_warn_about_an_index_never_made() {
    let lab = Lab::new("hro");
    let data = lab.root.join("ro");
    std::fs::create_dir(&data).unwrap();
    let target = data.to_str().unwrap();
    assert_eq!(
        run(
            "mount",
            &["-t", "tmpfs", "-o", "size=1m", "tmpfs", target],
            &[]
        )
        .code,
        0
    );
    let _mount = Mount(data.clone());
    let config = lab.config_with("1.1.0", "dataDir", json!(target));
    lab.call("ADD").config(&config).run().expect_result("ADD");
    lab.call("DEL")
        .config(&config)
        .run()
        .expect_silent_success("DEL");
    assert_eq!(run("mount", &["-o", "remount,ro", target], &[]).code, 0);
    let out = lab.call("ADD").config(&config).run();
    assert_cni_error(&out, 5, &["holder index"]);
    assert!(
        !out.stderr.contains("while undoing"),
        "the undo warned about something it never made:\n{out}"
    );
    no_lab_links(&lab, "after the failed ADD");
}

/// A run killed between writing its index's temp file and renaming it leaves
/// `holders/.tmp.*`; runtimes that never send GC must not collect these forever: the
/// attachment's own DEL (which the runtime sends after a failed ADD) removes it.
#[test]
fn stale_holder_temp_of_a_killed_add_goes_with_its_del() {
    let lab = Lab::new("hstaletmp");
    make_store(&lab);
    let inject = Inject {
        syscall: "renameat,renameat2".into(),
        when: 1,
        action: Action::Kill,
    };
    let file = lab.root.join("kill.trace");
    let (out, _) = run_strace(&lab.call("ADD"), &file, "renameat,renameat2", Some(&inject));
    assert_ne!(out.code, 0, "ADD was not killed:\n{out}");
    assert!(
        !tmp_files(&lab).is_empty(),
        "the kill left no temp file; the test no longer reproduces the leftover"
    );
    lab.call("DEL")
        .run()
        .expect_silent_success("DEL after the kill");
    assert!(
        tmp_files(&lab).is_empty(),
        "DEL left the killed ADD's temp files: {:?}",
        tmp_files(&lab)
    );
}

/// The class of item 8's raw echo: what a failing delegated IPAM plugin printed goes
/// into the message escaped and cut short, not 20 kB of it.
#[test]
fn a_failing_ipam_plugin_s_output_is_capped() {
    let lab = Lab::new("hnoisy");
    lab.install_script(
        "noisy",
        "#!/bin/sh\nprintf '\\033[31m'\nhead -c 20000 /dev/zero | tr '\\0' x\nexit 3\n",
    );
    let config = json!({
        "cniVersion": "1.1.0", "name": lab.network, "type": "academy",
        "bridge": lab.bridge, "ipam": {"type": "noisy"},
    });
    let out = lab.call("ADD").config(&config).run();
    let err = assert_cni_error(&out, 5, &["noisy"]);
    let msg = err["msg"].as_str().unwrap();
    assert!(msg.len() < 600, "{} bytes of message", msg.len());
    assert!(!msg.chars().any(|c| c.is_control()), "{msg:?}");
    no_lab_links(&lab, "after the failed ADD");
}
