/* Server reflection's answers in process (service/src/reflection.h), against hostile input: the
 * compiled-in descriptor set indexed, known and unknown names answered, and many thousands of
 * mutated, truncated and random requests and descriptor sets, each refused cleanly or answered
 * with a response that decodes (under the sanitizer build, without touching a byte it should
 * not). The black-box test over the wire is tests/test_reflection.py. */
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "onebit/protoset.h"
#include "reflection.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* A request, packed into a malloc'd buffer. */
static uint8_t *pack_request(const Grpc__Reflection__V1__ServerReflectionRequest *q, size_t *len)
{
    *len = grpc__reflection__v1__server_reflection_request__get_packed_size(q);
    uint8_t *b = malloc(*len ? *len : 1);
    assert_non_null(b);
    grpc__reflection__v1__server_reflection_request__pack(q, b);
    return b;
}

/* Answers req and checks the outcome: OB_OK with a response that decodes, or a clean refusal. */
static ob_status answer(const ob__reflection *x, const uint8_t *req, size_t len,
                        Grpc__Reflection__V1__ServerReflectionResponse **out)
{
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    ob_err err;
    ob_status rc = ob__reflection_answer(x, req, len, &resp, &resp_len, &err);
    if (rc != OB_OK) {
        assert_int_equal(rc, OB_ERR_INVALID_ARG);
        assert_null(resp);
        if (out) *out = NULL;
        return rc;
    }
    Grpc__Reflection__V1__ServerReflectionResponse *r =
        grpc__reflection__v1__server_reflection_response__unpack(NULL, resp_len, resp);
    free(resp);
    assert_non_null(r);
    if (out)
        *out = r;
    else
        grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
    return OB_OK;
}

