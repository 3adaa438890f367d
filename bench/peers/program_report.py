#!/usr/bin/env python3
"""The table of bench/peers/program.sh (gpt.py under onebit's optimizers and under PyTorch DDP).

    program_report.py LOGS OUT     # LOGS/*.log of a sweep -> OUT/runs.tsv, OUT/sweeps.txt and
                                   # OUT/results.md
    program_report.py OUT          # OUT/results.md again from OUT/runs.tsv

runs.tsv has a row per run (rate, system): whether it reached the target, the step and the
seconds of training to it, the steps run, their training seconds, rank 0's bytes, the freeze
step, the last eval loss and the exit status. results.md has, for each rate, the time to target
of every system and its ratio to DDP fp32 and to the fastest DDP variant that reached it.
"""
import csv
import json
import os
import re
import sys

COLUMNS = ("rate", "system", "reached", "target_step", "target_s", "steps", "train_s",
           "ms_per_step", "onebit_steps", "onebit_s", "bytes_sent", "freeze_step", "eval_loss", "exit", "failure")
RATES = ("unshaped", "1g", "200m", "50m")
DDP = ("ddp-fp32", "ddp-fp16", "ddp-powersgd")
NAMES = {
    "onebit": "OnebitAdam, freeze auto, fp32 warmup (the defaults until 2026-11-27)",
    "onebit-fp16": "OnebitAdam, freeze auto, the warmup's gradients in fp16",
    "onebit-fp8": "OnebitAdam, freeze auto, the warmup's gradients in fp8 (the defaults until 2026-11-28)",
    "onebit-short8": "OnebitAdam, opt-in: freeze_step 16, fp8 warmup, refresh_steps 16",
    "onebit-track8": "OnebitAdam, track_variance 25 (frozen at 75), fp8 warmup: **the defaults** since 2026-11-28",
    "onebit-overlap": "OnebitAdam, freeze auto, fp32 warmup + overlap",
    "onebit-fp8-overlap": "OnebitAdam, freeze auto, fp8 warmup + overlap",
    "binsgdm": "BinSGDM (1 bit from step 1)",
    "adam": "onebit.torch.Adam (fp32 ring)",
    "ddp-fp32": "DDP fp32",
    "ddp-fp16": "DDP + fp16 hook",
    "ddp-powersgd": "DDP + PowerSGD (rank 1)",
}


def parse_run(log, rc_path, err_path):
    row = dict(reached="no", target_step="", target_s="", steps="", train_s="", ms_per_step="",
               onebit_steps="", onebit_s="", bytes_sent="", freeze_step="", eval_loss="", exit="", failure="")
    summary = None
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("{"):
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("event") == "summary":
                    summary = ev
                elif ev.get("event") == "freeze" and not row["freeze_step"]:
                    row["freeze_step"] = str(ev["step"])  # the first (refreshes freeze again)
                continue
            m = re.match(r"target eval loss \S+ reached at step (\d+) after ([\d.]+) s", line)
            if m:
                row.update(reached="yes", target_step=m.group(1), target_s=m.group(2))
            m = re.match(r"training time ([\d.]+) s over (\d+) steps.*; ([\d.]+) s in (\d+) 1-bit",
                         line)
            if m:
                row.update(onebit_s=m.group(3), onebit_steps=m.group(4))
            m = re.match(r"training time ([\d.]+) s over (\d+) steps", line)
            if m:
                row.update(train_s=m.group(1), steps=m.group(2))
                if int(m.group(2)):
                    row["ms_per_step"] = "%.1f" % (1000 * float(m.group(1)) / int(m.group(2)))
    if summary:
        row["bytes_sent"] = str(summary.get("bytes_sent", ""))
        if summary.get("eval_loss") is not None:
            row["eval_loss"] = "%.6f" % summary["eval_loss"]
    if os.path.exists(rc_path):
        row["exit"] = open(rc_path).read().strip()
    if row["exit"] not in ("", "0") and os.path.exists(err_path):
        for line in open(err_path, errors="replace"):
            if re.search(r"error|abort|enforce|hung", line, re.I):
                row["failure"] = line.strip()[:200].replace("\t", " ")
                break
    return row


