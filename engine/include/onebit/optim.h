/* Optimizers over one flat float32 parameter buffer, data-parallel over an ob_comm.
 *
 *   adam         Adam with the gradient averaged by an fp32 allreduce every step; optional
 *                bias correction, decoupled weight decay.
 *   onebit_adam  1-bit Adam (Tang et al., 2021, Algorithm 1): Adam as above during a warmup of
 *                T_w steps, then v is frozen (v_Tw) and only the momentum crosses the network,
 *                compressed to one bit per element with worker and server error feedback
 *                (onebit/car.h). T_w is fixed or detected from the stability of ||v||_1.
 *     modes of onebit_adam, for the paper's comparisons:
 *       OB_ONEBIT_COMPRESSED    the algorithm (default);
 *       OB_ONEBIT_UNCOMPRESSED  same warmup and freeze, fp32 allreduce of the momentum after the
 *                               freeze ("compression=off", the paper's 1-bit Adam (32-bits));
 *       OB_ONEBIT_NAIVE         no freeze: the *gradient* is compressed with error feedback
 *                               every step and v keeps updating from the compressed gradient
 *                               (the paper's Figure 1 baseline).
 *     precondition (compressed mode, off by default): compress p = m / (sqrt(v_Tw) + eps)
 *       instead of m, step x -= lr * p_bar, and keep m = p_bar * (sqrt(v_Tw) + eps). Since v_Tw
 *       is frozen and identical on every rank this is the same linear algorithm in exact
 *       arithmetic, but the sign compression then sees values of Adam's step size on every
 *       coordinate. Without it a coordinate whose v_Tw is tiny (a ReLU unit that rarely fires)
 *       receives +-s of its block from the 1-bit code, i.e. a step of lr * s / (sqrt(v) + eps)
 *       that can be orders of magnitude larger than any Adam step (see docs/experiments).
 *
 *   binsgdm      BinSGDM (Gao et al., Algorithm 1): no warmup. Every rank keeps its own m and
 *                b (an EMA of |g| with the same beta1), b + eps kept as the denominator, and
 *                sends u = m / (b + eps), which lies in [-1, 1], quantised stochastically to
 *                +-1 without bias, with worker and server error feedback (the car under
 *                OB_SCALE_UNIT: one bit an element, no scales); every rank steps
 *                x -= lr (u_bar + wd x) with the server's +-1 average u_bar. From step T0 on
 *                (max_denominator_step > 0) b is kept as a running maximum (the paper's
 *                AMSGrad-style line 7, which it leaves out in practice: off by default). The
 *                draws come from cfg.seed and the step: a resumed run draws what the
 *                uninterrupted one did. m and b differ between ranks: they are per-rank state
 *                (ob_optim_state.local_moments). Its phase is the compression phase from the
 *                first step (freeze_step 0).
 *   softsign     SoftSignSGD, BinSGDM unquantised (the paper's Algorithm 2): the gradient
 *                averaged as adam's (gradient_exchange), then m, b from it and
 *                x -= lr (m / (b + eps) + wd x), for the comparison.
 *
 * Step numbering: a step is one call to ob_optim_step; t counts completed steps (the step in
 * progress is t+1). The freeze happens at the end of step T_w: steps 1..T_w are warmup steps,
 * steps T_w+1.. are compression steps.
 *
 * Auto freeze (freeze_step == 0): after every warmup step t, r_t = ||v_t||_1 / ||v_{t-Delta}||_1
 * with Delta = ceil(1/(1-beta2)); freeze at the first t with t >= max(lr_warmup_steps, Delta,
 * freeze_min_steps), t > Delta (so that v_{t-Delta} exists) and threshold <= r_t <= 1/threshold.
 * Above beta2 0.995 (Delta > OB_FREEZE_MAX_LAG) v carries its zero-initialisation bias for about
 * 3 Delta steps and that test cannot pass before step Delta (1000 at beta2 0.999), so a second
 * one may freeze earlier: the same band on the norms of v_hat = v / (1 - beta2^t) over the lag
 * L = OB_FREEZE_MAX_LAG (ob_optim_freeze_lag), from t >= max(lr_warmup_steps, L,
 * freeze_min_steps); the freeze comes at the first step either test passes (never later than
 * the first alone), and freeze_ratio is the ratio of the test that passed (while in the warmup,
 * the v_hat one above beta2 0.995), or at freeze_max_step when neither has passed by then.
 * With bias correction on, the frozen v is the corrected
 * v_hat, so the step size does not jump; without it, the paper's v.
 *
 * Memory: the optimizer's state and its parameter and gradient buffers live in the memory of its
 * communicator: host memory for MPI and self, the CUDA device for NCCL. Its element-wise
 * kernels (onebit/optim_kernels.h) then run on the CPU or on the GPU, on the communicator's
 * stream, with bitwise identical results; only the freeze detector's ||v||_1 is summed in
 * another order on the GPU (a tree), which can move an auto freeze only when a ratio lies
 * within about 1e-12 of the threshold. */
#ifndef ONEBIT_OPTIM_H
#define ONEBIT_OPTIM_H

/* The longest lag of the auto freeze's ratio (see above). */
#define OB_FREEZE_MAX_LAG 200

#include "onebit/car.h"
#include "onebit/comm.h"
#include "onebit/compress.h"
#include "onebit/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ob_optim_kind {
    OB_OPTIM_ADAM = 0,
    OB_OPTIM_ONEBIT_ADAM = 1,
    OB_OPTIM_BINSGDM = 2,
    OB_OPTIM_SOFTSIGN = 3,
} ob_optim_kind;

