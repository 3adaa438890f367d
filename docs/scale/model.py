#!/usr/bin/env python3
"""Cost model of the gradient exchanges: alpha-beta terms for the fp32 ring allreduce, the fp16
and fp8 rings, and the 1-bit exchange flat and hierarchical, calibrated on the network-namespace
measurements of this repository, then used to predict exchange and step times from 8 to 4096
ranks at 8 ranks a node.

    docs/scale/model.py [--report]     # prints the calibration, the 2x2 check and the tables
                                       # (--report: also writes docs/scale/predictions.tsv)

Inputs (standard library only):
  docs/bandwidth/car.tsv, rows car-after-RATE-MODEL  bench_car, 4 hosts x 1 rank (flat), per rate
  docs/scale/hier-2x2.tsv                        bench/net/hier.sh: 2 hosts x 2 ranks, flat and
                                                 hierarchical, per rate; row "intra": the fp32
                                                 ring of 2 ranks on one host

The model, per exchange and per step, for N ranks in n = N / m nodes of m ranks, d floats:
  time = rounds * alpha + (bytes on the busiest inter-node link) / (eta * B_inter)
         + (bytes on a node's own links) / B_intra + compute
  fp32 ring     rounds 2 (N-1); each host's NIC carries 2 (N-1)/N * 4 d bytes (a ring enters and
                leaves every node once per step of the ring: one rank's stream per NIC)
  fp16 / fp8    the same ring with 2 d / 1 d bytes
  1-bit flat    rounds 2 (alltoall, allgather; their N-1 messages overlap); every rank sends
                (N-m) of its N-1 pieces off the node in each phase: m (N-m)/N * d/8 bytes per
                NIC and phase; compute c_bit * d (compress d, server d/N, decode d)
  1-bit hier    fp32 average of the pieces inside the node ((m-1)/m * 4 d bytes a rank on
                B_intra), the flat exchange of the node's pieces between the n nodes
                (m ranks a NIC, 2 phases of (n-1)/n * d/8 bytes a NIC), the servers' messages
                shared inside the node ((m-1)/m * d/8 bytes a rank on B_intra); the same compute
eta and alpha are fitted on the flat 4-host measurements (the link's efficiency under tc and
TCP, and a per-round cost); compute per element on the CPU from the measured phases, on an
H100 from docs/GPU.md (4.37 ms of local work for 2^28 elements).
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RATES = {"50m": 50e6, "200m": 200e6, "1g": 1e9}


def flat_points():
    """(rate, d, car_s, car_bytes, fp32_s, fp32_bytes, compute_s) of the 4-host runs."""
    out = []
    path = os.path.join(ROOT, "docs/bandwidth/car.tsv")
    if not os.path.exists(path):
        return out
    lines = open(path).read().splitlines()
    head = lines[0].split("\t")
    for r in sorted((dict(zip(head, line.split("\t"))) for line in lines[1:]), key=lambda r: r["name"]):
        if not r["name"].startswith("car-after-"):
            continue
        rate = r["name"].split("-")[2]
        if rate not in RATES:
            continue
        j = {k: json.loads(v) for k, v in r.items() if k not in ("name", "bench")}
        comp = j["compress_s"] + j["server_s"] + j["decode_s"]
        out.append((rate, j["d"], j["car_s"], j["car_bytes"], j["fp32_s"], j["fp32_bytes"],
                    comp, j["ranks"]))
    return out


def hier_points():
    path = os.path.join(ROOT, "docs/scale/hier-2x2.tsv")
    rows = []
    if not os.path.exists(path):
        return rows
    lines = open(path).read().splitlines()
    head = lines[0].split("\t")
    for line in lines[1:]:
        r = dict(zip(head, line.split("\t")))
        if r["rate"] not in RATES:
            continue
        rows.append(r)
    return rows


def lstsq(rows, k):
    """Least squares of y = sum_i c_i x_i over rows (x_1 .. x_k, y), coefficients >= 0 (a
    coefficient that comes out negative is dropped and the rest refitted)."""
    active = list(range(k))
    while True:
        A = [[sum(r[i] * r[j] for r in rows) for j in active] for i in active]
        b = [sum(r[i] * r[k] for r in rows) for i in active]
        n = len(active)
        for c in range(n):  # Gauss-Jordan
            p = max(range(c, n), key=lambda q: abs(A[q][c]))
            A[c], A[p], b[c], b[p] = A[p], A[c], b[p], b[c]
            for q in range(n):
                if q != c and A[c][c]:
                    f = A[q][c] / A[c][c]
                    A[q] = [x - f * y for x, y in zip(A[q], A[c])]
                    b[q] -= f * b[c]
        sol = [b[i] / A[i][i] if A[i][i] else 0.0 for i in range(n)]
        neg = [active[i] for i in range(n) if sol[i] < 0]
        if not neg:
            out = [0.0] * k
            for i, a in enumerate(active):
                out[a] = sol[i]
            return out
        active = [a for a in active if a not in neg]


def fit_link(points):
    """t - compute = 2 a_car + wire_bits / (eta B) for the 1-bit exchange (two rounds whose N-1
    messages overlap), t = 2 (N-1) a_ring + wire_bits / (eta B) for the fp32 ring: the
    per-round costs and the link's efficiency, least squares over the flat 4-host points."""
    rows = []
    for rate, d, car_s, car_b, f_s, f_b, comp, n in points:
        B = RATES[rate]
        rows.append((2.0, 0.0, car_b * 8.0 / B, car_s - comp))
        rows.append((0.0, 2.0 * (n - 1), f_b * 8.0 / B, f_s))
    a_car, a_ring, inv_eta = lstsq(rows, 3)
    return a_car, a_ring, 1.0 / inv_eta


