/* The Kubernetes launcher's streams (k8s_internal.h): the lists and watches of MPIJobs and pods
 * (relisting after 410 Gone, reconnecting with a backoff), and each pod's log followed into the
 * job's log, with a mark of the newest copied line kept next to it. */
#define _GNU_SOURCE /* timegm */
#include "k8s_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- line streams --------------------------------------------------------------------------- */

/* Appends data to lb and calls fn for each complete line (overlong lines are dropped whole). */
static void feed_lines(linebuf *lb, const char *data, size_t n, void (*fn)(void *, char *, size_t),
                       void *user)
{
    for (size_t i = 0; i < n; i++) {
        char ch = data[i];
        if (ch == '\n') {
            if (!lb->overflow && lb->buf) {
                lb->buf[lb->len] = '\0';
                fn(user, lb->buf, lb->len);
            }
            lb->len = 0;
            lb->overflow = 0;
            continue;
        }
        if (lb->overflow) continue;
        if (lb->len + 2 > lb->cap) {
            size_t nc = lb->cap ? lb->cap * 2 : 4096;
            if (nc > lb->max + 2) nc = lb->max + 2;
            if (lb->len + 2 > nc) {
                lb->overflow = 1;
                continue;
            }
            char *nb = realloc(lb->buf, nc);
            if (!nb) {
                lb->overflow = 1;
                continue;
            }
            lb->buf = nb;
            lb->cap = nc;
        }
        lb->buf[lb->len++] = ch;
    }
}

/* One watch event line: {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}. */
static void on_event(void *user, char *line, size_t len)
{
    kwatch_ctx *wc = user;
    kube_launcher *kl = wc->kl;
    kwatch *w = wc->w;
    json_error_t je;
    json_t *ev = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    const char *type = ob__k8s_jstr(ev, "type");
    json_t *obj = json_object_get(ev, "object");
    if (!json_is_object(obj)) {
        json_decref(ev);
        return;
    }
    pthread_mutex_lock(&kl->mu);
    if (!strcmp(type, "ERROR")) {
        json_t *code = json_object_get(obj, "code");
        if (json_is_integer(code) && json_integer_value(code) == 410) {
            w->gone = 1;
            w->need_list = 1;
        }
    } else {
        const char *rv = ob__k8s_jstr(json_object_get(obj, "metadata"), "resourceVersion");
        if (rv[0] && strlen(rv) < sizeof w->rv) ob_strlcpy(w->rv, rv, sizeof w->rv);
        int deleted = !strcmp(type, "DELETED");
        if (!strcmp(type, "BOOKMARK")) {
        } else if (w == &kl->w[0]) {
            ob__k8s_apply_mpijob(kl, obj, deleted);
        } else {
            ob__k8s_apply_pod(kl, obj, deleted);
        }
    }
    pthread_mutex_unlock(&kl->mu);
    json_decref(ev);
}

static size_t watch_write(char *p, size_t size, size_t n, void *user)
{
    kwatch_ctx *wc = user;
    feed_lines(&wc->w->lb, p, size * n, on_event, wc);
    return wc->w->gone ? 0 : size * n; /* after a 410, end the stream: relist */
}

/* "2024-05-01T12:34:56.123456789Z" into seconds and nanoseconds; 0 when it is not one. */
static int parse_ts(const char *s, int64_t *sec, int64_t *nsec)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6 ||
        used != 19)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    int64_t ns = 0;
    const char *p = s + 19;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 9) ns = ns * 10 + (*p - '0');
        for (; digits < 9; digits++)
            ns *= 10;
    }
    if (*p != 'Z') return 0;
    *sec = (int64_t)timegm(&tm);
    *nsec = ns;
    return 1;
}

/* The mark file of a stream: next to the job's log, one per pod role and replica index. */
static void mark_path(const kstream *st, char *out, size_t cap)
{
    if (st->index < 0)
        snprintf(out, cap, "%s.k8s-mark", st->att->log_path);
    else
        snprintf(out, cap, "%s.k8s-mark.worker-%d", st->att->log_path, st->index);
}

/* The newest copied line's time, kept next to the log so that a restarted coordinator does not
 * copy it twice. */