def from_logs(logs):
    rows = []
    for name in sorted(os.listdir(logs)):
        if not name.endswith(".log") or name == "ref.log":
            continue
        stem = name[:-4]
        rate, _, system = stem.partition("-")
        row = dict(rate=rate, system=system)
        row.update(parse_run(os.path.join(logs, name), os.path.join(logs, stem + ".rc"),
                             os.path.join(logs, stem + ".err")))
        rows.append(row)
    key = {r: i for i, r in enumerate(RATES)}
    sysk = {s: i for i, s in enumerate(NAMES)}
    rows.sort(key=lambda r: (key.get(r["rate"], 99), sysk.get(r["system"], 99)))
    return rows


def params_of(logs):
    path = os.path.join(logs, "params")
    return open(path).read().strip().splitlines() if os.path.exists(path) else []


def table(rows):
    out = []
    for rate in [r for r in RATES if any(x["rate"] == r for x in rows)]:
        cell = {x["system"]: x for x in rows if x["rate"] == rate}
        t = {s: float(x["target_s"]) for s, x in cell.items() if x["reached"] == "yes"}
        fp32 = t.get("ddp-fp32")
        best = min((t[s] for s in DDP if s in t), default=None)
        out.append("### %s\n" % rate)
        out.append("| system | time to target | step reached | ms a step | MB sent (rank 0) | "
                   "freeze | vs DDP fp32 | vs best DDP |")
        out.append("|---|---|---|---|---|---|---|---|")
        for s, x in cell.items():
            if x["reached"] == "yes":
                tt = "%.1f s" % t[s]
                r32 = "%.2fx" % (fp32 / t[s]) if fp32 else "-"
                rb = "%.2fx" % (best / t[s]) if best else "-"
            else:
                why = "failed (exit %s)" % x["exit"] if x["exit"] not in ("", "0") else \
                    "not reached (eval %s at step %s)" % (x["eval_loss"] or "-", x["steps"] or "-")
                tt, r32, rb = why, "-", "-"
            mb = "%.1f" % (int(x["bytes_sent"]) / 1e6) if x["bytes_sent"] not in ("", "0") else \
                ("not counted" if s == "ddp-powersgd" else "-")
            ms = x["ms_per_step"] or "-"
            n1 = int(x.get("onebit_steps") or 0)
            if n1 and x["steps"] and int(x["steps"]) > n1:
                # the steps before the freeze and the 1-bit steps, each at its own cost
                rest = (float(x["train_s"]) - float(x["onebit_s"])) / (int(x["steps"]) - n1)
                ms = "%.1f, 1-bit %.1f" % (1000 * rest, 1000 * float(x["onebit_s"]) / n1)
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                NAMES.get(s, s), tt, x["target_step"] or "-", ms, mb,
                x["freeze_step"] or "-", r32, rb))
        out.append("")
        fails = [x for x in cell.values() if x["failure"]]
        for x in fails:
            out.append("- %s failed: `%s`" % (NAMES.get(x["system"], x["system"]), x["failure"]))
        if fails:
            out.append("")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    if len(args) == 2:
        logs, out = args
        rows = from_logs(logs)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "runs.tsv"), "w", newline="") as f:
            w = csv.DictWriter(f, COLUMNS, delimiter="\t", lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        params = params_of(logs)
        if params:  # how the logs were made: each invocation's settings, as it wrote them
            with open(os.path.join(out, "sweeps.txt"), "w") as f:
                f.write("\n".join(params) + "\n")
    elif len(args) == 1:
        out = args[0]
        with open(os.path.join(out, "runs.tsv")) as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    else:
        sys.exit(__doc__)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("# gpt.py under onebit and under PyTorch DDP: time to target\n\n"
                "Generated by `bench/peers/program_report.py` from [`runs.tsv`](runs.tsv); "
                "how it was run: [`README.md`](README.md).\n\n")
        f.write(table(rows))
    print(open(os.path.join(out, "results.md")).read())


if __name__ == "__main__":
    main()
