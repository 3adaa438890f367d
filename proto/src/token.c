/* Token files (onebit/token.h). */
#include "onebit/token.h"
#include "onebit/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ob_status ob_token_read(const char *path, char *tok, size_t cap, ob_err *err)
{
    tok[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return OB_ERR(err, errno == ENOENT ? OB_ERR_NOT_FOUND : OB_ERR_IO, "token file %s: %s",
                      path, strerror(errno));
    char line[OB_TOKEN_MAX + 2];
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    fclose(f);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
                 line[n - 1] == '\t'))
        line[--n] = '\0';
    const char *start = line + strspn(line, " \t");
    n = strlen(start);
    if (n == 0) return OB_ERR(err, OB_ERR_INVALID_ARG, "token file %s holds no token", path);
    if (n >= cap || n >= OB_TOKEN_MAX)
        return OB_ERR(err, OB_ERR_INVALID_ARG, "token file %s: the token is too long", path);
    memcpy(tok, start, n + 1);
    return OB_OK;
}

ob_status ob_token_ensure(const char *path, char *tok, size_t cap, int *created, ob_err *err)
{
    *created = 0;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (st.st_mode & (S_IRWXG | S_IRWXO))
            return OB_ERR(err, OB_ERR_STATE,
                          "token file %s can be read by others (mode %03o): chmod 600 it, or "
                          "remove it to have a new one made",
                          path, (unsigned)(st.st_mode & 0777));
        return ob_token_read(path, tok, cap, err);
    }
    if (cap < 65) return OB_ERR(err, OB_ERR_INVALID_ARG, "token buffer of %zu bytes", cap);
    ob_status rc = ob_random_hex(tok, 32, err);
    if (rc) return OB_WRAP(err, rc, "making a token");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return OB_ERR(err, OB_ERR_IO, "creating token file %s: %s", path, strerror(errno));
    char line[72];
    int len = snprintf(line, sizeof line, "%s\n", tok);
    int bad = write(fd, line, (size_t)len) != len || fsync(fd) != 0;
    bad |= close(fd) != 0;
    if (bad) {
        unlink(path);
        return OB_ERR(err, OB_ERR_IO, "writing token file %s: %s", path, strerror(errno));
    }
    *created = 1;
    return OB_OK;
}
