/*
 * spawnstat PROG [ARGS...]: run PROG as a runtime would (posix_spawn, inherited
 * environment and stdin/stdout/stderr), wait4 it, and write one line to fd 3:
 *
 *     <exit code or -signal> <wall ns> <ru_maxrss KiB> <user us> <sys us> <page faults>
 *
 * Why it exists: the kernel records the RSS of the address space a process had *before*
 * execve into its ru_maxrss. A child spawned from Python starts out as Python (~14 MB),
 * so wait4 from Python reports at least that for any plugin. Spawned from this small
 * process, the pre-exec address space is ours (well under 1 MB) and ru_maxrss is the
 * plugin's own peak. Wall time is taken here too, around spawn and reap only.
 *
 * With SPAWNSTAT_NETNS=/path/of/a/netns in the environment, the plugin is spawned inside
 * that network namespace (setns before the clock starts; the variable is not passed
 * on): the bench's private "nodes", measured exactly as the host's plugins are.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: spawnstat PROG [ARGS...] (report on fd 3)\n");
		return 2;
	}
	FILE *report = fdopen(3, "w");
	if (!report) {
		perror("spawnstat: fd 3");
		return 2;
	}
	/* fd 3 is ours alone: the plugin must not inherit it. */
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addclose(&fa, 3);

	const char *netns = getenv("SPAWNSTAT_NETNS");
	if (netns) {
		int fd = open(netns, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
			fprintf(stderr, "spawnstat: netns %s: %s\n", netns, strerror(errno));
			return 2;
		}
		close(fd);
		unsetenv("SPAWNSTAT_NETNS");
	}

	long long t0 = now_ns();
	pid_t pid;
	int err = posix_spawn(&pid, argv[1], &fa, NULL, argv + 1, environ);
	if (err) {
		fprintf(stderr, "spawnstat: %s: %s\n", argv[1], strerror(err));
		return 2;
	}
	int status;
	struct rusage ru;
	if (wait4(pid, &status, 0, &ru) < 0) {
		perror("spawnstat: wait4");
		return 2;
	}
	long long t1 = now_ns();

	int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
	fprintf(report, "%d %lld %ld %lld %lld %ld\n", code, t1 - t0, ru.ru_maxrss,
		(long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
		(long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
		ru.ru_minflt + ru.ru_majflt);
	return fclose(report) == 0 ? 0 : 2;
}
