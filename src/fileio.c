/* fileio.c - how the library creates an output file (safetensors, PNG):
 * the bytes go to PATH.tmp.XXXXXX in the same directory (so the rename
 * cannot cross devices), are synced, made 0644 (mkstemp creates 0600; an
 * output should be as readable as any file), and renamed over PATH. A
 * reader never sees a partial file, and a failure leaves nothing at PATH. */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

ra_status ra_write_file_atomic(const char *path, const void *const *parts, const size_t *sizes,
                               int nparts) {
    if (!path || !path[0]) return ra_fail(RA_ERR_ARG, "cannot write: NULL or empty path");
    char *tmp = malloc(strlen(path) + sizeof ".tmp.XXXXXX");
    if (!tmp) return ra_fail(RA_ERR_NOMEM, "out of memory saving '%s'", path);
    sprintf(tmp, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        ra_status s = ra_fail(RA_ERR_WRITE, "cannot create a temporary file for '%s': %s", path,
                              strerror(errno));
        free(tmp);
        return s;
    }
    const char *step = "write";
    int err = 0;
    for (int i = 0; !err && i < nparts; i++) err = write_all(fd, parts[i], sizes[i]);
    if (!err && fchmod(fd, 0644) != 0) { err = errno; step = "chmod"; }
    if (!err && fsync(fd) != 0) { err = errno; step = "fsync"; }
    if (close(fd) != 0 && !err) { err = errno; step = "close"; }
    if (!err && rename(tmp, path) != 0) { err = errno; step = "rename"; }
    ra_status s = RA_OK;
    if (err) {
        unlink(tmp);
        s = ra_fail(RA_ERR_WRITE, "cannot write '%s' (%s): %s", path, step, strerror(err));
    }
    free(tmp);
    return s;
}
