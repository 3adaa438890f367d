/* The dataset record shared by the data sources: data_idx.c (IDX files), data_text.c (text
 * files), data_synth.c (synthetic data) build it, data.c reads it (accessors and loaders).
 * Private to the engine. */
#ifndef ONEBIT_DATA_INTERNAL_H
#define ONEBIT_DATA_INTERNAL_H

#include "onebit/data.h"

#include <stddef.h>
#include <stdint.h>

struct ob_dataset {
    ob_dataset_kind kind;
    char *source; /* owned, malloc */

    /* Classification. A split holds either pixels (IDX: bytes mapped through lut) or features
     * (synthetic: floats used as they are); the other pointer is NULL. */
    size_t input_dim;
    int num_classes;
    size_t n[2];       /* examples per split, indexed by ob_split */
    uint8_t *pix[2];   /* (n, input_dim), malloc */
    float *feat[2];    /* (n, input_dim), malloc */
    int32_t *label[2]; /* (n), malloc */
    float lut[256];    /* pixel byte -> feature */
    float mean, std;   /* the normalisation lut applies (0 and 1 when none) */

    /* Text. */
    size_t context;
    uint8_t *text[2]; /* malloc; NULL when the split is empty */
    size_t text_len[2];
};

/* A zeroed dataset of the given kind with a copy of source, or NULL when out of memory. */
ob_dataset *ob__dataset_alloc(ob_dataset_kind kind, const char *source);

#endif /* ONEBIT_DATA_INTERNAL_H */
