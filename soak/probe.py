"""The soak's packets, run inside the test's own namespaces only.

    probe.py serve PORT            answer "hello" to every TCP connection on [::]:PORT
                                   (IPv4 too), until killed
    probe.py connect ADDR:PORT...  one connection to each (IPv6 as [ADDR]:PORT), a
                                   JSON object {target: what was read, "" for nothing}
"""

import json
import socket
import sys


def serve(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.listen(16)
    while True:
        c, _ = s.accept()
        try:
            c.sendall(b"hello")
        except OSError:
            pass
        c.close()


def connect(targets, timeout=1.5):
    got = {}
    for t in targets:
        host, _, port = t.rpartition(":")
        host = host.strip("[]")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as c:
                got[t] = c.recv(16).decode(errors="replace")
        except OSError as e:
            got[t] = ""
            got[t + " error"] = str(e)
    print(json.dumps(got))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        connect(sys.argv[2:])
