/* The Kubernetes launcher's MPIJob (k8s_internal.h): the spec shared with the pods through the
 * checkpoint volume, and the kubeflow.org/v2beta1 MPIJob object of an attempt, its launcher
 * running mpirun and its workers mounting the attempt's report-credential Secret. */
#include "k8s_internal.h"
#include "onebit/jobspec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- what the pods can run ----------------------------------------------------------------- */

/* 1 when a program's interpreter is a Python ("python3", "/usr/bin/python3.11"). */
static int python_interpreter(const char *interp)
{
    const char *base = strrchr(interp, '/');
    return !strncmp(base ? base + 1 : interp, "python", 6);
}

ob_status ob__k8s_check_job(const ob_launcher *l, const ob_jobspec *spec, size_t n_files,
                            ob_err *err)
{
    const kube_launcher *kl = (const kube_launcher *)l;
    if (!ob_jobspec_is_program(spec)) return OB_OK;
    /* The upload is kept under onebitd's state directory, which no pod mounts. */
    if (n_files > 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "files: program jobs with uploaded files cannot run on the kubernetes "
                      "launcher: its pods mount only the checkpoint volume, not onebitd's state "
                      "directory where uploads are kept; put the program in the worker image or "
                      "on the checkpoint volume and name it with program.workdir (onebitctl "
                      "submit --no-upload)");
    if (kl->no_python && python_interpreter(spec->program.interpreter))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "spec: program: the kubernetes launcher's worker image %.200s has no "
                      "Python (onebitd --k8s-image-python no), so it cannot run "
                      "program.interpreter '%.100s'; use a worker image built from "
                      "docker/Dockerfile (python3, torch and the onebit package) and "
                      "--k8s-image-python yes, or another launcher",
                      kl->image, spec->program.interpreter);
    return OB_OK;
}

/* ---- building the MPIJob ------------------------------------------------------------------ */

/* 1 when the spec at path asks for device: cuda (the service wrote it: canonical JSON). */
int ob__k8s_spec_wants_cuda(const char *path)
{
    json_error_t je;
    json_t *s = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    int cuda = !strcmp(ob__k8s_jstr(s, "device"), "cuda");
    json_decref(s);
    return cuda;
}

/* Copies the spec where every pod can read it: the checkpoint directory (the shared volume),
 * <ckpt>/.onebit-specs/<name>.json, written atomically. */
ob_status ob__k8s_share_spec(const ob_launch_req *req, const char *name, char *out, size_t cap,
                             ob_err *err)
{
    char dir[1024], tmp[1300];
    snprintf(dir, sizeof dir, "%s/.onebit-specs", req->checkpoint_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return OB_ERR(err, OB_ERR_IO, "creating %s: %s", dir, strerror(errno));
    if ((size_t)snprintf(out, cap, "%s/%s.json", dir, name) >= cap)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "checkpoint directory path too long");
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *in = fopen(req->spec_path, "rb");
    if (!in) return OB_ERR(err, OB_ERR_IO, "opening %s: %s", req->spec_path, strerror(errno));
    FILE *o = fopen(tmp, "wb");
    if (!o) {
        fclose(in);
        return OB_ERR(err, OB_ERR_IO, "creating %s: %s", tmp, strerror(errno));
    }
    char buf[8192];
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        bad |= fwrite(buf, 1, n, o) != n;
    bad |= ferror(in);
    fclose(in);
    bad |= fflush(o) != 0 || fsync(fileno(o)) != 0;
    bad |= fclose(o) != 0;
    if (bad || rename(tmp, out) != 0) {
        unlink(tmp);
        return OB_ERR(err, OB_ERR_IO, "writing %s", out);
    }
    return OB_OK;
}

static json_t *labels_for(const ob_launch_req *req, const char *name, const char *role)
{
    char attempt[16];
    snprintf(attempt, sizeof attempt, "%d", req->attempt);
    json_t *l = json_pack("{s:s, s:s, s:s, s:s}", LABEL_MANAGED, "onebitd", LABEL_JOB, req->job_id,
                          LABEL_ATTEMPT, attempt, LABEL_MPIJOB, name);
    if (l && role) json_object_set_new(l, LABEL_ROLE, json_string(role));
    return l;
}

/* One replica's pod template; report_secret (NULL: none) is the attempt's Secret, mounted
 * read-only at REPORT_TOKEN_DIR (the workers: rank 0 reads its credential there). */