typedef enum ob_onebit_mode {
    OB_ONEBIT_COMPRESSED = 0,
    OB_ONEBIT_UNCOMPRESSED = 1,
    OB_ONEBIT_NAIVE = 2,
} ob_onebit_mode;

typedef enum ob_phase {
    OB_PHASE_WARMUP = 0,
    OB_PHASE_COMPRESSION = 1,
} ob_phase;

/* What keeps the frozen-variance step in bounds (onebit_adam). */
typedef enum ob_stabilizer {
    OB_STABILIZER_NONE = 0,       /* the paper's exact step: x -= lr m / (sqrt(v_Tw) + eps) */
    OB_STABILIZER_ADAM_BOUND = 1, /* the default: no coordinate moves more than c lr per step */
} ob_stabilizer;

/* How the averaged gradients (adam, the warmup of onebit_adam) cross the network. */
typedef enum ob_gradient_exchange {
    OB_EXCHANGE_FP32 = 0, /* the default: the fp32 ring allreduce, the exact sum */
    OB_EXCHANGE_FP16 = 1, /* fp16 with block shifts (onebit/f16sum.h): half the bytes, each
                             element rounded to 11 significant bits of its block's largest */
    OB_EXCHANGE_FP8 = 2,  /* fp8 (E4M3) with block shifts: a quarter of the bytes, 4
                             significant bits (the default of a warm start's refit) */
} ob_gradient_exchange;

