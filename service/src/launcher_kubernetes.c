/* The Kubernetes launcher (onebit/kubernetes.h): every attempt one kubeflow.org/v2beta1 MPIJob.
 *
 * Two halves meet at one mutex (kl->mu, never held across a network call):
 * - the launcher calls, made by the supervisor with the service lock held: start() builds the
 *   MPIJob and queues its creation, signal() queues a graceful or an immediate delete, poll()
 *   and alive() read the state the thread keeps; attach() asks the API server once (a bounded
 *   request) for the attempt's MPIJob by its labels;
 * - the thread: creates and deletes what was queued, lists and then watches MPIJobs and pods
 *   labelled app.kubernetes.io/managed-by=onebitd (relisting after 410 Gone, reconnecting with
 *   a backoff when a stream breaks or stays silent past the idle limit), follows the launcher
 *   pod's log and each worker pod's log into the job's worker.log, makes and deletes each
 *   attempt's report-credential Secret, and ends attempts whose pods stay unschedulable or
 *   cannot pull their image.
 * The report credential never travels in the MPIJob: the MPIJob is created first, then the
 * Secret onebit-<job>-<attempt>-report with an ownerReference to the MPIJob's uid (so that
 * Kubernetes deletes it with the MPIJob even when onebitd is not there to), which the worker
 * pods mount read-only (rank 0 reads it from the file ONEBIT_REPORT_TOKEN_FILE names; mpirun
 * forwards only that path, so the credential is in no process's environment). That order
 * needs no "patch" on Secrets (the other order would: the owner's uid is only known once the
 * MPIJob exists); a worker pod whose Secret does not exist yet waits in ContainerCreating (the
 * kubelet retries the mount), and the launcher pod is only created once the workers are ready
 * (WaitForWorkersReady).
 * Everything the API server sends is parsed with jansson under a size limit, with its types
 * checked; text taken from it is bounded and stripped of control characters.
 * The launcher's files share k8s_internal.h (which says which does what); this one holds the
 * launcher calls and the launcher's creation. */
#include "k8s_internal.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the launcher interface ------------------------------------------------------------------ */

static katt *new_att(const ob_launch_req *req, const char *name)
{
    katt *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    ob_strlcpy(a->name, name, sizeof a->name);
    ob_strlcpy(a->job_id, req->job_id, sizeof a->job_id);
    a->attempt = req->attempt;
    if (req->log_path) ob_strlcpy(a->log_path, req->log_path, sizeof a->log_path);
    return a;
}

static ob_status kube_start(ob_launcher *l, const ob_launch_req *req, ob_launch_handle *h,
                            ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    char name[OB_K8S_NAME_MAX + 1], shared[1200];
    ob_status rc = ob_k8s_attempt_name(req->job_id, req->attempt, name, sizeof name, err);
    if (rc) return rc;
    if (req->world_size < 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "job %s: world size %d", req->job_id,
                      req->world_size);
    if ((rc = ob__k8s_share_spec(req, name, shared, sizeof shared, err)))
        return OB_WRAP(err, rc, "job %s: sharing its spec with the pods", req->job_id);
    json_t *job =
        ob__k8s_build_mpijob(kl, req, name, shared, ob__k8s_spec_wants_cuda(req->spec_path));
    char *body = job ? json_dumps(job, JSON_COMPACT) : NULL;
    json_decref(job);
    katt *a = body ? new_att(req, name) : NULL;
    if (!a) {
        free(body);
        return OB_ERR(err, OB_ERR_NOMEM, "the MPIJob of job %s", req->job_id);
    }
    a->body = body;
    a->phase = K_TO_CREATE;
    if (req->report_token && req->report_token[0]) {
        a->report_token = strdup(req->report_token);
        if (!a->report_token) {
            ob__k8s_free_att(a);
            return OB_ERR(err, OB_ERR_NOMEM, "the MPIJob of job %s", req->job_id);
        }
        a->secret_want = 1;
    }
    a->create_deadline_ms = ob_wall_ms() + 60000;
    pthread_mutex_lock(&kl->mu);
    katt *old = ob__k8s_find_att(kl, name);
    if (old) { /* an earlier start of the same attempt that was never followed up */
        katt **pp = &kl->atts;
        while (*pp != old)
            pp = &(*pp)->next;
        *pp = old->next;
        if (ob__k8s_streams_open(old)) {
            /* still streaming: keep it, renamed out of the way, for the thread to finish */
            old->name[0] = '\0';
            old->ended = 1;
            old->last_poll_ms = ob_wall_ms();
            old->next = kl->atts;
            kl->atts = old;
        } else {
            ob__k8s_free_att(old);
        }
    }
    a->next = kl->atts;
    kl->atts = a;
    pthread_mutex_unlock(&kl->mu);
    ob__k8s_wake(kl);
    memset(h, 0, sizeof *h);
    ob_strlcpy(h->spec_path, req->spec_path, sizeof h->spec_path);
    ob_strlcpy(h->ext_id, name, sizeof h->ext_id);
    return OB_OK;
}

