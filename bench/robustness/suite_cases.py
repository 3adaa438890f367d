"""The robustness suite's workloads and cases (bench/robustness/suite.py runs and reports them):
the job specs of each model, the variants of a spec, and the cases of every group. Standard
library only.
"""
import json
import re

# --- workloads -------------------------------------------------------------------------------

def mlp(seed, steps=1500, batch=64, lr=1e-3, hidden=(256, 128), act="gelu", beta2=0.99):
    return {
        "model": {"type": "mlp", "hidden": list(hidden), "activation": act},
        "data": {"type": "fashion_mnist", "normalize": "standardize"},
        "optimizer": {"type": "onebit_adam", "beta1": 0.9, "beta2": beta2, "eps": 1e-8,
                      "freeze_step": "auto", "block_size": 2048},
        "batch_size": batch, "steps": steps,
        "lr": {"schedule": "warmup_step_decay", "peak": lr, "warmup_steps": 100,
               "decay_rate": 0.99, "decay_every": 50},
        "seed": seed, "eval": {"interval": 0, "max_examples": 0}, "log_interval": 50,
    }


def softmax(seed, steps=1500, batch=64, lr=1e-3, beta2=0.99):
    s = mlp(seed, steps=steps, batch=batch, lr=lr, beta2=beta2)
    s["model"] = {"type": "softmax"}
    return s


def transformer(seed, steps=1500, batch=16, lr=3e-4, freeze=400, corpus=None):
    # beta2 0.999: Delta = 1000 steps, so an auto freeze needs well over 1000 warmup steps and
    # 1500-step runs would be Adam throughout; the transformer freezes at a fixed step instead.
    return {
        "model": {"type": "transformer", "layers": 2, "heads": 4, "d_model": 64, "context": 64,
                  "tied_output": True},
        "data": dict({"type": "text", "eval_fraction": 0.1, "max_bytes": 0},
                     **({"path": corpus[0], "max_bytes": corpus[1]} if corpus else {})),
        "optimizer": {"type": "onebit_adam", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                      "weight_decay": 0.01, "freeze_step": freeze, "block_size": 2048},
        "batch_size": batch, "steps": steps,
        "lr": {"schedule": "cosine", "peak": lr, "warmup_steps": 200, "min_lr": lr / 10},
        "seed": seed, "eval": {"interval": 0, "max_examples": 2048}, "log_interval": 50,
    }


def variant(spec, name):
    """adam | onebit (the defaults but the auto freeze: track_variance 0) | onebit-none (the paper's step, stabilizer none) |
    onebit-fp32, onebit-fp16, onebit-fp8 (the default with the gradients of the warmup exchanged
    in fp32 (the default until 2026-11-27), fp16, fp8 (the default since)) |
    onebit-tX (the default with the auto freeze's threshold X) |
    binsgdm | softsign (optimizer.type binsgdm / softsign with the spec's beta1, eps and
    weight_decay) | binsgdm-t0 (binsgdm with b a running maximum after the LR warmup:
    max_denominator_step = lr.warmup_steps)."""
    s = json.loads(json.dumps(spec))
    if s["optimizer"].get("type") == "onebit_adam" and name.startswith("onebit"):
        # The auto freeze, as every onebit row of the suite's results ran it: the defaults track
        # the variance since 2026-11-28 (the variants track-K).
        s["optimizer"].setdefault("track_variance", 0)
    if name == "adam":
        s["optimizer"] = {k: v for k, v in s["optimizer"].items()
                          if k in ("beta1", "beta2", "eps", "weight_decay")}
        s["optimizer"]["type"] = "adam"
        s["optimizer"]["bias_correction"] = False
    elif name in ("binsgdm", "softsign", "binsgdm-t0"):
        # BinSGDM (1-bit: m / (b + eps) quantised to +-1) and its unquantised form: beta1, eps
        # and weight_decay from the spec, every other field at its default; the LR schedule as is.
        s["optimizer"] = {k: v for k, v in s["optimizer"].items()
                          if k in ("beta1", "eps", "weight_decay")}
        s["optimizer"]["type"] = "binsgdm" if name == "binsgdm-t0" else name
        if name == "binsgdm-t0":
            s["optimizer"]["max_denominator_step"] = max(1, s["lr"].get("warmup_steps", 0))
    elif name == "onebit-none":
        s["optimizer"]["stabilizer"] = "none"
    elif name in ("onebit-fp32", "onebit-fp16", "onebit-fp8"):
        s["optimizer"]["gradient_exchange"] = name[len("onebit-"):]
    elif name == "onebit-bc":
        s["optimizer"]["bias_correction"] = True
    elif name.startswith("onebit-t"):  # onebit-tX: the auto freeze's threshold X (default 0.96)
        s["optimizer"]["freeze_threshold"] = float(name[len("onebit-t"):])
    elif name.startswith("onebit-r"):  # onebit-rX: frozen_step_ratio X (inf: 1e6, the paper's v)
        x = name[len("onebit-r"):]
        s["optimizer"]["frozen_step_ratio"] = 1e6 if x == "inf" else float(x)
    return s