typedef struct ob_optim_config {
    ob_optim_kind kind;
    double beta1;        /* [0, 1), default 0.9 */
    double beta2;        /* [0, 1), default 0.999 */
    double eps;          /* > 0, default 1e-8 */
    double weight_decay; /* >= 0, decoupled (AdamW style), default 0 */
    int bias_correction; /* default 1 for adam, 0 for onebit_adam (as the paper and BERT) */

    /* onebit_adam only */
    ob_onebit_mode mode;     /* default OB_ONEBIT_COMPRESSED */
    long freeze_step;        /* > 0: T_w fixed; 0: detect automatically (default) */
    double freeze_threshold; /* auto: (0, 1], default 0.96 */
    long freeze_min_steps;   /* auto: no freeze before this step, default 0 */
    long freeze_max_step;    /* auto: a freeze at the end of this step if none came before
                                (not before the floor above); 0 (default): no limit. A job spec
                                sets it from optimizer.freeze_max_fraction */
    long lr_warmup_steps;    /* auto: no freeze before the LR warmup ends, default 0 */
    size_t block_size;       /* scale block B, positive multiple of 32, default 2048 */
    ob_scale_kind scale;     /* default OB_SCALE_L1 */
    int precondition;        /* compress m / (sqrt(v_Tw) + eps) instead of m; default 0 */
    /* After the freeze a coordinate whose v_Tw is tiny (a ReLU unit that rarely fired by then)
     * can receive steps lr m / (sqrt(v_Tw) + eps) far beyond anything Adam takes once its
     * gradient grows, and the run diverges. OB_STABILIZER_ADAM_BOUND divides by
     * max(sqrt(v_Tw) + eps, |m| / c) instead (with precondition: clips the direction to
     * [-c, c]), where c defaults to (1 - beta1) / sqrt(1 - beta2), the largest |m| / sqrt(v)
     * Adam itself can reach (beta1^2 < beta2, no bias correction): steps Adam could take pass
     * unchanged. m is the decoded average every rank holds, so every rank computes the same
     * bits; nothing more crosses the network and there is no new state. */
    ob_stabilizer stabilizer; /* default OB_STABILIZER_ADAM_BOUND for onebit_adam */
    double stability_bound;   /* c > 0; 0 (default): (1 - beta1) / sqrt(1 - beta2) */
    /* Without bias correction the v frozen at step t is (1 - beta2^t) times the bias-corrected
     * v_hat, so every later step is 1 / sqrt(1 - beta2^t) times the step Adam would take with
     * the same variance: 2.2x at a freeze at step 227 with beta2 0.999. At the freeze v is
     * raised (one scalar for every coordinate) until that factor is at most r: v_Tw =
     * v * max(1, 1 / (r^2 (1 - beta2^t))). A freeze where r^2 (1 - beta2^t) >= 1 (step 102
     * or later at beta2 0.99 with the default r) keeps v; bias_correction freezes v_hat
     * itself. The default 1.25: on the beta2 0.999 jobs of docs/robustness, r = 1 (v_hat)
     * slowed the transformers (+1.0 %, +1.3 % against Adam), 1.5 and none let an MLP end
     * +4.2 % and +6.1 %; 1.25 kept all eight within -5.1 % .. +1.4 %. */
    double frozen_step_ratio; /* r >= 1; 0 (default): OB_FROZEN_STEP_RATIO under
                                 OB_STABILIZER_ADAM_BOUND, none (the paper's v) under _NONE */

    /* Every kind: the fp32 exchanges (adam, the warmup, compression off) run bucket by bucket,
     * each bucket a contiguous range of whole tensors (ob_optim_set_tensor_layout) of at least
     * bucket_bytes, the last tensors first. The compressed mode's momentum exchange is cut
     * where these buckets start (rounded up to the car's N*B grid: segments, onebit/car.h),
     * which changes no bit and no byte, only the rounds. */
    size_t bucket_bytes; /* default 0: one bucket, the whole vector (a job spec with overlap
                            defaults to OB_OPTIM_BUCKET_BYTES) */
    /* 1: the gradient's buckets (and in the compression phase of the compressed mode, the
     * momentum's segments: momentum update and compressed allreduce) are exchanged on a
     * communication thread while the backward pass goes on (ob_optim_backward_begin); the same
     * bits as 0. Host communicators only. */
    int overlap; /* default 0 */
    /* Every kind but the naive mode: the gradients' exchange (not the momentum's of
     * compression: uncompressed, which stays fp32). A world of one sends nothing and
     * rounds nothing. */
    ob_gradient_exchange gradient_exchange; /* default OB_EXCHANGE_FP32 */
    /* onebit_adam: the gradients' exchange during a warm start's refit (ob_optim_warm_start),
     * whatever gradient_exchange says: the refit re-estimates a borrowed v over a few steps,
     * where fp8 measured as good as fp16 and fp16 as fp32 (docs/robustness), and the refit's
     * bytes are most of a warm-started job's. */
    ob_gradient_exchange refit_exchange; /* default OB_EXCHANGE_FP8 */
    /* onebit_adam (compressed and uncompressed modes): re-estimates of v after an early freeze.
     * A variance frozen at step T describes the gradients of steps 1..T; frozen early (a short
     * warmup, for a job that must reach an early target) it does not fit the rest of the run.
     * With refresh_steps = R > 0, once the compression phase has run G = max(T, R) steps, the
     * next R steps exchange the averaged gradients at full precision (gradient_exchange) and
     * re-estimate v: at their end v is Adam's exponential average as if every step since T had
     * had the mean of their squared gradients, v_hat = w v_hat_T + (1 - w) mean(g^2) with
     * w = beta2^(G + R) (Adam's own decay over those steps), then raised as a freeze at that
     * step is (frozen_step_ratio). v moves there over the R steps (each step's share of the
     * mean, the denominator following), the momentum takes those steps' averaged gradients
     * exactly, the parameters step with the stabiliser, and the error feedback is cleared at
     * the first. v is then frozen again at the end of step T + G + R, which counts as the
     * freeze step of the next refresh: intervals double. A v taken from a warm start, or frozen
     * at the end of a refit, enters as v_hat. All the state is v, m and the freeze step: a
     * checkpoint taken inside a refresh resumes bit for bit. 0 (default): never. */
    long refresh_steps;

    /* binsgdm only */
    uint64_t seed; /* the stochastic quantisers' draws; default 1 (a job's trainer sets its seed) */
    long max_denominator_step; /* T0 > 0: b a running maximum after step T0; 0 (default): never */

    /* Every compressed exchange (onebit_adam compressed and naive, binsgdm): m > 1 runs the
     * hierarchical exchange of onebit/car.h (ob_car_create_hier) with m ranks a node: fp32
     * inside a node, 1 bit between nodes. 0 or 1 (default 0): flat. Host communicators.
     * OB_OPTIM_RANKS_PER_NODE_AUTO: chosen at creation from where the communicator's ranks
     * run (ob_car_auto_ranks_per_node): hierarchical over several nodes of the same size
     * numbered node by node, else flat, and flat on a device; ob_optim_exchange_note says
     * which and why. */
    int ranks_per_node;

    /* onebit_adam, compressed mode: a variance that follows the gradients after the freeze
     * without exchanging them (docs/research/variance-tracking.md). Every rank keeps, from its
     * own gradient g_i at every step, u_i = EMA_b1(g_i), A_i = EMA_b2(g_i^2) and
     * B_i = EMA_b2(u_hat_i^2) (u_hat_i, A_hat_i, B_hat_i bias-corrected with the job's step).
     * For gradients of mean mu and per-rank noise s^2, E[A] = mu^2 + s^2 and
     * E[B] ~ mu^2 + k s^2 with k = (1 - b1) / (1 + b1), while Adam's v is mu^2 + s^2 / N: so
     * at every K-th compression step (t - T_w a multiple of K) each rank forms
     * e_i = max(alpha A_hat_i + beta B_hat_i, A_hat_i / N), beta = (1 - 1/N) / (1 - k),
     * alpha = 1 - beta, the ranks sum e through the gradients' exchange (gradient_exchange), and
     * v = track_factor * sum / N in the warmup's scale (times 1 - beta2^t without
     * bias_correction: the v Adam has at step t), the same on every rank; where the sum is 0 (an
     * exchange's rounding) v keeps its value. With one rank v is track_factor times Adam's v. The
     * stabiliser bounds the steps as with a frozen v. The auto freeze then comes at the end of
     * step max(lr_warmup_steps, freeze_min_steps, K) instead of the ratio rule (the estimate,
     * not the warmup, describes the later gradients). The three vectors are per-rank state
     * (ob_optim_state.track_stats, in every rank's checkpoint file). Not with refresh_steps.
     * With precondition the estimate comes after the step (which needs the average of m / den)
     * and moves the error buffers, residuals of m / den, to the new denominator
     * (ob_car_scale_errors with den_old / den_new). 0 (default here; a job spec's default is
     * ob_optim_default_track_variance): off. */
    long track_variance; /* K, the compression steps between estimates; 0: off */
    double track_factor; /* > 0; 0 (default): OB_TRACK_FACTOR */
} ob_optim_config;

/* The largest track_variance accepted. */
#define OB_OPTIM_MAX_TRACK_INTERVAL 100000
/* The default track_factor: v is the estimate of Adam's own v. On the robustness suite's 26
 * stability and wide jobs 1 ended at a median of -0.40 % against the default (the auto
 * freeze), -2.21 % to +2.90 %, and 1.25 at -0.43 % (-3.02 % to +2.59 %), but the two beta2
 * 0.999 transformers at -0.40 % and +0.05 % with 1 against +1.35 % and +2.47 % with 1.25
 * (docs/research/variance-tracking.md, "The warmup's scale"). */
