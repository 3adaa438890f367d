/* The error-feedback buffers across a change of the exchange's shape: a checkpoint written by
 * a flat exchange resumed by a hierarchical one, and the reverse (onebit/checkpoint.h,
 * ob_ckpt_read_errors_for). Built on ob_ckpt_read_errors, which reads rank files as stored.
 *
 * What is carried is the error the whole world still owes, E = (1/N) sum over ranks of the
 * flat worker errors = (1/n) sum over nodes of the node errors (a node's error stands for its
 * m ranks). Rank j's flat equivalent is its own error (flat) or its node's (hierarchical: the
 * node's pieces are spread over its ranks' files, zero elsewhere, so their sum); a flat rank
 * takes its own, a hierarchical one the mean of its node's ranks' on its piece. Server errors
 * are by chunk in both shapes (rank r serves chunk r) and pass as they are. */
#include "onebit/checkpoint.h"

#include <stdlib.h>
#include <string.h>

static int shape(int ranks_per_node)
{
    return ranks_per_node > 1 ? ranks_per_node : 1;
}

/* Rank j's worker error as a flat rank would hold it, added times `weight` into acc (D). */
static ob_status add_flat_equivalent(const char *dir, const ob_ckpt_meta *meta, int j, size_t D,
                                     size_t C, float weight, float *acc, float *we, float *se,
                                     ob_err *err)
{
    int ms = shape(meta->ranks_per_node), first = ms > 1 ? j / ms * ms : j;
    for (int q = first; q < first + ms; q++) {
        ob_status st =
            ob_ckpt_read_errors(dir, meta, q, meta->world_size, D, C, NULL, 0, we, se, err);
        if (st != OB_OK) return st;
        for (size_t i = 0; i < D; i++)
            acc[i] += weight * we[i];
    }
    return OB_OK;
}

/* Zero outside rank r's piece of a hierarchical exchange of m ranks a node. */
static void keep_piece(float *we, size_t D, size_t C, int rank, int world, int m)
{
    size_t l = (size_t)(rank % m), n = (size_t)(world / m);
    for (size_t c = 0; c < D / C; c++)
        if (c % (size_t)m != l || c / (size_t)m >= n) memset(we + c * C, 0, C * sizeof(float));
}

ob_status ob_ckpt_read_errors_for(const char *dir, const ob_ckpt_meta *meta, int rank,
                                  int world_size, size_t D, size_t C, const size_t *seg_bounds,
                                  size_t num_segments, int ranks_per_node, float *we, float *se,
                                  ob_err *err)
{
    int ms = shape(meta->ranks_per_node), mc = shape(ranks_per_node);
    ob_status st = ob_ckpt_read_errors(dir, meta, rank, world_size, D, C, seg_bounds, num_segments,
                                       we, se, err);
    if (st != OB_OK || ms == mc || meta->padded_size == 0) return st;
    if (mc > 1 && world_size % mc != 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "ranks_per_node %d does not divide %d ranks", mc,
                      world_size);
    if (world_size != meta->world_size || D != meta->padded_size) {
        /* Resized: ob_ckpt_read_errors gave the mean of the stored buffers, 1/ms of E where
         * they were node errors spread over ms files. */
        for (size_t i = 0; ms > 1 && i < D; i++)
            we[i] *= (float)ms;
        if (mc > 1) keep_piece(we, D, C, rank, world_size, mc);
        return OB_OK;
    }
    /* The same world: the mean of this rank's target node's flat equivalents (one rank's own
     * when the target is flat). */
    float *acc = calloc(D, sizeof *acc), *tw = malloc(D * sizeof *tw);
    float *ts = malloc((C ? C : 1) * sizeof *ts);
    if (!acc || !tw || !ts) {
        free(acc), free(tw), free(ts);
        return OB_ERR(err, OB_ERR_NOMEM, "carrying the error buffers (D %zu)", D);
    }
    int first = mc > 1 ? rank / mc * mc : rank;
    for (int j = first; st == OB_OK && j < first + mc; j++)
        st = add_flat_equivalent(dir, meta, j, D, C, 1.0f / (float)mc, acc, tw, ts, err);
    if (st == OB_OK) {
        if (mc > 1) keep_piece(acc, D, C, rank, world_size, mc);
        memcpy(we, acc, D * sizeof *we);
    }
    free(acc), free(tw), free(ts);
    return st;
}
