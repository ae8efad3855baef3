"""Spawning a plugin the way a runtime does, and measuring it.

A runtime execs the plugin with CNI_* in its environment and the config on stdin, then
waits for it. We do the same with posix_spawn (no shell in the path) and reap it with
wait4, whose rusage gives the peak RSS (ru_maxrss, KiB) and CPU times of the process,
including any child it reaped (the reference bridge runs host-local as a child).

One catch decides how: the kernel folds the RSS of the address space a process had
*before* execve into its ru_maxrss. A child spawned straight from Python starts as a
copy of Python (~14 MB), so wait4 here would report at least that for any plugin. So
when the small C launcher native/spawnstat.c is available, the plugin is spawned and
wait4()ed by it (its own footprint is about 1 MB) and it reports rc, wall time, peak RSS
and CPU times on fd 3. Without it, measurements fall back to Python's wait4 and the RSS
figures are flagged as polluted.
"""

import os
import time
from dataclasses import dataclass, asdict

_PIPE_BUF = 65536  # stdin is written before the spawn, so it must fit in the pipe
_REPORT_FD = 3  # where spawnstat writes its line


@dataclass
class Run:
    """One finished process."""

    rc: int  # exit status, or -signal
    wall_ms: float  # spawn to reaped (by spawnstat when present, else by Python)
    maxrss_kib: int  # largest RSS of the process (or of a child it reaped)
    user_ms: float
    sys_ms: float
    stdout: bytes
    stderr: bytes
    faults: int = 0  # page faults (minor + major)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def sample(self) -> dict:
        """The numbers, without the output, for the raw results."""
        d = asdict(self)
        del d["stdout"], d["stderr"]
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


@dataclass
class Started:
    pid: int
    t0: int
    out_fd: int
    err_fd: int
    report_fd: int  # -1 without the launcher


class Spawner:
    """Starts and reaps processes, through spawnstat when given its path."""

    def __init__(self, launcher: str | None):
        self.launcher = launcher

    @property
    def clean_rss(self) -> bool:
        return self.launcher is not None

    def start(self, argv: list, env: dict, stdin: bytes = b"",
              netns: str | None = None) -> Started:
        """Spawns argv with env; stdin is a pipe already filled and closed, as a runtime's.
        With `netns` (a path), the process runs in that network namespace: spawnstat
        enters it before its clock starts; without spawnstat, nsenter does (and is timed)."""
        if netns:
            if self.launcher:
                env = dict(env, SPAWNSTAT_NETNS=netns)
            else:
                argv = ["/usr/bin/nsenter", f"--net={netns}", *argv]
        if len(stdin) >= _PIPE_BUF:
            raise ValueError("stdin larger than a pipe buffer")
        # memfds for the output: the child can never block on a full pipe while we sit
        # in wait4, and there is nothing to drain concurrently.
        out_fd = os.memfd_create("stdout")
        err_fd = os.memfd_create("stderr")
        report_fd = os.memfd_create("report") if self.launcher else -1
        r, w = os.pipe()
        try:
            os.write(w, stdin)
            os.close(w)
            actions = [
                (os.POSIX_SPAWN_DUP2, r, 0),
                (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, err_fd, 2),
            ]
            if self.launcher:
                actions.append((os.POSIX_SPAWN_DUP2, report_fd, _REPORT_FD))
                argv = [self.launcher] + list(argv)
            t0 = time.perf_counter_ns()
            pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
        except BaseException:
            for fd in (out_fd, err_fd, report_fd):
                if fd >= 0:
                    os.close(fd)
            raise
        finally:
            os.close(r)
        return Started(pid, t0, out_fd, err_fd, report_fd)

    def finish(self, p: Started) -> Run:
        """Waits for a started process; returns its measurements and output."""
        _, status, ru = os.wait4(p.pid, 0)
        t1 = time.perf_counter_ns()
        out, err = _drain(p.out_fd), _drain(p.err_fd)
        run = Run(
            rc=os.waitstatus_to_exitcode(status),
            wall_ms=(t1 - p.t0) / 1e6,
            maxrss_kib=ru.ru_maxrss,
            user_ms=ru.ru_utime * 1e3,
            sys_ms=ru.ru_stime * 1e3,
            stdout=out,
            stderr=err,
            faults=ru.ru_minflt + ru.ru_majflt,
        )
        if p.report_fd >= 0:
            report = _drain(p.report_fd).split()
            if run.rc != 0 or len(report) != 6:
                # The launcher itself failed (e.g. the binary vanished): keep its message.
                run.rc = run.rc or 127
                return run
            rc, wall_ns, rss, user_us, sys_us, faults = (int(x) for x in report)
            run.rc, run.wall_ms, run.maxrss_kib, run.faults = rc, wall_ns / 1e6, rss, faults
            run.user_ms, run.sys_ms = user_us / 1e3, sys_us / 1e3
        return run

    def run(self, argv: list, env: dict, stdin: bytes = b"", netns: str | None = None) -> Run:
        return self.finish(self.start(argv, env, stdin, netns))


def _drain(fd: int) -> bytes:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
