/* The REST server's connection budget (rest_internal.h): every connection has a slot from the
 * moment it is accepted, and deadlines that a slow sender cannot stretch. libmicrohttpd's own
 * timeout counts from a connection's last byte, so a client that sends one byte every few
 * seconds keeps a connection (and its thread) forever, and a few hundred of them from a few
 * addresses fill the connection limit: nobody else gets in, /healthz included. Here:
 *
 * - a connection has header_s from its start (or from the end of its previous request) to send
 *   its request's headers, and body_s more for its body, however it spreads the bytes;
 * - at most max_waiting connections may be waiting for their request at once; one more, and the
 *   one that has waited longest among those of the client address holding the most waiting
 *   connections is closed (an IPv6 client's address: its /64), so a connection that sends its
 *   request at once (a health probe, a unary call) always gets a thread, whatever the slow ones
 *   do: however fast slow clients from a few addresses open connections again, they push out
 *   their own, not a newcomer from elsewhere that has not been read yet;
 * - a request being answered is never cut: the event streams have limits of their own.
 *
 * A reaper thread looks every quarter second; "closed" is shutdown(2) of the socket, which makes
 * libmicrohttpd's thread see the end of the connection and close it itself. */
#include "rest_internal.h"
#include "onebit/base.h"

#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef enum { SLOT_FREE, SLOT_WAITING, SLOT_UPLOADING, SLOT_ANSWERING } slot_state;

typedef struct slot {
    slot_state state;
    int fd;
    double since;             /* when the current state began (ob_mono_s) */
    unsigned long order;      /* the budget's count of state changes then: which came first */
    unsigned char client[16]; /* the client's address (client_key) */
} slot;

struct ob__rest_conns {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t reaper;
    int running, stop;
    slot *slots;
    slot **scratch; /* n_slots: the waiting connections, sorted to choose one to close */
    unsigned long clock;
    int n_slots, max_waiting;
    double header_s, body_s;
    long closed; /* connections closed for a deadline or the waiting budget */
};

/* With the mutex held: the slot's state and when it began. */
static void set_state(ob__rest_conns *c, slot *sl, slot_state st)
{
    sl->state = st;
    sl->since = ob_mono_s();
    sl->order = ++c->clock;
}

/* With the mutex held: shuts the connection's socket down (its thread closes it). */
static void cut(ob__rest_conns *c, slot *sl)
{
    if (sl->fd >= 0) shutdown(sl->fd, SHUT_RDWR);
    set_state(c, sl, SLOT_ANSWERING); /* cut once; the close notification frees the slot */
    c->closed++;
}

static void *reaper_main(void *arg)
{
    ob__rest_conns *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        double now = ob_mono_s();
        for (int i = 0; i < c->n_slots; i++) {
            slot *sl = &c->slots[i];
            if ((sl->state == SLOT_WAITING && now - sl->since > c->header_s) ||
                (sl->state == SLOT_UPLOADING && now - sl->since > c->body_s))
                cut(c, sl);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

ob_status ob__rest_conns_create(ob__rest_conns **out, int slots, int max_waiting, double header_s,
                                double body_s, ob_err *err)
{
    *out = NULL;
    if (slots < 1 || max_waiting < 1)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "REST connection budget: %d slots, %d waiting",
                      slots, max_waiting);
    ob__rest_conns *c = calloc(1, sizeof *c);
    if (!c || !(c->slots = calloc((size_t)slots, sizeof *c->slots)) ||
        !(c->scratch = calloc((size_t)slots, sizeof *c->scratch))) {
        if (c) free(c->slots);
        free(c);
        return OB_ERR(err, OB_ERR_NOMEM, "REST connection budget");
    }
    for (int i = 0; i < slots; i++)
        c->slots[i].fd = -1;
    c->n_slots = slots;
    c->max_waiting = max_waiting;
    c->header_s = header_s;
    c->body_s = body_s;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->reaper, NULL, reaper_main, c) != 0) {
        ob__rest_conns_destroy(c);
        return OB_ERR(err, OB_ERR_IO, "REST connection budget: cannot start its thread");
    }
    c->running = 1;
    *out = c;
    return OB_OK;
}