#define OB_TRACK_FACTOR 1.0

/* The track_variance a job gets when its spec names none (onebit/jobspec.h), where its LR
 * warmup has at least OB_TRACK_DEFAULT_MIN_WARMUP steps: ob_optim_default_track_variance. */
#define OB_TRACK_DEFAULT_INTERVAL 25
#define OB_TRACK_DEFAULT_MIN_WARMUP 75
/* The MLP family's tracked default (ob_optim_default_mlp_tracking): frozen at this step, the
 * estimate raised by this factor. */
#define OB_TRACK_MLP_FREEZE 8
#define OB_TRACK_MLP_FACTOR 1.25

/* The buckets of the transformer family's overlap (ob_optim_default_transformer_overlap). */
#define OB_OVERLAP_TRANSFORMER_BUCKET_BYTES ((size_t)1 << 20)

/* The largest ranks_per_node accepted. */
#define OB_OPTIM_MAX_RANKS_PER_NODE 4096
/* ranks_per_node "auto" (a job spec's optimizer.ranks_per_node: "auto"). */
#define OB_OPTIM_RANKS_PER_NODE_AUTO (-1)

/* The default optimizer.freeze_max_fraction of a job spec under OB_STABILIZER_ADAM_BOUND: the
 * auto freeze comes at the latest after 15 % of the job's steps (the paper froze BERT-Large
 * after 23k of 152k and 1.5k of 10k steps), but not before the LR warmup (or freeze_min_steps)
 * plus two lags of the rule (ob_optim_freeze_lag): ob_jobspec sets freeze_max_step. */
#define OB_FREEZE_MAX_FRACTION 0.15

/* The default frozen_step_ratio (see there). */
#define OB_FROZEN_STEP_RATIO 1.25

/* 4 MiB: large enough that a bucket's ring steps stay bandwidth-bound, small enough that the
 * first buckets of a model of tens of MB leave while its backward pass goes on. */
#define OB_OPTIM_BUCKET_BYTES ((size_t)4 << 20)
/* The largest refresh_steps accepted. */
#define OB_OPTIM_MAX_REFRESH_STEPS 100000

/* The largest bucket_bytes accepted: 1 GiB. */
#define OB_OPTIM_MAX_BUCKET_BYTES ((size_t)1 << 30)

/* Fills cfg with the defaults for `kind`. */
void ob_optim_config_default(ob_optim_config *cfg, ob_optim_kind kind);

/* Checks every field; the message names the first offending field. */
ob_status ob_optim_config_validate(const ob_optim_config *cfg, ob_err *err);

/* Delta = ceil(1/(1-beta2)), computed so that the decimal betas people write (0.999 -> 1000)
 * are not pushed up by binary rounding. */
long ob_optim_freeze_delta(double beta2);

/* The lag L of the auto freeze's ratio (see the top of this file). */
long ob_optim_freeze_lag(double beta2);

/* "adam", "onebit_adam", "binsgdm", "softsign" */
const char *ob_optim_kind_name(ob_optim_kind kind);
const char *ob_onebit_mode_name(ob_onebit_mode mode); /* "compressed", "uncompressed", "naive" */
const char *ob_phase_name(ob_phase phase);            /* "warmup", "compression" */
const char *ob_stabilizer_name(ob_stabilizer s);      /* "none", "adam_bound" */
const char *ob_gradient_exchange_name(ob_gradient_exchange x); /* "fp32", "fp16", "fp8" */

/* The bound c in force for cfg: stability_bound, or (1 - beta1) / sqrt(1 - beta2) when that is
 * 0; INFINITY with OB_STABILIZER_NONE. */
double ob_optim_stability_bound(const ob_optim_config *cfg);

/* The track_variance for cfg when the job names none: OB_TRACK_DEFAULT_INTERVAL for
 * onebit_adam with compression on, the auto freeze, an LR warmup of at least
 * OB_TRACK_DEFAULT_MIN_WARMUP steps, the adam_bound stabiliser, and neither precondition,
 * refresh_steps nor a warm start (`warm_start` nonzero); else 0. That is the setting measured
 * against the auto freeze (docs/research/variance-tracking.md, "The default"): the robustness
 * suite's 26 stability and wide jobs (LR warmups of 100 and 200 steps; median -0.40 %, -2.21 %
 * to +2.90 %), its long beta2 0.999 runs (Adam's median +0.05 %), gpt.py's 1500-step runs (a
 * 75-step LR warmup; five seeds from -2.34 % to +2.27 %, median -1.45 %), and 1.3-1.6x sooner
 * to the targets of bench/peers. Where it is 0 the job freezes as the paper does: gpt.py's
 * 1000-step runs, whose LR warmup is 50 steps, ended behind the auto freeze on all three seeds
 * tracked (+1.2 %, +9.8 %, +1.3 %); without an LR warmup the freeze would come at step K; with
 * precondition tracking measured behind on some MLPs. */
long ob_optim_default_track_variance(const ob_optim_config *cfg, int warm_start);

