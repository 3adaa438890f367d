#!/usr/bin/env python3
"""Slow clients against onebitd's REST port, and what a fast client sees meanwhile.

usage: slow_clients.py HOST:PORT [--attackers N] [--addresses K] [--probes P] [--limit-ms MS]
                       [--trickle-s S] [--deadline-s D]

N connections from K loopback addresses (127.0.0.10, .11, ...) each send the start of a request
and then one byte every --trickle-s seconds, forever (a closed one is opened again at once).
Meanwhile P fresh connections from 127.0.0.1 ask GET /healthz and GET /v1/jobs in turn; each
must be answered (200) within 5 s, and the 99th percentile of their times must be under
--limit-ms. With --deadline-s D one more trickling connection from 127.0.0.9 must be closed by
the server D seconds after its start (not before, and within 1.5 s after), once the others
are gone. Prints the figures; exit 0 when every check passes.
"""
import argparse
import selectors
import socket
import sys
import threading
import time


def attack(host, port, n, k, trickle_s, stop, stats):
    sel = selectors.DefaultSelector()
    socks = {}

    def open_one(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind(("127.0.0.%d" % (10 + i % k), 0))
            s.connect_ex((host, port))
        except OSError:
            s.close()
            return
        socks[s] = [i, 0, time.monotonic()]
        sel.register(s, selectors.EVENT_READ)
        stats["opened"] += 1

    for i in range(n):
        open_one(i)
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    while not stop.is_set():
        now = time.monotonic()
        for s, st in list(socks.items()):
            if now - st[2] < trickle_s and st[1] > 0:
                continue
            try:
                s.send(head if st[1] == 0 else b"x")
                st[1] += 1
                st[2] = now
            except OSError:
                pass
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the server: come back at once
                i = socks.pop(s)[0]
                sel.unregister(s)
                s.close()
                stats["closed"] += 1
                if not stop.is_set():
                    open_one(i)
    for s in socks:
        s.close()


def probe(host, port, path):
    t0 = time.monotonic()
    s = socket.create_connection((host, port), timeout=5, source_address=("127.0.0.1", 0))
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path)
                  .encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    ok = data.startswith(b"HTTP/1.1 200")
    return ok, (time.monotonic() - t0) * 1e3


def trickler_lifetime(host, port, limit_s):
    """Seconds until the server closes a connection that sends a byte every second."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.9", 0))
    s.connect((host, port))
    s.settimeout(1.0)
    t0 = time.monotonic()
    s.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    try:
        while time.monotonic() - t0 < limit_s + 5:
            try:
                if not s.recv(4096):
                    return time.monotonic() - t0
            except socket.timeout:
                pass
            try:
                s.send(b"x")
            except OSError:
                return time.monotonic() - t0
    finally:
        s.close()
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("--attackers", type=int, default=300)
    ap.add_argument("--addresses", type=int, default=10)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--limit-ms", type=float, default=100.0)
    ap.add_argument("--trickle-s", type=float, default=4.0)
    ap.add_argument("--deadline-s", type=float, default=0.0)
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    stop = threading.Event()
    stats = {"opened": 0, "closed": 0}
    t = threading.Thread(target=attack, args=(host, port, a.attackers, a.addresses, a.trickle_s,
                                              stop, stats), daemon=True)
    t.start()
    time.sleep(2.0)  # the slow connections are in
    times, failures = [], 0
    for i in range(a.probes):
        try:
            ok, ms = probe(host, port, "/healthz" if i % 2 == 0 else "/v1/jobs")
        except OSError:
            ok, ms = False, 5000.0
        failures += not ok
        times.append(ms)
    stop.set()
    t.join(timeout=10)
    time.sleep(1.0)  # the attack's connections are gone: the trickler is alone
    life = trickler_lifetime(host, port, a.deadline_s) if a.deadline_s > 0 else None
    times.sort()
    p50 = times[len(times) // 2]
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print("slow connections: %d opened, %d closed by the server; probes: %d, failed %d, "
          "p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (stats["opened"], stats["closed"], len(times),
                                                     failures, p50, p99, times[-1]))
    good = failures == 0 and p99 < a.limit_ms
    if a.deadline_s > 0:
        print("a connection trickling a byte a second was closed after %s s (deadline %g s)" %
              ("%.1f" % life if life is not None else "never", a.deadline_s))
        good = good and life is not None and a.deadline_s - 0.5 <= life <= a.deadline_s + 1.5
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
