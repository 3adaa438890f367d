/* gRPC server reflection's answers (reflection.h). The descriptor set is read with a small
 * protobuf wire reader that knows the few fields of descriptor.proto it needs (names, packages,
 * imports, nested messages and enums, services and methods), so that onebitd needs no generated
 * code of descriptor.proto; the requests and responses are grpc.reflection.v1's protobuf-c
 * messages. */
#include "reflection.h"
#include "onebit/base.h"
#include "onebit/status_map.h"
#include "grpc/reflection/v1/reflection.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the wire reader ----------------------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p, *end;
} rd;

/* One field of a message: its number and wire type; for a length-delimited field the bytes. */
typedef struct field {
    uint32_t num;
    int type;
    const uint8_t *data;
    size_t len;
} field;

static int rd_varint(rd *r, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* The next field into *f: 1, 0 at the end, -1 on bytes that are not protobuf. */
static int rd_next(rd *r, field *f)
{
    if (r->p == r->end) return 0;
    uint64_t key, v;
    if (rd_varint(r, &key) || key >> 32 || (key >> 3) == 0) return -1;
    f->num = (uint32_t)(key >> 3);
    f->type = (int)(key & 7);
    f->data = NULL;
    f->len = 0;
    switch (f->type) {
    case 0:
        return rd_varint(r, &v) ? -1 : 1;
    case 1:
        if ((size_t)(r->end - r->p) < 8) return -1;
        r->p += 8;
        return 1;
    case 5:
        if ((size_t)(r->end - r->p) < 4) return -1;
        r->p += 4;
        return 1;
    case 2:
        if (rd_varint(r, &v) || v > (uint64_t)(r->end - r->p)) return -1;
        f->data = r->p;
        f->len = (size_t)v;
        r->p += v;
        return 1;
    default: /* groups: not in descriptor.proto's fields we read */
        return -1;
    }
}

/* The string field `num` of the message m[0..len) (the last one wins, as protobuf says) into a
 * new string; "" when absent. NULL on malformed bytes or no memory. */
static char *rd_string(const uint8_t *m, size_t len, uint32_t num)
{
    rd r = {m, m + len};
    field f;
    const uint8_t *s = (const uint8_t *)"";
    size_t n = 0;
    int k;
    while ((k = rd_next(&r, &f)) == 1)
        if (f.num == num && f.type == 2) {
            s = f.data;
            n = f.len;
        }
    if (k < 0 || memchr(s, '\0', n)) return NULL;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

/* ---- the index ----------------------------------------------------------------------------- */

typedef struct file_entry {
    char *name;
    const uint8_t *bytes; /* borrowed from the set */
    size_t len;
    size_t *deps; /* indices of the files it imports */
    size_t n_deps;
} file_entry;

typedef struct symbol {
    char *name; /* fully qualified, no leading dot */
    size_t file;
    int is_message;
} symbol;

struct ob__reflection {
    file_entry *files;
    size_t n_files;
    symbol *syms;
    size_t n_syms, cap_syms;
    char **services;
    size_t n_services;
};

/* Descriptors nest; ours do not nest deeply, and a set that does is refused, not recursed. */
#define MAX_NESTING 32

static ob_status add_symbol(ob__reflection *x, const char *prefix, const char *name, size_t file,
                            int is_message, char **full_out, ob_err *err)
{
    if (x->n_syms == x->cap_syms) {
        size_t cap = x->cap_syms ? 2 * x->cap_syms : 64;
        symbol *s = realloc(x->syms, cap * sizeof *s);
        if (!s) return OB_ERR(err, OB_ERR_NOMEM, "indexing the descriptor set");
        x->syms = s;
        x->cap_syms = cap;
    }
    size_t n = strlen(prefix) + 1 + strlen(name) + 1;
    char *full = malloc(n);
    if (!full) return OB_ERR(err, OB_ERR_NOMEM, "indexing the descriptor set");
    snprintf(full, n, "%s%s%s", prefix, prefix[0] ? "." : "", name);
    x->syms[x->n_syms++] = (symbol){full, file, is_message};
    if (full_out) *full_out = full;
    return OB_OK;
}

/* A DescriptorProto (is_message) or EnumDescriptorProto in m[0..len), declared in scope prefix:
 * its name, and for a message its nested messages (3) and enums (4). */
static ob_status index_type(ob__reflection *x, const uint8_t *m, size_t len, const char *prefix,
                            size_t file, int is_message, int depth, ob_err *err)
{
    if (depth > MAX_NESTING)
        return OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: messages nested too deeply");
    char *name = rd_string(m, len, 1);
    if (!name || !name[0]) {
        free(name);
        return OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: a type without a name");
    }
    char *full = NULL;
    ob_status rc = add_symbol(x, prefix, name, file, is_message, &full, err);
    free(name);
    if (rc || !is_message) return rc;
    rd r = {m, m + len};
    field f;
    int k;
    while ((k = rd_next(&r, &f)) == 1) {
        if (f.type != 2 || (f.num != 3 && f.num != 4)) continue;
        rc = index_type(x, f.data, f.len, full, file, f.num == 3, depth + 1, err);
        if (rc) return rc;
    }
    return k < 0 ? OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: malformed message %s", full)
                 : OB_OK;
}

/* A ServiceDescriptorProto: the service, its methods (2), and the service in the list. */
static ob_status index_service(ob__reflection *x, const uint8_t *m, size_t len, const char *pkg,
                               size_t file, ob_err *err)
{
    char *name = rd_string(m, len, 1);
    if (!name || !name[0]) {
        free(name);
        return OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: a service without a name");
    }
    char *full = NULL;
    ob_status rc = add_symbol(x, pkg, name, file, 0, &full, err);
    free(name);
    if (rc) return rc;
    char **sv = realloc(x->services, (x->n_services + 1) * sizeof *sv);
    if (!sv) return OB_ERR(err, OB_ERR_NOMEM, "indexing the descriptor set");
    x->services = sv;
    x->services[x->n_services++] = full; /* borrowed from the symbol */
    rd r = {m, m + len};
    field f;
    int k;
    while ((k = rd_next(&r, &f)) == 1) {
        if (f.num != 2 || f.type != 2) continue;
        char *method = rd_string(f.data, f.len, 1);
        if (!method || !method[0]) {
            free(method);
            return OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: a method of %s without a name",
                          full);
        }
        rc = add_symbol(x, full, method, file, 0, NULL, err);
        free(method);
        if (rc) return rc;
    }
    return k < 0 ? OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: malformed service %s", full)
                 : OB_OK;
}

/* A FileDescriptorProto: name (1), package (2), messages (4), enums (5), services (6). Its
 * imports (3) are resolved once every file is known. */
static ob_status index_file(ob__reflection *x, size_t i, ob_err *err)
{
    file_entry *fe = &x->files[i];
    fe->name = rd_string(fe->bytes, fe->len, 1);
    char *pkg = rd_string(fe->bytes, fe->len, 2);
    ob_status rc = OB_OK;
    if (!fe->name || !pkg || !fe->name[0]) {
        rc = OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: file %zu has no readable name", i);
        goto out;
    }
    rd r = {fe->bytes, fe->bytes + fe->len};
    field f;
    int k;
    while (rc == OB_OK && (k = rd_next(&r, &f)) == 1) {
        if (f.type != 2) continue;
        if (f.num == 4 || f.num == 5)
            rc = index_type(x, f.data, f.len, pkg, i, f.num == 4, 0, err);
        else if (f.num == 6)
            rc = index_service(x, f.data, f.len, pkg, i, err);
    }
    if (rc == OB_OK && k < 0)
        rc = OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: malformed file %s", fe->name);
out:
    free(pkg);
    return rc;
}

static ob_status resolve_deps(ob__reflection *x, size_t i, ob_err *err)
{
    file_entry *fe = &x->files[i];
    rd r = {fe->bytes, fe->bytes + fe->len};
    field f;
    int k;
    while ((k = rd_next(&r, &f)) == 1) {
        if (f.num != 3 || f.type != 2) continue;
        size_t j = 0;
        while (j < x->n_files &&
               (strlen(x->files[j].name) != f.len || memcmp(x->files[j].name, f.data, f.len) != 0))
            j++;
        if (j == x->n_files)
            return OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: %s imports a file not in the set",
                          fe->name);
        size_t *d = realloc(fe->deps, (fe->n_deps + 1) * sizeof *d);
        if (!d) return OB_ERR(err, OB_ERR_NOMEM, "indexing the descriptor set");
        fe->deps = d;
        fe->deps[fe->n_deps++] = j;
    }
    return k < 0 ? OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: malformed file %s", fe->name)
                 : OB_OK;
}

