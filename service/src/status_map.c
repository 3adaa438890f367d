/* ob_status -> gRPC code and HTTP status: the single table both APIs answer from. */
#include "onebit/status_map.h"

#include <stddef.h>

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
