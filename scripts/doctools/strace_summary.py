"""One line per step of academy, from `strace -f -s 256 -o FILE academy` (what
`scripts/lab.sh --summarize-trace` prints into docs/lab/*.txt).

Host-side netlink requests are decoded by strace; those sent from inside the container's
netns are not (strace cannot see that socket's protocol), so their payload is decoded here.
Each request is shown with its reply and the ip(8) command it does the work of."""

import re
import sys

TYPES = {0x10: "RTM_NEWLINK", 0x11: "RTM_DELLINK", 0x12: "RTM_GETLINK", 0x14: "RTM_NEWADDR",
         0x15: "RTM_DELADDR", 0x16: "RTM_GETADDR", 0x18: "RTM_NEWROUTE", 0x19: "RTM_DELROUTE"}

def cstr(s):
    """A C string literal as strace prints it, to bytes."""
    out, i = bytearray(), 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode(); i += 1; continue
        n = s[i + 1]
        if n == "x":
            out.append(int(s[i + 2:i + 4], 16)); i += 4
        elif n in "01234567":
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8)); i = j
        else:
            out += {"n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v", "f": b"\f"}.get(n, n.encode()); i += 2
    return bytes(out)

def attrs(b):
    i, out = 0, []
    while i + 4 <= len(b):
        ln, ty = int.from_bytes(b[i:i+2], "little"), int.from_bytes(b[i+2:i+4], "little")
        if ln < 4:
            break
        out.append((ty & 0x3fff, b[i+4:i+ln]))
        i += (ln + 3) & ~3
    return out

def ip4(b):
    return ".".join(str(x) for x in b[:4])

def zstr(b):
    return b.split(b"\0")[0].decode(errors="replace")

def show(b):
    return '"' + b.decode(errors="replace").replace("\r", "\\r").replace("\n", "\\n") + '"'