/* The default of a job whose model has no attention (a job spec's softmax and mlp models) and
 * whose optimizer names none of freeze_step, track_variance and track_factor: where
 * ob_optim_default_track_variance's conditions hold but for the LR warmup (onebit_adam
 * compressed, the auto freeze, adam_bound, neither precondition, refresh_steps nor a warm
 * start), tracking every OB_TRACK_DEFAULT_INTERVAL steps from a freeze at step
 * OB_TRACK_MLP_FREEZE with the factor OB_TRACK_MLP_FACTOR (no latest freeze: it is fixed),
 * whatever the LR warmup; else cfg is left as it is. Measured on the robustness suite's 24 MLP
 * jobs: frozen at 8, with their LR warmup of 100 steps (beta2 0.99) median -0.89 % against
 * Adam, worst +3.44 %, and without an LR warmup -1.35 %, +2.61 %, where the freeze at 16 (the
 * default until 2026-12-02) ended at -0.06 % and +3.73 % (the same bits on two machines),
 * -1.16 % and +2.56 %, and the freeze at 4 at -0.28 % and +4.83 %, -0.45 % and +3.81 %; with
 * LR warmups of 25 and 50 steps the freeze at 16 ended at -0.34 % and -0.70 % in the median
 * (worst +5.57 %, +4.57 %, one overfitting job), where the auto freeze (then untracked) ended at
 * -0.03 % and +0.30 %. On bench/peers' MLP the freeze at 8 reaches the target at the same step
 * as the freeze at 16 in 10.9-12.2 s at 200 Mbit/s (16: 13.5-14.6 s; DDP fp32 134.2 s in the
 * same session) and 22.8-24.0 s at 50 Mbit/s (16: 25.8 s; DDP fp32 419.8 s). The transformers
 * are left out: frozen at 16 the suite's pylib transformer ended 4-6 % behind the auto freeze,
 * and gpt.py goes wrong with a freeze inside its LR warmup
 * (docs/research/variance-tracking.md, "An early freeze for MLPs"; docs/robustness/README.md,
 * "The MLPs' freeze at step 8" and "The MLPs' defaults at any LR warmup"). */
void ob_optim_default_mlp_tracking(ob_optim_config *cfg, int warm_start);

/* The default of a transformer job's onebit_adam whose optimizer names neither overlap nor
 * bucket_mb (a transformer runs on the CPU), for a model of num_params parameters that fill at
 * least two buckets: overlap on, in buckets of OB_OVERLAP_TRANSFORMER_BUCKET_BYTES, so that
 * the last layers' tensors leave while the backward pass goes on (a smaller model would send
 * one bucket after the backward pass, overlapping nothing). No step's arithmetic changes but
 * where the ring exchanges (the warmup's gradients, the tracked variance's estimates) cut
 * their chunks, and so round their sums; the compressed exchange gives the same bits in any
 * buckets, with or without the overlap. Measured on bench/peers' transformer
 * (docs/peers/README.md, "The transformer's overlap by default"). Any other kind is left as it
 * is. */
void ob_optim_default_transformer_overlap(ob_optim_config *cfg, size_t num_params);

/* The track_factor in force for cfg. */
double ob_optim_track_factor(const ob_optim_config *cfg);

/* With track_variance and an auto freeze: the step at whose end v is frozen,
 * max(lr_warmup_steps, freeze_min_steps, track_variance). */
long ob_optim_track_freeze_step(const ob_optim_config *cfg);

/* The ratio r in force for cfg (frozen_step_ratio): INFINITY where v is frozen as it is. */
double ob_optim_frozen_step_ratio(const ob_optim_config *cfg);

/* The factor a freeze of cfg's warmup at step t multiplies v by: max(1, 1 / (r^2 (1 -
 * beta2^t))), 1 with bias_correction (v_hat frozen) or r infinite. */
double ob_optim_freeze_raise(const ob_optim_config *cfg, long t);

/* The factor between a v frozen at step s and Adam's bias-corrected v_hat of that step:
 * (1 - beta2^s) times the freeze's raise (ob_optim_freeze_raise), which is
 * max(1 - beta2^s, 1 / frozen_step_ratio^2) under the default stabiliser; 1 with bias
 * correction, which freezes v_hat itself, and for s <= 0 (a v no freeze scaled). */
double ob_optim_frozen_scale(const ob_optim_config *cfg, long s);

typedef struct ob_optim ob_optim;

/* Creates an optimizer for the d parameters at `params` (borrowed: updated in place by every
 * step, must outlive the optimizer; in the communicator's memory) over `comm` (borrowed).
 * With a device communicator the state is allocated on the current CUDA device and steps are
 * enqueued on the communicator's stream (ob_comm_stream). Collective when the
 * communicator has several ranks (it allocates nothing remote, but callers should create
 * optimizers in the same order on every rank). Parameters should be identical on all ranks. */
ob_status ob_optim_create(ob_optim **out, const ob_optim_config *cfg, ob_comm *comm, float *params,
                          size_t d, ob_err *err);
void ob_optim_destroy(ob_optim *opt); /* accepts NULL */

/* The tensors of the parameter buffer: tensor i starts at offsets[i] (ascending, offsets[0]
 * == 0, all below d; borrowed, read during the call), as in the model's gradient parts
 * (ob_model_grad_part_at), and its gradient is final at stages[i] of the backward pass (the
 * order in which the model's grad hook reports it; NULL: the last tensor first, n - 1 - i). The
 * fp32 exchange is then cut into buckets at these boundaries (cfg.bucket_bytes; a bucket also
 * ends early where a large tensor is final at another time than the rest of it), and buckets
 * are exchanged in the order in which they are complete. Before it is called the whole vector
 * is one tensor, hence one bucket. Call it before the first step, at most once (OB_ERR_STATE
 * otherwise); OB_ERR_INVALID_ARG for offsets that do not fit d. */
ob_status ob_optim_set_tensor_layout(ob_optim *opt, const size_t *offsets, const size_t *stages,
                                     size_t n, ob_err *err);

