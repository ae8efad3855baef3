"""Running academy in the node, as a runtime and an operator would, and killing it at
a random point: a random system call's Nth entry by strace's fault injection
(`-e inject=SYSCALL:signal=SIGKILL:when=N`), or a SIGKILL after a random delay.

Every process is started in a session of its own and killed by its id only.
"""

import json
import os
import signal
import subprocess
import time

# The calls an invocation makes on the way to the store, the kernel and nf_tables.
KILL_SYSCALLS = [
    "sendto", "sendmsg", "recvfrom", "recvmsg", "openat", "write", "renameat2",
    "rename", "linkat", "unlinkat", "unlink", "fsync", "flock", "setns", "ioctl",
    "close", "read", "socket", "mkdirat", "newfstatat", "getdents64",
]


class Fault:
    """How an invocation is killed: by strace at a call, or after a delay."""

    def __init__(self, how, syscall=None, when=None, delay_ms=None):
        self.how = how
        self.syscall = syscall
        self.when = when
        self.delay_ms = delay_ms

    @staticmethod
    def draw(rng):
        if rng.random() < 0.5:
            return Fault("strace", syscall=rng.choice(KILL_SYSCALLS), when=rng.randint(1, 12))
        return Fault("timed", delay_ms=rng.randint(0, 40))

    def describe(self):
        if self.how == "strace":
            return "SIGKILL at %s #%d (strace)" % (self.syscall, self.when)
        return "SIGKILL after %d ms" % self.delay_ms

    def prefix(self):
        if self.how != "strace":
            return []
        return ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=%s" % self.syscall,
                "-e", "inject=%s:signal=SIGKILL:when=%d" % (self.syscall, self.when), "--"]


class Outcome:
    def __init__(self, code, stdout, stderr, ms, killed, fault):
        self.code = code
        self.stdout = stdout
        self.stderr = stderr
        self.ms = ms
        self.killed = killed
        self.fault = fault

    @property
    def ok(self):
        return self.code == 0 and not self.killed

    def result(self):
        try:
            return json.loads(self.stdout)
        except ValueError:
            return None

    def brief(self):
        if self.killed:
            return "killed (%s)" % self.fault.describe()
        if self.code == 0:
            return "ok"
        msg = ""
        r = self.result()
        if isinstance(r, dict):
            msg = "code %s: %s" % (r.get("code"), r.get("msg"))
        return "exit %s %s" % (self.code, msg or self.stderr.strip()[-200:])


def start(args, env=None, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=None):
    return subprocess.Popen(args, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                            text=True, start_new_session=True)


def kill_group(p, sig=signal.SIGKILL):
    """The process and whatever it started, by the process's own id (its session)."""
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


class Academy:
    """The binary under test, run inside the node netns."""

    def __init__(self, binary, node, conf_dir, cni_path, timeout=60):
        self.binary = binary
        self.node = node
        self.conf_dir = conf_dir
        self.cni_path = cni_path
        self.timeout = timeout

    def invoke(self, args, env, stdin="", fault=None):
        argv = ["ip", "netns", "exec", self.node] + (fault.prefix() if fault else []) \
            + [self.binary] + list(args)
        full = dict(os.environ)
        full.update(env)
        t0 = time.monotonic()
        p = start(argv, env=full, stdin=subprocess.PIPE)
        wait = fault.delay_ms / 1000.0 if fault and fault.how == "timed" else self.timeout
        try:
            out, err = p.communicate(stdin, timeout=wait)
        except subprocess.TimeoutExpired:
            kill_group(p)
            out, err = p.communicate()
            if not (fault and fault.how == "timed"):
                err += "\n(soak: killed after %d s: a hang)" % self.timeout
        ms = (time.monotonic() - t0) * 1000
        killed = p.returncode == -signal.SIGKILL and fault is not None
        return Outcome(p.returncode, out, err, ms, killed, fault)

    def cni(self, verb, config, cid=None, netns=None, ifname=None, fault=None):
        env = {"CNI_COMMAND": verb, "CNI_PATH": self.cni_path}
        if cid is not None:
            env.update({"CNI_CONTAINERID": cid, "CNI_IFNAME": ifname})
            if netns is not None:
                env["CNI_NETNS"] = netns
        return self.invoke([], env, json.dumps(config), fault)

    def tool(self, *args, fault=None):
        return self.invoke(list(args), {}, "", fault)

    def start_watch(self, log_path):
        log = open(log_path, "a")
        p = start(["ip", "netns", "exec", self.node, self.binary, "watch", "--conf-dir",
                   self.conf_dir], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        return p
