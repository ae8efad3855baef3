//! Running another IPAM plugin, as the spec lays down: found in CNI_PATH, given the same
//! environment (CNI_COMMAND set to the verb) and the same network config on stdin.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};

use serde_json::Value;

use crate::cni::env::{Command, Env};
use crate::cni::error::cut_short;
use crate::cni::{code, Error, Result};

/// Runs `plugin` for `command`. Returns its parsed stdout (the result, for ADD).
pub fn exec(plugin: &str, command: Command, env: &Env, stdin: &[u8]) -> Result<Option<Value>> {
    let path = find(plugin, &env.path)?;
    let mut child = Process::new(&path)
        .env("CNI_COMMAND", command.name())
        .env("CNI_CONTAINERID", &env.container_id)
        .env("CNI_NETNS", &env.netns)
        .env("CNI_IFNAME", &env.ifname)
        .env("CNI_ARGS", OsStr::from_bytes(&env.args))
        .env("CNI_PATH", &env.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::io(format!("cannot run IPAM plugin {}", path.display()), &e))?;
    // A plugin that exits without reading stdin closes the pipe; its exit status says why.
    let _ = child.stdin.take().expect("stdin is piped").write_all(stdin);
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io(format!("IPAM plugin {plugin} did not finish"), &e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed: Option<Value> = serde_json::from_str(text.trim()).ok();
    if out.status.success() {
        return Ok(parsed);
    }
    // A CNI error from the delegate keeps its code: it is the most precise one there is.
    let (code, msg, details) = match &parsed {
        Some(v) if v.get("code").is_some() => (
            v["code"].as_u64().unwrap_or(999) as u32,
            v.get("msg")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            v.get("details")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        ),
        _ => (
            code::IO_FAILURE,
            format!(
                "exited with {} and printed {:?}",
                out.status,
                cut_short(text.trim(), 200)
            ),
            String::new(),
        ),
    };
    Err(Error::new(
        code,
        format!("IPAM plugin {plugin} failed ({}): {msg}", command.name()),
    )
    .details(details))
}

fn find(plugin: &str, cni_path: &str) -> Result<PathBuf> {
    if cni_path.is_empty() {
        return Err(Error::env(format!(
            "CNI_PATH is not set, so the IPAM plugin {plugin} cannot be found"
        )));
    }
    cni_path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join(plugin))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::config(format!(
                "IPAM plugin {plugin} was not found in CNI_PATH {cni_path}"
            ))
            .details(
                "install it there, or use \"type\": \"host-local\" to use academy's own allocator",
            )
        })
}
