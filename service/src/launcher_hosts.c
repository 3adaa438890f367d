/* The hosts launcher: mpirun across a list of machines (launcher.h). The host list is validated
 * strictly, written as an Open MPI hostfile, and the local launcher runs mpirun with it and the
 * chosen remote agent. Cancel reaches ranks on other machines through mpirun, which forwards
 * SIGUSR1 to every rank (the worker treats it as SIGTERM); it would answer SIGTERM itself by
 * killing them before their final checkpoint. */
#include "onebit/launcher.h"
#include "exec.h"
#include "onebit/base.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void ob_host_list_clear(ob_host_list *l)
{
    if (!l) return;
    free(l->hosts);
    memset(l, 0, sizeof *l);
}

/* 1 for a DNS host name: labels of [A-Za-z0-9-], 1..63 long, no '-' at either end. */
static int valid_hostname(const char *s, size_t len)
{
    if (len == 0 || len > OB_HOST_NAME_MAX) return 0;
    size_t label = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-') return 0;
            label = 0;
            continue;
        }
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-') return 0;
        if (c == '-' && label == 0) return 0;
        if (++label > 63) return 0;
    }
    return label > 0 && s[len - 1] != '-';
}

/* 1 for a dotted-quad IPv4 address without leading zeros. */
static int valid_ipv4(const char *s, size_t len)
{
    int parts = 0;
    size_t i = 0;
    while (i < len) {
        size_t start = i;
        int v = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9' && i - start < 3)
            v = v * 10 + (s[i++] - '0');
        size_t n = i - start;
        if (n == 0 || v > 255 || (n > 1 && s[start] == '0')) return 0;
        parts++;
        if (i == len) break;
        if (s[i] != '.' || parts == 4) return 0;
        i++;
        if (i == len) return 0;
    }
    return parts == 4;
}

/* 1 when every character is a digit or a dot: such a name must be an IPv4 address. */
static int numeric(const char *s, size_t len)
{
    return strspn(s, "0123456789.") >= len;
}

ob_status ob_host_list_parse(ob_host_list *out, const char *text, ob_err *err)
{
    memset(out, 0, sizeof *out);
    if (!text || !text[0]) return OB_ERR(err, OB_ERR_INVALID_ARG, "--hosts: empty host list");
    size_t entries = 1;
    for (const char *p = text; *p; p++)
        entries += *p == ',';
    if (entries > OB_HOSTS_MAX)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "--hosts: %zu hosts, at most %d", entries,
                      OB_HOSTS_MAX);
    ob_host *hosts = calloc(entries, sizeof *hosts);
    if (!hosts) return OB_ERR(err, OB_ERR_NOMEM, "--hosts: %zu hosts", entries);
    ob_status rc = OB_OK;
    size_t n = 0;
    long total = 0;
    for (const char *p = text;; n++) {
        size_t len = strcspn(p, ",");
        const char *colon = memchr(p, ':', len);
        size_t nlen = colon ? (size_t)(colon - p) : len;
        int shown = (int)(len < 80 ? len : 80);
        if (!colon) {
            rc = OB_ERR(err, OB_ERR_INVALID_ARG,
                        "--hosts: entry %zu '%.*s': expected NAME:SLOTS (\"node1:4\")", n + 1,
                        shown, p);
            break;
        }
        int name_ok = numeric(p, nlen) ? valid_ipv4(p, nlen) : valid_hostname(p, nlen);
        if (!name_ok) {
            rc = OB_ERR(err, OB_ERR_INVALID_ARG,
                        "--hosts: entry %zu '%.*s': '%.*s' is not a host name or IPv4 address",
                        n + 1, shown, p, (int)(nlen < 80 ? nlen : 80), p);
            break;
        }
        const char *s = colon + 1;
        size_t slen = len - nlen - 1;
        long slots = 0;
        int slots_ok = slen > 0 && slen <= 4 && s[0] != '0';
        for (size_t i = 0; slots_ok && i < slen; i++) {
            slots_ok = s[i] >= '0' && s[i] <= '9';
            slots = slots * 10 + (s[i] - '0');
        }
        if (!slots_ok || slots < 1 || slots > OB_HOST_SLOTS_MAX) {
            rc = OB_ERR(err, OB_ERR_INVALID_ARG,
                        "--hosts: entry %zu '%.*s': slots must be an integer from 1 to %d", n + 1,
                        shown, p, OB_HOST_SLOTS_MAX);
            break;
        }
        for (size_t k = 0; k < n && rc == OB_OK; k++)
            if (strlen(hosts[k].name) == nlen && !strncasecmp(hosts[k].name, p, nlen))
                rc = OB_ERR(err, OB_ERR_INVALID_ARG, "--hosts: host '%.*s' is listed twice",
                            (int)nlen, p);
        if (rc) break;
        if (total > INT_MAX - slots) {
            rc = OB_ERR(err, OB_ERR_INVALID_ARG, "--hosts: too many slots in all");
            break;
        }
        total += slots;
        memcpy(hosts[n].name, p, nlen);
        hosts[n].name[nlen] = '\0';
        hosts[n].slots = (int)slots;
        if (!p[len]) {
            n++;
            break;
        }
        p += len + 1;
    }
    if (rc) {
        free(hosts);
        return rc;
    }
    out->hosts = hosts;
    out->n = n;
    out->total_slots = (int)total;
    return OB_OK;
}

