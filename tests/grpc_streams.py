#!/usr/bin/env python3
"""Replaying WatchJob streams against onebitd's gRPC port, and what unary GetJob sees meanwhile.

usage: grpc_streams.py HOST:PORT JOB_ID [--streams N] [--calls C] [--limit-ms MS] [--seconds S]

N WatchJob streams (over 8 channels) ask for JOB_ID's whole history (after_seq 0) and, when a
stream ends, ask again, for S seconds; meanwhile C GetJob calls are made one after another on a
channel of their own, each with a 5 s deadline. Every call must succeed and the 99th percentile
of their times must be under --limit-ms. Prints the figures; exit 0 when the checks pass.
"""
import argparse
import sys
import threading
import time

import grpc


def field1(s):
    """A request whose only field is string field 1 (GetJobRequest.id, WatchJobRequest.id)."""
    b = s.encode()
    return b"\x0a" + bytes([len(b)]) + b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr")
    ap.add_argument("job")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--limit-ms", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    ident = lambda x: x
    channels = [grpc.insecure_channel(a.addr) for _ in range(8)]
    watch = [c.unary_stream("/onebit.v1.JobService/WatchJob", request_serializer=ident,
                            response_deserializer=ident) for c in channels]
    stop = threading.Event()
    stats = {"replays": 0, "events": 0, "errors": 0}
    lock = threading.Lock()

    got = [0] * a.streams  # events each stream received (its own slot: no lock per event)

    def watcher(i):
        while not stop.is_set():
            try:
                for _ in watch[i % len(watch)](field1(a.job), timeout=120):
                    got[i] += 1
                    if stop.is_set():
                        break
                with lock:
                    stats["replays"] += not stop.is_set()
            except grpc.RpcError as e:
                if stop.is_set():
                    break
                with lock:
                    stats["errors"] += 1
                    stats["last_error"] = str(e.code())
                time.sleep(0.1)

    threads = [threading.Thread(target=watcher, args=(i,), daemon=True)
               for i in range(a.streams)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    unary = grpc.insecure_channel(a.addr)
    get = unary.unary_unary("/onebit.v1.JobService/GetJob", request_serializer=ident,
                            response_deserializer=ident)
    times, failures = [], 0
    t_end = time.monotonic() + a.seconds
    give_up = time.monotonic() + 3 * a.seconds  # calls not made by then count as failed
    for i in range(a.calls):
        if time.monotonic() > give_up:
            failures += a.calls - i
            times.append(5000.0)
            break
        t0 = time.monotonic()
        try:
            ok = len(get(field1(a.job), timeout=5)) > 0
        except grpc.RpcError:
            ok = False
        times.append((time.monotonic() - t0) * 1e3)
        failures += not ok
        left = (t_end - time.monotonic()) / max(1, a.calls - i - 1)
        if left > 0:
            time.sleep(min(left, 0.2))
    stop.set()
    stats["events"] = sum(got)
    times.sort()
    p50 = times[len(times) // 2]
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print("%d WatchJob streams: %d whole replays, %d events, %d stream errors; GetJob: %d calls, "
          "failed %d, p50 %.1f ms, p99 %.1f ms, max %.1f ms"
          % (a.streams, stats["replays"], stats["events"], stats["errors"], len(times), failures,
             p50, p99, times[-1]))
    # The streams must have moved too (each a few hundred events at least, on average): a server
    # that starved them would pass the GetJob check for the wrong reason.
    moving = stats["events"] >= 100 * a.streams and stats["errors"] == 0
    return 0 if failures == 0 and p99 < a.limit_ms and moving else 1


if __name__ == "__main__":
    sys.exit(main())