# --- cases -------------------------------------------------------------------------------------
# A case is (name, group, spec, variants, source) where source names a job whose checkpoint the
# case warm-starts from; its variants then run the warm start (default and as-is) beside the
# same job from scratch and with Adam.

SOURCES = {
    "mlp-src": dict(mlp(21, steps=400), checkpoint={"interval": 400, "keep": 1}),
    "mlp-src-b512": dict(mlp(21, steps=400, batch=512), checkpoint={"interval": 400, "keep": 1}),
    "tf-src": dict(transformer(21, steps=600), checkpoint={"interval": 600, "keep": 1}),
}
# Sources of the same-seed cases: the job's own seed (so its initial parameters are the source's
# initial parameters) for seeds 22 to 25 besides mlp-src's 21.
for _seed in (22, 23, 24, 25):
    SOURCES["mlp-src-s%d" % _seed] = dict(mlp(_seed, steps=400),
                                          checkpoint={"interval": 400, "keep": 1})
# The transformer's same-seed cases for seeds 22 to 25 beside tf-src's 21.
for _seed in (22, 23, 24, 25):
    SOURCES["tf-src-s%d" % _seed] = dict(transformer(_seed, steps=600),
                                         checkpoint={"interval": 600, "keep": 1})


def warm_cases():
    cases = []
    for seed in (22, 23, 24, 25, 26):
        cases.append(("mlp-other-seed-s%d" % seed, mlp(seed), "mlp-src", False))
        cases.append(("mlp-lr3e-3-s%d" % seed, mlp(seed, lr=3e-3), "mlp-src", False))
        cases.append(("mlp-b16-from-b512-s%d" % seed, mlp(seed, batch=16), "mlp-src-b512", False))
    # Batch 16 from 512 and LR 3e-3 are the configurations furthest from 1 % and from 3x fewer
    # bytes: fifteen more seeds each (single runs differ by about 2 %).
    for seed in range(27, 42):
        cases.append(("mlp-lr3e-3-s%d" % seed, mlp(seed, lr=3e-3), "mlp-src", False))
        cases.append(("mlp-b16-from-b512-s%d" % seed, mlp(seed, batch=16), "mlp-src-b512", False))
    for seed in (22, 23):
        cases.append(("mlp-params-s%d" % seed, mlp(seed), "mlp-src", True))
        cases.append(("mlp-b256-s%d" % seed, mlp(seed, batch=256), "mlp-src", False))
    cases.append(("mlp-same-seed-s21", mlp(21), "mlp-src", False))
    for seed in (22, 23, 24, 25):
        cases.append(("mlp-same-seed-s%d" % seed, mlp(seed), "mlp-src-s%d" % seed, False))
    cases.append(("tf-other-seed-s22", transformer(22), "tf-src", False))
    for seed in (22, 23, 24):
        cases.append(("tf-params-s%d" % seed, transformer(seed), "tf-src", True))
    cases.append(("tf-same-seed-s21", transformer(21), "tf-src", False))
    for seed in (22, 23, 24, 25):
        cases.append(("tf-same-seed-s%d" % seed, transformer(seed), "tf-src-s%d" % seed, False))
    out = []
    for name, spec, src, params in cases:
        out.append({"case": name, "group": "warm", "spec": spec, "source": src,
                    "params": params,
                    "variants": ["adam", "scratch", "warm", "warm-asis"]})
    return out


def stability_cases():
    out = []
    for seed in (3, 4, 5, 6):
        out.append({"case": "mlp1024-relu-b32-s%d" % seed, "group": "stability",
                    "spec": mlp(seed, steps=1300, batch=32, hidden=(1024, 512), act="relu")})
        out.append({"case": "mlp256-gelu-s%d" % seed, "group": "stability", "spec": mlp(seed)})
        out.append({"case": "mlp512-tanh-s%d" % seed, "group": "stability",
                    "spec": mlp(seed, hidden=(512, 256), act="tanh")})
    for c in out:
        c["variants"] = ["adam", "onebit", "onebit-none"]
    return out