void ob__rest_conns_destroy(ob__rest_conns *c)
{
    if (!c) return;
    if (c->running) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->reaper, NULL);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c->scratch);
    free(c);
}

/* The key a client's connections are counted under: an IPv4 address as IPv4-mapped IPv6, an
 * IPv6 address's /64 (one host's share of a network, which it may fill with addresses), all
 * zeros for anything else. */
static void client_key(const struct sockaddr *sa, unsigned char key[16])
{
    memset(key, 0, 16);
    if (sa && sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa && sa->sa_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        memcpy(key, a, memcmp(a, v4mapped, 12) == 0 ? 16 : 8);
    }
}

/* Waiting connections by client, then oldest first. */
static int by_client_then_age(const void *pa, const void *pb)
{
    const slot *a = *(slot *const *)pa, *b = *(slot *const *)pb;
    int k = memcmp(a->client, b->client, sizeof a->client);
    if (k) return k;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* With the mutex held and n waiting connections in c->scratch: the one to close, the
 * longest-waiting of the client with the most (of two such clients, the one whose connection
 * has waited longer). */
static slot *choose_cut(ob__rest_conns *c, int n)
{
    qsort(c->scratch, (size_t)n, sizeof *c->scratch, by_client_then_age);
    slot *best = NULL;
    int best_n = 0;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && memcmp(c->scratch[j]->client, c->scratch[i]->client, 16) == 0)
            j++;
        if (j - i > best_n || (j - i == best_n && c->scratch[i]->order < best->order)) {
            best = c->scratch[i];
            best_n = j - i;
        }
        i = j;
    }
    return best;
}

void *ob__rest_conns_open(ob__rest_conns *c, const struct sockaddr *client, int fd)
{
    pthread_mutex_lock(&c->mu);
    slot *free_slot = NULL;
    int waiting = 0;
    for (int i = 0; i < c->n_slots; i++) {
        slot *sl = &c->slots[i];
        if (sl->state == SLOT_FREE && !free_slot) free_slot = sl;
        if (sl->state == SLOT_WAITING || sl->state == SLOT_UPLOADING) c->scratch[waiting++] = sl;
    }
    if (waiting >= c->max_waiting) cut(c, choose_cut(c, waiting)); /* max_waiting >= 1 */
    if (free_slot) {
        set_state(c, free_slot, SLOT_WAITING);
        free_slot->fd = fd;
        client_key(client, free_slot->client);
    } else if (fd >= 0) {
        /* More connections than slots cannot happen under libmicrohttpd's own limit; if it
         * does, the newcomer is the one that goes. */
        shutdown(fd, SHUT_RDWR);
        c->closed++;
    }
    pthread_mutex_unlock(&c->mu);
    return free_slot;
}

void ob__rest_conns_close(ob__rest_conns *c, void *handle)
{
    slot *sl = handle;
    if (!sl) return;
    pthread_mutex_lock(&c->mu);
    sl->state = SLOT_FREE;
    sl->fd = -1;
    pthread_mutex_unlock(&c->mu);
}

void ob__rest_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                           enum MHD_ConnectionNotificationCode code)
{
    ob__rest_conns *c = cls;
    if (!c) return;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context =
            ob__rest_conns_open(c, addr ? addr->client_addr : NULL, fd ? fd->connect_fd : -1);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        ob__rest_conns_close(c, *socket_context);
        *socket_context = NULL;
    }
}

void ob__rest_conns_phase(ob__rest_conns *c, struct MHD_Connection *conn, int phase)
{
    if (!c || !conn) return;
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    slot *sl = info ? info->socket_context : NULL;
    if (!sl) return;
    pthread_mutex_lock(&c->mu);
    if (sl->state != SLOT_FREE)
        set_state(c, sl,
                  phase == OB__REST_CONN_UPLOADING   ? SLOT_UPLOADING
                  : phase == OB__REST_CONN_ANSWERING ? SLOT_ANSWERING
                                                     : SLOT_WAITING);
    pthread_mutex_unlock(&c->mu);
}

long ob__rest_conns_closed(ob__rest_conns *c)
{
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    long n = c->closed;
    pthread_mutex_unlock(&c->mu);
    return n;
}
