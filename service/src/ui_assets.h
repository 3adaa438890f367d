/* The web dashboard's files, embedded in the binary at build time: service/ui/embed.cmake turns
 * every file listed in service/CMakeLists.txt into a byte array and one entry of ob__ui_assets
 * (the generated ui_assets.c). Nothing under /ui/ is ever looked up on the filesystem. */
#ifndef ONEBIT_UI_ASSETS_H
#define ONEBIT_UI_ASSETS_H

#include <stddef.h>

typedef struct ob__ui_asset {
    const char *path;          /* "/ui/app.js" */
    const char *type;          /* its Content-Type */
    const unsigned char *data; /* len bytes (and a NUL after them) */
    size_t len;
} ob__ui_asset;

extern const ob__ui_asset ob__ui_assets[];
extern const size_t ob__ui_asset_count;

#endif /* ONEBIT_UI_ASSETS_H */