/* The bucket plan: n buckets, bucket k covering floats [lo, hi) and tensors [tensor_lo,
 * tensor_hi); bucket 0 ends the buffer. ob_optim_bucket_order gives the i-th bucket of the
 * exchange order (by the stage at which a bucket is complete, then by index; k = i for the
 * default stages), 0 for i out of range. */
size_t ob_optim_num_buckets(const ob_optim *opt);
void ob_optim_bucket(const ob_optim *opt, size_t k, size_t *lo, size_t *hi, size_t *tensor_lo,
                     size_t *tensor_hi);
size_t ob_optim_bucket_order(const ob_optim *opt, size_t i);

/* 1 when cfg.overlap is in effect: a host communicator whose collectives may run on another
 * thread (ob_comm_any_thread). With cfg.overlap set on an MPI communicator whose MPI was
 * initialised below MPI_THREAD_SERIALIZED the optimizer falls back to exchanging the buckets
 * after the backward pass (the same bits) and this returns 0; the caller says so. */
int ob_optim_overlap_active(const ob_optim *opt);

/* With cfg.ranks_per_node OB_OPTIM_RANKS_PER_NODE_AUTO and a compressed exchange: the shape
 * chosen and why, a phrase owned by the optimizer ("2 nodes of 2 ranks (MPI_COMM_TYPE_SHARED):
 * hierarchical, ranks_per_node 2"; "all 4 ranks on one node (MPI_COMM_TYPE_SHARED): flat").
 * "" otherwise. */
const char *ob_optim_exchange_note(const ob_optim *opt);

/* The overlapped exchange. Before the backward pass that computes `grad` (d floats, borrowed
 * until the next ob_optim_step, which must be given the same pointer), call
 * ob_optim_backward_begin; during it report every tensor whose gradient in `grad` is final with
 * ob_optim_grad_hook (its signature is ob_model_grad_hook's: pass it with the optimizer as
 * `user` to ob_model_set_grad_hook); the step then waits for the buckets still in flight. A
 * bucket's exchange starts, on the communication thread, once every tensor of it and of the
 * buckets before it is final. Between begin and the step the caller must make no call on the
 * optimizer's communicator (one thread inside MPI at a time) and must not write a reported
 * tensor of `grad`, nor change the optimizer's state (a step armed for one phase that finds
 * the other fails with OB_ERR_STATE). begin does nothing (and the hook is ignored) unless the
 * overlap is active and the next step exchanges fp32 gradients (adam, the warmup) or, in the
 * compressed mode's compression phase, the momentum (each segment's momentum update and
 * compressed allreduce run on the thread once its tensors are final); ob_optim_destroy waits
 * for an armed exchange. */
void ob_optim_backward_begin(ob_optim *opt, const float *grad);
void ob_optim_grad_hook(void *opt, size_t tensor);

/* One optimizer step with this rank's local gradient `grad` (d floats in the communicator's
 * memory, borrowed, not modified) and learning rate lr. Collective: every rank calls it with the
 * same lr. On a device communicator the updates may still be running on the stream when it
 * returns; work enqueued on the same stream sees them. */
ob_status ob_optim_step(ob_optim *opt, const float *grad, float lr, ob_err *err);

/* What a warm start (ob_optim_warm_start) did with the borrowed variance. */
typedef enum ob_warm_state {
    OB_WARM_NONE = 0,    /* no warm start */
    OB_WARM_TAKEN = 1,   /* v_Tw taken as is, frozen at once (refit_steps 0) */
    OB_WARM_REFIT = 2,   /* re-estimated by Adam from v_Tw until refit_end, then frozen */
    OB_WARM_REFUSED = 3, /* did not fit the first gradients: discarded, a warmup from scratch */
    OB_WARM_REWARM = 4,  /* after a rollback (ob_optim_rewarm): re-estimating until refit_end */
    OB_WARM_DELAYED = 5, /* after a rollback into the warmup (ob_optim_rewarm): the freeze comes
                          * at the end of step refit_end, whatever the rule */
} ob_warm_state;

/* The first step of the variance refresh (refresh_steps) that follows a freeze at freeze_step:
 * freeze_step + max(freeze_step, refresh_steps) + 1; 0 when there is none. */
long ob_optim_next_refresh(const ob_optim_config *cfg, long freeze_step);

/* The step whose freeze scale (ob_optim_freeze_raise) the v of a state carries, after `step`
 * steps, frozen at `freeze_step`, in warm-start state `warm` (refit ending at `refit_end`):
 * freeze_step; inside a variance refresh of cfg (refresh_steps), which scales v as frozen at
 * each of its steps, `step` itself; 0 when no freeze scaled it (a v taken as is from a warm
 * start, or frozen at the end of a refit, which carries v on as it was); -1 before a freeze. */
long ob_optim_v_scaled_at(const ob_optim_config *cfg, ob_warm_state warm, long refit_end,
                          long freeze_step, long step);

/* The warm-start check: the borrowed v is refused when at the first step more than this
 * fraction of the coordinates has an averaged gradient above OB_WARM_CHECK_FACTOR sqrt(v)
 * (docs/CHECKPOINTS.md: 0.01-4.9 % where a warm start trained well, 7.7 % where it did not). */
#define OB_WARM_CHECK_FACTOR 10.0
#define OB_WARM_REFUSE_FRACTION 0.05
/* ... and fits as well as on the run it was frozen on when at most this fraction is off: then
 * a refit of "auto" length ends at step 1 (0.01-0.09 % where the job starts from the source's
 * parameters or seed, 0.8-2.3 % from other parameters: docs/CHECKPOINTS.md). */
#define OB_WARM_FIT_FRACTION 0.0025