static ob_status kube_poll(ob_launcher *l, const ob_launch_handle *h, ob_launch_exit *ex,
                           ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    (void)err;
    memset(ex, 0, sizeof *ex);
    ex->exit_code = -1;
    int64_t now = ob_wall_ms();
    pthread_mutex_lock(&kl->mu);
    katt *a = h->ext_id[0] ? ob__k8s_find_att(kl, h->ext_id) : NULL;
    if (!a) {
        pthread_mutex_unlock(&kl->mu);
        ex->done = 1;
        snprintf(ex->reason, sizeof ex->reason, "onebitd does not follow MPIJob '%s'", h->ext_id);
        return OB_OK;
    }
    a->last_poll_ms = now;
    int final = a->ended || a->succeeded || a->failed || a->deleted;
    /* An ended attempt waits a little for the rest of its log, which may say why. */
    if (final && !(ob__k8s_streams_open(a) && now - a->final_ms < LOG_SETTLE_MS)) {
        ex->done = 1;
        const kpod *lp = ob__k8s_launcher_pod(a);
        int lcode = lp && lp->terminated ? lp->exit_code : -1;
        char why[TEXT] = "";
        if (a->ended) {
            ob_strlcpy(ex->reason, a->end_reason, sizeof ex->reason);
            ex->permanent = a->permanent;
        } else if (a->succeeded) {
            ex->exit_code = 0;
        } else if (a->failed) {
            ob__k8s_diagnose(a, why, sizeof why, &ex->permanent);
            ex->exit_code = lcode > 0 ? lcode : 1;
            /* What the pods say first: that is what people act on. */
            if (why[0])
                snprintf(ex->reason, sizeof ex->reason, "%.150s; MPIJob %.45s failed (%.40s)", why,
                         a->name, a->cond);
            else
                snprintf(ex->reason, sizeof ex->reason, "MPIJob %s failed (%.150s)", a->name,
                         a->cond);
        } else if (a->term_wanted || a->kill_wanted || a->drop_wanted) {
            ex->exit_code = lcode;
            if (lcode < 0) ex->term_signal = a->kill_wanted ? SIGKILL : SIGTERM;
            snprintf(ex->reason, sizeof ex->reason, "MPIJob %s deleted by onebitd", a->name);
        } else if (a->rv == 0) {
            /* Never seen: gone before this coordinator could look (an attach while the API
             * server could not be asked). A new MPIJob can resume the job. */
            snprintf(ex->reason, sizeof ex->reason, "MPIJob %s does not exist (any more)", a->name);
        } else {
            ob__k8s_diagnose(a, why, sizeof why, &ex->permanent);
            snprintf(ex->reason, sizeof ex->reason, "MPIJob %s was deleted outside onebitd%s%.150s",
                     a->name, why[0] ? "; " : "", why);
            ex->permanent = 1;
        }
    } else if (!final) {
        const kpod *p = ob__k8s_stuck_pod(a);
        if (kl->api_problem[0])
            ob_strlcpy(ex->reason, kl->api_problem, sizeof ex->reason);
        else if (p)
            ob__k8s_stuck_text(p, ex->reason, sizeof ex->reason);
        else if (a->restarting[0])
            ob_strlcpy(ex->reason, a->restarting, sizeof ex->reason);
        else if (a->phase == K_TO_CREATE)
            snprintf(ex->reason, sizeof ex->reason, "creating MPIJob %s", a->name);
    }
    pthread_mutex_unlock(&kl->mu);
    return OB_OK;
}