static void test_index_and_answers(void **state)
{
    (void)state;
    ob__reflection *x = NULL;
    ob_err err;
    assert_int_equal(ob__reflection_create(&x, ob_protoset, ob_protoset_len, &err), OB_OK);
    assert_int_equal(ob__reflection_service_count(x), 5);
    int job_service = 0;
    for (size_t i = 0; i < ob__reflection_service_count(x); i++)
        job_service += !strcmp(ob__reflection_service(x, i), "onebit.v1.JobService");
    assert_int_equal(job_service, 1);
    assert_null(ob__reflection_service(x, 5));

    Grpc__Reflection__V1__ServerReflectionRequest q =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    q.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
    const struct {
        const char *symbol;
        int found;
    } cases[] = {{"onebit.v1.JobService", 1},
                 {"onebit.v1.JobService.WatchJob", 1},
                 {"onebit.v1.Job", 1},
                 {".onebit.v1.JobState", 1},
                 {"grpc.health.v1.HealthCheckResponse.ServingStatus", 1},
                 {"grpc.reflection.v1alpha.ServerReflection", 1},
                 {"onebit.v1", 0},
                 {"onebit.v1.JobService.", 0},
                 {"", 0},
                 {"JobService", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        q.file_containing_symbol = (char *)cases[i].symbol;
        size_t len;
        uint8_t *b = pack_request(&q, &len);
        Grpc__Reflection__V1__ServerReflectionResponse *r = NULL;
        assert_int_equal(answer(x, b, len, &r), OB_OK);
        free(b);
        if (cases[i].found) {
            if (r->message_response_case !=
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE)
                fail_msg("'%s' not found", cases[i].symbol);
            assert_true(r->file_descriptor_response->n_file_descriptor_proto >= 1);
        } else {
            if (r->message_response_case !=
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE)
                fail_msg("'%s' found", cases[i].symbol);
            assert_int_equal(r->error_response->error_code, 5);
        }
        grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
    }
    /* A request over the limit is refused before it is decoded. */
    size_t big = OB_REFLECTION_MAX_REQUEST + 1;
    uint8_t *b = calloc(big, 1);
    assert_non_null(b);
    assert_int_equal(answer(x, b, big, NULL), OB_ERR_INVALID_ARG);
    free(b);
    ob__reflection_destroy(x);
    ob__reflection_destroy(NULL);
}

/* Valid requests of every kind, then mutated: flipped, cut short, lengthened, random. */
static void test_hostile_requests(void **state)
{
    (void)state;
    ob__reflection *x = NULL;
    assert_int_equal(ob__reflection_create(&x, ob_protoset, ob_protoset_len, NULL), OB_OK);
    Grpc__Reflection__V1__ExtensionRequest ext = GRPC__REFLECTION__V1__EXTENSION_REQUEST__INIT;
    ext.containing_type = (char *)"onebit.v1.Job";
    ext.extension_number = 7;
    Grpc__Reflection__V1__ServerReflectionRequest seeds[5];
    for (int i = 0; i < 5; i++) {
        grpc__reflection__v1__server_reflection_request__init(&seeds[i]);
        seeds[i].host = (char *)"localhost";
    }
    seeds[0].message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES;
    seeds[0].list_services = (char *)"*";
    seeds[1].message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME;
    seeds[1].file_by_filename = (char *)"onebit/v1/worker.proto";
    seeds[2].message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
    seeds[2].file_containing_symbol = (char *)"onebit.v1.JobService";
    seeds[3].message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION;
    seeds[3].file_containing_extension = &ext;
    seeds[4].message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE;
    seeds[4].all_extension_numbers_of_type = (char *)"onebit.v1.Job";
    int answered = 0, refused = 0;
    for (int round = 0; round < 20000; round++) {
        size_t len;
        uint8_t *seed = pack_request(&seeds[round % 5], &len);
        size_t cap = len + 64;
        uint8_t *b = malloc(cap);
        assert_non_null(b);
        memcpy(b, seed, len);
        free(seed);
        int mode = (int)(next_rand() % 4);
        if (mode == 0) { /* flip a few bytes */
            for (int k = 0; k < 1 + (int)(next_rand() % 4); k++)
                b[next_rand() % len] ^= (uint8_t)(1 + next_rand() % 255);
        } else if (mode == 1) { /* cut short */
            len = next_rand() % len;
        } else if (mode == 2) { /* garbage after it */
            size_t extra = 1 + next_rand() % 63;
            for (size_t k = 0; k < extra; k++)
                b[len + k] = (uint8_t)next_rand();
            len += extra;
        } else { /* random bytes */
            len = next_rand() % cap;
            for (size_t k = 0; k < len; k++)
                b[k] = (uint8_t)next_rand();
        }
        /* An exact-size copy: the sanitizers see a read past the end of the request. */
        uint8_t *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, b, len);
        free(b);
        if (answer(x, exact, len, NULL) == OB_OK)
            answered++;
        else
            refused++;
        free(exact);
    }
    assert_true(answered > 1000);
    assert_true(refused > 1000);
    ob__reflection_destroy(x);
}

/* The index refuses a descriptor set that is not one, whatever its bytes. */
static void test_hostile_sets(void **state)
{
    (void)state;
    ob__reflection *x = NULL;
    ob_err err;
    assert_int_equal(ob__reflection_create(&x, (const uint8_t *)"", 0, &err), OB_ERR_CORRUPT);
    assert_null(x);
    int made = 0;
    for (int round = 0; round < 3000; round++) {
        size_t len = ob_protoset_len;
        uint8_t *b = malloc(len);
        assert_non_null(b);
        memcpy(b, ob_protoset, len);
        if (round % 2)
            len = next_rand() % len;
        else
            for (int k = 0; k < 1 + (int)(next_rand() % 8); k++)
                b[next_rand() % len] ^= (uint8_t)(1 + next_rand() % 255);
        uint8_t *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, b, len);
        free(b);
        ob_status rc = ob__reflection_create(&x, exact, len, &err);
        if (rc == OB_OK) {
            /* Whatever it indexed must answer without reading outside the set. */
            Grpc__Reflection__V1__ServerReflectionRequest q =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
            q.message_request_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
            q.file_containing_symbol = (char *)"onebit.v1.JobService";
            size_t qlen;
            uint8_t *qb = pack_request(&q, &qlen);
            answer(x, qb, qlen, NULL);
            free(qb);
            ob__reflection_destroy(x);
            x = NULL;
            made++;
        } else {
            assert_int_equal(rc, OB_ERR_CORRUPT);
            assert_null(x);
        }
        free(exact);
    }
    assert_true(made < 3000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_and_answers),
        cmocka_unit_test(test_hostile_requests),
        cmocka_unit_test(test_hostile_sets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