ob_status ob__reflection_create(ob__reflection **out, const uint8_t *set, size_t len, ob_err *err)
{
    *out = NULL;
    ob__reflection *x = calloc(1, sizeof *x);
    if (!x) return OB_ERR(err, OB_ERR_NOMEM, "allocating the reflection index");
    ob_status rc = OB_OK;
    /* FileDescriptorSet: repeated FileDescriptorProto file = 1. */
    rd r = {set, set + len};
    field f;
    int k;
    while ((k = rd_next(&r, &f)) == 1) {
        if (f.num != 1 || f.type != 2) continue;
        file_entry *fs = realloc(x->files, (x->n_files + 1) * sizeof *fs);
        if (!fs) {
            rc = OB_ERR(err, OB_ERR_NOMEM, "indexing the descriptor set");
            goto fail;
        }
        x->files = fs;
        x->files[x->n_files++] = (file_entry){NULL, f.data, f.len, NULL, 0};
    }
    if (k < 0 || x->n_files == 0) {
        rc = OB_ERR(err, OB_ERR_CORRUPT, "descriptor set: not a FileDescriptorSet");
        goto fail;
    }
    for (size_t i = 0; i < x->n_files && rc == OB_OK; i++)
        rc = index_file(x, i, err);
    for (size_t i = 0; i < x->n_files && rc == OB_OK; i++)
        rc = resolve_deps(x, i, err);
    if (rc) goto fail;
    *out = x;
    return OB_OK;
fail:
    ob__reflection_destroy(x);
    return rc;
}