def freeze_cases():
    """beta2 0.999 (Delta = 1000): the auto freeze beside a sweep of fixed freeze steps, with the
    paper's uncorrected v and with bias correction (v_hat frozen)."""
    out = []
    points = (150, 250, 400, 600, 1000)
    out.append({"case": "mlp256-gelu-999-s3", "spec": mlp(3, steps=3000, beta2=0.999),
                "variants": ["adam", "onebit", "onebit-bc"] + ["freeze-%d" % n for n in points] +
                            ["freeze-%d-bc" % n for n in (150, 250, 400)]})
    for seed in (4, 5, 6, 7):
        out.append({"case": "mlp256-gelu-999-s%d" % seed, "spec": mlp(seed, steps=3000, beta2=0.999),
                    "variants": ["adam", "onebit", "onebit-bc"]})
    out.append({"case": "mlp1024-relu-b32-999-s3",
                "spec": mlp(3, steps=3000, batch=32, hidden=(1024, 512), act="relu", beta2=0.999),
                "variants": ["adam", "onebit", "onebit-bc", "freeze-250", "freeze-250-bc"]})
    # the same job as the wide group's tf-fortunes-999-s21 (whose adam and onebit runs the
    # report shows beside these)
    tf = transformer(21, steps=1500)
    tf["optimizer"]["freeze_step"] = "auto"
    out.append({"case": "tf-999-s21", "spec": tf,
                "variants": ["freeze-200", "freeze-200-bc", "onebit-bc"]})
    for c in out:
        c["group"] = "freeze"
    return out


# The second text corpus: Python's standard library (source code, 4 MB of it), beside the
# default one (fortunes: English prose).
PYLIB = ("/usr/lib/python3.11", 4 << 20)


def wide_cases():
    """More models, widths, depths, batch sizes and learning rates (beta2 0.99), and the
    transformer on two corpora (beta2 0.999, auto freeze)."""
    out = []
    for seed in (3, 4, 5):
        out.append(("softmax-s%d" % seed, softmax(seed)))
        out.append(("mlp128-relu-d1-s%d" % seed, mlp(seed, hidden=(128,), act="relu")))
    for seed in (3, 4):
        out.append(("mlp512-relu-lr3e-3-s%d" % seed, mlp(seed, hidden=(512, 256), act="relu", lr=3e-3)))
    out.append(("mlp512-relu-lr3e-4-s3", mlp(3, hidden=(512, 256), act="relu", lr=3e-4)))
    out.append(("mlp256-relu-b16-s3", mlp(3, batch=16, act="relu")))
    out.append(("mlp256-relu-b256-s3", mlp(3, batch=256, act="relu")))
    out.append(("mlp2048-gelu-d3-s3", mlp(3, steps=1000, hidden=(2048, 1024, 512))))
    for corpus, name in ((None, "fortunes"), (PYLIB, "pylib")):
        tf = transformer(21, steps=1500, corpus=corpus)
        tf["optimizer"]["freeze_step"] = "auto"
        out.append(("tf-%s-999-s21" % name, tf))
    return [{"case": c, "group": "wide", "spec": sp, "variants": ["adam", "onebit", "onebit-none"]}
            for c, sp in out]


def fp16_cases():
    """The default with gradient_exchange fp16 on the jobs of the freeze (beta2 0.999, 3000
    steps), wide and stability groups, beside their Adam and default runs (mlp2048-gelu-d3, which
    never freezes, left out)."""
    out = []
    for c in [c for c in freeze_cases() if c["case"] != "tf-999-s21"] + wide_cases() + stability_cases():
        if c["case"] == "mlp2048-gelu-d3-s3":
            continue
        out.append(dict(c, group="fp16", variants=["onebit-fp16"]))
    return out


RATIOS = ("onebit-r1", "onebit-r1.25", "onebit-r1.5")


def ratio_cases():
    """frozen_step_ratio on the beta2 0.999 jobs: the MLP seeds and the transformer on both
    corpora, beside Adam and the default (r = 1.25). `onebit-rinf` rows are the default before
    frozen_step_ratio existed (the paper's v: r infinite, which 1e6 gives exactly)."""
    out = [dict(c, variants=["adam", "onebit", "onebit-rinf"] + list(RATIOS))
           for c in freeze_cases() if c["case"] != "tf-999-s21"]
    out += [dict(c, variants=["adam", "onebit", "onebit-rinf"] + list(RATIOS))
            for c in wide_cases() if "-999-" in c["case"]]
    return [dict(c, group="ratio") for c in out]


