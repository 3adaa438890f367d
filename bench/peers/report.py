#!/usr/bin/env python3
"""Table and plot of bench/peers/run.sh: OUT/results.md and OUT/time-to-target.svg and .png
(gnuplot), built from the summaries in OUT (models.tsv, runs.tsv, sweeps.tsv; committed).

usage: report.py [--logs LOGS [--keep-targets]] OUT
  --logs LOGS  first take the summaries from the raw logs of a sweep (bench/peers/run.sh keeps
               them under var/peers/logs/ or var/peers/long/logs/, git-ignored): a run's row
               replaces the row of the same run, the rows of runs LOGS lacks stay, LOGS/params'
               lines are added to sweeps.tsv
  --keep-targets  time LOGS' runs to the targets of OUT/models.tsv, those the rows kept from
               earlier sweeps were timed to, not to the target of LOGS' own reference (a rerun
               of some systems stays comparable with the rest of the table)

  models.tsv  per model: its parameters and batch, the target eval loss (the highest of the
              reference's last 3 evaluations, steps ref_from-ref_step), the compute check's
              median step times [s] (compute_onebit_s, compute_torch_s) and torch's version
  runs.tsv    per model, bandwidth and system: whether its log had events, the steps, freeze
              step, last eval loss, the step and training time [s] to the target, the median
              step times [s] per phase (t_warm, t_comp) and the failure its stderr names
  sweeps.tsv  one row per invocation of run.sh: its rates, models, systems and seconds
Floats are written with repr(), so the report from the TSVs is the report from the logs."""
import argparse
import json
import os
import shlex
import statistics
import shutil
import subprocess
import tempfile

SYSTEMS = ["onebit", "onebit-fp32", "onebit-fp16", "onebit-short", "onebit-refresh", "onebit-short-fp8", "onebit-refresh-fp8",
           "onebit-refresh-fp8-overlap", "onebit-warm", "onebit-overlap", "onebit-plain", "onebit-track", "onebit-track-pre", "onebit-track16", "onebit-track-overlap", "onebit-track16-overlap", "onebit-track-flat", "onebit-defaults", "adam", "adam-fp16", "adam-overlap",
           "ddp-fp32", "ddp-fp16", "ddp-powersgd1", "ddp-powersgd4"]
LABEL = {"onebit": "onebit 1-bit Adam (defaults)", "onebit-fp32": "onebit 1-bit Adam, fp32 warmup",
         "onebit-overlap": "onebit 1-bit Adam, overlap",
         "onebit-fp16": "onebit 1-bit Adam, fp16 warmup",
         "onebit-short": "onebit 1-bit Adam, short fp16 warmup",
         "onebit-refresh": "onebit 1-bit Adam, short fp16 warmup + refresh",
         "onebit-short-fp8": "onebit 1-bit Adam, short fp8 warmup",
         "onebit-refresh-fp8": "onebit 1-bit Adam, short fp8 warmup + refresh",
         "onebit-refresh-fp8-overlap": "onebit 1-bit Adam, short fp8 warmup + refresh, overlap",
         "onebit-warm": "onebit 1-bit Adam, warm start", "adam-fp16": "onebit Adam, fp16",
         "onebit-plain": "onebit 1-bit Adam, no precondition, auto freeze",
         "onebit-track": "onebit 1-bit Adam, no precondition, track_variance 25 (the transformer defaults since 2026-11-28, with the overlap since 2026-12-02)",
         "onebit-track-pre": "onebit 1-bit Adam, track_variance 25",
         "onebit-track16": "onebit 1-bit Adam, no precondition, track_variance 25, frozen at SHORT_FREEZE (16), track_factor 1.25 (the MLP defaults from 2026-11-28 to 2026-12-02)",
         "onebit-track-overlap": "onebit 1-bit Adam, the transformer defaults, overlap",
         "onebit-track16-overlap": "onebit 1-bit Adam, the MLP defaults, overlap",
         "onebit-track-flat": "onebit 1-bit Adam, no precondition, track_variance 25, overlap false (the transformer defaults until 2026-12-02)",
         "onebit-defaults": "onebit 1-bit Adam, only the type and betas named (the defaults of the day)",
         "adam": "onebit Adam (fp32)", "adam-overlap": "onebit Adam, overlap", "ddp-fp32": "DDP fp32",
         "ddp-fp16": "DDP + fp16 hook", "ddp-powersgd1": "DDP + PowerSGD r1",
         "ddp-powersgd4": "DDP + PowerSGD r4"}
