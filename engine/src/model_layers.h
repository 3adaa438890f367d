/* CPU layer kernels shared by the models: forward and backward of linear layers, activations,
 * layer norm, causal self-attention, embeddings and softmax cross-entropy.
 *
 * Conventions: every buffer is row-major float32 and borrowed. Shapes are in the comments with
 * N rows (examples or tokens). Backward kernels ACCUMULATE into parameter gradients (dw, db) --
 * the caller zeroes the gradient buffer once per step, and a tied weight then simply receives
 * both contributions -- while gradients with respect to activations are OVERWRITTEN unless the
 * comment says otherwise. Matrix products go through cblas_sgemm; all dimensions have been
 * checked to fit an int when the model was created. Private to the engine. */
#ifndef ONEBIT_MODEL_LAYERS_H
#define ONEBIT_MODEL_LAYERS_H

#include "onebit/model.h"

#include <stddef.h>
#include <stdint.h>

/* out (N, OC) = inp (N, C) @ w^T + b, with w (OC, C) and b (OC) or NULL. */
void ob__linear_forward(float *out, const float *inp, const float *w, const float *b, size_t n,
                        size_t c, size_t oc);

/* out (N, OC) += inp (N, C) @ w^T + b: the residual connection fused into the projection. */
void ob__linear_forward_add(float *out, const float *inp, const float *w, const float *b, size_t n,
                            size_t c, size_t oc);

/* dinp (N, C) = dout @ w (skipped when dinp is NULL); dw (OC, C) += dout^T @ inp;
 * db (OC) += column sums of dout (skipped when db is NULL). */
void ob__linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, size_t n, size_t c, size_t oc);

/* out (n) = act(inp). */
void ob__act_forward(ob_activation act, float *out, const float *inp, size_t n);

/* dinp (n) = dout * act'(inp), where out = act(inp) from the forward pass. dinp may be the same
 * buffer as dout (in-place), but no other overlap is allowed. */
void ob__act_backward(ob_activation act, float *dinp, const float *dout, const float *inp,
                      const float *out, size_t n);

/* Layer norm over the last dimension: out (N, C) = (inp - mean) * rstd * w + b; saves mean (N)
 * and rstd (N) for the backward pass. */
void ob__layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                           const float *b, size_t n, size_t c);

/* dinp (N, C) += d/d inp (accumulates: inp is the residual stream, whose gradient also arrives
 * through the skip connection); dw (C), db (C) += as usual. */
void ob__layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, size_t n,
                            size_t c);

/* Causal multi-head self-attention. qkv (B, T, 3C) holds q, k, v side by side, each split into
 * NH heads of C / NH. att (B, NH, T, T) receives the attention probabilities (zero above the
 * diagonal); out (B, T, C) the attended values with the heads concatenated. */
void ob__attention_forward(float *out, float *att, const float *qkv, size_t b, size_t t, size_t c,
                           size_t nh);

/* dqkv (B, T, 3C) = gradient of the loss with respect to qkv, given dout (B, T, C).
 * scratch holds T * T floats. */
void ob__attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *att, size_t b, size_t t, size_t c, size_t nh);

/* out (B, T, C) = wte[tokens[b, t]] + wpe[t]. Row b of tokens starts at tokens + b * stride. */
void ob__embed_forward(float *out, const uint8_t *tokens, size_t stride, const float *wte,
                       const float *wpe, size_t b, size_t t, size_t c);

/* dwte, dwpe += the embedding gradients from dout (B, T, C). */
void ob__embed_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens,
                        size_t stride, size_t b, size_t t, size_t c);

/* Softmax cross-entropy over logits (N, V) with targets (N) in [0, V): writes probs (N, V),
 * adds each row's -log p[target] to *loss_sum (double, so a large batch does not lose digits)
 * and counts rows whose argmax (first maximum) is the target in *correct. */
void ob__xent_forward(float *probs, double *loss_sum, size_t *correct, const float *logits,
                      const int32_t *targets, size_t n, size_t v);

/* Turns probs (N, V) into d(scale * sum of losses)/d logits in place: (probs - onehot) * scale. */
void ob__xent_backward(float *probs, const int32_t *targets, size_t n, size_t v, float scale);

#endif /* ONEBIT_MODEL_LAYERS_H */