def cap_cases():
    """Fixed freezes at 10 % and 15 % of the run (with the default frozen_step_ratio) on the
    beta2 0.999 jobs: what a latest freeze step would give where the auto rule freezes late."""
    out = []
    for c in ratio_cases():
        n = c["spec"]["steps"]
        out.append(dict(c, group="cap", variants=["fixed-%d" % (n // 10), "fixed-%d" % (n * 15 // 100)]))
    return out


SHORT = ("fixed-16-fp16", "refresh-16-fp16", "refresh-8-fp16")


def short_cases():
    """A short warmup: a fixed freeze at step 16 with the warmup's gradients in fp16 (the
    configuration bench/peers times as onebit-short), alone and with variance refreshes of 16
    and 8 steps (optimizer.refresh_steps), on the jobs of the stability and wide groups, beside
    their Adam and default runs, and on two more seeds of the fortunes transformer."""
    out = [dict(c, group="short", variants=list(SHORT)) for c in wide_cases() + stability_cases()]
    # Two more seeds of the fortunes transformer (beta2 0.999), with their Adam and default.
    for seed in (22, 23):
        tf = transformer(seed, steps=1500)
        tf["optimizer"]["freeze_step"] = "auto"
        out.append({"case": "tf-fortunes-999-s%d" % seed, "group": "short", "spec": tf,
                    "variants": ["adam", "onebit"] + list(SHORT)})
    return out


# track-25: the default factor (1 since 2026-11-28); track-25-f1.25: the factor before;
# track-25-at16, track-25-f1.25-at16: a fixed freeze at step 16 (the latter the MLPs' default
# from 2026-11-28 to 2026-12-02); track-25-f1.25-at8: at step 8 (the MLPs' default since,
# ob_optim_default_mlp_tracking). The rows
# of the first engine build (the estimate in v_hat's scale, factor 1.25) are track-25-v1 in
# docs/robustness/results.tsv (docs/research/variance-tracking.md, "The warmup's scale").
TRACK = ("track-25", "track-25-f1.25", "track-25-at16", "track-25-f1.25-at16", "track-25-f1.25-at8")


def track_cases():
    """A tracked variance (optimizer.track_variance 25, the default factor and 1.25, the warmup's
    gradients in fp8): the freeze at the LR warmup's end, v re-estimated every 25 steps from
    every rank's own statistics, on the jobs of the stability and wide groups (their Adam and
    default runs are those groups')."""
    return [dict(c, group="track", variants=list(TRACK)) for c in wide_cases() + stability_cases()]


def seed_cases():
    """More seeds (7 to 10) of the stability group's configurations, as the track group's jobs
    (its variants by name: track-K[-fF][-atN][-lwN], adam-lwN); Adam with the spec's LR warmup
    runs by default. For a gap between two variants that one seed per job cannot settle."""
    out = []
    for seed in (7, 8, 9, 10):
        for c in stability_cases():
            if c["case"].endswith("-s3"):
                sp = json.loads(json.dumps(c["spec"]))
                sp["seed"] = seed
                out.append({"case": c["case"][:-len("s3")] + "s%d" % seed, "group": "track",
                            "spec": sp, "variants": ["adam"]})
    return out


def binsgdm_cases():
    """BinSGDM (no warmup, its defaults) beside Adam on every configuration of the stability and
    wide groups, three seeds each (the groups' case names where they have the seed). The MLPs
    and softmax first, the largest MLP after them, the transformers last. `--variant softsign`
    adds the unquantised SoftSignSGD."""
    out = []
    stab = {}
    for c in stability_cases():
        stab.setdefault(re.sub(r"-s[0-9]+$", "", c["case"]), c)
    seeds = (3, 4, 5)
    for cfg, c in stab.items():
        for seed in seeds:
            sp = json.loads(json.dumps(c["spec"]))
            sp["seed"] = seed
            out.append(("%s-s%d" % (cfg, seed), sp))
    wide = {}
    for c in wide_cases():
        wide.setdefault(re.sub(r"-s[0-9]+$", "", c["case"]), c)
    mlps = [k for k in wide if not k.startswith("tf-") and k != "mlp2048-gelu-d3"]
    for cfg in mlps + ["mlp2048-gelu-d3"]:
        for seed in seeds:
            sp = json.loads(json.dumps(wide[cfg]["spec"]))
            sp["seed"] = seed
            out.append(("%s-s%d" % (cfg, seed), sp))
    for cfg in [k for k in wide if k.startswith("tf-")]:
        for seed in (21, 22, 23):
            sp = json.loads(json.dumps(wide[cfg]["spec"]))
            sp["seed"] = seed
            out.append(("%s-s%d" % (cfg, seed), sp))
    return [{"case": c, "group": "binsgdm", "spec": sp, "variants": ["adam", "binsgdm"]}
            for c, sp in out]


# Groups that are their own cases, and groups that "all" runs together (in this order).
SEPARATE = {"binsgdm": binsgdm_cases, "short": short_cases, "track": track_cases, "seeds": seed_cases,
            "cap": cap_cases, "fp16": fp16_cases, "ratio": ratio_cases}
TOGETHER = (("wide", wide_cases), ("freeze", freeze_cases), ("warm", warm_cases),
            ("stability", stability_cases))


def all_cases(group):
    if group in SEPARATE:
        return SEPARATE[group]()
    return [c for name, cases in TOGETHER if group in (name, "all") for c in cases()]