COLOR = {"onebit": "#7b2cbf", "onebit-fp32": "#a05fd6", "onebit-overlap": "#c77dff", "onebit-fp16": "#3c096c",
         "onebit-warm": "#e0aaff", "onebit-short": "#10002b", "onebit-refresh": "#5a189a",
         "onebit-short-fp8": "#240046", "onebit-refresh-fp8": "#9d4edd",
         "onebit-refresh-fp8-overlap": "#b5179e", "onebit-plain": "#6a4c93", "onebit-track": "#ff006e", "onebit-track-pre": "#fb5607",
         "onebit-track16": "#3a86ff", "onebit-track-overlap": "#c9184a", "onebit-track16-overlap": "#023e8a",
         "onebit-track-flat": "#ff8fab", "onebit-defaults": "#2d6a4f",
         "adam-fp16": "#1d6b62", "adam": "#2a9d8f",
         "adam-overlap": "#8ad1c8", "ddp-fp32": "#e76f51", "ddp-fp16": "#f4a261",
         "ddp-powersgd1": "#264653", "ddp-powersgd4": "#6c757d"}
# The onebit systems whose time to target the table sets against DDP's, and their short names.
RATIO = {"onebit": "1-bit", "onebit-fp32": "1-bit fp32 warmup", "onebit-fp16": "1-bit fp16",
         "onebit-short": "short", "onebit-refresh": "refresh", "onebit-short-fp8": "short fp8",
         "onebit-refresh-fp8": "refresh fp8", "onebit-refresh-fp8-overlap": "refresh fp8 overlap",
         "onebit-warm": "warm", "onebit-plain": "no precondition", "onebit-track": "tracked", "onebit-track-pre": "tracked + precondition",
         "onebit-track16": "tracked from 16", "onebit-track-overlap": "tracked, overlap",
         "onebit-track16-overlap": "tracked from 16, overlap", "onebit-track-flat": "tracked, no overlap",
         "onebit-defaults": "defaults"}
RATES = ["50m", "200m", "1g", "unshaped"]
RATE_LABEL = {"50m": "50 Mbit/s", "200m": "200 Mbit/s", "1g": "1 Gbit/s", "unshaped": "unshaped"}
RATE_X = {"50m": 50, "200m": 200, "1g": 1000, "unshaped": 10000}