void ob__k8s_save_mark(const kstream *st)
{
    char path[1200], tmp[1210];
    mark_path(st, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%" PRId64 " %" PRId64 "\n", st->sec, st->nsec);
    if (fclose(f) == 0) rename(tmp, path);
}

static void load_mark(kstream *st)
{
    char path[1200];
    mark_path(st, path, sizeof path);
    st->mark_loaded = 1;
    FILE *f = fopen(path, "r");
    if (!f) return;
    long long s = 0, ns = 0;
    if (fscanf(f, "%lld %lld", &s, &ns) == 2 && s > 0 && ns >= 0 && ns < 1000000000) {
        st->sec = s;
        st->nsec = ns;
    }
    fclose(f);
}

/* Appends one line to the job's log in one write (O_APPEND: the streams of an attempt share
 * the file, and a line is never split by another's). */
static void append_line(kstream *st, const char *text, size_t len)
{
    char prefix[32] = "";
    if (st->index >= 0) snprintf(prefix, sizeof prefix, "[worker %d] ", st->index);
    size_t plen = strlen(prefix), n = plen + len + 1;
    char *buf = malloc(n);
    if (!buf || st->fd < 0) {
        free(buf);
        return;
    }
    memcpy(buf, prefix, plen);
    memcpy(buf + plen, text, len);
    buf[n - 1] = '\n';
    for (size_t off = 0; off < n;) {
        ssize_t w = write(st->fd, buf + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    st->copied += (long long)n;
    free(buf);
}

/* One log line "TIMESTAMP text": copied to the job's log unless an earlier stream did, and
 * while the stream's limit allows. */
static void on_log_line(void *user, char *line, size_t len)
{
    kstream *st = user;
    char *sp = memchr(line, ' ', len);
    int64_t sec, nsec;
    if (!sp || st->truncated) return;
    *sp = '\0';
    if (!parse_ts(line, &sec, &nsec)) return;
    if (sec < st->sec || (sec == st->sec && nsec <= st->nsec)) return;
    st->sec = sec;
    st->nsec = nsec;
    size_t tlen = len - (size_t)(sp + 1 - line);
    if (st->max > 0 && st->copied + (long long)tlen + 16 > st->max) {
        char note[400];
        int k = snprintf(note, sizeof note,
                         "onebitd: pod %.200s wrote more than %lld bytes of log; the rest is not "
                         "copied (kubectl logs %.200s)",
                         st->pod, st->max, st->pod);
        append_line(st, note, (size_t)k < sizeof note ? (size_t)k : sizeof note - 1);
        st->truncated = 1;
        return;
    }
    append_line(st, sp + 1, tlen);
}

static size_t log_write(char *p, size_t size, size_t n, void *user)
{
    kstream *st = user;
    feed_lines(&st->lb, p, size * n, on_log_line, st);
    return st->truncated ? 0 : size * n; /* over its limit: the stream ends */
}

/* ---- watches and log streams ------------------------------------------------------------- */

/* LIST of a watch's kind: replaces what is known, and gives the resourceVersion to watch from.
 * Called without the mutex. */
void ob__k8s_relist(kube_launcher *kl, kwatch *w)
{
    char path[600];
    int jobs = w == &kl->w[0];
    snprintf(path, sizeof path,
             jobs ? API_MPIJOBS "?labelSelector=" SELECTOR : API_PODS "?labelSelector=" SELECTOR,
             kl->ns);
    long status;
    char *body = NULL;
    ob_err err;
    ob_err_clear(&err);
    ob_status rc = ob__k8s_api(kl, "GET", path, NULL, &status, &body, &err);
    json_error_t je;
    json_t *list =
        rc == OB_OK && status == 200 ? json_loads(body, JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *items = json_object_get(list, "items");
    const char *rv = ob__k8s_jstr(json_object_get(list, "metadata"), "resourceVersion");
    pthread_mutex_lock(&kl->mu);
    if (!json_is_array(items) || !rv[0] || strlen(rv) >= sizeof w->rv) {
        char msg[TEXT];
        if (rc)
            ob_strlcpy(msg, err.msg, sizeof msg);
        else
            ob__kube_status_message(body, msg, sizeof msg);
        snprintf(kl->api_problem, sizeof kl->api_problem,
                 "the Kubernetes API server cannot be watched (listing %s%s%ld): %.150s", w->what,
                 rc ? "" : ", HTTP ", rc ? 0L : status, msg);
        w->failures++;
        int64_t backoff = 500LL << (w->failures < 6 ? w->failures : 6);
        w->retry_ms = ob_wall_ms() + backoff;
    } else {
        int64_t list_rv = ob__k8s_parse_rv(rv);
        size_t i;
        json_t *it;
        /* Attempts the list no longer has are gone (deleted while nobody watched). */
        for (katt *a = kl->atts; a && jobs; a = a->next) {
            int present = 0;
            json_array_foreach(items, i, it)
            {
                present |= !strcmp(ob__k8s_jstr(json_object_get(it, "metadata"), "name"), a->name);
            }
            if (!present && a->phase == K_LIVE && (!list_rv || list_rv > a->rv)) {
                a->deleted = 1;
                if (!a->final_ms) a->final_ms = ob_wall_ms();
            }
        }
        json_array_foreach(items, i, it)
        {
            if (jobs)
                ob__k8s_apply_mpijob(kl, it, 0);
            else
                ob__k8s_apply_pod(kl, it, 0);
        }
        ob_strlcpy(w->rv, rv, sizeof w->rv);
        w->need_list = 0;
        w->failures = 0;
        w->retry_ms = 0;
        kl->api_problem[0] = '\0'; /* it answers again */
    }
    pthread_mutex_unlock(&kl->mu);
    json_decref(list);
    free(body);
}

/* A stream that sends nothing for idle_s is dead (a watch's bookmarks and timeoutSeconds keep a
 * live one talking): curl ends it with CURLE_OPERATION_TIMEDOUT. TCP keepalive finds a peer
 * that is gone sooner where the network says so. */
static void idle_limits(const kube_launcher *kl, CURL *h)
{
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)kl->idle_s);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
}

void ob__k8s_start_watch(kube_launcher *kl, kwatch *w, kwatch_ctx *wc)
{
    char base[600], full[800];
    snprintf(base, sizeof base, w == &kl->w[0] ? API_MPIJOBS : API_PODS, kl->ns);
    /* The server ends the watch before the idle limit: a live stream is never taken for dead. */
    int server_s = kl->idle_s - kl->idle_s / 6;
    snprintf(full, sizeof full,
             "%s?labelSelector=" SELECTOR "&watch=1&allowWatchBookmarks=true&timeoutSeconds=%d"
             "&resourceVersion=%s",
             base, server_s > 0 ? server_s : 1, w->rv);
    ob_err err;
    ob_err_clear(&err);
    w->h = ob__kube_stream(&kl->conn, full, &w->hl, &err);
    if (!w->h) {
        w->retry_ms = ob_wall_ms() + 2000;
        snprintf(kl->api_problem, sizeof kl->api_problem, "watching %s: %.200s", w->what, err.msg);
        return;
    }
    w->gone = 0;
    w->lb.len = 0;
    w->lb.overflow = 0;
    curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, watch_write);
    curl_easy_setopt(w->h, CURLOPT_WRITEDATA, wc);
    curl_easy_setopt(w->h, CURLOPT_PRIVATE, w);
    idle_limits(kl, w->h);
    curl_multi_add_handle(kl->multi, w->h);
}

/* The stream of a pod role and index, made when missing (NULL when the attempt has its most). */
static kstream *stream_for(kube_launcher *kl, katt *a, const kpod *p)
{
    for (kstream *st = a->streams; st; st = st->next)
        if (st->index == p->index) return st;
    if (a->nstreams >= MAX_STREAMS) return NULL;
    kstream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->att = a;
    st->index = p->index;
    st->fd = -1;
    st->max = p->index < 0 ? 0 : kl->worker_log_max;
    st->next = a->streams;
    a->streams = st;
    a->nstreams++;
    return st;
}

/* Follows pod p's log from the stream's mark. With the mutex held. */
static void start_stream(kube_launcher *kl, kstream *st, const kpod *p)
{
    katt *a = st->att;
    char path[1200], since[64] = "";
    if (!st->mark_loaded) load_mark(st);
    if (st->sec > 0) {
        struct tm tm;
        time_t t = (time_t)st->sec;
        gmtime_r(&t, &tm);
        strftime(since, sizeof since, "&sinceTime=%Y-%m-%dT%H%%3A%M%%3A%SZ", &tm);
    }
    snprintf(path, sizeof path, API_PODS "/%s/log?container=%s&follow=true&timestamps=true%s",
             kl->ns, p->name, p->launcher ? "launcher" : "worker", since);
    ob_strlcpy(st->pod, p->name, sizeof st->pod);
    st->fd = open(a->log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    st->h = ob__kube_stream(&kl->conn, path, &st->hl, NULL);
    if (!st->h) {
        if (st->fd >= 0) close(st->fd);
        st->fd = -1;
        st->retry_ms = ob_wall_ms() + 2000;
        return;
    }
    st->lb.len = 0;
    st->lb.overflow = 0;
    st->lb.max = MAX_LOG_LINE;
    curl_easy_setopt(st->h, CURLOPT_WRITEFUNCTION, log_write);
    curl_easy_setopt(st->h, CURLOPT_WRITEDATA, st);
    curl_easy_setopt(st->h, CURLOPT_PRIVATE, st);
    idle_limits(kl, st->h);
    curl_multi_add_handle(kl->multi, st->h);
}

/* With the mutex held: follows the log of every pod of the attempt that has started (worker
 * pods' only when worker_log_max allows). */
void ob__k8s_follow_logs(kube_launcher *kl, katt *a, int64_t now)
{
    if (!a->log_path[0]) return;
    for (size_t i = 0; i < a->npods; i++) {
        const kpod *p = &a->pods[i];
        if (!p->launcher && (p->index < 0 || kl->worker_log_max <= 0)) continue;
        if (strcmp(p->phase, "Running") && strcmp(p->phase, "Succeeded") &&
            strcmp(p->phase, "Failed"))
            continue;
        kstream *st = stream_for(kl, a, p);
        if (st && !st->h && !st->done && now >= st->retry_ms) start_stream(kl, st, p);
    }
}

void ob__k8s_reap_transfers(kube_launcher *kl)
{
    int left;
    CURLMsg *m;
    while ((m = curl_multi_info_read(kl->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *h = m->easy_handle;
        CURLcode cc = m->data.result;
        long status = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        void *priv = NULL;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, &priv);
        curl_multi_remove_handle(kl->multi, h);
        pthread_mutex_lock(&kl->mu);
        int is_watch = priv == &kl->w[0] || priv == &kl->w[1];
        if (is_watch) {
            kwatch *w = priv;
            curl_slist_free_all(w->hl);
            w->hl = NULL;
            w->h = NULL;
            if (w->gone || status == 410) {
                w->need_list = 1;
                w->retry_ms = 0;
            } else if (cc == CURLE_OK && status == 200) {
                w->retry_ms = 0; /* the server ended the watch (timeoutSeconds): resume */
                w->failures = 0;
                kl->api_problem[0] = '\0';
            } else if (cc == CURLE_OPERATION_TIMEDOUT && status == 200) {
                /* Silent past the idle limit: taken for dead. What happened meanwhile is read
                 * from a fresh list, at once. */
                w->need_list = 1;
                w->retry_ms = 0;
                w->silent++;
            } else {
                w->failures++;
                w->need_list = 1; /* what happened meanwhile is read from a fresh list */
                w->retry_ms = ob_wall_ms() + (500LL << (w->failures < 6 ? w->failures : 6));
                char why[80];
                if (cc == CURLE_OK)
                    snprintf(why, sizeof why, "HTTP status %ld", status);
                else if (cc == CURLE_OPERATION_TIMEDOUT)
                    snprintf(why, sizeof why, "nothing for %d s", kl->idle_s);
                else
                    snprintf(why, sizeof why, "%s", curl_easy_strerror(cc));
                snprintf(kl->api_problem, sizeof kl->api_problem,
                         "the Kubernetes API server cannot be watched (%s): %s", w->what, why);
            }
        } else {
            kstream *st = priv;
            katt *a = st->att;
            curl_slist_free_all(st->hl);
            st->hl = NULL;
            st->h = NULL;
            if (st->fd >= 0) close(st->fd);
            st->fd = -1;
            if (st->sec) ob__k8s_save_mark(st);
            const kpod *p = ob__k8s_pod_of(a, st->index);
            int over = !p || !strcmp(p->phase, "Succeeded") || !strcmp(p->phase, "Failed") ||
                       !strcmp(p->phase, "Deleted");
            if ((cc == CURLE_OK && status == 200 && over) || a->deleted || status == 404 ||
                st->truncated)
                st->done = 1;
            else
                st->retry_ms = ob_wall_ms() + 1000;
        }
        pthread_mutex_unlock(&kl->mu);
        curl_easy_cleanup(h);
    }
}
