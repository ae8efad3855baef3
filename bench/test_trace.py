"""Unit tests of trace.py's sorting of a traced ADD into items (no root, no strace)."""

import unittest

import report
import trace

# A shortened `strace -f -yy -T` of an ADD: the main thread (100) and the netns thread (101).
ADD = """\
100 execve("/x/academy", ["/x/academy"], 0x7ffe /* 5 vars */) = 0 <0.000300>
100 brk(NULL) = 0x5555 <0.000005>
100 rt_sigaction(SIGPIPE, {sa_handler=SIG_IGN, sa_mask=[], sa_flags=SA_RESTORER}, NULL, 8) = 0 <0.000004>
100 poll([{fd=0<pipe:[1]>, events=0}], 3, 0) = 0 (Timeout) <0.000004>
100 read(0<pipe:[1]>, "{}", 65536) = 2 <0.000005>
100 openat(AT_FDCWD</>, "/run/academy/networks/n.1.state", O_RDONLY|O_CLOEXEC) = 3</run/academy/networks/n.1.state> <0.000010>
100 openat(AT_FDCWD</>, "/run/netns/c1", O_RDONLY|O_NONBLOCK) = 4</run/netns/c1> <0.000010>
100 socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC, NETLINK_ROUTE) = 5<NETLINK:[7]> <0.000010>
100 openat(5</s/net>, ".", O_WRONLY|O_CLOEXEC|O_TMPFILE, 0600) = 6</s/net/#12 (deleted)> <0.000030>
100 sendto(5<NETLINK:[ROUTE:100]>, [{nlmsg_len=44}], 44, 0, NULL, 0) = 44 <0.000010>
100 recvfrom(5<NETLINK:[ROUTE:100]>, [{nlmsg_len=36}], 32768, 0, NULL, NULL) = 36 <0.000010>
100 mmap(NULL, 266240, PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_STACK, -1, 0) = 0x7f00 <0.000005>
100 mprotect(0x7f01, 262144, PROT_READ|PROT_WRITE) = 0 <0.000005>
100 clone3({flags=CLONE_VM}, 88 <unfinished ...>
101 setns(4</run/netns/c1>, CLONE_NEWNET) = 0 <0.000020>
100 <... clone3 resumed> => {parent_tid=[101]}, 88) = 101 <0.000050>
101 openat(AT_FDCWD</>, "/proc/sys/net/ipv4/conf/eth0/arp_notify", O_WRONLY) = 7</proc/sys/net/ipv4/conf/eth0/arp_notify> <0.000010>
101 madvise(0x7f00, 245760, MADV_DONTNEED) = 0 <0.000005>
101 exit(0) = ?
100 socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC, NETLINK_NETFILTER) = 8<NETLINK:[9]> <0.000010>
100 sendto(8<NETLINK:[NETFILTER:100]>, [{nlmsg_len=44}], 44, 0, NULL, 0) = 44 <0.000010>
100 getrandom("\\x01", 6, 0) = 6 <0.000002>
100 write(1<pipe:[2]>, "{}\\n", 3) = 3 <0.000010>
100 exit_group(0) = ?
"""


class Classify(unittest.TestCase):
    def test_each_call_lands_in_its_item(self):
        items = trace.classify(ADD.splitlines())
        calls = {k: v["calls"] for k, v in items.items() if v["calls"]}
        self.assertEqual(calls, {
            "exec and libc start-up": 2,
            "Rust runtime start-up (and its teardown)": 2,
            "stdin (the config)": 1,
            "state-version record": 1,
            "netns file checks and setns": 2,
            "netlink sockets (open, options, close)": 1,
            "address store": 1,
            "rtnetlink round trips": 2,
            "netns thread (start, stack, exit)": 5,
            "/proc/sys reads and writes": 1,
            "nf_tables socket and lookups": 2,
            "MAC addresses (getrandom)": 1,
            "result on stdout": 1,
            "exit": 1,
        })
        # A resumed call is counted once, where it began.
        self.assertEqual(sum(calls.values()), 23)
        self.assertAlmostEqual(items["netns thread (start, stack, exit)"]["us"], 15.0)

    def test_a_program_without_std_s_runtime_starts_work_after_libc(self):
        floor = """\
7 execve("/x/nlfloor", ["/x/nlfloor"], 0x7ffe /* 1 var */) = 0 <0.000200>
7 brk(NULL) = 0x5555 <0.000005>
7 socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC, NETLINK_ROUTE) = 3<NETLINK:[7]> <0.000010>
7 sendto(3<NETLINK:[ROUTE:7]>, [{nlmsg_len=44}], 44, 0, NULL, 0) = 44 <0.000010>
7 exit_group(0) = ?
"""
        items = trace.classify(floor.splitlines())
        calls = {k: v["calls"] for k, v in items.items() if v["calls"]}
        self.assertEqual(calls, {"exec and libc start-up": 2,
                                 "netlink sockets (open, options, close)": 1,
                                 "rtnetlink round trips": 1, "exit": 1})

    def test_the_floor_listing_shows_the_difference(self):
        ours = trace.classify(ADD.splitlines())
        floor = {k: {"calls": 0, "us": 0.0} for k in trace.ITEMS}
        floor["rtnetlink round trips"] = {"calls": 2, "us": 5.0}
        sc = {"academy": {"items": {"ADD": {"items": ours}}},
              "nlfloor": {"items": {"ADD": {"items": floor}}}}
        rows = report.above_floor(sc)
        self.assertIn("| rtnetlink round trips | 2 | 2 | +0 | 20 |", rows)
        self.assertIn("| netns thread (start, stack, exit) | 5 | 0 | +5 | 15 |", rows)
        self.assertEqual(rows[-1], "| total | 23 | 2 | +21 | |")
        self.assertEqual(report.above_floor({}), [])


if __name__ == "__main__":
    unittest.main()