void ob__reflection_destroy(ob__reflection *x)
{
    if (!x) return;
    for (size_t i = 0; i < x->n_files; i++) {
        free(x->files[i].name);
        free(x->files[i].deps);
    }
    for (size_t i = 0; i < x->n_syms; i++)
        free(x->syms[i].name);
    free(x->files);
    free(x->syms);
    free(x->services);
    free(x);
}

size_t ob__reflection_service_count(const ob__reflection *x)
{
    return x->n_services;
}

const char *ob__reflection_service(const ob__reflection *x, size_t i)
{
    return i < x->n_services ? x->services[i] : NULL;
}

/* ---- answers ------------------------------------------------------------------------------- */

static const symbol *find_symbol(const ob__reflection *x, const char *name)
{
    if (name[0] == '.') name++; /* ".onebit.v1.Job", as descriptors write type names */
    for (size_t i = 0; i < x->n_syms; i++)
        if (!strcmp(x->syms[i].name, name)) return &x->syms[i];
    return NULL;
}

/* Appends file i and (depth first) every file it imports that is not in yet. */
static void add_file(const ob__reflection *x, size_t i, char *in, ProtobufCBinaryData *out,
                     size_t *n)
{
    if (in[i]) return;
    in[i] = 1;
    out[(*n)++] = (ProtobufCBinaryData){x->files[i].len, (uint8_t *)x->files[i].bytes};
    for (size_t d = 0; d < x->files[i].n_deps; d++)
        add_file(x, x->files[i].deps[d], in, out, n);
}

