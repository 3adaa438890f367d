#!/usr/bin/env python3
"""The robustness suite: whole training runs of onebit-worker on several models, seeds and
settings, 1-bit Adam beside its baselines (Adam, and for warm starts the same job from scratch).

    bench/robustness/suite.py run [--group warm|stability|freeze|wide|fp16|ratio|cap|short|track|seeds|binsgdm|all] [--only SUBSTR] [--rerun]
    bench/robustness/suite.py report [--docs]  # tables + SVG plot (--docs: into docs/robustness/)

Runs go one at a time (4 MPI ranks each, `mpirun --oversubscribe`); every finished run appends
one line to results.tsv (var/robustness/ by default), so an interrupted suite carries on where
it stopped. Environment: WORKER (default build-rel/bin/onebit-worker), MPIRUN, NP (4), OUT.
The workloads, variants and cases of every group are in suite_cases.py. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

from suite_cases import (RATIOS, SHORT, SOURCES, TRACK, all_cases, binsgdm_cases, fp16_cases,
                         ratio_cases, short_cases, track_cases, transformer, variant)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.environ.get("OUT", os.path.join(ROOT, "var", "robustness"))
WORKER = os.environ.get("WORKER", os.path.join(ROOT, "build-rel", "bin", "onebit-worker"))
MPIRUN = os.environ.get("MPIRUN", "mpirun")
NP = int(os.environ.get("NP", "4"))
FIELDS = ["case", "variant", "status", "steps", "eval_loss", "eval_accuracy", "freeze_step",
          "bytes_sent", "bytes_warmup", "wall_s", "notes", "rewarms"]


# --- running -----------------------------------------------------------------------------------

def run_spec(name, spec, ckpt_dir=None):
    """Runs one job; returns (status, summary dict, notices, wall seconds). Notices include the
    rewarm events (rollbacks of the divergence guard) and warnings."""
    os.makedirs(os.path.join(OUT, "specs"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "logs"), exist_ok=True)
    spec = dict(spec, name=name)
    path = os.path.join(OUT, "specs", name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    cmd = [MPIRUN, "--oversubscribe", "-np", str(NP), WORKER, "--spec", path, "--format", "json"]
    if ckpt_dir:
        cmd += ["--checkpoint-dir", ckpt_dir]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OPENBLAS_NUM_THREADS="1")
    log = os.path.join(OUT, "logs", name)
    t0 = time.time()
    with open(log + ".jsonl", "w") as out, open(log + ".err", "w") as err:
        rc = subprocess.call(cmd, stdout=out, stderr=err, env=env)
    wall = time.time() - t0
    summary, notices, last = {}, [], {}
    with open(log + ".jsonl") as f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if j.get("event") == "summary":
                summary = j
            elif j.get("event") in ("notice", "warm_start"):
                notices.append(j.get("message", ""))
            elif j.get("event") == "rewarm":
                notices.append("rewarm: " + j.get("message", ""))
            elif j.get("event") == "step":
                last = j
    status = "ok" if rc == 0 else ("diverged" if rc == 3 else "exit %d" % rc)
    if rc != 0 and last:
        status += "@%d" % last.get("step", 0)
    return status, summary, notices, wall


def done_rows():
    path = os.path.join(OUT, "results.tsv")
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if parts[0] == "case" or len(parts) not in (len(FIELDS) - 1, len(FIELDS)):
                    continue  # rows written before the rewarm count have one field less
                rows.append(dict(zip(FIELDS, parts + [""] * (len(FIELDS) - len(parts)))))
    return rows


def append_row(row):
    path = os.path.join(OUT, "results.tsv")
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("\t".join(FIELDS) + "\n")
        f.write("\t".join(str(row.get(k, "")) for k in FIELDS) + "\n")


def ensure_source(name):
    ck = os.path.join(OUT, "checkpoints")
    path = os.path.join(ck, "src-" + name)
    if os.path.isdir(path) and any(d.startswith("step-") for d in os.listdir(path)):
        return path
    print("source %s ..." % name, flush=True)
    status, summary, _, wall = run_spec("src-" + name, SOURCES[name], ckpt_dir=ck)
    if status != "ok":
        sys.exit("source %s failed: %s (see %s/logs)" % (name, status, OUT))
    print("source %s: eval %.4f, frozen at %s, %.0f s" % (
        name, summary.get("eval_loss", float("nan")), summary.get("freeze_step"), wall))
    return path


def case_spec(case, var):
    lw = re.match(r"^(.+)-lw([0-9]+)$", var)
    if lw:  # VARIANT-lwN: that variant with an LR warmup of N steps instead of the job's
        s = case_spec(case, lw.group(1))
        s["lr"]["warmup_steps"] = int(lw.group(2))
        return s
    if var in ("adam", "onebit", "onebit-none", "onebit-fp32", "onebit-fp16", "onebit-fp8",
               "onebit-bc", "binsgdm", "softsign", "binsgdm-t0") \
            or var.startswith("onebit-r") or var.startswith("onebit-t"):
        return variant(case["spec"], var)
    if var == "scratch":
        return variant(case["spec"], "onebit")
    if var == "onebit-pre":  # the default with precondition: what track-K-pre is set against
        s = variant(case["spec"], "onebit")
        s["optimizer"]["precondition"] = True
        return s
    if var.startswith("fixed-"):  # a fixed freeze step with the default frozen_step_ratio
        s = variant(case["spec"], "onebit")
        s["optimizer"]["freeze_step"] = int(var.split("-")[1])
        if var.endswith("-fp16") or var.endswith("-fp8"):
            s["optimizer"]["gradient_exchange"] = var.split("-")[-1]
        return s
    if var.startswith("track-"):  # track-K[-fF][-fpX][-pre][-atN]: track_variance K (track_factor
        # F, the gradients in fpX, precondition, a fixed freeze at step N instead of auto)
        s = variant(case["spec"], "onebit")
        s["optimizer"]["freeze_step"] = "auto"
        s["optimizer"]["track_variance"] = int(var.split("-")[1])
        for part in var.split("-")[2:]:
            if part == "pre":
                s["optimizer"]["precondition"] = True
            elif part.startswith("at"):
                s["optimizer"]["freeze_step"] = int(part[2:])
            elif part.startswith("fp"):
                s["optimizer"]["gradient_exchange"] = part
            elif part.startswith("f"):
                s["optimizer"]["track_factor"] = float(part[1:])
        return s
    if var.startswith("refresh-"):  # refresh-N-fp16 (-fp8): freeze at 16, refreshes of N steps
        s = variant(case["spec"], "onebit")
        s["optimizer"]["gradient_exchange"] = var.split("-")[-1]
        s["optimizer"]["freeze_step"] = 16
        s["optimizer"]["refresh_steps"] = int(var.split("-")[1])
        return s
    if var.startswith("freeze-"):  # a fixed freeze step, on v (freeze-N) or v_hat (freeze-N-bc)
        s = variant(case["spec"], "onebit")
        parts = var.split("-")
        s["optimizer"]["freeze_step"] = int(parts[1])
        s["optimizer"]["bias_correction"] = parts[2:] == ["bc"]
        return s
    s = variant(case["spec"], "onebit")
    s["warm_start"] = {"from": ensure_source(case["source"]), "params": case["params"]}
    if var == "warm-asis":
        s["warm_start"]["refit_steps"] = 0
    elif var.startswith("warm-refit-"):  # a longer or shorter re-estimation than auto
        s["warm_start"]["refit_steps"] = int(var.split("-")[2])
    elif var == "warm-fp16":  # the default refit with its gradients in fp16 (fp8 by default)
        s["warm_start"]["refit_exchange"] = "fp16"
    return s


def cmd_run(args):
    if not os.access(WORKER, os.X_OK):
        sys.exit("no worker at %s (build it: cmake -S . -B build-rel -DONEBIT_CUDA=OFF "
                 "-DCMAKE_BUILD_TYPE=Release && cmake --build build-rel --target onebit-worker) "
                 "or set WORKER" % WORKER)
    have = {(r["case"], r["variant"]) for r in done_rows()}
    def variants(c):  # extra variants named on the command line: warm-refit-N, warm-fp16 of the
        # warm cases, the short group's in fp8 (fixed-16-fp8, refresh-16-fp8), the fp16 group's
        # fp32 and fp8 warmups and Adam (in one build), track-K[...] on the short and freeze
        # groups' jobs, and on the track group's fixed-N, onebit-pre and any VARIANT-lwN (that
        # variant with an LR warmup of N steps)
        extra = (c["group"] == "warm" and (args.variant.startswith("warm-refit-") or args.variant == "warm-fp16")) or \
                (c["group"] == "fp16" and (args.variant in ("onebit-fp32", "onebit-fp8", "adam")
                                           or args.variant.startswith("onebit-t"))) or \
                (c["group"] in ("short", "freeze") and (args.variant.endswith("-fp8") or
                                                        args.variant.startswith("track-"))) or \
                (c["group"] == "track" and (args.variant.startswith("track-") or
                                            args.variant.startswith("fixed-") or
                                            args.variant == "onebit-pre" or
                                            re.search(r"-lw[0-9]+$", args.variant))) or \
                (c["group"] == "binsgdm" and args.variant in ("softsign", "binsgdm-t0"))
        # (once: a variant the case already lists is not added again)
        return c["variants"] + ([args.variant] if extra and args.variant not in c["variants"] else [])
    pending = [(c, v) for c in all_cases(args.group) for v in variants(c)
            if (not args.only or args.only in c["case"]) and (not args.variant or v == args.variant)
            and (args.rerun or (c["case"], v) not in have)]
    print("%d runs to do" % len(pending), flush=True)
    for i, (c, v) in enumerate(pending, 1):
        spec = case_spec(c, v)
        ck = None
        if c["group"] in ("stability", "wide", "freeze", "fp16", "ratio", "cap", "short", "track",
                          "binsgdm") and v != "adam":
            # Checkpoints, so that the divergence guard can roll back (its rollbacks counted).
            spec["checkpoint"] = {"interval": 100, "keep": 1}
            ck = os.path.join(OUT, "ck-run")
            shutil.rmtree(ck, ignore_errors=True)
        status, s, notices, wall = run_spec("%s-%s" % (c["case"], v), spec, ckpt_dir=ck)
        if ck:
            shutil.rmtree(ck, ignore_errors=True)
        rewarms = sum(1 for n in notices if n.startswith("rewarm: "))
        rise = [n for n in notices if "loss rose" in n]
        warm = [n for n in notices if n.startswith("warm start check") or n.startswith("warm start refused")]
        row = {"case": c["case"], "variant": v, "status": status, "steps": s.get("steps", ""),
               "eval_loss": s.get("eval_loss", ""), "eval_accuracy": s.get("eval_accuracy", ""),
               "freeze_step": s.get("freeze_step", ""), "bytes_sent": s.get("bytes_sent", ""),
               "bytes_warmup": s.get("bytes_warmup", ""), "wall_s": "%.1f" % wall,
               "notes": (warm[0] if warm else rise[0] if rise else "").replace("\t", " ")[:160],
               "rewarms": rewarms}
        append_row(row)
        print("[%d/%d] %-28s %-12s %-10s eval %-9s bytes %s (%.0f s)" % (
            i, len(pending), c["case"], v, status, row["eval_loss"], row["bytes_sent"], wall), flush=True)

# --- report ------------------------------------------------------------------------------------

def fnum(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def svg_plot(points, path):
    """A dot plot: one row per case, the gap of each variant to scratch in percent."""
    colors = {"warm": "#1f77b4", "warm-asis": "#d62728", "adam": "#7f7f7f"}
    cases = sorted({p[0] for p in points})
    w, row_h, left, right = 760, 18, 210, 40
    h = 60 + row_h * len(cases)
    lo, hi = -10.0, 20.0
    x = lambda g: left + (min(max(g, lo), hi) - lo) / (hi - lo) * (w - left - right)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="16" font-size="13">Warm start: eval loss against the same job from scratch (%%, clipped to [%g, %g])</text>' % (left - 200, lo, hi)]
    for g in range(int(lo), int(hi) + 1, 5):
        out.append('<line x1="%.1f" x2="%.1f" y1="30" y2="%d" stroke="%s"/>' % (x(g), x(g), h - 20, "#000" if g == 0 else "#ddd"))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%+d</text>' % (x(g), h - 6, g))
    for i, c in enumerate(cases):
        y = 40 + row_h * i
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (left - 8, y + 4, c))
        for (pc, var, gap) in points:
            if pc == c:
                out.append('<circle cx="%.1f" cy="%d" r="4" fill="%s" fill-opacity="0.8"><title>%s %s %+.2f%%</title></circle>' % (x(gap), y, colors.get(var, "#000"), c, var, gap))
    lx = w - right - 250
    for j, (var, label) in enumerate([("warm", "warm start (default: re-estimated)"), ("warm-asis", "warm start as is (refit_steps: 0)"), ("adam", "Adam")]):
        out.append('<circle cx="%d" cy="%d" r="4" fill="%s"/><text x="%d" y="%d">%s</text>' % (lx, 28 + 12 * j, colors[var], lx + 8, 32 + 12 * j, label))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def warm_note(case, var):
    """The warm-start check's message from a run's log (rows written before it was recorded)."""
    path = os.path.join(OUT, "logs", "%s-%s.jsonl" % (case, var))
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        for line in f:
            if '"warm start check' in line or '"warm start refused' in line:
                try:
                    return json.loads(line).get("message", "")
                except ValueError:
                    pass
    return ""


def short_table(by):
    """The short warmup variants (SHORT) beside Adam and the default: eval loss, gaps, bytes."""
    names = {"fixed-16-fp16": "`freeze_step: 16` with the warmup's gradients in fp16",
             "refresh-16-fp16": "the same with `refresh_steps: 16`",
             "refresh-8-fp16": "the same with `refresh_steps: 8`"}
    return variants_table(by, "A short warmup", SHORT, names, short_cases())


def track_table(by):
    """The tracked variance (TRACK) beside Adam and the default, as short_table."""
    names = {"track-25": "`track_variance: 25` (frozen at the LR warmup's end)",
             "track-25-f1.25": "`track_variance: 25`, `track_factor: 1.25`",
             "track-25-at16": "`track_variance: 25`, `freeze_step: 16`",
             "track-25-f1.25-at16": "`track_variance: 25`, `track_factor: 1.25`, `freeze_step: "
                                    "16` (the default of the MLPs from 2026-11-28 to 2026-12-02)",
             "track-25-f1.25-at8": "`track_variance: 25`, `track_factor: 1.25`, `freeze_step: "
                                   "8` (the default of the MLPs since 2026-12-02)"}
    return variants_table(by, "A tracked variance", TRACK, names, track_cases())


def variants_table(by, title, variants, names, all_cases_of):
    """Each of `variants` beside Adam and the default: eval loss, gaps, bytes."""
    lines = []
    for var in variants:
        cases = [c["case"] for c in all_cases_of if (c["case"], var) in by]
        if not cases:
            continue
        if not lines:
            lines = ["## " + title, "",
                     "Each variant beside Adam and the default (auto freeze, fp32 warmup): eval loss, "
                     "gap to Adam and to the default, and the default's bytes over the variant's.", ""]
        lines += ["### `%s`: %s" % (var, names.get(var, var)), "",
                  "| case | steps | adam | default (freeze) | %s | gap to Adam | gap to default | bytes default/run |" % var,
                  "|---|---|---|---|---|---|---|---|"]
        to_adam, to_default, saved, by_cfg, bad = [], [], [], {}, 0
        for c in cases:
            ad, ob, sh = by.get((c, "adam")), by.get((c, "onebit")), by[(c, var)]
            if sh["status"] != "ok":
                bad += 1
            a = fnum(ad and ad["eval_loss"])
            d = fnum(ob and ob["eval_loss"])
            x = fnum(sh["eval_loss"])
            ga = (x / a - 1) * 100 if a and x else None
            gd = (x / d - 1) * 100 if d and x else None
            b = fnum(ob and ob["bytes_sent"]) / fnum(sh["bytes_sent"]) if ob and fnum(sh["bytes_sent"]) else None
            if ga is not None:
                to_adam.append(ga)
            if gd is not None:
                to_default.append(gd)
                by_cfg.setdefault(re.sub(r"-s[0-9]+$", "", c), []).append(gd)
            if b:
                saved.append(b)
            lines.append("| %s | %s | %s | %s (%s) | %s | %s | %s | %s |" % (
                c, sh.get("steps", ""), fmt4(a), fmt4(d), (ob or {}).get("freeze_step", "-"), fmt4(x),
                pct(ga), pct(gd), "%.2fx" % b if b else "-"))
        lines.append("")
        if to_adam and to_default:
            lines.append("Over %d cases: %d diverged; gap to Adam median %+.2f%%, worst %+.2f%%; to the "
                         "default median %+.2f%%, %+.2f%% to %+.2f%%, %d within 1%% of it or better; "
                         "bytes median %.2fx fewer than the default's." % (
                             len(cases), bad, median(to_adam), max(to_adam), median(to_default),
                             min(to_default), max(to_default), sum(g <= 1.0 for g in to_default),
                             median(saved) if saved else float("nan")))
            lines.append("Mean gap to the default per configuration (seeds): " + "; ".join(
                "%s %+.2f%% (%d)" % (k, sum(v) / len(v), len(v)) for k, v in sorted(by_cfg.items())) + ".")
            lines.append("")
    return lines


def binsgdm_table(by):
    """Per configuration of the binsgdm group: Adam's median eval loss over the seeds,
    BinSGDM's median and worst, their differences to Adam's median, divergences (a failed run
    or a non-finite loss), rollbacks, bytes Adam/BinSGDM, and SoftSignSGD and BinSGDM with T0
    where they ran."""
    cfgs = {}
    for c in binsgdm_cases():
        cfgs.setdefault(re.sub(r"-s[0-9]+$", "", c["case"]), []).append(c["case"])
    if not any((c, "binsgdm") in by for cases in cfgs.values() for c in cases):
        return []

    def ok(r):
        e = fnum(r and r["eval_loss"])
        return r is not None and r["status"] == "ok" and e is not None and e == e and abs(e) != float("inf")

    lines = ["## BinSGDM against Adam", "",
             "Eval loss per configuration over its seeds: Adam's median, BinSGDM's median and worst and "
             "their difference to Adam's median; divergences (runs that failed or ended with a non-finite "
             "loss), the divergence guard's rollbacks, Adam's bytes over BinSGDM's, and the goal "
             "(0 divergences, median within 1 % of Adam's median, worst within 3 %).", "",
             "| configuration | seeds | Adam median | BinSGDM median | diff | BinSGDM worst | diff | "
             "divergences | rollbacks | bytes Adam/BinSGDM | paired per seed | goal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # The group's other variants, each beside Adam and BinSGDM: variant -> rows.
    others = {"softsign": [], "binsgdm-t0": []}
    tot = {"div": 0, "n": 0, "met": 0, "cfg": 0}
    for cfg, cases in cfgs.items():
        ran = [c for c in cases if (c, "binsgdm") in by]
        if not ran:
            continue
        ad = [fnum(by[(c, "adam")]["eval_loss"]) for c in cases if ok(by.get((c, "adam")))]
        bs = [by[(c, "binsgdm")] for c in ran]
        good = [fnum(r["eval_loss"]) for r in bs if ok(r)]
        div = sum(1 for r in bs if not ok(r))
        rew = sum(int(r["rewarms"] or 0) for r in bs)
        am = median(ad) if ad else None
        bm, bw = (median(good), max(good)) if good else (None, None)
        d = lambda x: 100.0 * (x - am) / am if (x is not None and am) else None
        ratios = [fnum(by[(c, "adam")]["bytes_sent"]) / fnum(by[(c, "binsgdm")]["bytes_sent"])
                  for c in ran if (c, "adam") in by and fnum(by[(c, "adam")]["bytes_sent"])
                  and fnum(by[(c, "binsgdm")]["bytes_sent"])]
        paired = []
        for c in ran:
            a, b = by.get((c, "adam")), by[(c, "binsgdm")]
            if ok(a) and ok(b):
                paired.append("%+.1f%%" % (100.0 * (fnum(b["eval_loss"]) / fnum(a["eval_loss"]) - 1)))
            else:
                paired.append(b["status"] if not ok(b) else "-")
        met = div == 0 and bm is not None and d(bm) <= 1.0 and d(bw) <= 3.0 and len(good) == len(cases)
        tot["div"] += div
        tot["n"] += len(bs)
        tot["cfg"] += 1
        tot["met"] += met
        rr = ("%.1fx" % min(ratios) if ratios and max(ratios) - min(ratios) < 0.05
              else "%.1f-%.1fx" % (min(ratios), max(ratios)) if ratios else "-")
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %d | %d | %s | %s | %s |" % (
            cfg, len(ran), fmt4(am), fmt4(bm), pct(d(bm)), fmt4(bw), pct(d(bw)), div, rew, rr,
            ", ".join(paired), "met" if met else "**not met**"))
        for v, rows in others.items():
            sv = [by[(c, v)] for c in cases if (c, v) in by]
            if sv:
                sg = [fnum(r["eval_loss"]) for r in sv if ok(r)]
                rows.append((cfg, len(sv), am, median(sg) if sg else None, max(sg) if sg else None,
                             sum(1 for r in sv if not ok(r)), bm, d))
    lines.append("")
    lines.append("%d configurations, %d BinSGDM runs: %d divergences; the goal met on %d of %d "
                 "configurations." % (tot["cfg"], tot["n"], tot["div"], tot["met"], tot["cfg"]))
    lines.append("")
    titles = {"softsign": ("SoftSignSGD (`softsign`, the same update unquantised, gradients "
                           "exchanged in fp32):", "SoftSign"),
              "binsgdm-t0": ("BinSGDM with b a running maximum from the end of the LR warmup "
                             "(`binsgdm-t0`: `max_denominator_step` = `lr.warmup_steps`):", "T0")}
    for v, rows in others.items():
        if not rows:
            continue
        title, short = titles[v]
        lines += [title, "",
                  "| configuration | seeds | Adam median | %s median | diff | %s worst | diff | "
                  "divergences | BinSGDM median | diff |" % (short, short),
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for cfg, n, am, sm, sw, div, bm, d in rows:
            lines.append("| %s | %d | %s | %s | %s | %s | %s | %d | %s | %s |" % (
                cfg, n, fmt4(am), fmt4(sm), pct(d(sm)), fmt4(sw), pct(d(sw)), div, fmt4(bm), pct(d(bm))))
        lines.append("")
    return lines


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def pct(g):
    return "-" if g is None else "%+.2f%%" % g


def fmt4(x):
    return "%.4f" % x if x is not None else "-"


def cmd_report(args):
    rows = done_rows()
    by = {(r["case"], r["variant"]): r for r in rows}
    lines = []
    points = []
    warm = sorted({r["case"] for r in rows if r["variant"] in ("warm", "warm-asis")})
    if warm:
        lines += ["## Warm start", "",
                  "Eval loss of each run (the whole test split; 2048 held-out sequences for the "
                  "transformer), its gap to the same job from scratch, and the bytes one rank sent "
                  "against the scratch run's.", "",
                  "| case | adam | scratch | warm (default) | gap | bytes scratch/warm | warm as is | gap | off at step 1 |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in warm:
            sc, ad = by.get((c, "scratch")), by.get((c, "adam"))
            wa, wi = by.get((c, "warm")), by.get((c, "warm-asis"))
            base = fnum(sc and sc["eval_loss"])
            def cell(r):
                if not r:
                    return "-"
                e = fnum(r["eval_loss"])
                return ("%.4f" % e) if (r["status"] == "ok" and e is not None) else r["status"]
            def gap(r, var):
                e = fnum(r and r["eval_loss"])
                if not r or r["status"] != "ok" or e is None or not base:
                    return "-"
                g = 100.0 * (e - base) / base
                points.append((c, var, g))
                return "%+.2f%%" % g
            ratio = "-"
            if sc and wa and fnum(sc["bytes_sent"]) and fnum(wa["bytes_sent"]):
                ratio = "%.2fx" % (fnum(sc["bytes_sent"]) / fnum(wa["bytes_sent"]))
            gap(ad, "adam")
            note = (wa or {}).get("notes", "") or warm_note(c, "warm")
            m = re.search(r"([0-9.]+)%", note)
            check = (m.group(1) + "%") if m else "-"
            if note.startswith("warm start refused"):
                check += " (refused)"
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                c, cell(ad), cell(sc), cell(wa), gap(wa, "warm"), ratio, cell(wi), gap(wi, "warm-asis"), check))
        lines.append("")
        # Mean and worst gap per configuration (the case name without its seed).
        groups = {}
        for (c, var, g) in points:
            groups.setdefault(re.sub(r"-s[0-9]+$", "", c), {}).setdefault(var, []).append(g)
        lines += ["Per configuration, over its seeds: mean gap to scratch (worst in brackets).", "",
                  "| configuration | seeds | warm (default) | warm as is | adam |", "|---|---|---|---|---|"]
        for cfg in sorted(groups):
            def agg(var):
                v = groups[cfg].get(var, [])
                return "%+.2f%% (%+.2f%%)" % (sum(v) / len(v), max(v)) if v else "-"
            lines.append("| %s | %d | %s | %s | %s |" % (cfg, len(groups[cfg].get("warm", [])), agg("warm"), agg("warm-asis"), agg("adam")))
        lines.append("")
    freeze = [c for c in dict.fromkeys(r["case"] for r in rows)
              if any(r["case"] == c and (r["variant"].startswith("freeze-") or
                                         r["variant"] in ("auto-nobc", "onebit-bc"))
                     for r in rows)]
    stab = [c for c in dict.fromkeys(r["case"] for r in rows)
            if c not in freeze and any(r["case"] == c and r["variant"] in ("onebit", "onebit-none") for r in rows)]

    def cell(r):
        if not r:
            return "-"
        e = fnum(r["eval_loss"])
        return ("%.4f" % e) if (r["status"] == "ok" and e is not None) else r["status"]

    def gap(r, base):
        e = fnum(r and r["eval_loss"])
        if not r or r["status"] != "ok" or e is None or not base:
            return None
        return 100.0 * (e - base) / base

    def ratio(a, b):
        x, y = fnum(a and a["bytes_sent"]), fnum(b and b["bytes_sent"])
        return "%.1fx" % (x / y) if x and y else "-"

    # warm-refit-N runs (run ... --variant warm-refit-N): the gap and bytes per refit length,
    # below the warm-start tables.
    refits = sorted({int(r["variant"].split("-")[2]) for r in rows if r["variant"].startswith("warm-refit-")})
    rcases = [c for c in warm if any((c, "warm-refit-%d" % n) in by for n in refits)]
    if rcases:
        lines += ["Refit length (`refit_steps`: N Adam steps before the freeze), gap to scratch and bytes "
                  "scratch/run:", "",
                  "| case | scratch | " + " | ".join("refit %d | gap | bytes" % n for n in refits) + " |",
                  "|---|---|" + "---|---|---|" * len(refits)]
        sums = {}
        for c in rcases:
            sc = by.get((c, "scratch"))
            base = fnum(sc and sc["eval_loss"])
            cells = []
            for n in refits:
                r = by.get((c, "warm-refit-%d" % n))
                if not r and (by.get((c, "warm")) or {}).get("freeze_step") == str(n):
                    r = by[(c, "warm")]  # the default's refit (auto) was N steps
                g = gap(r, base)
                if g is None:
                    cells += ["-", "-", "-"]
                    continue
                sums.setdefault(re.sub(r"-s[0-9]+$", "", c), {}).setdefault(n, []).append(g)
                cells += [cell(r), pct(g), "%.2fx" % (fnum(sc["bytes_sent"]) / fnum(r["bytes_sent"]))]
            lines.append("| %s | %.4f | %s |" % (c, base or 0, " | ".join(cells)))
        lines.append("")
        for cfg in sorted(sums):
            lines.append("%s, mean gap (worst): " % cfg + "; ".join(
                "refit %d %+.2f%% (%+.2f%%)" % (n, sum(v) / len(v), max(v))
                for n, v in sorted(sums[cfg].items())) + ".")
        lines.append("")
    if freeze:
        lines += ["## Freeze step (beta2 0.999)", "",
                  "Each case: Adam; the default (`onebit`: the paper's test on v over Delta = 1000 "
                  "steps beside the test on v_hat over 200 steps, the freeze at the first that passes, "
                  "the paper's v frozen); `onebit-bc`: the same rule with `bias_correction: true` (Adam's "
                  "warmup with bias correction, v_hat frozen); `auto-nobc`: the paper's test alone, the rule before (rows "
                  "from the build before the change: it is no longer selectable); fixed freeze steps with the paper's v "
                  "(`freeze-N`) and with bias correction, v_hat frozen (`freeze-N-bc`). Gap: eval loss "
                  "against Adam's; bytes: Adam's over the run's. `tf-999-s21` is the job "
                  "`tf-fortunes-999-s21` of the stability table, whose Adam and default runs it shows.", "",
                  "| case | variant | eval loss | gap to Adam | freeze step | bytes Adam/run |",
                  "|---|---|---|---|---|---|"]
        same = {"tf-999-s21": "tf-fortunes-999-s21"}
        for c in freeze:
            for v in ("adam", "onebit"):
                if (c, v) not in by and (same.get(c), v) in by:
                    by[(c, v)] = by[(same[c], v)]
            ad = by.get((c, "adam"))
            base = fnum(ad and ad["eval_loss"])
            order = ["adam", "onebit", "onebit-bc", "auto-nobc"] + sorted(
                {r["variant"] for r in rows if r["case"] == c and r["variant"].startswith("freeze-")},
                key=lambda v: (v.endswith("-bc"), int(v.split("-")[1])))
            for v in order:
                r = by.get((c, v))
                if not r:
                    continue
                lines.append("| %s | %s | %s | %s | %s | %s |" % (
                    c, v, cell(r), pct(gap(r, base)) if v != "adam" else "",
                    r["freeze_step"] if r["freeze_step"] not in ("", "None") else "-",
                    ratio(ad, r) if v != "adam" else ""))
        lines.append("")
    if stab:
        lines += ["## Stability", "",
                  "The default 1-bit Adam and the paper's exact step (`stabilizer: none`) against Adam, "
                  "each 1-bit run with checkpoints every 100 steps so that the divergence guard can roll "
                  "back (rewarms: its rollbacks; `-`: a run made before the count was recorded).", "",
                  "| case | adam | 1-bit Adam (default) | gap | freeze | rewarms | stabilizer none | gap | bytes adam/1-bit |",
                  "|---|---|---|---|---|---|---|---|---|"]
        gaps, div_default, div_none, ratios, n = [], 0, 0, [], 0
        for c in stab:
            ad, ob, nn = by.get((c, "adam")), by.get((c, "onebit")), by.get((c, "onebit-none"))
            base = fnum(ad and ad["eval_loss"])
            g = gap(ob, base)
            if ad and ad["status"] == "ok" and ob:
                n += 1
                if ob["status"] != "ok":
                    div_default += 1
                elif g is not None:
                    gaps.append(g)
            if nn and nn["status"] != "ok":
                div_none += 1
            if ad and ob and fnum(ad["bytes_sent"]) and fnum(ob["bytes_sent"]):
                ratios.append(fnum(ad["bytes_sent"]) / fnum(ob["bytes_sent"]))
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                c, cell(ad), cell(ob), pct(g), (ob or {}).get("freeze_step", "-"),
                (ob or {}).get("rewarms", "") or "-", cell(nn), pct(gap(nn, base)), ratio(ad, ob)))
        lines.append("")
        if gaps:
            srt = sorted(gaps)
            med = srt[len(srt) // 2] if len(srt) % 2 else (srt[len(srt) // 2 - 1] + srt[len(srt) // 2]) / 2
            lines += ["Over %d cases where Adam converges: the default diverged in %d; its gap to Adam: "
                      "median %+.2f%%, worst %+.2f%%, best %+.2f%%; bytes %.1fx to %.1fx fewer than Adam. "
                      "The paper's exact step diverged in %d." % (
                          n, div_default, med, max(gaps), min(gaps), min(ratios), max(ratios), div_none), ""]
    rc = [c["case"] for c in ratio_cases() if any((c["case"], v) in by for v in RATIOS)]
    if rc:
        cols = ["onebit", "onebit-rinf"] + list(RATIOS)
        lines += ["## Frozen step ratio (beta2 0.999)", "",
                  "Eval loss and gap to Adam of the default (`onebit`: `frozen_step_ratio` 1.25), the "
                  "paper's v as the default froze it before (`rinf`; rows of the build before "
                  "the change, the same bits as `frozen_step_ratio: 1e6`; `-` where the freeze came "
                  "late enough for 1.25 to keep v, so the default's row is that run) and r = 1, 1.25, "
                  "1.5. Freeze step and bytes are the same for all of a case's runs.", "",
                  "| case | adam | freeze | bytes Adam/run | " + " | ".join(
                      "%s | gap" % v.replace("onebit-", "") for v in cols) + " |",
                  "|---|---|---|---|" + "---|---|" * len(cols)]
        worst = {v: [] for v in cols}
        for c in rc:
            ad = by.get((c, "adam"))
            base = fnum(ad and ad["eval_loss"])
            ob = by.get((c, "onebit"))
            cells = []
            for v in cols:
                r = by.get((c, v))
                g = gap(r, base)
                if g is not None:
                    worst[v].append(g)
                cells.append("%s | %s" % (cell(r), pct(g)))
            lines.append("| %s | %s | %s | %s | %s |" % (
                c, cell(ad), (ob or {}).get("freeze_step", "-"), ratio(ad, ob), " | ".join(cells)))
        lines.append("")
        lines.append("Worst gap to Adam: " + "; ".join(
            "%s %s over %d" % (v.replace("onebit-", ""), pct(max(worst[v])), len(worst[v]))
            for v in cols if worst[v]) + ".")
        lines.append("")
    fixed_cases = {r["case"] for r in rows
                   if r["variant"].startswith("fixed-") and r["variant"] not in SHORT}
    caps = [c for c in dict.fromkeys(r["case"] for r in rows) if c in fixed_cases]
    if caps:
        lines += ["## The latest freeze (beta2 0.999)", "",
                  "The default (`onebit`: auto freeze, at the latest after `freeze_max_fraction` 0.15 of "
                  "the steps, not before the LR warmup plus two lags of the rule) beside fixed freezes "
                  "at 10 % and 15 % of the run (`fixed-N`, the default `frozen_step_ratio`): eval loss, "
                  "gap to Adam, freeze step, Adam's bytes over the run's.", "",
                  "| case | adam | default | gap | freeze | bytes | fixed | gap | bytes | fixed | gap | bytes |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in caps:
            ad, ob = by.get((c, "adam")), by.get((c, "onebit"))
            base = fnum(ad and ad["eval_loss"])
            fixed = [by[(c, v)] for v in sorted(
                {r["variant"] for r in rows if r["case"] == c and r["variant"].startswith("fixed-")
                 and r["variant"] not in SHORT},
                key=lambda v: int(v.split("-")[1]))]
            cells = ["%s (%s) | %s | %s" % (cell(r), r["variant"], pct(gap(r, base)), ratio(ad, r))
                     for r in fixed[:2]]
            cells += ["- | - | -"] * (2 - len(cells))
            lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                c, cell(ad), cell(ob), pct(gap(ob, base)), (ob or {}).get("freeze_step", "-"),
                ratio(ad, ob), " | ".join(cells)))
        lines.append("")
    f16 = [c["case"] for c in fp16_cases() if (c["case"], "onebit-fp16") in by]
    if f16:
        lines += ["## fp16 gradient exchange", "",
                  "The default (`onebit`, fp32 gradients in the warmup) and the same with "
                  "`gradient_exchange: fp16` (`fp16`), each against Adam (fp32): eval loss, gap, "
                  "freeze step, and Adam's bytes over the run's.", "",
                  "| case | steps | adam | default | gap | freeze | bytes | fp16 | gap | freeze | bytes |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        g32, g16, diff, div, big = [], [], [], 0, []
        for c in f16:
            ad, ob, fp = by.get((c, "adam")), by.get((c, "onebit")), by.get((c, "onebit-fp16"))
            base = fnum(ad and ad["eval_loss"])
            a, b = gap(ob, base), gap(fp, base)
            if fp["status"] != "ok":
                div += 1
            if a is not None:
                g32.append(a)
            if b is not None:
                g16.append(b)
            if a is not None and b is not None:
                diff.append(b - a)
            steps = (fp or {}).get("steps", "")
            if fnum(steps) and fnum(steps) >= 2000 and ad and ob and fnum(ad["bytes_sent"]):
                big.append((c, fnum(ad["bytes_sent"]) / fnum(ob["bytes_sent"]),
                            fnum(ad["bytes_sent"]) / fnum(fp["bytes_sent"])))
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                c, steps, cell(ad), cell(ob), pct(a), (ob or {}).get("freeze_step", "-"),
                ratio(ad, ob), cell(fp), pct(b), fp.get("freeze_step", "-"), ratio(ad, fp)))
        lines.append("")
        if g16 and g32 and diff:
            lines += ["Over %d cases: fp16 diverged in %d; gap to Adam median %+.2f%% (default %+.2f%%), "
                      "worst %+.2f%% (default %+.2f%%); fp16 against the default: median %+.2f%%, "
                      "%+.2f%% to %+.2f%%." % (len(f16), div, median(g16), median(g32), max(g16), max(g32),
                                               median(diff), min(diff), max(diff))]
            for c, x, y in big:
                lines.append("%s (>= 2000 steps): %.1fx fewer bytes than Adam by default, %.1fx with fp16." % (c, x, y))
            lines.append("")
    lines += short_table(by)
    lines += track_table(by)
    lines += binsgdm_table(by)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "tables.md"), "w") as f:
        f.write(text)
    print(text)
    if points:
        svg_plot(points, os.path.join(OUT, "warm-start.svg"))
    if args.docs:
        # The tables between the markers of docs/robustness/README.md, the plot and the raw
        # results beside it.
        docs = os.path.join(ROOT, "docs", "robustness")
        readme = os.path.join(docs, "README.md")
        with open(readme) as f:
            doc = f.read()
        begin, end = "<!-- suite:begin -->", "<!-- suite:end -->"
        if begin not in doc or end not in doc:
            sys.exit("%s has no %s ... %s markers" % (readme, begin, end))
        doc = doc[:doc.index(begin) + len(begin)] + "\n" + text + doc[doc.index(end):]
        with open(readme, "w") as f:
            f.write(doc)
        with open(os.path.join(OUT, "results.tsv")) as f, open(os.path.join(docs, "results.tsv"), "w") as g:
            g.write(f.read())
        if points:
            svg_plot(points, os.path.join(docs, "warm-start.svg"))
        print("updated %s" % readme)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--group", default="warm", choices=["warm", "stability", "freeze", "wide", "fp16", "ratio", "cap", "short",
                                                       "track", "seeds", "binsgdm", "all"])
    r.add_argument("--only", default="")
    r.add_argument("--variant", default="", help="only this variant (adam, scratch, warm, ...)")
    r.add_argument("--rerun", action="store_true")
    rp = sub.add_parser("report")
    rp.add_argument("--docs", action="store_true",
                    help="also write the tables into docs/robustness/README.md")
    args = ap.parse_args()
    {"run": cmd_run, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