def events(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def step_times(ev):
    """Per-step training time [s] by step number, whichever program wrote the log."""
    start = next((e for e in ev if e.get("event") == "start"), {})
    spec = start.get("spec", {})
    world, batch = start.get("world_size", 1), spec.get("batch_size", start.get("batch_size", 1))
    t = {}
    for e in ev:
        if e.get("event") != "step":
            continue
        if "step_s" in e:
            t[e["step"]] = e["step_s"]
        elif e.get("samples_per_s"):
            t[e["step"]] = world * batch / e["samples_per_s"]
    return t


def run_result(path, target):
    """Time to target, its step, the eval losses, and median step times per phase."""
    ev = events(path)
    if not ev:
        return None
    times = step_times(ev)
    steps = [e for e in ev if e.get("event") == "step"]
    evals = [e for e in ev if e.get("event") == "eval"]
    freeze = next((e["step"] for e in ev if e.get("event") == "freeze"), None)
    hit = next((e for e in evals if e["eval_loss"] <= target), None)
    r = {"steps": len(steps), "freeze": freeze, "last_eval": evals[-1]["eval_loss"] if evals else None,
         "hit_step": hit["step"] if hit else None, "hit_loss": hit["eval_loss"] if hit else None,
         "diverged": any(e.get("event") == "diverged" for e in ev)}
    if hit:
        r["ttt"] = sum(v for k, v in times.items() if k <= hit["step"])
    # Phase medians, the first 3 steps of each phase left out (connections open, caches warm).
    if freeze:
        warm = [v for k, v in times.items() if 3 < k <= freeze]
        comp = [v for k, v in times.items() if k > freeze + 3]
    else:
        warm, comp = [v for k, v in times.items() if k > 3], []
    r["t_warm"] = statistics.median(warm) if warm else None
    r["t_comp"] = statistics.median(comp) if comp else None
    return r


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


MODEL_COLS = ["model", "num_params", "batch", "target", "ref_from", "ref_step", "compute_onebit_s",
              "compute_torch_s", "torch"]
RUN_COLS = ["model", "rate", "system", "events", "steps", "freeze", "last_eval", "hit_step", "ttt",
            "t_warm", "t_comp", "fail"]
SWEEP_COLS = ["rates", "models", "systems", "seconds"]
INT_COLS = {"steps", "freeze", "hit_step", "ref_from", "ref_step", "batch", "seconds", "events"}
FLOAT_COLS = {"target", "compute_onebit_s", "compute_torch_s", "last_eval", "ttt", "t_warm", "t_comp"}


def read_tsv(path):
    """Rows of a TSV with a header line, as dicts: empty cells None, numbers parsed."""
    if not os.path.exists(path):
        return []
    lines = open(path).read().splitlines()
    head = lines[0].split("\t")
    rows = []
    for line in lines[1:]:
        r = {}
        for k, v in zip(head, line.split("\t")):
            r[k] = None if v == "" else int(v) if k in INT_COLS else float(v) if k in FLOAT_COLS else v
        rows.append(r)
    return rows


def write_tsv(path, cols, rows):
    def cell(v):
        return "" if v is None else repr(v) if isinstance(v, float) else str(v)
    with open(path, "w") as f:
        f.write("\t".join(cols) + "\n")
        for r in rows:
            f.write("\t".join(cell(r.get(c)) for c in cols) + "\n")


def merge(path, cols, new, key):
    """new's rows, and the rows of the file at path whose key new lacks, sorted by key."""
    old = read_tsv(path)
    have = {key(r) for r in new}
    rows = [r for r in old if key(r) not in have] + new
    write_tsv(path, cols, sorted(rows, key=key))


def reference(logs, model, models):
    """The target of model from its reference run in logs/, its row appended to models."""
    ref = events(os.path.join(logs, f"ref-{model}.jsonl"))
    ref_eval = [e for e in ref if e.get("event") == "eval"]
    # The eval loss is noisy (+-0.02 from one evaluation to the next on the MLP): the target
    # is the highest of the reference's last 3 evaluations, a level Adam is at or below
    # from the first of them on, rather than the luck of one evaluation.
    last3 = ref_eval[-3:]
    target = max(e["eval_loss"] for e in last3)
    start = next((e for e in ref if e.get("event") == "start"), {})
    m = {"model": model, "num_params": start.get("num_params", "?"),
         "batch": start.get("spec", {}).get("batch_size", 1), "target": float(target),
         "ref_from": last3[0]["step"], "ref_step": ref_eval[-1]["step"]}
    # Compute check.
    c1 = step_times(events(os.path.join(logs, f"compute-{model}-onebit.jsonl")))
    torch_ev = events(os.path.join(logs, f"compute-{model}-torch.jsonl"))
    c2 = step_times(torch_ev)
    if c1 and c2:
        m["compute_onebit_s"] = float(statistics.median([v for k, v in c1.items() if k > 3]))
        m["compute_torch_s"] = float(statistics.median([v for k, v in c2.items() if k > 3]))
        m["torch"] = torch_ev[0].get("torch", "")
    models.append(m)
    return target


def summarize(logs, out, keep_targets=False):
    """The rows of models.tsv, runs.tsv and sweeps.tsv from the raw logs in logs/; with
    keep_targets the runs are timed to the targets of out/models.tsv, which stays as it is."""
    models, runs = [], []
    kept = {r["model"]: r for r in read_tsv(os.path.join(out, "models.tsv"))}
    for model in ("mlp", "transformer"):
        if keep_targets:
            if model not in kept:
                continue
            target = kept[model]["target"]
        elif not os.path.exists(os.path.join(logs, f"ref-{model}.jsonl")):
            continue
        else:
            target = reference(logs, model, models)
        for rate in RATES:
            for s in SYSTEMS:
                path = os.path.join(logs, f"{rate}-{model}-{s}")
                if not os.path.exists(path + ".jsonl") and not os.path.exists(path + ".err"):
                    continue
                r = run_result(path + ".jsonl", target)
                text = open(path + ".err", errors="replace").read() if os.path.exists(path + ".err") else ""
                fail = ("aborts (gloo)" if "EnforceNotMet" in text else
                        "hangs at its start" if "no step after step" in text else None)
                row = {"model": model, "rate": rate, "system": s, "events": 0 if r is None else 1,
                       "fail": fail}
                if r is not None:
                    row.update({k: r.get(k) for k in RUN_COLS if k in r})
                    for k in ("last_eval", "ttt", "t_warm", "t_comp"):
                        if row.get(k) is not None:
                            row[k] = float(row[k])
                runs.append(row)
    sweeps = []
    if os.path.exists(os.path.join(logs, "params")):  # run.sh appends a line per invocation
        for line in open(os.path.join(logs, "params")).read().splitlines():
            kv = dict(w.partition("=")[::2] for w in shlex.split(line))
            sweeps.append({"rates": kv.get("RATES"), "models": kv.get("MODELS"),
                           "systems": kv.get("SYSTEMS"), "seconds": int(kv.get("SWEEP_SECONDS", 0))})
    # A sweep run with --no-compute has no compute check: the model keeps the earlier one's.
    for m in models:
        if "compute_onebit_s" not in m and m["model"] in kept:
            m.update({k: kept[m["model"]][k] for k in ("compute_onebit_s", "compute_torch_s", "torch")})
    merge(os.path.join(out, "models.tsv"), MODEL_COLS, models, lambda r: r["model"])
    merge(os.path.join(out, "runs.tsv"), RUN_COLS, runs, lambda r: (r["model"], r["rate"], r["system"]))
    old = read_tsv(os.path.join(out, "sweeps.tsv"))
    write_tsv(os.path.join(out, "sweeps.tsv"), SWEEP_COLS, old + [r for r in sweeps if r not in old])


def report(out):
    sweep_s = sum(r["seconds"] or 0 for r in read_tsv(os.path.join(out, "sweeps.tsv")))
    by_model = {m["model"]: m for m in read_tsv(os.path.join(out, "models.tsv"))}
    models = [m for m in ("mlp", "transformer") if m in by_model]
    runs = {(r["model"], r["rate"], r["system"]): r for r in read_tsv(os.path.join(out, "runs.tsv"))}
    md = ["# onebit against PyTorch DDP, on our runs", "",
          "Generated by `bench/peers/run.sh` (`bench/peers/report.py` rebuilds it from the TSVs beside it). 4 ranks, one",
          "per network namespace, links shaped with tc as in `docs/bandwidth/`; all ranks share the same 2",
          "CPU cores. Time to target: training time (evaluation left out, for every system) of the steps up",
          "to the first evaluation at or below the target eval loss (from onebit's Adam, unshaped: below).",
          "Each cell is the latest run of its system; the cells run twice are compared in `README.md`",
          "(\"Repeats\").", ""]
    plot_rows = {}
    for model in models:
        mr = by_model[model]
        target, ref_from, ref_step = mr["target"], mr["ref_from"], mr["ref_step"]
        md += [f"## {model} ({mr['num_params']} parameters)", ""]
        # Compute check.
        if mr["compute_onebit_s"] is not None and mr["compute_torch_s"] is not None:
            batch = mr["batch"]
            m1, m2 = mr["compute_onebit_s"], mr["compute_torch_s"]
            md += ["Compute check (one process, one core, no communication): forward, backward and Adam step",
                   "of the same model and batch.", "",
                   "| program | step [ms] | samples/s | vs torch |", "|---|---|---|---|",
                   f"| onebit-worker (adam, world 1) | {m1 * 1e3:.1f} | {batch / m1:.0f} | {m2 / m1:.2f}x |",
                   f"| torch {mr['torch'] or ''} (1 thread) | {m2 * 1e3:.1f} | {batch / m2:.0f} | 1.00x |", ""]
        md += [f"Target eval loss **{target:.4f}**: the highest eval loss of onebit's Adam over steps "
               f"{ref_from}-{ref_step} of its reference run.", "",
               "| bandwidth | " + " | ".join(LABEL[s] for s in SYSTEMS) +
               "".join(f" | {RATIO[s]} vs DDP fp32 | {RATIO[s]} vs best DDP" for s in RATIO) + " |",
               "|---|" + "---|" * (len(SYSTEMS) + 2 * len(RATIO))]
        detail = ["", "Step times per phase [ms] (median; for onebit 1-bit Adam: warmup / compression; "
                  "PowerSGD: before / after its start iteration) and the run's freeze step:", "",
                  "| bandwidth | " + " | ".join(LABEL[s] for s in SYSTEMS) + " |", "|---|" + "---|" * len(SYSTEMS)]
        for rate in RATES:
            rows = {s: runs.get((model, rate, s)) for s in SYSTEMS}
            res = {s: rows[s] if rows[s] and rows[s]["events"] else None for s in SYSTEMS}
            if not any(res.values()):
                continue
            cells, dcells = [], []
            for s in SYSTEMS:
                r = res[s]
                fail = rows[s] and rows[s]["fail"]
                if r is None or (r["steps"] <= 5 and not r.get("ttt")) or (fail and not r.get("ttt")):
                    cells.append(fail or "-")
                    dcells.append(fmt(r["t_warm"] * 1e3) if r and r.get("t_warm") else "-")
                    continue
                if r.get("ttt") is not None:
                    cells.append(f"{r['ttt']:.1f} s ({r['hit_step']})")
                    plot_rows.setdefault((model, s), []).append((RATE_X[rate], r["ttt"]))
                else:
                    cells.append(f"not reached in {r['steps']} (eval {fmt(r['last_eval'], 4)})")
                ph = fmt(r["t_warm"] and r["t_warm"] * 1e3)
                if r["t_comp"] is not None:
                    ph += " / " + fmt(r["t_comp"] * 1e3)
                if r["freeze"]:
                    ph += f" (freeze {r['freeze']})"
                dcells.append(ph)
            ddp = [res[s]["ttt"] for s in SYSTEMS if s.startswith("ddp") and res[s] and res[s].get("ttt")]
            fp32 = res["ddp-fp32"] and res["ddp-fp32"].get("ttt")
            ratios = []
            for mine in RATIO:
                one = res[mine] and res[mine].get("ttt")
                ratios.append(f"**{fp32 / one:.2f}x**" if one and fp32 else "-")
                ratios.append(f"**{min(ddp) / one:.2f}x**" if one and ddp else "-")
            md.append(f"| {RATE_LABEL[rate]} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
            detail.append(f"| {RATE_LABEL[rate]} | " + " | ".join(dcells) + " |")
        md += ["", "Cells: time to target (step at which it was reached)."] + detail + [""]
    if sweep_s:
        md += [f"The runs took {sweep_s} s in all.", ""]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md))
    plot(out, models, plot_rows)