/* "none", "taken", "refit", "refused", "rewarm", "delayed" */
const char *ob_warm_state_name(ob_warm_state s);

typedef struct ob_optim_stats {
    long step;           /* completed steps */
    ob_phase phase;      /* phase of the next step */
    long freeze_step;    /* T_w, or -1 while still in warmup (or never, for naive) */
    double freeze_ratio; /* last ||v_t||_1/||v_{t-Delta}||_1; NaN when not computed */
    double v_l1_norm;    /* last ||v_t||_1 computed (0 when not computed) */
    uint64_t bytes_sent; /* by this rank's collectives in all steps so far */
    uint64_t bytes_last_step;
    ob_warm_state warm_start; /* see ob_optim_warm_start */
    long refit_end;           /* OB_WARM_REFIT: the step at which v is frozen */
    /* The check's fraction of coordinates above OB_WARM_CHECK_FACTOR sqrt(v) (NaN until it ran,
     * in this process: a resumed run does not repeat it). */
    double warm_check_fraction;
    /* Buckets exchanged by fp32 steps and segments by compressed-mode compression steps, in
     * this process; and of those, handed to the communication thread while the backward pass
     * was still running (cfg.overlap). */
    uint64_t buckets_exchanged;
    uint64_t buckets_early;
} ob_optim_stats;

void ob_optim_get_stats(const ob_optim *opt, ob_optim_stats *out);

/* This rank's parts of the compression-health numbers, read from the state the optimizer holds
 * after its last step (nothing is written, so training is the same with or without them):
 * squared L2 norms of the worker error (D, this rank's buffer, padding included), of the server
 * error chunk this rank serves (C) and of the momentum m (d), and how many coordinates of m are
 * exactly zero. Summed over the ranks they give
 *   ||e_worker|| / ||m||  = sqrt(sum worker_error_sq / sum momentum_sq)  (RMS over ranks of both)
 *   ||e_server|| / ||m||  = sqrt(sum server_error_sq / (sum momentum_sq / N))  (the whole
 *                           server error, every chunk, against the RMS momentum norm)
 *   zero-momentum fraction = sum zero_momentum / (N d).
 * Before the freeze the error buffers are zero (the compressed allreduce is not used), so both
 * ratios are 0. OB_ERR_UNSUPPORTED when the optimizer has no error feedback (adam, or
 * onebit_adam in the uncompressed mode). On a device the sums are computed there and the call
 * waits for the stream. */
typedef struct ob_optim_health_sums {
    double worker_error_sq, server_error_sq, momentum_sq;
    double zero_momentum; /* a count, as a double */
} ob_optim_health_sums;

ob_status ob_optim_health_sums_local(ob_optim *opt, ob_optim_health_sums *out, ob_err *err);

/* Where the time of ob_optim_step goes, summed over the steps taken while timing was on (wall
 * clock, this rank). On a device communicator timing synchronises the stream after each part,
 * so that the time lands in the part that spent it (a small cost: leave it off unless asked). */
typedef struct ob_optim_timing {
    uint64_t steps;
    double total_s;     /* whole steps */
    double allreduce_s; /* fp32 allreduces (warmup gradients, uncompressed momentum); with
                         * the overlap, the time the step waited for buckets still in flight */
    double wait_s;      /* with the overlap, compression steps: the time the step waited for
                         * segments still in flight (their phases are in car, on the thread) */
    ob_car_timing car;  /* compressed allreduces, by phase */
} ob_optim_timing;

/* Turns timing on or off (off after create) and clears the sums. */
void ob_optim_set_timing(ob_optim *opt, int on);
void ob_optim_get_timing(const ob_optim *opt, ob_optim_timing *out);

/* The optimizer's state for checkpointing. Pointers are owned by the optimizer and writable:
 * a resumed run writes the saved values into them, then calls ob_optim_set_progress. The
 * arrays live in `mem` (device memory for a device communicator: copy them with the CUDA
 * runtime after synchronising the communicator's stream); the norm history is host memory. */
typedef struct ob_optim_state {
    ob_mem_kind mem;
    size_t d;
    size_t padded_size;     /* D, 0 when no compressed allreduce is used */
    size_t chunk_size;      /* C, 0 when no compressed allreduce is used */
    float *exp_avg;         /* m (d) */
    float *exp_avg_sq;      /* v (d); after the freeze, v_Tw */
    float *worker_error;    /* (D) or NULL */
    float *server_error;    /* (C) or NULL */
    /* The car's server layout (onebit/car.h): num_server_segments segments whose bounds are
     * server_segments[0 .. num_server_segments]; 0 and NULL without a car. */
    size_t num_server_segments;
    const size_t *server_segments;
    /* 1: exp_avg and exp_avg_sq are this rank's own (binsgdm's m and b, from its gradients
     * alone): a checkpoint keeps every rank's. 0: identical on every rank. */
    int local_moments;
    /* The compressed exchange's ranks a node (1: flat): the worker error then holds this
     * rank's node's error on its piece only (onebit/car.h). */
    int ranks_per_node;
    /* With track_variance: this rank's u, A and B (3 d floats in that order, in `mem`), per
     * rank like local_moments; NULL and 0 otherwise. */
    float *track_stats;
    size_t track_stats_len;
    double *v_norm_history; /* (Delta) ring of ||v_t||_1, slot t % Delta; NULL unless auto freeze */
    size_t v_norm_history_len;
} ob_optim_state;

void ob_optim_get_state(ob_optim *opt, ob_optim_state *out);