static ob_status kube_signal(ob_launcher *l, const ob_launch_handle *h, int sig, ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    (void)err;
    if (sig != SIGTERM && sig != SIGKILL) return OB_OK; /* nothing else reaches pods */
    pthread_mutex_lock(&kl->mu);
    katt *a = h->ext_id[0] ? ob__k8s_find_att(kl, h->ext_id) : NULL;
    if (a) {
        if (a->phase == K_TO_CREATE) {
            /* Never created: nothing to stop, and nothing will be. */
            a->ended = 1;
            a->final_ms = ob_wall_ms();
            snprintf(a->end_reason, sizeof a->end_reason, "stopped before MPIJob %s was created",
                     a->name);
        }
        if (sig == SIGKILL) {
            a->kill_wanted = 1;
            a->kill_sent = 0;
        } else {
            a->term_wanted = 1;
        }
    }
    pthread_mutex_unlock(&kl->mu);
    ob__k8s_wake(kl);
    return OB_OK;
}

static int kube_alive(ob_launcher *l, const ob_launch_handle *h)
{
    kube_launcher *kl = (kube_launcher *)l;
    pthread_mutex_lock(&kl->mu);
    katt *a = h->ext_id[0] ? ob__k8s_find_att(kl, h->ext_id) : NULL;
    int alive = a && !a->ended && !a->succeeded && !a->failed && !a->deleted;
    pthread_mutex_unlock(&kl->mu);
    return alive;
}

static ob_status kube_attach(ob_launcher *l, ob_launch_handle *h, const ob_launch_req *req,
                             ob_err *err)
{
    kube_launcher *kl = (kube_launcher *)l;
    char name[OB_K8S_NAME_MAX + 1];
    ob_status rc = ob_k8s_attempt_name(req->job_id, req->attempt, name, sizeof name, err);
    if (rc) return OB_ERR(err, OB_ERR_NOT_FOUND, "no MPIJob can belong to job %s", req->job_id);
    if (h->ext_id[0] && strcmp(h->ext_id, name) != 0)
        return OB_ERR(err, OB_ERR_NOT_FOUND, "MPIJob %s is not attempt %d of job %s", h->ext_id,
                      req->attempt, req->job_id);
    /* By its labels: this job's attempt, made by onebitd. */
    char path[800], sel[300];
    snprintf(sel, sizeof sel, LABEL_MANAGED "=onebitd," LABEL_JOB "=%s," LABEL_ATTEMPT "=%d",
             req->job_id, req->attempt);
    char q[400] = "";
    ob__kube_query_escape(sel, q, sizeof q);
    snprintf(path, sizeof path, API_MPIJOBS "?labelSelector=%s", kl->ns, q);
    long status;
    char *body = NULL;
    ob_err aerr;
    ob_err_clear(&aerr);
    rc = ob__k8s_api(kl, "GET", path, NULL, &status, &body, &aerr);
    json_t *list =
        rc == OB_OK && status == 200 ? json_loads(body, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(body);
    json_t *items = json_object_get(list, "items");
    if (rc == OB_OK && status == 200 && !json_is_array(items)) {
        json_decref(list);
        return OB_ERR(err, OB_ERR_CORRUPT, "the API server's MPIJob list does not parse");
    }
    json_t *found = NULL;
    size_t i;
    json_t *it;
    if (json_is_array(items)) json_array_foreach(items, i, it)
        {
            if (!strcmp(ob__k8s_jstr(json_object_get(it, "metadata"), "name"), name)) found = it;
        }
    if (json_is_array(items) && !found) {
        json_decref(list);
        return OB_ERR(err, OB_ERR_NOT_FOUND, "no MPIJob %s labelled for job %s attempt %d", name,
                      req->job_id, req->attempt);
    }
    katt *a = new_att(req, name);
    if (!a) {
        json_decref(list);
        return OB_ERR(err, OB_ERR_NOMEM, "following MPIJob %s", name);
    }
    a->phase = K_LIVE;
    a->secret_made = 1; /* it may exist: deleted when the attempt ends (404 when not) */
    pthread_mutex_lock(&kl->mu);
    if (!ob__k8s_find_att(kl, name)) {
        a->next = kl->atts;
        kl->atts = a;
        if (found) ob__k8s_apply_mpijob(kl, found, 0);
        /* Pods and the newest state come with the next list. */
        kl->w[0].need_list = kl->w[1].need_list = 1;
        a = NULL;
    }
    pthread_mutex_unlock(&kl->mu);
    ob__k8s_free_att(a);
    json_decref(list);
    ob__k8s_wake(kl);
    /* When the API server cannot be asked now, the MPIJob is followed anyway: the next list
     * says whether it is there. */
    h->pid = h->pgid = 0;
    if (req->spec_path) ob_strlcpy(h->spec_path, req->spec_path, sizeof h->spec_path);
    ob_strlcpy(h->ext_id, name, sizeof h->ext_id);
    return OB_OK;
}

static void kube_stop_stale(ob_launcher *l, const ob_launch_handle *h, const ob_launch_req *req)
{
    ob_launch_handle mine = *h;
    if (kube_attach(l, &mine, req, NULL) != OB_OK) return;
    kube_signal(l, &mine, SIGKILL, NULL);
}

/* A deleted job: its spec copies go (<ckpt>/.onebit-specs/onebit-<job>-<attempt>.json, and a
 * .tmp a crash left), and the deletion of its attempts' MPIJobs and Secrets is queued (the ended
 * ones stay until ttlSecondsAfterFinished otherwise; 404 for those already gone). */
static void kube_forget(ob_launcher *l, const ob_launch_req *req)
{
    kube_launcher *kl = (kube_launcher *)l;
    char dir[1100], prefix[128], path[1400];
    if (!ob_k8s_dns_label(req->job_id)) return;
    snprintf(dir, sizeof dir, "%s/.onebit-specs", req->checkpoint_dir);
    int plen = snprintf(prefix, sizeof prefix, "onebit-%s-", req->job_id);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, prefix, (size_t)plen) != 0) continue;
        size_t digits = strspn(n + plen, "0123456789");
        const char *rest = n + plen + digits;
        /* Only this job's: "onebit-job-1-2-3.json" is job-1-2's, not job-1's. */
        if (digits == 0 || (strcmp(rest, ".json") && strcmp(rest, ".json.tmp"))) continue;
        snprintf(path, sizeof path, "%s/%s", dir, n);
        unlink(path);
    }
    if (d) closedir(d);
    pthread_mutex_lock(&kl->mu);
    for (int k = 1; k <= req->attempt && kl->npurge < 4096; k++) {
        kpurge *pg = calloc(1, sizeof *pg);
        if (!pg || ob_k8s_attempt_name(req->job_id, k, pg->name, sizeof pg->name, NULL)) {
            free(pg);
            break;
        }
        pg->next = kl->purge;
        kl->purge = pg;
        kl->npurge++;
    }
    pthread_mutex_unlock(&kl->mu);
    ob__k8s_wake(kl);
}

