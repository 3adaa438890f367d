/* Private to the REST front end: docs/openapi.json (the OpenAPI 3.0 document of the REST API)
 * compiled in by cmake/embed.cmake, served at GET /v1/openapi.json. Not NUL-terminated. */
#ifndef ONEBIT_OPENAPI_H
#define ONEBIT_OPENAPI_H

#include <stddef.h>

extern const unsigned char ob_openapi_json[];
extern const size_t ob_openapi_json_len;

#endif /* ONEBIT_OPENAPI_H */
