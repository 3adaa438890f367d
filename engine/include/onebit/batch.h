/* A mini-batch as the data loaders produce it and the models consume it. All pointers are
 * borrowed: they point into the loader's buffers and stay valid until its next call. */
#ifndef ONEBIT_BATCH_H
#define ONEBIT_BATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ob_batch {
    size_t n; /* number of examples */

    /* Classification (softmax regression, MLP): */
    size_t input_dim; /* features per example */
    const float *x;   /* (n, input_dim) row-major */
    const int32_t *y; /* (n) class labels in [0, num_classes) */

    /* Byte-level language modelling (transformer): each row holds context + 1 bytes; the model
     * reads tokens[:, 0:context] and predicts tokens[:, 1:context+1]. */
    size_t context;        /* sequence length T */
    const uint8_t *tokens; /* (n, context + 1) row-major */
} ob_batch;

#ifdef __cplusplus
}
#endif

#endif /* ONEBIT_BATCH_H */
