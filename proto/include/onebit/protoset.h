/* The descriptor set of every service onebitd serves: a serialized
 * google.protobuf.FileDescriptorSet of proto/onebit/v1/{jobs,worker}.proto,
 * proto/grpc/health/v1/health.proto and proto/grpc/reflection/{v1,v1alpha}/reflection.proto with
 * their imports, made by `protoc --descriptor_set_out --include_imports` at build time. The same
 * bytes are shipped as build/share/onebit/onebit.protoset. Server reflection answers from it. */
#ifndef ONEBIT_PROTOSET_H
#define ONEBIT_PROTOSET_H

#include <stddef.h>

extern const unsigned char ob_protoset[];
extern const size_t ob_protoset_len;

#endif /* ONEBIT_PROTOSET_H */
