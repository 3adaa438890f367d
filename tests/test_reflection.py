#!/usr/bin/env python3
"""gRPC server reflection of the real onebitd, through a real gRPC client (python3-grpcio).

usage: test_reflection.py ONEBITD PROTO_DIR PROTOSET

Starts onebitd with a token on free ports, then speaks grpc.reflection.v1 and v1alpha to it the
way grpcurl does: list_services must name exactly the services onebitd serves;
file_containing_symbol("onebit.v1.JobService") must give descriptors that load into a descriptor
pool (with their imports) and declare SubmitJob; unknown names are answered with NOT_FOUND on the
same stream; garbage bytes, oversized requests and missing tokens end the call with an error, and
the server keeps serving. The reflection messages are compiled from PROTO_DIR with protoc at test
time. The shipped PROTOSET must be the same descriptors. Exits non-zero on any mismatch."""
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool

ONEBITD, PROTO_DIR, PROTOSET = sys.argv[1:4]
TOKEN = "reflection-test-token-0123456789"
SERVICES = {
    "onebit.v1.JobService",
    "onebit.v1.WorkerService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
}
failures = 0


def check(name, cond, detail=""):
    global failures
    if cond:
        print(f"[ PASSED ] {name}")
    else:
        failures += 1
        print(f"[ FAILED ] {name}: {detail}")


tmp = tempfile.mkdtemp()
subprocess.run(["protoc", f"--python_out={tmp}", "-I", PROTO_DIR,
                "grpc/reflection/v1/reflection.proto"], check=True)
# Loaded by path: its package name, grpc, is taken by grpcio's own.
_spec = importlib.util.spec_from_file_location(
    "reflection_pb2", os.path.join(tmp, "grpc/reflection/v1/reflection_pb2.py"))
rpb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rpb)

with open(os.path.join(tmp, "token"), "w") as f:
    f.write(TOKEN + "\n")
os.chmod(os.path.join(tmp, "token"), 0o600)
ready = os.path.join(tmp, "ready")
log = open(os.path.join(tmp, "onebitd.log"), "w")
daemon = subprocess.Popen([ONEBITD, "--grpc", "127.0.0.1:0", "--rest", "127.0.0.1:0",
                           "--state-dir", os.path.join(tmp, "state"), "--ready-file", ready,
                           "--token-file", os.path.join(tmp, "token")],
                          stdout=log, stderr=subprocess.STDOUT)