static void kube_destroy(ob_launcher *l)
{
    kube_launcher *kl = (kube_launcher *)l;
    if (!kl) return;
    if (kl->started) {
        pthread_mutex_lock(&kl->mu);
        kl->stop = 1;
        pthread_mutex_unlock(&kl->mu);
        ob__k8s_wake(kl);
        pthread_join(kl->thread, NULL);
    }
    for (int i = 0; i < 2; i++) {
        if (kl->w[i].h) {
            curl_multi_remove_handle(kl->multi, kl->w[i].h);
            curl_easy_cleanup(kl->w[i].h);
        }
        curl_slist_free_all(kl->w[i].hl);
        free(kl->w[i].lb.buf);
    }
    while (kl->atts) {
        katt *a = kl->atts;
        kl->atts = a->next;
        for (kstream *st = a->streams; st; st = st->next) {
            if (!st->h) continue;
            curl_multi_remove_handle(kl->multi, st->h);
            curl_easy_cleanup(st->h);
            curl_slist_free_all(st->hl);
            st->h = NULL;
            if (st->sec) ob__k8s_save_mark(st);
        }
        ob__k8s_free_att(a);
    }
    while (kl->purge) {
        kpurge *pg = kl->purge;
        kl->purge = pg->next;
        free(pg);
    }
    if (kl->multi) curl_multi_cleanup(kl->multi);
    pthread_mutex_destroy(&kl->mu);
    ob_kube_conn_clear(&kl->conn);
    free(kl);
}

static const ob_launcher_ops kube_ops = {
    .ext_id_kind = "MPIJob",
    .start = kube_start,
    .poll = kube_poll,
    .signal = kube_signal,
    .alive = kube_alive,
    .stop_stale = kube_stop_stale,
    .attach = kube_attach,
    .forget = kube_forget,
    .check_job = ob__k8s_check_job,
    .destroy = kube_destroy,
};

/* Kubernetes quantities as we accept them: digits, an optional fraction and a suffix. */
static int quantity(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n < 32 && strspn(s, "0123456789.") > 0 &&
           strspn(s, "0123456789.mkKMGTPEi") == n;
}