def main():
    ap = argparse.ArgumentParser(description="table and plot of bench/peers/run.sh from its TSVs")
    ap.add_argument("--logs", help="first take the TSVs from the raw logs in this directory")
    ap.add_argument("--keep-targets", action="store_true",
                    help="time the runs to the targets of OUT/models.tsv, not to LOGS' reference")
    ap.add_argument("out", nargs="?", default="docs/peers")
    a = ap.parse_args()
    if a.keep_targets and not a.logs:
        ap.error("--keep-targets goes with --logs")
    if a.logs:
        summarize(a.logs, a.out, a.keep_targets)
    report(a.out)


def plot(out, models, rows):
    if not rows:
        return
    tmp = tempfile.mkdtemp()
    data = os.path.join(tmp, "time-to-target.dat")
    series = []
    with open(data, "w") as f:
        for model in models:
            for s in SYSTEMS:
                pts = sorted(rows.get((model, s), []))
                if not pts:
                    continue
                f.write(f"# {model} {s}\n")
                for x, y in pts:
                    f.write(f"{x} {y}\n")
                f.write("\n\n")
                series.append((model, s))
    for term, ext in (("svg size 1100,460 font 'sans,11'", "svg"), ("pngcairo size 1100,460", "png")):
        plot_one(out, models, series, data, term, ext)
    shutil.rmtree(tmp)


def plot_one(out, models, series, data, term, ext):
    cmds = [f"set terminal {term}", f"set output '{out}/time-to-target.{ext}'",
            "set logscale xy", "set xrange [35:15000]",
            "set xtics ('50 Mbit/s' 50, '200 Mbit/s' 200, '1 Gbit/s' 1000, 'unshaped' 10000)",
            "set xlabel 'link bandwidth'", "set ylabel 'time to target eval loss [s]'",
            "set key top right font ',9'", "set grid",
            f"set multiplot layout 1,{len(models)}"]
    idx = 0
    for model in models:
        parts = []
        for (m, s) in series:
            if m == model:
                parts.append(f"'{data}' index {idx} with linespoints lw 2 lc rgb '{COLOR[s]}' title '{LABEL[s]}'")
                idx += 1
        cmds.append(f"set title '{model}'")
        cmds.append("plot " + ", ".join(parts))
    cmds.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(cmds), text=True, check=False)


if __name__ == "__main__":
    main()