def summarize(lines, netns=""):
    """The steps of one traced run, in order: dicts with who (main/netns thread), what,
    reply and the equivalent ip command. `netns` names the container's netns for `ip -n`
    when the trace does not show it being opened."""
    events, fds, names, tids = [], {}, {}, []
    last_content = ""
    pending = {}          # (tid, seq) -> event, for the reply
    bridge = None         # the first link academy looks up is its bridge
    stdin_bytes, result_bytes = 0, 0

    def role(tid):
        if tid not in tids:
            tids.append(tid)
        return "main " if tids[0] == tid else "netns"

    def ev(tid, what, ip="-", key=None):
        e = {"who": role(tid), "what": what, "ip": ip, "reply": ""}
        events.append(e)
        if key is not None:
            pending[(tid, key)] = e
        return e

    def ns_ip(tid, cmd):
        return f"ip -n {netns} {cmd}" if role(tid) == "netns" and netns else f"ip {cmd}"

    def link_request(tid, ty, flags, name, kind, up, master, alias, peer, index, seq):
        create = "NLM_F_CREATE" in flags
        tag = f"{ty} {name or ('index ' + str(index))}"
        if ty == "RTM_GETLINK":
            return ev(tid, tag, ns_ip(tid, f"link show {name or index}"), seq)
        if ty == "RTM_DELLINK":
            return ev(tid, tag, ns_ip(tid, f"link del {name or index}"), seq)
        if create and kind == "bridge":
            cmd = f"ip link add {name} type bridge" + (f"; ip link set {name} up" if up else "")
            return ev(tid, f"{tag} type bridge{', up' if up else ''} (create)", cmd, seq)
        if create and kind == "veth":
            pname, pns = peer
            cmd = f"ip link add {name} type veth peer name {pname} netns {netns or 'NS'}"
            if master:
                cmd += f"; ip link set {name} master {bridge}"
            if up:
                cmd += f" up"
            return ev(tid, f"{tag} type veth, peer {pname} in the netns (fd {pns}), master {bridge}{', up' if up else ''} (create)", cmd, seq)
        if alias is not None:
            return ev(tid, f"{tag} alias {alias}", ns_ip(tid, f"link set {name} alias {alias}"), seq)
        if up:
            dev = names.get((role(tid), index), f"index {index}") if not name else name
            return ev(tid, f"{ty} {dev} up", ns_ip(tid, f"link set {dev} up"), seq)
        return ev(tid, tag, "-", seq)

    for raw in lines:
        m = re.match(r"(\d+) +(.*)", raw.rstrip("\n"))
        if not m:
            continue
        tid, line = int(m.group(1)), m.group(2)
        if "unfinished" in line or "resumed" in line or line.startswith("+++") or line.startswith("---"):
            continue
        sc = re.match(r"(\w+)\((.*)\) += (-?\d+|\?)(?: (\w+))?", line)
        if not sc:
            continue
        call, args, ret, err = sc.group(1), sc.group(2), sc.group(3), sc.group(4)
        args = re.sub(r"\.tmp\.\d+\.\d+\.\d+", ".tmp.<pid>.<ns>.<seq>", args)
        killed = ret == "?"
        if call == "read":
            fd = int(args.split(",")[0])
            if fd == 0:
                stdin_bytes += int(ret) if ret.lstrip("-").isdigit() and int(ret) > 0 else 0
                if ret == "0":
                    ev(tid, f"read(0): the network config, {stdin_bytes} bytes, once", "(none: the config comes on stdin)")
                continue
            path = fds.get((tid, fd)) or fds.get((tids[0] if tids else tid, fd))
            s = re.search(r'"((?:[^"\\]|\\.)*)"', args)
            if path and path.startswith("store:") and s and ret != "0":
                ev(tid, f"read {path[6:]} = {show(cstr(s.group(1)))}")
            continue
        if call == "openat":
            s = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
            if not s:
                continue
            p = s[0]
            dirfd = args.split(",")[0]
            if ret.startswith("-"):
                if dirfd != "AT_FDCWD" and err == "ENOENT":
                    ev(tid, f"openat {p}: absent")
                continue
            fd = int(ret)
            if dirfd == "AT_FDCWD":
                if p.startswith("/var/run/netns/") or p.startswith("/run/netns/"):
                    netns = p.rsplit("/", 1)[1]
                    ev(tid, f"open CNI_NETNS {p}")
                elif "O_DIRECTORY" in args and "/lib/" not in p[:5] and p.startswith("/var/lib/cni"):
                    ev(tid, f"open the store {p}")
                elif p.startswith("/proc/sys/"):
                    fds[(tid, fd)] = "sys:" + p
                continue
            if "O_TMPFILE" in args:
                fds[(tid, fd)] = "store:(O_TMPFILE)"
            else:
                fds[(tid, fd)] = "store:" + p
            continue
        if call == "write":
            fd = int(args.split(",")[0])
            s = re.search(r'"((?:[^"\\]|\\.)*)"', args)
            if fd == 1:
                ev(tid, f"write(1): the result, {ret} bytes", "(none: the result is printed for the runtime)")
                continue
            if fd == 2:
                ev(tid, f"write(2): {show(cstr(s.group(1)))}" if s else "write(2)")
                continue
            path = fds.get((tid, fd))
            if path and s:
                content = show(cstr(s.group(1)))
                if path.startswith("sys:"):
                    ev(tid, f"write {path[4:]} = {content}", f"sysctl -w {path[4+len('/proc/sys/'):].replace('/', '.')}={cstr(s.group(1)).decode()}" if role(tid) == "main " else f"ip netns exec {netns} sysctl -w {path[4+len('/proc/sys/'):].replace('/', '.')}={cstr(s.group(1)).decode()}")
                elif path.startswith("store:") and ".tmp." not in path and "O_TMPFILE" not in path:
                    ev(tid, f"write {path[6:]} = {content}")
                else:
                    last_content = content
            continue
        if call == "renameat":
            s = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
            if len(s) == 2 and ret == "0":
                ev(tid, f"rename {s[0]} -> {s[1]} = {last_content}")
            continue
        if call == "linkat":
            s = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
            if len(s) == 2:
                e = ev(tid, f"linkat (O_TMPFILE) -> {s[1]} = {last_content}, exclusive")
                e["reply"] = "ok" if ret == "0" else err
            continue
        if call == "newfstatat":
            s = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
            if s and s[0] and not args.startswith("AT_FDCWD"):
                ev(tid, f"probe {s[0]}: " + ("taken" if ret == "0" else "free"))
            continue
        if call == "unlinkat":
            s = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
            if s:
                e = ev(tid, f"unlink {s[0]}")
                e["reply"] = "ok" if ret == "0" else err
            continue
        if call == "setns":
            e = ev(tid, "setns(CNI_NETNS, CLONE_NEWNET): this thread enters the netns", f"ip netns exec {netns or 'NS'} ...")
            if killed:
                e["reply"] = "never returned: killed"
            continue
        if call == "sendto":
            seq = re.search(r"nlmsg_seq=(\d+)", args)
            seq = int(seq.group(1)) if seq else None
            flags = re.search(r"nlmsg_flags=([\w|]+)", args).group(1)
            t = re.search(r"nlmsg_type=(\w+)", args).group(1)
            if t.startswith("0x"):
                ty = TYPES.get(int(t, 16), t)
                payload = cstr(re.search(r'\}, "((?:[^"\\]|\\.)*)"\]', args).group(1))
                if "0x600" in args:
                    flags += "|NLM_F_EXCL|NLM_F_CREATE"
                if ty in ("RTM_NEWLINK", "RTM_GETLINK", "RTM_DELLINK"):
                    index = int.from_bytes(payload[4:8], "little", signed=True)
                    up = bool(int.from_bytes(payload[8:12], "little") & 1) and bool(int.from_bytes(payload[12:16], "little") & 1)
                    a = dict(attrs(payload[16:]))
                    name = zstr(a[3]) if 3 in a else None
                    alias = zstr(a[20]) if 20 in a else None
                    link_request(tid, ty, flags, name, None, up, None, alias, None, index, seq)
                elif ty == "RTM_NEWADDR":
                    plen, index = payload[1], int.from_bytes(payload[4:8], "little")
                    a = dict(attrs(payload[8:]))
                    dev = names.get((role(tid), index), f"index {index}")
                    addr = ip4(a.get(2, a.get(1, b"")))
                    ev(tid, f"RTM_NEWADDR {addr}/{plen} on {dev}", ns_ip(tid, f"addr add {addr}/{plen} dev {dev}"), seq)
                elif ty == "RTM_NEWROUTE":
                    dlen = payload[1]
                    a = dict(attrs(payload[12:]))
                    dst = f"{ip4(a[1])}/{dlen}" if 1 in a else "0.0.0.0/0"
                    gw = ip4(a[5]) if 5 in a else None
                    dev = names.get((role(tid), int.from_bytes(a.get(4, b"\0\0\0\0"), "little")), "?")
                    shown = "default" if dlen == 0 else dst
                    ev(tid, f"RTM_NEWROUTE {dst} via {gw} dev {dev}", ns_ip(tid, f"route add {shown} via {gw} dev {dev}"), seq)
                else:
                    ev(tid, ty, "-", seq)
                continue
            name = re.search(r'IFLA_IFNAME\}, "([^"]*)"', args)
            name = name.group(1) if name else None
            m_idx = re.search(r'ifi_index=if_nametoindex\("([^"]*)"\)', args)
            if not name and m_idx:
                name = m_idx.group(1)
            if t in ("RTM_GETLINK", "RTM_NEWLINK", "RTM_DELLINK"):
                if t == "RTM_GETLINK" and bridge is None and role(tid) == "main ":
                    bridge = name
                kind = re.search(r'IFLA_INFO_KIND\}, "([^"]*)"', args)
                kind = kind.group(1) if kind else None
                up = "ifi_flags=IFF_UP" in args and "ifi_change=0x1" in args
                master = re.search(r"IFLA_MASTER\}, (\d+)", args)
                alias = re.search(r'IFLA_IFALIAS\}, "([^"]*)"', args)
                peer = (None, None)
                data = re.search(r'IFLA_INFO_DATA\}, "((?:[^"\\]|\\.)*)"', args)
                if data:
                    for ty_, val in attrs(cstr(data.group(1))):
                        if ty_ == 1:  # VETH_INFO_PEER: ifinfomsg + attributes
                            pa = dict(attrs(val[16:]))
                            peer = (zstr(pa.get(3, b"?")), int.from_bytes(pa.get(28, b"\0\0\0\0"), "little"))
                link_request(tid, t, flags, name, kind, up, master, alias.group(1) if alias else None, peer, 0, seq)
            elif t == "RTM_NEWADDR":
                addr = re.search(r'IFA_LOCAL\}, inet_addr\("([^"]*)"\)', args).group(1)
                plen = re.search(r"ifa_prefixlen=(\d+)", args).group(1)
                dev = m = re.search(r'ifa_index=if_nametoindex\("([^"]*)"\)', args)
                dev = dev.group(1) if dev else "?"
                ev(tid, f"RTM_NEWADDR {addr}/{plen} on {dev}", f"ip addr add {addr}/{plen} dev {dev}", seq)
            elif t == "RTM_GETADDR":
                dev = re.search(r'ifa_index=if_nametoindex\("([^"]*)"\)', args)
                dev = dev.group(1) if dev else "?"
                ev(tid, f"RTM_GETADDR dump, {dev}'s addresses", f"ip addr show dev {dev}", seq)
            else:
                ev(tid, t, "-", seq)
            if killed:
                events[-1]["reply"] = "never returned: killed"
            continue
        if call == "recvfrom":
            seq = re.search(r"nlmsg_seq=(\d+)", args)
            if not seq:
                continue
            e = pending.get((tid, int(seq.group(1))))
            if e is None:
                continue
            er = re.search(r"error=(-?\w+)", args)
            if er:
                e["reply"] = "ok" if er.group(1) == "0" else er.group(1).lstrip("-")
            elif "NLMSG_DONE" in args:
                pass
            elif not e["reply"]:
                e["reply"] = "found"
                # A link's reply names its index: remember it for later requests by index.
                payload = re.search(r'\}, "((?:[^"\\]|\\.)*)"', args)
                if payload and "nlmsg_type=0x" in args and e["what"].startswith("RTM_GETLINK"):
                    b = cstr(payload.group(1))
                    if len(b) >= 8:
                        names[(role(tid), int.from_bytes(b[4:8], "little", signed=True))] = e["what"].split()[1]
            continue
    return events


def render(events):
    """The steps as aligned text lines."""
    w = max((len(e["what"]) + (len(e["reply"]) + 4 if e["reply"] else 0)) for e in events) if events else 0
    w = min(w, 96)
    out = []
    for e in events:
        what = e["what"] + (f" -> {e['reply']}" if e["reply"] else "")
        out.append(f"[{e['who']}] {what:<{w}}  | {e['ip']}")
    return out


def main(argv):
    if len(argv) not in (1, 2):
        sys.exit("usage: summarize-trace FILE [NETNS]")
    with open(argv[0], errors="replace") as f:
        for line in render(summarize(f, argv[1] if len(argv) > 1 else "")):
            print(line)
