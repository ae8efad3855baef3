//! Running programs: the plugin as a runtime calls it ([`Call`]), and any other program
//! (ip, cnitool, strace, podman) with a clean environment. One runner ([`start`]) does
//! the spawning for all of them; [`Out`] is what a finished process did.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::assertions::assert_no_panic;

/// The only variable a child gets from the test besides what the test gives it.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The plugin binary cargo built for these tests.
pub fn plugin() -> &'static str {
    env!("CARGO_BIN_EXE_academy")
}

/// What a process did: exit code (negative: killed by that signal), stdout, stderr.
#[derive(Debug, Clone)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn from(o: std::process::Output) -> Out {
        use std::os::unix::process::ExitStatusExt;
        Out {
            code: o
                .status
                .code()
                .unwrap_or_else(|| -o.status.signal().unwrap_or(0)),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// stdout as JSON; panics with the whole output when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self}"))
    }

    /// Exit 0, nothing on stdout (DEL, CHECK), no panic.
    pub fn expect_silent_success(&self, what: &str) {
        assert_eq!(self.code, 0, "{what} failed:\n{self}");
        assert!(
            self.stdout.trim().is_empty(),
            "{what} printed on stdout:\n{self}"
        );
        assert_no_panic(self, what);
    }

    /// Exit 0 and a JSON object on stdout (ADD).
    pub fn expect_result(&self, what: &str) -> Value {
        assert_eq!(self.code, 0, "{what} failed:\n{self}");
        assert_no_panic(self, what);
        let v = self.json();
        assert!(v.is_object(), "{what}: result is not an object:\n{self}");
        v
    }

    /// stdout and stderr together, for matching cnitool's messages.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  exit: {}\n  stdout: {}\n  stderr: {}",
            self.code,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// One plugin invocation: CNI_* variables (nothing else from the test's environment)
/// and the bytes given on stdin.
#[derive(Debug, Clone)]
pub struct Call {
    pub vars: BTreeMap<String, String>,
    pub stdin: Vec<u8>,
}

impl Call {
    /// A call with no variables at all and empty stdin.
    pub fn bare() -> Call {
        Call {
            vars: BTreeMap::new(),
            stdin: Vec::new(),
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Call {
        self.vars.insert(key.into(), value.into());
        self
    }

    pub fn without(mut self, key: &str) -> Call {
        self.vars.remove(key);
        self
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Call {
        self.stdin = bytes.into();
        self
    }

    pub fn config(self, config: &Value) -> Call {
        self.stdin(config.to_string())
    }

    pub fn run(&self) -> Out {
        self.spawn(plugin(), &[])
    }

    /// Runs any program (the plugin, a reference plugin, strace) with this call's
    /// environment and stdin.
    pub fn spawn(&self, program: &str, args: &[&str]) -> Out {
        start(self, program, args, &[]).finish()
    }
}

/// A started process; its stdin (the call's bytes) is being written by a thread of its own.
pub struct Running {
    child: Child,
    writer: JoinHandle<()>,
    what: String,
}

impl Running {
    /// Whether the process has not exited yet.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, then what it printed until then.
    pub fn kill(mut self) -> Out {
        let _ = self.child.kill();
        self.finish()
    }

    pub fn finish(self) -> Out {
        let what = self.what;
        let o = self
            .child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let _ = self.writer.join();
        Out::from(o)
    }
}

/// Starts `program args` with only PATH, the call's variables (plus `env`) and its stdin.
pub fn start(call: &Call, program: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
    try_start(call, program, args, env).unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn try_start(
    call: &Call,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::io::Result<Running> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", PATH)
        .envs(&call.vars)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // From a thread: a child that exits without reading stdin, or reads it only after
    // filling its stdout, must not deadlock the test (EPIPE is fine).
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let bytes = call.stdin.clone();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    Ok(Running {
        child,
        writer,
        what: format!("{program} {}", args.join(" ")),
    })
}

pub fn run_with(call: &Call, program: &str, args: &[&str], env: &[(&str, &str)]) -> Out {
    start(call, program, args, env).finish()
}

/// Runs a command with a clean environment (only PATH) plus `env`, and empty stdin.
pub fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> Out {
    run_with(&Call::bare(), program, args, env)
}

/// Copies the executable `from` to `to` with cp, so that no descriptor writing it is
/// ever open in this process: a child that another test thread forks meanwhile would
/// inherit that descriptor until it execs, and an exec of `to` then fails with ETXTBSY
/// ("Text file busy"). A copy made by fs::copy and run at once failed so in one CI run.
pub fn copy_executable(from: impl AsRef<Path>, to: impl AsRef<Path>) {
    let (from, to) = (
        from.as_ref().to_str().unwrap(),
        to.as_ref().to_str().unwrap(),
    );
    let out = run("cp", &[from, to], &[]);
    assert_eq!(out.code, 0, "cp {from} {to}:\n{out}");
}

/// Like [`run`] but never panics (for Drop and best-effort cleanup).
pub fn run_quiet(program: &str, args: &[&str]) -> Option<Out> {
    let running = try_start(&Call::bare(), program, args, &[]).ok()?;
    let o = running.child.wait_with_output().ok()?;
    let _ = running.writer.join();
    Some(Out::from(o))
}

/// Absolute path of a program on PATH (the wrappers cnitool runs get its environment, but
/// an absolute path removes the doubt). Fails the test when it is missing: `make setup`
/// installs everything the tests run.
pub fn which(program: &str) -> String {
    PATH.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{program} is not installed: run `make setup`"))
        .to_string_lossy()
        .into_owned()
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A debug build's test hold (src/firewall/mod.rs, `hold_for_test`): the plugin given
/// [`TestHold::path`] in the hold's variable writes `<path>.held` when it gets there, then
/// waits while `<path>` exists. Dropping the hold lets the plugin go, so an assertion
/// that fails meanwhile never leaves it waiting.
pub struct TestHold {
    path: std::path::PathBuf,
}

impl TestHold {
    /// A hold in `dir` named `name`, closed (the plugin will wait at it).
    pub fn new(dir: &Path, name: &str) -> TestHold {
        let path = dir.join(name);
        std::fs::write(&path, b"").expect("the hold file");
        TestHold { path }
    }

    /// The value of the hold's variable.
    pub fn path(&self) -> &str {
        self.path.to_str().expect("a UTF-8 path")
    }

    /// Lets the plugin go (again is harmless).
    pub fn release(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// Whether the plugin got to the hold within `limit`.
    pub fn reached(&self, limit: Duration) -> bool {
        let mut held = self.path.clone().into_os_string();
        held.push(".held");
        wait_until(limit, || Path::new(&held).exists())
    }
}

impl Drop for TestHold {
    fn drop(&mut self) {
        self.release();
    }
}

/// Runs `attempt` again (up to five more times) while it fails because a link vanished
/// under it: podman lists the host's interfaces and then reads each one's addresses, and
/// the links other tests delete concurrently make that fail with "no such network
/// interface".
pub fn retried_while_links_vanish(attempt: impl Fn() -> Out) -> Out {
    let mut out = attempt();
    for _ in 0..5 {
        if !out.stderr.contains("no such network interface") {
            break;
        }
        out = attempt();
    }
    out
}