/* Where an optimizer stands, besides its arrays: what a checkpoint saves and a resume restores. */
typedef struct ob_optim_progress {
    long step;                /* completed steps */
    long freeze_step;         /* -1: not frozen */
    double last_ratio;        /* freeze detector's last ratio (NaN: none) */
    double last_norm;         /* freeze detector's last ||v_t||_1 */
    uint64_t bytes_sent;      /* traffic so far, for the statistics */
    ob_warm_state warm_start; /* OB_WARM_NONE unless warm-started */
    long refit_end;           /* OB_WARM_REFIT: the step of the freeze; else 0 */
    double refit_scale;       /* OB_WARM_REFIT: v's factor at that freeze, in (0, 1]; else 1 */
} ob_optim_progress;

void ob_optim_get_progress(const ob_optim *opt, ob_optim_progress *out);

/* Restores the progress after the arrays of ob_optim_get_state were written: the step counter,
 * the freeze step (a frozen optimizer recomputes its sqrt(v_Tw) + eps from the restored v) and
 * the statistics. OB_ERR_INVALID_ARG (nothing changed) when the values do not fit the
 * optimizer: a negative step, a freeze after the step, a freeze of adam or naive. */
ob_status ob_optim_set_progress(ob_optim *opt, const ob_optim_progress *p, ob_err *err);

/* Warm start of a fresh optimizer (no step taken yet) with v_Tw of an earlier run (d floats in
 * host memory, copied). Only for onebit_adam in the compressed or uncompressed modes.
 *
 * refit_steps == 0: v_Tw is frozen as is and the compression phase starts at once
 * (OB_WARM_TAKEN). A variance frozen on another run's parameters, batch size or learning rate
 * need not fit this one, so the default is refit_steps > 0 (OB_WARM_REFIT): steps 1..refit_steps
 * are Adam steps (gradient exchange cfg.refit_exchange, no bias correction of v, which does not
 * start from zero) that carry on from v_Tw, and v is frozen at the end of step refit_steps. At
 * step 1 the borrowed v is checked against the averaged gradient: when more than
 * OB_WARM_REFUSE_FRACTION of the coordinates exceed OB_WARM_CHECK_FACTOR sqrt(v), v is
 * set to zero and the run warms up as from scratch (OB_WARM_REFUSED: its freeze_step rule
 * applies). raised >= 1: the factor the source's freeze multiplied its v by
 * (ob_optim_freeze_raise; 1 when unknown): a refit starts from v_frozen / raised, the variance
 * the source estimated (the check compares with it), while v_Tw taken as is keeps the raise
 * that bounds its frozen steps. scale in (0, 1]: the factor between the source's frozen v and
 * its v_hat (ob_optim_frozen_scale at its freeze; 1 when unknown): the refit carries v on as an
 * estimate of v_hat (nothing to correct), so its freeze multiplies v by scale and the frozen
 * steps keep the ratio to Adam's that the source's had (a job from scratch freezes the same
 * way; without it the warm-started transformers of the robustness suite ended 1.3-4.3 % behind it).
 * fit_fraction > 0: when the check finds at most that fraction of the
 * coordinates over the limit, the refit ends at step 1 instead (refit_end = 1: the borrowed v fits
 * as it did on its own run, and a longer refit only costs bytes); 0: the refit runs its length.
 * Either way the state survives a checkpoint (ob_optim_progress). */
ob_status ob_optim_warm_start(ob_optim *opt, const float *v_frozen, double raised, double scale,
                              long refit_steps, double fit_fraction, ob_err *err);

/* After a rollback to a checkpoint of a run that then diverged at step bad_step: a frozen
 * optimizer goes back to Adam steps (fp32 exchange) that carry v on from its v_Tw for `steps`
 * steps, then freezes again (OB_WARM_REWARM, refit_end = step + steps), with both
 * error-feedback buffers zeroed. An optimizer still in the warmup (the checkpoint predates the
 * freeze) would take the same path to the same divergence, so its freeze is moved to the end
 * of step bad_step + steps (OB_WARM_DELAYED, refit_end), for the auto rule as for a fixed
 * freeze step. Only
 * onebit_adam in the compressed or uncompressed modes; steps > 0. */
ob_status ob_optim_rewarm(ob_optim *opt, long steps, long bad_step, ob_err *err);

/* How a warm start's source ran against the job, for refit_steps "auto". */
typedef enum ob_warm_source {
    OB_WARM_SOURCE_SAME = 0,        /* the job's global batch and peak learning rate */
    OB_WARM_SOURCE_OTHER = 1,       /* another peak learning rate, or a smaller global batch */
    OB_WARM_SOURCE_LARGER_BATCH = 2 /* a larger global batch than the job's */
} ob_warm_source;

/* refit_steps for "auto": ceil(Delta / 5), a fifth of the variance's memory (20 steps at
 * beta2 = 0.99, 200 at 0.999), over which 1 - beta2^(Delta/5) = 18 % of v is re-estimated, on
 * the source's own setting; ceil(Delta / 2) (39 %) when the source ran another peak learning
 * rate or a smaller global batch: another learning rate takes the parameters along another
 * path, and the noise part of v scales with 1 / batch; ceil(3 Delta / 4) (53 %) when it ran a
 * larger global batch: its v_Tw then underestimates the job's gradient noise, the direction that
 * makes the frozen steps too large (batch 16 per rank from a source of 512: ceil(Delta / 2)
 * ended 1.83 % above the same job from scratch on average over 10 seeds, ceil(3 Delta / 4) 0.59 %).
 */
long ob_optim_auto_refit_steps(double beta2, ob_warm_source source);

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_OPTIM_H */