ob_status ob__reflection_answer(const ob__reflection *x, const uint8_t *req, size_t len,
                                uint8_t **out, size_t *out_len, ob_err *err)
{
    *out = NULL;
    *out_len = 0;
    if (len > OB_REFLECTION_MAX_REQUEST)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "ServerReflectionRequest: %zu bytes, larger than the limit of %zu", len,
                      OB_REFLECTION_MAX_REQUEST);
    Grpc__Reflection__V1__ServerReflectionRequest *q =
        grpc__reflection__v1__server_reflection_request__unpack(NULL, len, req);
    if (!q)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "malformed ServerReflectionRequest message: not valid protobuf");
    Grpc__Reflection__V1__ServerReflectionResponse resp =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    resp.valid_host = q->host;
    resp.original_request = q;
    Grpc__Reflection__V1__ErrorResponse error = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    Grpc__Reflection__V1__FileDescriptorResponse files =
        GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    Grpc__Reflection__V1__ListServiceResponse list =
        GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1__ExtensionNumberResponse ext =
        GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT;
    Grpc__Reflection__V1__ServiceResponse *sv = NULL, **svp = NULL;
    ProtobufCBinaryData *blobs = NULL;
    char *in = NULL;
    char text[300];
    ob_status rc = OB_OK;
    ob_status refused = OB_OK; /* answered with an ErrorResponse of this code */
    size_t file = 0;
    int want_file = 0;

    switch (q->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        sv = calloc(x->n_services ? x->n_services : 1, sizeof *sv);
        svp = calloc(x->n_services ? x->n_services : 1, sizeof *svp);
        if (!sv || !svp) {
            rc = OB_ERR(err, OB_ERR_NOMEM, "answering list_services");
            goto out;
        }
        for (size_t i = 0; i < x->n_services; i++) {
            grpc__reflection__v1__service_response__init(&sv[i]);
            sv[i].name = x->services[i];
            svp[i] = &sv[i];
        }
        list.n_service = x->n_services;
        list.service = svp;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        resp.list_services_response = &list;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        for (file = 0; file < x->n_files; file++)
            if (!strcmp(x->files[file].name, q->file_by_filename)) break;
        if (file == x->n_files) {
            snprintf(text, sizeof text, "no file named '%.200s'", q->file_by_filename);
            refused = OB_ERR_NOT_FOUND;
        }
        want_file = 1;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL: {
        const symbol *s = find_symbol(x, q->file_containing_symbol);
        if (!s) {
            snprintf(text, sizeof text, "no symbol named '%.200s'", q->file_containing_symbol);
            refused = OB_ERR_NOT_FOUND;
        } else {
            file = s->file;
        }
        want_file = 1;
        break;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION: {
        /* onebit's protos declare no extensions. */
        const Grpc__Reflection__V1__ExtensionRequest *e = q->file_containing_extension;
        snprintf(text, sizeof text, "no extension %d of '%.200s'", e ? e->extension_number : 0,
                 e ? e->containing_type : "");
        refused = OB_ERR_NOT_FOUND;
        break;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE: {
        const symbol *s = find_symbol(x, q->all_extension_numbers_of_type);
        if (!s || !s->is_message) {
            snprintf(text, sizeof text, "no message type named '%.200s'",
                     q->all_extension_numbers_of_type);
            refused = OB_ERR_NOT_FOUND;
            break;
        }
        ext.base_type_name = s->name; /* known, and extended by nothing */
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
        resp.all_extension_numbers_response = &ext;
        break;
    }
    default:
        snprintf(text, sizeof text,
                 "ServerReflectionRequest: none of list_services, file_by_filename, "
                 "file_containing_symbol, file_containing_extension, "
                 "all_extension_numbers_of_type is set");
        refused = OB_ERR_INVALID_ARG;
    }
    if (want_file && !refused) {
        in = calloc(x->n_files, 1);
        blobs = calloc(x->n_files, sizeof *blobs);
        if (!in || !blobs) {
            rc = OB_ERR(err, OB_ERR_NOMEM, "answering a file request");
            goto out;
        }
        add_file(x, file, in, blobs, &files.n_file_descriptor_proto);
        files.file_descriptor_proto = blobs;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
        resp.file_descriptor_response = &files;
    }
    if (refused) {
        error.error_code = ob_status_grpc_code(refused);
        error.error_message = text;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
        resp.error_response = &error;
    }
    size_t n = grpc__reflection__v1__server_reflection_response__get_packed_size(&resp);
    *out = malloc(n ? n : 1);
    if (!*out) {
        rc = OB_ERR(err, OB_ERR_NOMEM, "encoding a reflection answer");
        goto out;
    }
    *out_len = grpc__reflection__v1__server_reflection_response__pack(&resp, *out);
out:
    free(sv);
    free(svp);
    free(blobs);
    free(in);
    grpc__reflection__v1__server_reflection_request__free_unpacked(q, NULL);
    return rc;
}
