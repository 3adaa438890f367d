/* The inside of ob_tls_config (servers.h), for the two servers: the PEM text of each file as
 * read and checked by ob_tls_config_load, NUL-terminated. */
#ifndef ONEBIT_TLS_INTERNAL_H
#define ONEBIT_TLS_INTERNAL_H

#include <stddef.h>

struct ob_tls_config {
    char *cert_pem, *key_pem, *client_ca_pem; /* client_ca_pem NULL: no client certificates */
    size_t cert_len, key_len, client_ca_len;
};

#endif /* ONEBIT_TLS_INTERNAL_H */