try:
    for _ in range(200):
        if os.path.exists(ready) and os.path.getsize(ready) > 0:
            break
        time.sleep(0.05)
    ports = dict(line.split("=", 1) for line in open(ready).read().split())
    channel = grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}")
    auth = [("authorization", f"Bearer {TOKEN}")]

    def stream(version, requests, metadata=auth, raw=False):
        """Sends requests (messages, or bytes when raw) on one ServerReflectionInfo stream;
        returns the responses and the final status code."""
        call = channel.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=(lambda b: b) if raw else rpb.ServerReflectionRequest.SerializeToString,
            response_deserializer=rpb.ServerReflectionResponse.FromString)
        out = []
        try:
            for r in call(iter(requests), metadata=metadata, timeout=10):
                out.append(r)
            return out, grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return out, e.code(), e.details()

    for version in ("v1", "v1alpha"):
        # Several requests on one stream, answered in order.
        reqs = [rpb.ServerReflectionRequest(host="h", list_services=""),
                rpb.ServerReflectionRequest(file_containing_symbol="onebit.v1.JobService"),
                rpb.ServerReflectionRequest(file_containing_symbol="onebit.v1.NoSuchThing"),
                rpb.ServerReflectionRequest(file_by_filename="onebit/v1/worker.proto"),
                rpb.ServerReflectionRequest(file_by_filename="no/such.proto"),
                rpb.ServerReflectionRequest(file_containing_symbol="onebit.v1.Job.NoNested"),
                rpb.ServerReflectionRequest(
                    file_containing_symbol="onebit.v1.JobService.SubmitJob"),
                rpb.ServerReflectionRequest(file_containing_symbol=".onebit.v1.Progress"),
                rpb.ServerReflectionRequest(all_extension_numbers_of_type="onebit.v1.Job"),
                rpb.ServerReflectionRequest(all_extension_numbers_of_type="onebit.v1.Nope"),
                rpb.ServerReflectionRequest(file_containing_extension=rpb.ExtensionRequest(
                    containing_type="onebit.v1.Job", extension_number=100)),
                rpb.ServerReflectionRequest(host="only-a-host")]
        resps, code, details = stream(version, reqs)
        check(f"{version}: one answer per request, stream OK", code == grpc.StatusCode.OK and
              len(resps) == len(reqs), f"{code} {details} {len(resps)}")
        if len(resps) != len(reqs):
            continue
        names = {s.name for s in resps[0].list_services_response.service}
        check(f"{version}: list_services names exactly our services", names == SERVICES,
              sorted(names))
        check(f"{version}: valid_host and original_request echoed",
              resps[0].valid_host == "h" and resps[0].original_request == reqs[0])

        files = [descriptor_pb2.FileDescriptorProto.FromString(b)
                 for b in resps[1].file_descriptor_response.file_descriptor_proto]
        check(f"{version}: file_containing_symbol(JobService) is jobs.proto first",
              files and files[0].name == "onebit/v1/jobs.proto",
              [f.name for f in files])
        methods = [m.name for f in files for s in f.service if s.name == "JobService"
                   for m in s.method]
        check(f"{version}: JobService declares SubmitJob", "SubmitJob" in methods, methods)
        pool = descriptor_pool.DescriptorPool()
        try:
            for f in reversed(files):
                pool.Add(f)
            svc = pool.FindServiceByName("onebit.v1.JobService")
            ok = svc.FindMethodByName("SubmitJob").input_type.full_name == \
                "onebit.v1.SubmitJobRequest"
        except Exception as e:  # a descriptor that does not load is the failure we look for
            ok = False
            print(e)
        check(f"{version}: the descriptors load into a pool", ok)

        def error_of(r):
            return (r.WhichOneof("message_response") == "error_response" and
                    r.error_response.error_code)

        check(f"{version}: unknown symbol -> NOT_FOUND", error_of(resps[2]) == 5 and
              "onebit.v1.NoSuchThing" in resps[2].error_response.error_message, resps[2])
        worker = [descriptor_pb2.FileDescriptorProto.FromString(b).name
                  for b in resps[3].file_descriptor_response.file_descriptor_proto]
        check(f"{version}: file_by_filename(worker.proto) comes with its import",
              worker == ["onebit/v1/worker.proto", "onebit/v1/jobs.proto"], worker)
        check(f"{version}: unknown file -> NOT_FOUND", error_of(resps[4]) == 5, resps[4])
        check(f"{version}: unknown nested symbol -> NOT_FOUND", error_of(resps[5]) == 5)
        m = [descriptor_pb2.FileDescriptorProto.FromString(b).name
             for b in resps[6].file_descriptor_response.file_descriptor_proto]
        check(f"{version}: a method's file", m[:1] == ["onebit/v1/jobs.proto"], m)
        m = [descriptor_pb2.FileDescriptorProto.FromString(b).name
             for b in resps[7].file_descriptor_response.file_descriptor_proto]
        check(f"{version}: a message's file (leading dot)", m[:1] == ["onebit/v1/jobs.proto"], m)
        check(f"{version}: extension numbers of a known type: none",
              resps[8].all_extension_numbers_response.base_type_name == "onebit.v1.Job" and
              not resps[8].all_extension_numbers_response.extension_number, resps[8])
        check(f"{version}: extension numbers of an unknown type -> NOT_FOUND",
              error_of(resps[9]) == 5)
        check(f"{version}: file_containing_extension -> NOT_FOUND", error_of(resps[10]) == 5)
        check(f"{version}: a request without a question -> INVALID_ARGUMENT",
              error_of(resps[11]) == 3, resps[11])

    # Hostile input ends the call with an error; the server goes on.
    _, code, details = stream("v1", [b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"], raw=True)
    check("garbage bytes -> INVALID_ARGUMENT", code == grpc.StatusCode.INVALID_ARGUMENT and
          "not valid protobuf" in details, f"{code} {details}")
    _, code, details = stream("v1", [b"\x3a\x05ab"], raw=True)  # a string longer than the message
    check("truncated message -> INVALID_ARGUMENT", code == grpc.StatusCode.INVALID_ARGUMENT,
          f"{code} {details}")
    unknown = rpb.ServerReflectionRequest(list_services="").SerializeToString() + \
        b"\xa0\x06\x01" + b"\xaa\x06\x03xyz"  # fields 100 and 101, unknown to the protocol
    resps, code, details = stream("v1", [unknown], raw=True)
    check("unknown fields are ignored", code == grpc.StatusCode.OK and len(resps) == 1 and
          len(resps[0].list_services_response.service) == len(SERVICES), f"{code} {details}")
    big = rpb.ServerReflectionRequest(file_containing_symbol="x" * 100000)
    resps, code, details = stream("v1", [big])
    check("oversized request -> INVALID_ARGUMENT, not echoed",
          code == grpc.StatusCode.INVALID_ARGUMENT and not resps and "limit" in details,
          f"{code} {details}")
    resps, code, _ = stream("v1", [])
    check("an empty stream ends OK", code == grpc.StatusCode.OK and not resps, code)
    _, code, _ = stream("v1", [rpb.ServerReflectionRequest(list_services="")], metadata=[])
    check("without the token -> UNAUTHENTICATED", code == grpc.StatusCode.UNAUTHENTICATED, code)
    _, code, _ = stream("v1", [rpb.ServerReflectionRequest(list_services="")],
                        metadata=[("authorization", "Bearer wrong")])
    check("with a wrong token -> UNAUTHENTICATED", code == grpc.StatusCode.UNAUTHENTICATED, code)
    # A client that goes away in the middle of a stream.
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=rpb.ServerReflectionRequest.SerializeToString,
        response_deserializer=rpb.ServerReflectionResponse.FromString)

    def forever():
        while True:
            yield rpb.ServerReflectionRequest(list_services="")
            time.sleep(0.01)

    it = call(forever(), metadata=auth)
    next(it)
    next(it)
    it.cancel()
    resps, code, _ = stream("v1", [rpb.ServerReflectionRequest(list_services="")])
    check("serving after a cancelled stream", code == grpc.StatusCode.OK and len(resps) == 1)
    check("onebitd still running", daemon.poll() is None)

    # The shipped descriptor set holds the same files the server answers with.
    fds = descriptor_pb2.FileDescriptorSet.FromString(open(PROTOSET, "rb").read())
    shipped = {f.name for f in fds.file}
    resps, _, _ = stream("v1", [rpb.ServerReflectionRequest(file_by_filename=n)
                                for n in sorted(shipped)])
    served = {descriptor_pb2.FileDescriptorProto.FromString(
        r.file_descriptor_response.file_descriptor_proto[0]).name for r in resps}
    check("the shipped onebit.protoset holds every file the server answers", served == shipped,
          f"{sorted(served)} vs {sorted(shipped)}")
    # Strings with a NUL byte, anywhere in a request, are refused (C strings would cut them:
    # DeleteJob("job-000002\0whatever") deleted job-000002). Raw protobuf: field 1, a string.
    def unary(method, payload):
        call = channel.unary_unary(f"/onebit.v1.JobService/{method}",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        try:
            call(payload, metadata=auth, timeout=10)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details()

    def field(num, data):
        return bytes([num << 3 | 2, len(data)]) + data

    for method, payload in (("DeleteJob", field(1, b"job-000002\0whatever")),
                            ("GetJob", field(1, b"job-000001\0")),
                            ("CancelJob", field(1, b"\0")),
                            ("ListJobs", field(4, b"team=a\0b")),
                            ("SubmitJob", field(1, b"steps: 1\0") + field(5, b"a=b"))):
        code, details = unary(method, payload)
        check(f"{method}: a string with a NUL byte is INVALID_ARGUMENT",
              code == grpc.StatusCode.INVALID_ARGUMENT and "NUL" in details, f"{code} {details}")
    code, details = unary("GetJob", field(1, b"job-000001"))
    check("the same request without the NUL byte is looked up", code == grpc.StatusCode.NOT_FOUND,
          f"{code} {details}")
    channel.close()
finally:
    daemon.terminate()
    try:
        daemon.wait(timeout=10)
    except subprocess.TimeoutExpired:
        daemon.kill()
    subprocess.run(["rm", "-rf", tmp])
print(f"{'FAILED' if failures else 'ok'}: {failures} failure(s)")
sys.exit(1 if failures else 0)