ob_status ob_host_list_hostfile(const ob_host_list *l, char *out, size_t cap, ob_err *err)
{
    size_t used = 0;
    if (cap) out[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        int w = snprintf(out + used, cap > used ? cap - used : 0, "%s slots=%d\n", l->hosts[i].name,
                         l->hosts[i].slots);
        if (w < 0 || (size_t)w >= (cap > used ? cap - used : 0))
            return OB_ERR(err, OB_ERR_TOO_LARGE, "hostfile of %zu hosts: more than %zu bytes", l->n,
                          cap);
        used += (size_t)w;
    }
    return OB_OK;
}

/* 1 for one entry of --mpi-net: an IPv4 CIDR ("10.0.0.0/24") or a Linux interface name (1 to
 * 15 of [A-Za-z0-9._-], not starting with '-'). */
static int valid_net_entry(const char *s, size_t len)
{
    const char *slash = memchr(s, '/', len);
    if (slash) {
        size_t alen = (size_t)(slash - s), plen = len - alen - 1;
        if (!numeric(s, alen) || !valid_ipv4(s, alen) || plen < 1 || plen > 2) return 0;
        if (strspn(slash + 1, "0123456789") < plen || (plen == 2 && slash[1] == '0')) return 0;
        return atoi(slash + 1) <= 32;
    }
    if (len == 0 || len > 15 || s[0] == '-') return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok) return 0;
    }
    return 1;
}

ob_status ob_hosts_net_check(const char *net, ob_err *err)
{
    size_t total = strlen(net);
    if (total == 0 || total > 255)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "--mpi-net: empty, or longer than 255 characters");
    for (const char *p = net;; p++) {
        size_t len = strcspn(p, ",");
        if (!valid_net_entry(p, len))
            return OB_ERR(err, OB_ERR_INVALID_ARG,
                          "--mpi-net: '%.*s' is not an IPv4 CIDR (10.0.0.0/24) or an interface "
                          "name",
                          (int)(len < 80 ? len : 80), p);
        p += len;
        if (!*p) return OB_OK;
    }
}

ob_status ob_hosts_launcher_create(ob_launcher **out, const ob_hosts_launcher_config *cfg,
                                   ob_err *err)
{
    *out = NULL;
    if (!cfg->hosts || cfg->hosts->n == 0 || !cfg->hostfile_path)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "the hosts launcher needs hosts and a hostfile");
    if (cfg->rsh_agent && (!cfg->rsh_agent[0] || strpbrk(cfg->rsh_agent, "\n\r")))
        return OB_ERR(err, OB_ERR_INVALID_ARG, "--ssh-agent: empty, or a line break in it");
    if (cfg->net) {
        ob_status nrc = ob_hosts_net_check(cfg->net, err);
        if (nrc) return nrc;
    }
    size_t cap = cfg->hosts->n * (OB_HOST_NAME_MAX + 16) + 1;
    char *text = malloc(cap);
    if (!text) return OB_ERR(err, OB_ERR_NOMEM, "hostfile");
    ob_status rc = ob_host_list_hostfile(cfg->hosts, text, cap, err);
    if (rc == OB_OK) rc = ob__write_file_atomic(cfg->hostfile_path, text, err);
    free(text);
    if (rc) return rc;
    size_t n_extra = 0;
    while (cfg->mpirun_args && cfg->mpirun_args[n_extra])
        n_extra++;
    if (n_extra > 20)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "at most 20 extra mpirun arguments, got %zu",
                      n_extra);
    const char *args[34];
    size_t a = 0;
    args[a++] = "--hostfile";
    args[a++] = cfg->hostfile_path;
    if (cfg->rsh_agent) {
        args[a++] = "--mca";
        args[a++] = "plm_rsh_agent";
        args[a++] = cfg->rsh_agent;
    }
    /* Both of Open MPI's TCP users: the ranks' traffic (btl) and the daemons' wire-up (oob).
     * Left to itself each tries every interface, and an address every host has (docker0's
     * 172.17.0.1, a bridge of libvirt) looks like the peer but is the host itself: the
     * connection hangs instead of failing. */
    if (cfg->net) {
        args[a++] = "--mca";
        args[a++] = "btl_tcp_if_include";
        args[a++] = cfg->net;
        args[a++] = "--mca";
        args[a++] = "oob_tcp_if_include";
        args[a++] = cfg->net;
    }
    /* The placement a job spec's ranks_per_node "auto" reads (engine: ob_comm_node_map), given
     * to onebitd for hosts that MPI cannot tell apart: mpirun hands its own environment to the
     * ranks on this machine only. */
    if (getenv("ONEBIT_RANKS_PER_NODE")) {
        args[a++] = "-x";
        args[a++] = "ONEBIT_RANKS_PER_NODE";
    }
    for (size_t i = 0; i < n_extra; i++)
        args[a++] = cfg->mpirun_args[i];
    args[a] = NULL;
    ob_local_launcher_config lc = {
        .mpirun = cfg->mpirun,
        .worker = cfg->worker,
        .mpirun_args = args,
        .term_via_mpirun = SIGUSR1,
    };
    return ob_local_launcher_create(out, &lc, err);
}
