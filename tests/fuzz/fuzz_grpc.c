/* Fuzz target: every gRPC request message onebitd accepts, decoded and handled by the real
 * handlers against a real service (its SQLite store in a private temporary directory; the
 * supervisor is not started, so nothing is launched). The first byte picks the method, the rest
 * is the message. Submits with valid specs pile up jobs in the store, as they would. */
#include "grpc_internal.h"
#include "onebit/launcher.h"
#include "onebit/service.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ob_service *svc;

static void setup(void)
{
    static char dir[64] = "/tmp/fuzz_grpc.XXXXXX";
    if (!mkdtemp(dir)) abort();
    grpc_init();
    static ob_launcher *launcher;
    static const char *const no_args[] = {NULL};
    ob_local_launcher_config lc = {.mpirun = "/bin/false", .worker = "/bin/false",
                                   .mpirun_args = no_args};
    ob_service_config cfg;
    ob_service_config_default(&cfg);
    cfg.state_dir = dir;
    if (ob_local_launcher_create(&launcher, &lc, NULL) != OB_OK) abort();
    cfg.launcher = launcher;
    if (ob_service_create(&svc, &cfg, NULL) != OB_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!svc) setup();
    if (size == 0) return 0;
    int m = data[0] % M_COUNT;
    const ob__grpc_method *method = &ob__grpc_methods[m];
    if (!method->fn) return 0; /* streams: decoded by the same code as GetJob */
    ProtobufCMessage *msg = protobuf_c_message_unpack(method->request, NULL, size - 1, data + 1);
    if (!msg) return 0;
    ob__grpc_reply r;
    memset(&r, 0, sizeof r);
    method->fn(svc, msg, "", &r);
    if (r.bb) grpc_byte_buffer_destroy(r.bb);
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
}