ob_status ob_kubernetes_launcher_create(ob_launcher **out, const ob_kubernetes_launcher_config *cfg,
                                        ob_err *err)
{
    *out = NULL;
    if (!cfg->image || !cfg->image[0] || strlen(cfg->image) >= 512 ||
        strpbrk(cfg->image, " \t\r\n\"\\"))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "--k8s-image: the worker image is required");
    const char *pull = cfg->image_pull_policy ? cfg->image_pull_policy : "IfNotPresent";
    if (strcmp(pull, "IfNotPresent") && strcmp(pull, "Always") && strcmp(pull, "Never"))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "image pull policy '%.40s': expected IfNotPresent, Always or Never", pull);
    const char *labels[][2] = {{"namespace", cfg->namespace_},
                               {"checkpoint claim", cfg->checkpoint_claim},
                               {"service account", cfg->service_account}};
    for (size_t i = 0; i < 3; i++)
        if (labels[i][1] && !ob_k8s_dns_label(labels[i][1]) &&
            !(i > 0 && strlen(labels[i][1]) < 254 &&
              strspn(labels[i][1], "abcdefghijklmnopqrstuvwxyz0123456789-.") ==
                  strlen(labels[i][1])))
            return OB_ERR(err, OB_ERR_INVALID_ARG, "%s '%.80s' is not a DNS-1123 name",
                          labels[i][0], labels[i][1]);
    const char *cpu = cfg->cpu ? cfg->cpu : "1", *mem = cfg->memory ? cfg->memory : "1Gi";
    if (!quantity(cpu) || !quantity(mem))
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "worker requests cpu '%.40s', memory '%.40s': not "
                      "Kubernetes quantities",
                      cpu, mem);
    if (cfg->slots_per_worker < 0 || cfg->slots_per_worker > 1024)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "slots per worker %d: expected 1 to 1024",
                      cfg->slots_per_worker);
    kube_launcher *kl = calloc(1, sizeof *kl);
    if (!kl) return OB_ERR(err, OB_ERR_NOMEM, "allocating the Kubernetes launcher");
    kl->base.ops = &kube_ops;
    pthread_mutex_init(&kl->mu, NULL);
    ob_status rc = ob_kube_conn_load(&kl->conn, cfg->kubeconfig, cfg->sa_dir, err);
    if (rc) {
        kube_destroy(&kl->base);
        return rc;
    }
    ob_strlcpy(kl->ns,
               cfg->namespace_ ? cfg->namespace_
                               : (kl->conn.namespace_[0] ? kl->conn.namespace_ : "default"),
               sizeof kl->ns);
    ob_strlcpy(kl->image, cfg->image, sizeof kl->image);
    ob_strlcpy(kl->pull, pull, sizeof kl->pull);
    if (cfg->checkpoint_claim) ob_strlcpy(kl->claim, cfg->checkpoint_claim, sizeof kl->claim);
    if (cfg->service_account) ob_strlcpy(kl->sa, cfg->service_account, sizeof kl->sa);
    ob_strlcpy(kl->cpu, cpu, sizeof kl->cpu);
    ob_strlcpy(kl->mem, mem, sizeof kl->mem);
    kl->slots = cfg->slots_per_worker > 0 ? cfg->slots_per_worker : 1;
    kl->grace_s = cfg->grace_s > 0 ? cfg->grace_s : 30;
    kl->pending_s = cfg->pending_timeout_s >= 0 ? cfg->pending_timeout_s : 300;
    kl->ttl_s = cfg->ttl_s > 0 ? cfg->ttl_s : 86400;
    kl->timeout_ms = cfg->request_timeout_ms > 0 ? cfg->request_timeout_ms : 10000;
    kl->idle_s = cfg->watch_idle_s > 0 ? cfg->watch_idle_s : 90;
    kl->worker_log_max = cfg->worker_log_max > 0 ? cfg->worker_log_max : 8LL << 20;
    kl->no_python = cfg->image_without_python != 0;
    kl->w[0].what = "mpijobs";
    kl->w[1].what = "pods";
    for (int i = 0; i < 2; i++) {
        kl->w[i].need_list = 1;
        kl->w[i].lb.max = MAX_EVENT;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(kl->multi = curl_multi_init())) {
        kube_destroy(&kl->base);
        return OB_ERR(err, OB_ERR_NOMEM, "initialising libcurl");
    }
    int e = pthread_create(&kl->thread, NULL, ob__k8s_thread, kl);
    if (e) {
        kube_destroy(&kl->base);
        return OB_ERR(err, OB_ERR_IO, "starting the Kubernetes watch thread: %s", strerror(e));
    }
    kl->started = 1;
    *out = &kl->base;
    return OB_OK;
}
