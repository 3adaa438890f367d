"""Builds bench/python/RESULTS-mlp-curves.md's figures from mlp_curves.sh's runs: onebit-worker's
step and eval reports (its AVX-512 kernel, and ONEBIT_GEMM=blas) and tests/python/mlp_curves.py's
TSV (torch's MLP, onebit.torch.OnebitAdam), one set per world size and seed.

    mlp_curves_report.py TSV MD NP:SEED:ENGINE.jsonl:BLAS.jsonl:TORCH.tsv...

Writes TSV (ranks, seed, step, engine, engine_blas, torch: the train loss of each step, the mean
over the ranks, torch's rounded as the worker prints; then the eval rows, step prefixed with
"eval") and the tables of MD between its markers, leaving the prose around them alone.
"""
import json
import sys

BEGIN, END = "<!-- mlp_curves_report.py: begin -->", "<!-- mlp_curves_report.py: end -->"


def engine_log(path):
    steps, evals, summary = {}, {}, {}
    for line in open(path):
        if not line.startswith("{"):
            continue
        ev = json.loads(line)
        if ev["event"] == "step":
            steps[ev["step"]] = ev["loss"]
        elif ev["event"] == "eval":
            evals[ev["step"]] = ev["eval_loss"]
        elif ev["event"] in ("freeze", "summary"):
            summary.update({k: v for k, v in ev.items() if k in ("step", "freeze_step")})
    return steps, evals, summary.get("freeze_step", summary.get("step"))


def torch_tsv(path):
    steps, evals = {}, {}
    for line in open(path):
        f = line.split("\t")
        if f[0] == "eval":
            evals[int(f[1])] = float(f[2])
        else:
            steps[int(f[0])] = float(f[1])
    return steps, evals


def rel(a, b):
    return abs(a - b) / abs(b)


def stats(xs):
    return (max(xs), sum(xs) / len(xs)) if xs else (float("nan"), float("nan"))


def windows(last, freeze):
    """Step ranges over which the differences are summarised: the first steps, up to the
    freeze, then doubling spans to the end."""
    out, lo = [], 1
    for hi in sorted({10, freeze, 2 * freeze, last}):
        if lo <= hi <= last:
            out.append((lo, hi))
            lo = hi + 1
    return out


def r7(x):
    """A value as the worker prints it (7 significant digits, "%.7g"), so that both sides of a
    comparison have the same resolution."""
    return float("%.7g" % x)


def main():
    tsv, md, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
    rows, spans, tables, finals = [], {}, [], {}
    summary = ["| ranks | seed | freeze | final eval loss: engine (AVX-512) | engine (BLAS) | "
               "torch | torch vs engine | BLAS vs AVX-512 |",
               "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        np_, seed, ep, bp, tp = run.split(":")
        e, ee, freeze = engine_log(ep)
        b, be, _ = engine_log(bp)
        t, te = torch_tsv(tp)
        t = {s: r7(v) for s, v in t.items()}
        te = {s: r7(v) for s, v in te.items()}
        last = max(e)
        for s in sorted(e):
            rows.append("%s\t%s\t%d\t%.7g\t%.7g\t%.7g" % (np_, seed, s, e[s], b[s], t[s]))
        for s in sorted(ee):
            rows.append("%s\t%s\teval%d\t%.7g\t%.7g\t%.7g" % (np_, seed, s, ee[s], be[s], te[s]))
        for lo, hi in windows(last, freeze):
            span = range(lo, hi + 1)
            acc = spans.setdefault((np_, freeze), {}).setdefault((lo, hi), [[], [], []])
            acc[0] += [rel(t[s], e[s]) for s in span]
            acc[1] += [rel(b[s], e[s]) for s in span]
            acc[2] += [rel(t[s], b[s]) for s in span]
        fe, fb, ft = ee[last], be[last], te[last]
        summary.append("| %s | %s | %d | %.7g | %.7g | %.7g | %.1e | %.1e |" %
                       (np_, seed, freeze, fe, fb, ft, rel(ft, fe), rel(fb, fe)))
        finals.setdefault(np_, []).append((rel(ft, fe), rel(fb, fe)))
    for np_, f in finals.items():
        summary.append("| %s | mean | | | | | %.1e | %.1e |" %
                       (np_, sum(x for x, _ in f) / len(f), sum(y for _, y in f) / len(f)))
    for (np_, freeze), by_span in spans.items():
        tables.append("\n**%s rank%s** (freeze after step %d), every seed: relative difference "
                      "of the train loss, step by step, max / mean over each span\n" %
                      (np_, "" if np_ == "1" else "s", freeze))
        tables.append("| steps | torch vs engine | BLAS vs AVX-512 (engine) | torch vs engine "
                      "(BLAS) |")
        tables.append("|---|---:|---:|---:|")
        for (lo, hi), acc in by_span.items():
            cells = ["%.1e / %.1e" % stats(xs) for xs in acc]
            tables.append("| %d-%d | %s |" % (lo, hi, " | ".join(cells)))
    with open(tsv, "w") as f:
        f.write("ranks\tseed\tstep\tengine\tengine_blas\ttorch\n")
        f.write("\n".join(rows) + "\n")
    body = "\n".join(summary + tables)
    text = open(md).read()
    i, j = text.index(BEGIN) + len(BEGIN), text.index(END)
    with open(md, "w") as f:
        f.write(text[:i] + "\n" + body + "\n" + text[j:])


if __name__ == "__main__":
    main()
