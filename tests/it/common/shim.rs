//! The LD_PRELOAD shim for the netlink requests strace cannot reach (its per-thread
//! `when=N` counter never gets to the netns thread's requests, see `strace.rs`): it counts
//! netlink sends across all threads and fails or kills the N-th. Compiled at test time
//! with `cc`, which cargo needs as its linker anyway.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::lab::Lab;
use super::process::{plugin, run_with, Call, Out};

/// Counts sends on netlink sockets over all threads; the FAULT_SHIM_AT-th fails with EPERM
/// (or, with FAULT_SHIM_ACTION=SIGKILL, kills the process before it is sent) and says so
/// on stderr. FAULT_SHIM_COUNT=1 prints the total at exit.
pub const SHIM_SOURCE: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_long sends;

static void say(const char *text) { ssize_t r = write(2, text, strlen(text)); (void)r; }

static int fault(int fd, const void *buf, size_t len) {
    struct sockaddr_storage ss;
    socklen_t ss_len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &ss_len) != 0 || ss.ss_family != AF_NETLINK)
        return 0;
    long n = atomic_fetch_add(&sends, 1) + 1;
    const char *at = getenv("FAULT_SHIM_AT");
    if (at == NULL || atol(at) != n)
        return 0;
    const char *action = getenv("FAULT_SHIM_ACTION");
    int kill_it = action != NULL && strcmp(action, "SIGKILL") == 0;
    /* struct nlmsghdr: u32 length, then u16 type. */
    const unsigned char *b = buf;
    unsigned type = b != NULL && len >= 6 ? (unsigned)(b[4] | b[5] << 8) : 0;
    char msg[128];
    snprintf(msg, sizeof msg, "fault-shim: %s at netlink send #%ld (nlmsg_type=0x%x)\n",
             kill_it ? "SIGKILL" : "EPERM", n, type);
    say(msg);
    if (kill_it) kill(getpid(), SIGKILL);
    errno = EPERM;
    return 1;
}

ssize_t send(int fd, const void *buf, size_t len, int flags) {
    static ssize_t (*real)(int, const void *, size_t, int);
    if (real == NULL)
        real = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    if (fault(fd, buf, len)) return -1;
    return real(fd, buf, len, flags);
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags,
               const struct sockaddr *to, socklen_t tolen) {
    static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    if (real == NULL)
        real = (ssize_t (*)(int, const void *, size_t, int, const struct sockaddr *,
                            socklen_t))dlsym(RTLD_NEXT, "sendto");
    if (fault(fd, buf, len)) return -1;
    return real(fd, buf, len, flags, to, tolen);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    static ssize_t (*real)(int, const struct msghdr *, int);
    if (real == NULL)
        real = (ssize_t (*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    const void *head = msg->msg_iovlen > 0 ? msg->msg_iov[0].iov_base : NULL;
    size_t head_len = msg->msg_iovlen > 0 ? msg->msg_iov[0].iov_len : 0;
    if (fault(fd, head, head_len)) return -1;
    return real(fd, msg, flags);
}

__attribute__((destructor)) static void report(void) {
    if (getenv("FAULT_SHIM_COUNT") != NULL) {
        char msg[64];
        snprintf(msg, sizeof msg, "fault-shim: %ld netlink sends\n", atomic_load(&sends));
        say(msg);
    }
}
"#;

/// Compiles the shim into the lab's folder (removed with the lab).
pub fn build_shim(lab: &Lab) -> PathBuf {
    let src = lab.root.join("fault-shim.c");
    let so = lab.root.join("fault-shim.so");
    std::fs::write(&src, SHIM_SOURCE).unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("cannot run cc (cargo's linker): the netlink fault tests need it");
    assert!(
        out.status.success(),
        "cc failed to build the fault shim:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// Runs the plugin with the shim; `at` 0 injects nothing.
pub fn run_shim(call: &Call, shim: &Path, at: usize, kill: bool, count: bool) -> Out {
    let at = at.to_string();
    let shim = shim.to_string_lossy();
    let mut env = vec![
        ("LD_PRELOAD", shim.as_ref()),
        ("FAULT_SHIM_AT", at.as_str()),
    ];
    if kill {
        env.push(("FAULT_SHIM_ACTION", "SIGKILL"));
    }
    if count {
        env.push(("FAULT_SHIM_COUNT", "1"));
    }
    run_with(call, plugin(), &[], &env)
}