def cpu_compute_per_element(points):
    """Seconds per element of the 1-bit exchange's local work (compress, server, decode)."""
    vals = [comp / d for rate, d, car_s, car_b, f_s, f_b, comp, n in points]
    vals.sort()
    return vals[len(vals) // 2]


def msg_bytes(n_elems, block=2048, unit=False):
    return n_elems / 8.0 + (0 if unit else 4.0 * n_elems / block)


def t_ring(N, m, d, B, a_ring, eta, elem=4.0):
    """The fp32 (elem 4), fp16 (2) or fp8 (1) ring over N ranks: one rank's stream a NIC."""
    return 2 * (N - 1) * a_ring + 2.0 * (N - 1) / N * elem * d * 8.0 / (eta * B)


def t_flat(N, m, d, B, a_car, eta, c_bit, unit=False, B_intra=float("inf")):
    """1-bit flat: m ranks a NIC each send (N - m) of their N - 1 pieces off the node per
    phase; the m - 1 pieces for the node's own ranks go over its links."""
    per_nic = m * (N - m) / N * msg_bytes(d, unit=unit)
    own = (m - 1) / N * msg_bytes(d, unit=unit)
    return 2 * a_car + 2 * per_nic * 8.0 / (eta * B) + 2 * own / B_intra + c_bit * d


def t_hier(N, m, d, B, a_car, eta, c_bit, B_intra, unit=False):
    """1-bit hierarchical: the node's fp32 average of the pieces, the flat exchange of the
    pieces between the n nodes (m ranks a NIC), the messages shared inside the node."""
    n = N // m
    if m <= 1:
        return t_flat(N, 1, d, B, a_car, eta, c_bit, unit)
    intra = ((m - 1) / m * 4.0 * d + (m - 1) / m * msg_bytes(d, unit=unit)) / B_intra
    per_nic = (n - 1) / n * msg_bytes(d, unit=unit)
    inter = 2 * a_car + 2 * per_nic * 8.0 / (eta * B) if n > 1 else 0.0
    return inter + intra + c_bit * d


def intra_bandwidth():
    """Bytes/s of the node's own links: the fp32 ring of 2 ranks on one host (shared memory),
    the row "intra" of docs/scale/hier-2x2.tsv: 4 d bytes a rank in fp32_s."""
    path = os.path.join(ROOT, "docs/scale/hier-2x2.tsv")
    if not os.path.exists(path):
        return None
    lines = open(path).read().splitlines()
    head = lines[0].split("\t")
    for line in lines[1:]:
        r = dict(zip(head, line.split("\t")))
        if r["rate"] == "intra" and float(r["fp32_s"]) > 0:
            return 4.0 * float(r["d"]) / float(r["fp32_s"])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    fp = flat_points()
    if not fp:
        sys.exit("no calibration data in docs/bandwidth/car.tsv")
    a_car, a_ring, eta = fit_link(fp)
    B_intra = intra_bandwidth() or 5e9
    print("calibration on %d flat 4-host points: a round of the 1-bit exchange %.2f ms, of the "
          "ring %.3f ms, link efficiency %.2f; inside a host %.2f GB/s (fp32 ring of 2 ranks)"
          % (len(fp), a_car * 1e3, a_ring * 1e3, eta, B_intra / 1e9))
    print("\nflat 4 hosts x 1 rank (the calibration points), measured against the model:")
    print("%-6s %9s %10s %10s %7s %10s %10s %7s" % ("rate", "d", "1-bit ms", "model", "err",
                                                     "fp32 ms", "model", "err"))
    for rate, d, car_s, car_b, f_s, f_b, comp, n in fp:
        B = RATES[rate]
        mc = t_flat(n, 1, d, B, a_car, eta, comp / d)
        mf = t_ring(n, 1, d, B, a_ring, eta)
        print("%-6s %9d %10.2f %10.2f %+6.0f%% %10.1f %10.1f %+6.0f%%" % (
            rate, d, car_s * 1e3, mc * 1e3, 100 * (mc / car_s - 1), f_s * 1e3, mf * 1e3,
            100 * (mf / f_s - 1)))
    hp = hier_points()
    checks = []
    if hp:
        print("\n2 hosts x 2 ranks (bench/net/hier.sh), predicted from the calibration above and "
              "the local work measured in the run:")
        print("%-6s %5s %6s %10s %10s %7s" % ("rate", "scale", "shape", "ms", "model", "err"))
        for r in hp:
            d = float(r["d"])
            B = RATES[r["rate"]]
            unit = r["scale"] == "unit"
            m = int(r["ranks_per_node"])
            # local work: the run's own compress, server and decode phases (the 2-rank
            # hierarchical run's inside-the-node exchange is part of its alltoall phase)
            comp = float(r["compress_s"]) + float(r["server_s"]) + float(r["decode_s"])
            if m == 2:
                model = t_hier(4, 2, d, B, a_car, eta, comp / d, B_intra, unit)
            else:
                model = t_flat(4, 2, d, B, a_car, eta, comp / d, unit, B_intra)
            meas = float(r["car_s"])
            checks.append((r["rate"], r["scale"], m, meas, model))
            print("%-6s %5s %6s %10.2f %10.2f %+6.0f%%" % (
                r["rate"], r["scale"], "hier" if m == 2 else "flat", meas * 1e3, model * 1e3,
                100 * (model / meas - 1)))
    # Extrapolation: H100 nodes of 8, NVLink-class inside, 10/25/100 Gbit/s between.
    c_gpu = 4.37e-3 / 2 ** 28  # docs/GPU.md: the compressed allreduce's local work on an H100
    B_nv = 300e9  # bytes/s: an NVLink-class 300 GB/s a GPU
    a_dc = 20e-6  # a round between nodes in a data centre: assumed, not measured here
    print("\nPredicted exchange time per step (ms), 8 ranks a node, H100 local work, NVLink "
          "300 GB/s inside, %.0f us a message between nodes, link efficiency %.2f:"
          % (a_dc * 1e6, eta))
    rows = []
    for d, dname in ((340e6, "340M"), (1.3e9, "1.3B")):
        for gbit in (10, 25, 100):
            B = gbit * 1e9
            print("\n d = %s parameters, %d Gbit/s between nodes" % (dname, gbit))
            print(" %6s %9s %9s %9s %9s %9s %9s" % ("ranks", "fp32", "fp16", "fp8", "1b flat",
                                                   "1b hier", "compute"))
            for N in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
                m = 8
                if N > m:
                    f32, f16, f8 = (t_ring(N, m, d, B, a_dc, eta, e) for e in (4.0, 2.0, 1.0))
                else:  # one node: the ring stays on NVLink
                    f32, f16, f8 = (2.0 * 7 / 8 * e * d / B_nv for e in (4.0, 2.0, 1.0))
                # every message of an alltoall phase pays its latency: N - 1 flat, n - 1 hier
                fl = t_flat(N, m, d, B, a_dc * (N - 1) / 2, eta, c_gpu, B_intra=B_nv)
                hi = t_hier(N, m, d, B, a_dc * max(N // m - 1, 1) / 2, eta, c_gpu, B_nv)
                rows.append((dname, gbit, N, f32, f16, f8, fl, hi, c_gpu * d))
                print(" %6d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f" % (
                    N, f32 * 1e3, f16 * 1e3, f8 * 1e3, fl * 1e3, hi * 1e3, c_gpu * d * 1e3))
    # Time to target: S steps of compute C each, the exchange on top (no overlap assumed).
    # 1-bit Adam pays its fp32 warmup (at most freeze_max_fraction, 0.15, of the steps: the
    # default), BinSGDM none; both are assumed to need Adam's number of steps (1-bit Adam's
    # long runs ended within 1 % of Adam's: docs/robustness/; BinSGDM's do not yet).
    C, S, w = 0.2, 10000, 0.15
    print("\nTime to a target Adam reaches in %d steps of %.0f ms compute (hours), 340M "
          "parameters, 1-bit Adam with %.0f %% of the steps in its fp32 warmup, hierarchical:"
          % (S, C * 1e3, w * 100))
    print(" %6s %6s %9s %9s %12s %12s" % ("Gbit/s", "ranks", "fp32", "fp16", "1-bit Adam",
                                          "no warmup"))
    for r in rows:
        if r[0] != "340M" or r[2] not in (16, 128, 1024, 4096):
            continue
        f32, f16, hi = r[3], r[4], r[7]
        t32, t16 = S * (C + f32), S * (C + f16)
        t1 = S * (w * (C + f32) + (1 - w) * (C + hi))
        t0 = S * (C + hi)
        print(" %6d %6d %9.2f %9.2f %12.2f %12.2f" % (r[1], r[2], t32 / 3600, t16 / 3600,
                                                      t1 / 3600, t0 / 3600))
    if args.report:
        out = os.path.join(ROOT, "docs/scale/predictions.tsv")
        with open(out, "w") as f:
            f.write("params\tgbit\tranks\tfp32_ms\tfp16_ms\tfp8_ms\tonebit_flat_ms"
                    "\tonebit_hier_ms\tcompress_compute_ms\n")
            for r in rows:
                f.write("%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n" % (
                    r[0], r[1], r[2], r[3] * 1e3, r[4] * 1e3, r[5] * 1e3, r[6] * 1e3,
                    r[7] * 1e3, r[8] * 1e3))
        out = os.path.join(ROOT, "docs/scale/check-2x2.tsv")
        with open(out, "w") as f:
            f.write("rate\tscale\tranks_per_node\tmeasured_ms\tmodel_ms\terror_pct\n")
            for c in checks:
                f.write("%s\t%s\t%d\t%.3f\t%.3f\t%+.1f\n" % (
                    c[0], c[1], c[2], c[3] * 1e3, c[4] * 1e3, 100 * (c[4] / c[3] - 1)))
        print("wrote docs/scale/predictions.tsv and docs/scale/check-2x2.tsv")


if __name__ == "__main__":
    main()
