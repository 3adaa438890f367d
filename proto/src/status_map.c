/* ob_status -> gRPC code and HTTP status: the single table both APIs answer from. */
#include "onebit/status_map.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct row {
    ob_status status;
    int grpc;         /* grpc_status_code */
    int http;         /* HTTP status */
    const char *name; /* the gRPC code's name */
} row;

static const row table[] = {
    {OB_OK, 0, 200, "OK"},
    {OB_ERR_INVALID_ARG, 3, 400, "INVALID_ARGUMENT"},
    {OB_ERR_NOT_FOUND, 5, 404, "NOT_FOUND"},
    {OB_ERR_STATE, 9, 409, "FAILED_PRECONDITION"},
    {OB_ERR_UNAUTHENTICATED, 16, 401, "UNAUTHENTICATED"},
    {OB_ERR_TOO_LARGE, 8, 413, "RESOURCE_EXHAUSTED"},
    {OB_ERR_NOMEM, 8, 503, "RESOURCE_EXHAUSTED"},
    {OB_ERR_UNSUPPORTED, 12, 501, "UNIMPLEMENTED"},
    {OB_ERR_COMM, 14, 503, "UNAVAILABLE"},
    {OB_ERR_UNAVAILABLE, 14, 503, "UNAVAILABLE"},
    {OB_ERR_CORRUPT, 15, 500, "DATA_LOSS"},
    {OB_ERR_IO, 13, 500, "INTERNAL"},
    {OB_ERR_CUDA, 13, 500, "INTERNAL"},
    {OB_ERR_NUMERIC, 13, 500, "INTERNAL"},
};

static const row *find(ob_status s)
{
    static const row unknown = {0, 2, 500, "UNKNOWN"};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].status == s) return &table[i];
    return &unknown;
}

int ob_status_grpc_code(ob_status s)
{
    return find(s)->grpc;
}

int ob_status_http(ob_status s)
{
    return find(s)->http;
}

const char *ob_status_code_name(ob_status s)
{
    return find(s)->name;
}

/* Whether msg[0..n) ends in " (name.c:123)". */
static size_t location_suffix(const char *msg, size_t n)
{
    if (n < 6 || msg[n - 1] != ')') return 0;
    size_t i = n - 1;
    while (i > 0 && msg[i - 1] >= '0' && msg[i - 1] <= '9')
        i--;
    if (i == n - 1 || i < 4 || msg[i - 1] != ':') return 0;
    size_t colon = i - 1;
    if (colon < 3 || strncmp(msg + colon - 2, ".c", 2) != 0) return 0;
    size_t open = colon;
    while (open > 0 && msg[open - 1] != '(' && msg[open - 1] != ' ')
        open--;
    if (open < 2 || msg[open - 1] != '(' || msg[open - 2] != ' ') return 0;
    return n - (open - 2);
}

void ob_status_public_message(const char *msg, char *out, size_t cap)
{
    if (!cap) return;
    if (!msg) msg = "";
    size_t n = strlen(msg);
    n -= location_suffix(msg, n);
    if (n >= cap) n = cap - 1;
    memcpy(out, msg, n);
    out[n] = '\0';
}
