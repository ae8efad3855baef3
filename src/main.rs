//! The academy binary: read the CNI environment and stdin, run, print, exit.
//!
//! `#![no_main]`: a runtime spawns academy for every ADD, so its start-up is paid on
//! every pod. std's own start-up (`lang_start`) costs 16 syscalls here: it reads
//! /proc/self/maps to find the main thread's stack guard, installs SIGSEGV and SIGBUS
//! handlers on an alternate signal stack (mmap, mprotect, sigaltstack, and again in every
//! thread std spawns, the netns thread included), and takes them down at exit. Those
//! handlers only turn a stack overflow into a message ("has overflowed its stack") before
//! the abort; without them the overflow is a plain SIGSEGV. Neither prints CNI JSON, so
//! the runtime sees the same failure either way: that message is the whole trade-off.
//! What std's start-up does that matters is kept, below: SIGPIPE ignored, fds 0-2 open.
//! A panic still prints CNI JSON (catch_unwind below; panic stays "unwind"), and on
//! glibc std captures argv and the environment itself (.init_array), so std::env works.

// A test build of this file (`cargo test --all-targets`) keeps the harness's own main;
// it has no tests, and its functions are then unused.
#![cfg_attr(not(test), no_main)]
#![cfg_attr(test, allow(dead_code, unused_imports))]

use std::ffi::{c_char, c_int, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;

use academy::plugin;
use academy::plugin::LeftOpen;

/// Big enough for any config in one read (runtimes send a few KiB at most); a larger
/// one grows the buffer as usual.
const STDIN_CAPACITY: usize = 64 * 1024;

#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    process_setup();
    // A panic must not unwind into the C caller (that aborts): caught here as std's
    // lang_start would, with its exit status, 101. The CNI path catches its own below.
    let (code, _left_open) = std::panic::catch_unwind(run).unwrap_or((101, None));
    // process::exit, not a return: it flushes stdout as std's own exit path does, and
    // runs no destructor, so what the verb left open (sockets, the netns, the store and
    // its locks: verbs::LeftOpen, src/verbs/mod.rs) is closed by the kernel with the process, not
    // one close at a time. Everything is written by now.
    std::process::exit(code)
}

/// What std's start-up does that academy relies on, in 2 syscalls instead of 19.
fn process_setup() {
    // SAFETY: plain libc calls on the process's own signal disposition and fds, made
    // before any other thread exists.
    unsafe {
        // A write to a pipe the runtime closed fails with EPIPE instead of killing
        // academy halfway through an ADD (what std does too).
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        // A runtime that starts academy with stdout closed must not have the next file
        // academy opens (a store file) become fd 1 and receive the result: closed
        // standard fds are opened on /dev/null first, as std does.
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        });
        if libc::poll(fds.as_mut_ptr(), 3, 0) > 0 {
            for p in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 && null != p.fd {
                    // Opened in the lowest free slot: that is p.fd when the lower ones
                    // are open; otherwise moved there.
                    libc::dup2(null, p.fd);
                    libc::close(null);
                }
            }
        }
        // The netns thread's first allocation would make a second malloc arena (a 128 MiB
        // reservation trimmed by two munmaps, then an mprotect); one thread at a time
        // allocates here, so it shares the main arena instead.
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The exit status, and what the verb left open for the exit.
fn run() -> (c_int, Option<LeftOpen>) {
    // An operator's subcommand (`academy list ...`): never when a runtime calls, since a
    // runtime always sets CNI_COMMAND. No arguments still prints the about text below.
    if std::env::var_os("CNI_COMMAND").is_none() && std::env::args_os().len() > 1 {
        return (academy::cli::main(std::env::args_os().skip(1)), None);
    }
    // Bytes, not String: one non-UTF-8 byte must not make a variable read as unset.
    let env = plugin::Env::from_lookup(|name| std::env::var_os(name).map(OsString::into_vec));
    let mut stdin = Vec::new();
    // Read once, whole; a person running the binary by hand gets the about text instead.
    if !matches!(env, Ok(None)) {
        stdin.reserve(STDIN_CAPACITY);
        if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
            eprintln!("academy: cannot read stdin: {e}");
        }
    }
    // A bug must still reach the runtime as CNI JSON, not as a bare exit status 101.
    let outcome = std::panic::catch_unwind(|| plugin::run(env, &stdin)).unwrap_or_else(|_| {
        Some(plugin::Outcome {
            stdout: Some(plugin::internal_error(&stdin)),
            exit_code: 1,
            open: LeftOpen::default(),
        })
    });
    let Some(outcome) = outcome else {
        eprintln!("{}", plugin::about());
        return (0, None);
    };
    if let Some(text) = outcome.stdout {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
    (outcome.exit_code, Some(outcome.open))
}