static json_t *pod_template(const kube_launcher *kl, const ob_launch_req *req, const char *name,
                            const char *role, json_t *container, const char *report_secret)
{
    json_t *spec = json_pack("{s:i, s:{s:b, s:i, s:i}, s:[o]}", "terminationGracePeriodSeconds",
                             kl->grace_s, "securityContext", "runAsNonRoot", 1, "runAsUser", 1000,
                             "fsGroup", 1000, "containers", container);
    if (!spec) return NULL;
    if (kl->sa[0]) json_object_set_new(spec, "serviceAccountName", json_string(kl->sa));
    json_t *volumes = json_array(), *mounts = json_array();
    if (kl->claim[0]) {
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s}}", "name", "checkpoints",
                                                 "persistentVolumeClaim", "claimName", kl->claim));
        json_array_append_new(mounts, json_pack("{s:s, s:s}", "name", "checkpoints", "mountPath",
                                                req->checkpoint_dir));
    }
    if (report_secret) {
        /* 0440 with the pod's fsGroup: the onebit user reads it, nobody else. */
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s, s:i, s:[{s:s, s:s}]}}", "name",
                                                 "report-credential", "secret", "secretName",
                                                 report_secret, "defaultMode", 0440, "items", "key",
                                                 "token", "path", "token"));
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "report-credential",
                                                "mountPath", REPORT_TOKEN_DIR, "readOnly", 1));
    }
    if (json_array_size(volumes)) {
        json_object_set(spec, "volumes", volumes);
        json_object_set(container, "volumeMounts", mounts);
    }
    json_decref(volumes);
    json_decref(mounts);
    return json_pack("{s:{s:o}, s:o}", "metadata", "labels", labels_for(req, name, role), "spec",
                     spec);
}

json_t *ob__k8s_build_mpijob(const kube_launcher *kl, const ob_launch_req *req, const char *name,
                             const char *shared_spec, int cuda)
{
    int slots = kl->slots;
    int workers = (req->world_size + slots - 1) / slots;
    char np[16], gpus[16];
    snprintf(np, sizeof np, "%d", req->world_size);
    snprintf(gpus, sizeof gpus, "%d", slots);
    /* --tag-output: every rank's line names its rank, as with the local launcher
     * (onebitctl logs --rank). */
    json_t *args =
        json_pack("[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s]", "-np", np, "--bind-to", "none",
                  "--tag-output", "-x", "ONEBIT_REPORT_TOKEN_FILE", "-x", "OPENBLAS_NUM_THREADS",
                  "onebit-worker", "--spec", shared_spec, "--format", "json", "--job-id",
                  req->job_id, "--checkpoint-dir", req->checkpoint_dir);
    if (!args) return NULL;
    if (req->resume) json_array_append_new(args, json_string("--resume"));
    if (req->report_addr && req->report_addr[0]) {
        json_array_append_new(args, json_string("--report"));
        json_array_append_new(args, json_string(req->report_addr));
    }
    json_t *env = json_pack("[{s:s, s:s}]", "name", "OPENBLAS_NUM_THREADS", "value", "1");
    /* The credential itself is in the attempt's Secret, never in the MPIJob nor in any
     * process's environment: the worker pods mount the Secret, and mpirun forwards only the
     * file's path to the ranks. */
    char secret[SECRET_NAME_MAX];
    const char *report_secret = NULL;
    if (req->report_token && req->report_token[0]) {
        snprintf(secret, sizeof secret, "%s" SECRET_SUFFIX, name);
        report_secret = secret;
        json_array_append_new(env, json_pack("{s:s, s:s}", "name", "ONEBIT_REPORT_TOKEN_FILE",
                                             "value", REPORT_TOKEN_DIR "/token"));
    }
    json_t *launcher =
        json_pack("{s:s, s:s, s:s, s:[s], s:o, s:o, s:{s:{s:s, s:s}}}", "name", "launcher", "image",
                  kl->image, "imagePullPolicy", kl->pull, "command", "mpirun", "args", args, "env",
                  env, "resources", "requests", "cpu", "100m", "memory", "128Mi");
    json_t *res = json_pack("{s:{s:s, s:s}}", "requests", "cpu", kl->cpu, "memory", kl->mem);
    if (cuda && res) json_object_set_new(res, "limits", json_pack("{s:s}", "nvidia.com/gpu", gpus));
    json_t *worker = json_pack("{s:s, s:s, s:s, s:o, s:[{s:s, s:i}]}", "name", "worker", "image",
                               kl->image, "imagePullPolicy", kl->pull, "resources", res, "ports",
                               "name", "ssh", "containerPort", 2222);
    json_t *lt = launcher ? pod_template(kl, req, name, "launcher", launcher, NULL) : NULL;
    json_t *wt = worker ? pod_template(kl, req, name, "worker", worker, report_secret) : NULL;
    if (!lt || !wt) {
        json_decref(lt);
        json_decref(wt);
        return NULL;
    }
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:o}, s:{s:i, s:s, s:s, s:s, s:{s:s, s:i, s:i}, "
                     "s:{s:{s:i, s:s, s:o}, s:{s:i, s:s, s:o}}}}",
                     "apiVersion", "kubeflow.org/v2beta1", "kind", "MPIJob", "metadata", "name",
                     name, "namespace", kl->ns, "labels", labels_for(req, name, NULL), "spec",
                     "slotsPerWorker", slots, "launcherCreationPolicy", "WaitForWorkersReady",
                     "mpiImplementation", "OpenMPI", "sshAuthMountPath", "/home/onebit/.ssh",
                     "runPolicy", "cleanPodPolicy", "Running", "backoffLimit", 0,
                     "ttlSecondsAfterFinished", kl->ttl_s, "mpiReplicaSpecs", "Launcher",
                     "replicas", 1, "restartPolicy", "Never", "template", lt, "Worker", "replicas",
                     workers, "restartPolicy", "Never", "template", wt);
}
