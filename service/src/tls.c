/* ob_tls_config: onebitd's certificate, key and (for client certificates) CA, read from PEM
 * files and checked once at start with GnuTLS (the library libmicrohttpd serves TLS with), so
 * that an unreadable, garbage or mismatched file is named in a clear message before any port
 * is opened. The servers take the PEM text as it was read (tls_internal.h). */
#include "onebit/servers.h"
#include "tls_internal.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TLS_FILE_MAX ((size_t)1 << 20) /* a PEM file larger than this is not ours */

/* Reads the whole of path (what names it in messages: "--tls-cert") into *out (malloc'd,
 * NUL-terminated; taken by the caller). With secret, a file others can read or write is
 * refused, like the token's. */
static ob_status read_pem(const char *what, const char *path, int secret, char **out, size_t *len,
                          ob_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return OB_ERR(err, OB_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return OB_ERR(err, OB_ERR_IO, "%s %s: not a regular file", what, path);
    }
    if (secret && (st.st_mode & S_IRWXO)) {
        close(fd);
        return OB_ERR(err, OB_ERR_STATE,
                      "%s %s can be read by others (mode %03o): chmod 600 (or 640) it", what, path,
                      (unsigned)(st.st_mode & 0777));
    }
    if ((size_t)st.st_size > TLS_FILE_MAX || st.st_size == 0) {
        close(fd);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s %s: %s", what, path,
                      st.st_size ? "larger than 1 MiB" : "empty");
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return OB_ERR(err, OB_ERR_NOMEM, "%s %s", what, path);
    }
    size_t n = 0;
    while (n < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    if (n != (size_t)st.st_size || strlen(buf) != n) {
        free(buf);
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s %s: not a PEM file (short read or binary)", what,
                      path);
    }
    *out = buf;
    *len = n;
    return OB_OK;
}

/* The number of certificates in pem, or a message naming the file. */
static ob_status check_certs(const char *what, const char *path, const char *pem, size_t len,
                             ob_err *err)
{
    gnutls_x509_crt_t *list = NULL;
    unsigned n = 0;
    gnutls_datum_t d = {(unsigned char *)pem, (unsigned)len};
    int g = gnutls_x509_crt_list_import2(&list, &n, &d, GNUTLS_X509_FMT_PEM, 0);
    if (g < 0 || n == 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "%s %s: no PEM certificate in it (%s)", what, path,
                      g < 0 ? gnutls_strerror(g) : "empty list");
    for (unsigned i = 0; i < n; i++)
        gnutls_x509_crt_deinit(list[i]);
    gnutls_free(list);
    return OB_OK;
}

static ob_status check_key(const char *path, const char *pem, size_t len, ob_err *err)
{
    gnutls_x509_privkey_t key;
    if (gnutls_x509_privkey_init(&key) < 0) return OB_ERR(err, OB_ERR_NOMEM, "--tls-key %s", path);
    gnutls_datum_t d = {(unsigned char *)pem, (unsigned)len};
    int g = gnutls_x509_privkey_import2(key, &d, GNUTLS_X509_FMT_PEM, NULL, GNUTLS_PKCS_PLAIN);
    gnutls_x509_privkey_deinit(key);
    if (g < 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "--tls-key %s: not an unencrypted PEM private key (%s)", path,
                      gnutls_strerror(g));
    return OB_OK;
}

/* The certificate and the key together, as a server would load them. */
static ob_status check_pair(const ob_tls_config *t, const char *cert_file, const char *key_file,
                            ob_err *err)
{
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
        return OB_ERR(err, OB_ERR_NOMEM, "TLS credentials");
    gnutls_datum_t c = {(unsigned char *)t->cert_pem, (unsigned)t->cert_len};
    gnutls_datum_t k = {(unsigned char *)t->key_pem, (unsigned)t->key_len};
    int g = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
    gnutls_certificate_free_credentials(cred);
    if (g == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
        return OB_ERR(err, OB_ERR_INVALID_ARG,
                      "--tls-key %s does not belong to the certificate in --tls-cert %s", key_file,
                      cert_file);
    if (g < 0)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "--tls-cert %s with --tls-key %s: %s", cert_file,
                      key_file, gnutls_strerror(g));
    return OB_OK;
}

ob_status ob_tls_config_load(ob_tls_config **out, const char *cert_file, const char *key_file,
                             const char *client_ca_file, ob_err *err)
{
    *out = NULL;
    if (!cert_file || !key_file)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "TLS needs both a certificate and its key");
    ob_tls_config *t = calloc(1, sizeof *t);
    if (!t) return OB_ERR(err, OB_ERR_NOMEM, "TLS configuration");
    ob_status rc;
    if ((rc = read_pem("--tls-cert", cert_file, 0, &t->cert_pem, &t->cert_len, err)) ||
        (rc = check_certs("--tls-cert", cert_file, t->cert_pem, t->cert_len, err)) ||
        (rc = read_pem("--tls-key", key_file, 1, &t->key_pem, &t->key_len, err)) ||
        (rc = check_key(key_file, t->key_pem, t->key_len, err)) ||
        (rc = check_pair(t, cert_file, key_file, err)))
        goto fail;
    if (client_ca_file && ((rc = read_pem("--tls-client-ca", client_ca_file, 0, &t->client_ca_pem,
                                          &t->client_ca_len, err)) ||
                           (rc = check_certs("--tls-client-ca", client_ca_file, t->client_ca_pem,
                                             t->client_ca_len, err))))
        goto fail;
    *out = t;
    return OB_OK;
fail:
    ob_tls_config_destroy(t);
    return rc;
}

int ob_tls_config_requires_client_cert(const ob_tls_config *t)
{
    return t && t->client_ca_pem != NULL;
}

void ob_tls_config_destroy(ob_tls_config *t)
{
    if (!t) return;
    if (t->key_pem) {
        /* The key does not outlive the configuration in our memory. */
        volatile char *p = t->key_pem;
        for (size_t i = 0; i < t->key_len; i++)
            p[i] = 0;
    }
    free(t->cert_pem);
    free(t->key_pem);
    free(t->client_ca_pem);
    free(t);
}
