/* onebitd's private header: the parsed command line (options.c reads it from the option table,
 * the environment and the defaults; main.c serves with it). */
#ifndef ONEBITD_H
#define ONEBITD_H

#include "onebit/opt.h"

#include <stdint.h>
#include <stdio.h>

typedef struct opts {
    const char *grpc_addr, *rest_addr, *state_dir, *token_file, *worker, *mpirun, *ready_file;
    int slots, max_restarts, threads, gpus, max_streams;
    int max_connections, max_client_connections, request_timeout_s;
    double progress_timeout_s, backoff_s, backoff_max_s, grace_s;
    double retention_days; /* --retention-days: 0 keeps jobs until DeleteJob */
    /* --data-root and --checkpoint-root, NULL-terminated; empty: the service's defaults */
    const char *data_roots[17], *checkpoint_roots[17];
    int n_data_roots, n_checkpoint_roots;
    int insecure_no_auth; /* --insecure-no-auth: serve without a token */
    int allow_plaintext;  /* --allow-plaintext: non-loopback addresses without TLS */
    /* --tls-cert, --tls-key, --tls-client-ca; --report-listen: the workers' plaintext port */
    const char *tls_cert, *tls_key, *tls_client_ca, *report_listen;
    int slots_given;         /* --slots or ONEBIT_SLOTS */
    const char *launcher;    /* local, hosts, slurm */
    const char *report_addr; /* --report-addr: where workers reach the gRPC port */
    const char *hosts, *ssh_agent, *mpi_net;
    const char *slurm_partition, *slurm_mpi, *slurm_bin;
    const char *slurm_args[33]; /* --slurm-arg, NULL-terminated */
    int n_slurm_args;
    double slurm_poll_s;
    /* --launcher kubernetes */
    const char *kubeconfig, *k8s_namespace, *k8s_image, *k8s_pull, *k8s_claim, *k8s_sa, *k8s_cpu,
        *k8s_memory, *k8s_image_python;
    int k8s_slots_per_worker, k8s_pending_s, k8s_ttl_s, k8s_watch_idle_s, k8s_worker_log_max,
        k8s_given;
    int64_t store_min_free;      /* --store-min-free */
    int64_t max_job_memory;      /* --max-job-memory; -1: the default */
    int64_t max_upload;          /* --max-upload-size; 0: the default (64 MiB) */
    int64_t worker_memory_limit; /* --worker-memory-limit; OB_WORKER_MEMORY_AUTO by default */
    int worker_memory_given;
} opts;

/* Reads the command line and the environment into o (zeroed by the caller). Returns 0 to go on,
 * 1 after --help, --version or --man (printed), 2 after a mistake (message printed). */
int onebitd_parse_args(int argc, char **argv, opts *o);

#endif /* ONEBITD_H */
