/* fileio.c - how the library maps an input file (rai_map_file) and
 * creates an output file (safetensors, PNG).
 *
 * A regular file (or a new one): the bytes go to PATH.tmp.XXXXXX in the
 * same directory (so the rename cannot cross devices), are synced, made
 * 0644 (the temporary file is created 0600; an output should be as
 * readable as any file), and renamed over PATH. A reader never sees a partial file, and a
 * failure leaves nothing at PATH.
 *
 * Anything else at PATH is never replaced (a rename would turn a device
 * node, a FIFO or a symlink into a regular file, and as root `-o /dev/null`
 * would replace the system's /dev/null): /dev/null-like character devices,
 * terminals and FIFOs are written through, everything else is refused. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE   /* major(), minor() */
#include "base/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/sysmacros.h>
#endif

/* ---- the files this process read ----------------------------------------
 * A set of (device, inode) in open addressing (linear probing, at most half
 * full), each with the path it was first opened by; a forgotten file
 * leaves a tombstone. One lock: readers note a file once per open, writers
 * look once per output. */

typedef struct read_file {
    dev_t dev;
    ino_t ino;
    char *path;   /* NULL: empty (or, with gone, a tombstone) */
    int gone;
} read_file;

static pthread_mutex_t reads_lock = PTHREAD_MUTEX_INITIALIZER;
static read_file *reads;
static size_t reads_cap, reads_used;   /* slots, slots not empty (tombstones count) */

static size_t read_slot(dev_t dev, ino_t ino) {
    uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15u ^ (uint64_t)dev * 0xbf58476d1ce4e5b9u;
    return (size_t)(h ^ h >> 29) & (reads_cap - 1);
}

/* The entry of (dev, ino), or NULL; under the lock. */
static read_file *read_find(dev_t dev, ino_t ino) {
    for (size_t i = reads_cap ? read_slot(dev, ino) : 0, k = 0; k < reads_cap;
         k++, i = (i + 1) & (reads_cap - 1)) {
        read_file *r = &reads[i];
        if (!r->path && !r->gone) return NULL;
        if (r->path && r->dev == dev && r->ino == ino) return r;
    }
    return NULL;
}

/* Twice the slots (or 64), tombstones dropped; 0 if out of memory. */
static int reads_grow(void) {
    const size_t cap = reads_cap ? 2 * reads_cap : 64;
    read_file *old = reads, *t = calloc(cap, sizeof *t);
    const size_t old_cap = reads_cap;
    if (!t) return 0;
    reads = t, reads_cap = cap, reads_used = 0;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].path) continue;
        size_t j = read_slot(old[i].dev, old[i].ino);
        while (reads[j].path) j = (j + 1) & (cap - 1);
        reads[j] = old[i];
        reads_used++;
    }
    free(old);
    return 1;
}

static void note_stat(const struct stat *st, const char *path) {
    if (!S_ISREG(st->st_mode)) return;
    pthread_mutex_lock(&reads_lock);
    /* out of memory: the file is not remembered, and an output over it is
     * refused by nothing but the CLI's comparison with its arguments */
    if (!read_find(st->st_dev, st->st_ino) &&
        (2 * (reads_used + 1) <= reads_cap || reads_grow())) {
        char *copy = strdup(path ? path : "?");
        size_t i = read_slot(st->st_dev, st->st_ino);
        while (reads[i].path) i = (i + 1) & (reads_cap - 1);
        if (copy) {
            reads_used += !reads[i].gone;
            reads[i] = (read_file){st->st_dev, st->st_ino, copy, 0};
        }
    }
    pthread_mutex_unlock(&reads_lock);
}

void rai_note_read(int fd, const char *path) {
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) note_stat(&st, path);
}

ra_status ra_input_note(const char *path) {
    if (!path) return rai_fail(RA_ERR_ARG, "ra_input_note: NULL path");
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return rai_fail(RA_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    rai_note_read(fd, path);
    close(fd);
    return RA_OK;
}

void ra_input_forget(const char *path) {
    struct stat st;
    pthread_mutex_lock(&reads_lock);
    for (size_t i = 0; !path && i < reads_cap; i++)
        if (reads[i].path) free(reads[i].path), reads[i] = (read_file){0, 0, NULL, 1};
    read_file *r = path && stat(path, &st) == 0 ? read_find(st.st_dev, st.st_ino) : NULL;
    if (r) free(r->path), *r = (read_file){0, 0, NULL, 1};
    pthread_mutex_unlock(&reads_lock);
}

ra_status ra_output_check(const char *path) {
    struct stat st;
    if (!path) return rai_fail(RA_ERR_ARG, "ra_output_check: NULL path");
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return RA_OK;   /* nothing read there */
    ra_status s = RA_OK;
    pthread_mutex_lock(&reads_lock);
    const read_file *r = read_find(st.st_dev, st.st_ino);
    if (r && !strcmp(r->path, path))
        s = rai_fail(RA_ERR_WRITE, "cannot write '%s': it is an input of this command; "
                     "refusing to replace it", path);
    else if (r)
        s = rai_fail(RA_ERR_WRITE, "cannot write '%s': it is the file '%s', an input of this "
                     "command; refusing to replace it", path, r->path);
    pthread_mutex_unlock(&reads_lock);
    return s;
}

/* ---- reading -------------------------------------------------------------- */

ra_status rai_map_file(const char *path, rai_mapping *out) {
    *out = (rai_mapping){NULL, 0, -1};
    /* O_NONBLOCK: a FIFO must not block the open; it is refused below as not a
     * regular file (for regular files the flag changes nothing) */
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return rai_fail(RA_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    ra_status s = RA_OK;
    void *p = NULL;
    if (fstat(fd, &st) != 0)
        s = rai_fail(RA_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = rai_fail(RA_ERR_IO, "'%s' is not a regular file", path);
    else if ((uintmax_t)st.st_size > SIZE_MAX)
        s = rai_fail(RA_ERR_IO, "'%s' is too large to map", path);
    else if (st.st_size > 0 &&
             (p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        s = rai_fail(RA_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    if (s) {
        close(fd);
        return s;
    }
    note_stat(&st, path);
    *out = (rai_mapping){p, (size_t)st.st_size, fd};
    return RA_OK;
}

void rai_unmap_file(rai_mapping *m) {
    if (m->p) munmap(m->p, m->len);
    if (m->fd >= 0) close(m->fd);
    *m = (rai_mapping){NULL, 0, -1};
}

static ra_tempfile_hook tempfile_hook;

void ra_set_tempfile_hook(ra_tempfile_hook hook) { tempfile_hook = hook; }

/* mkstemp, but the hook hears of the name before the file exists, so that
 * no signal can come between the file and the hook: a name made of the
 * clock, the process and a counter, created with O_EXCL (a name taken is
 * tried again; only while open() finds it taken could a signal remove a
 * file of that random name, a leftover of an earlier run). */
static int make_temp(char *tmp, size_t at) {
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    static _Atomic unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15u ^ (uint64_t)getpid() << 32 ^
                    (uint64_t)ts.tv_sec;
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t r = seed ^ (uint64_t)++counter * 0xbf58476d1ce4e5b9u;
        r ^= r >> 31;
        for (int i = 0; i < 6; i++, r /= 62) tmp[at + i] = digits[r % 62];
        if (tempfile_hook) tempfile_hook(tmp);
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        const int err = errno;
        if (fd < 0 && tempfile_hook) tempfile_hook(NULL);
        if (fd >= 0 || err != EEXIST) {
            errno = err;
            return fd;
        }
    }
    errno = EEXIST;
    return -1;
}

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

/* A character device an output may go to: one that discards (or refuses)
 * what it is given, or a terminal. Terminals are known by their major
 * numbers, so that nothing is opened to find out. */
static int harmless_chardev(const struct stat *s) {
#ifdef __linux__
    const unsigned ma = major(s->st_rdev), mi = minor(s->st_rdev);
    if (ma == 1) return mi == 3 || mi == 5 || mi == 7;   /* null, zero, full */
    return ma == 4 || ma == 5 || (ma >= 136 && ma <= 143);   /* tty*, tty, pts */
#else
    (void)s;
    return 0;
#endif
}

static ra_status write_through(const char *path, const void *const *parts, const size_t *sizes,
                               int nparts, int fifo) {
    /* a FIFO without a reader would block forever: O_NONBLOCK makes that
     * ENXIO; no O_CREAT, no O_TRUNC: nothing is made or cut */
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
    if (fd < 0)
        return rai_fail(RA_ERR_WRITE, "cannot write '%s': %s", path,
                        errno == ENXIO ? "a FIFO with no reader" : strerror(errno));
    struct stat s;
    int err = fstat(fd, &s) ? errno : 0;
    /* what was opened must still be what was checked */
    if (!err && !(fifo ? S_ISFIFO(s.st_mode) : S_ISCHR(s.st_mode) && harmless_chardev(&s)))
        err = EEXIST;
    if (!err && fifo) {
        const int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) err = errno;
    }
    for (int i = 0; !err && i < nparts; i++) err = write_all(fd, parts[i], sizes[i]);
    if (close(fd) != 0 && !err) err = errno;
    if (err == EEXIST)
        return rai_fail(RA_ERR_WRITE, "cannot write '%s': it changed while being opened", path);
    if (err) return rai_fail(RA_ERR_WRITE, "cannot write '%s': %s", path, strerror(err));
    return RA_OK;
}

/* What is at path, and whether (and how) it may be written: 0 to replace
 * it (or create it), 1 to write through, else a refusal. */
static ra_status classify_target(const char *path, int *through, int *fifo) {
    struct stat l, s;
    *through = *fifo = 0;
    if (lstat(path, &l) != 0) {
        if (errno == ENOENT) return RA_OK;
        return rai_fail(RA_ERR_WRITE, "cannot write '%s': %s", path, strerror(errno));
    }
    const int link = S_ISLNK(l.st_mode);
    if (link && stat(path, &s) != 0)
        return rai_fail(RA_ERR_WRITE, "cannot write '%s': a symbolic link to nothing (%s); "
                        "outputs are not written through links", path, strerror(errno));
    if (!link) s = l;
    if (S_ISFIFO(s.st_mode) || (S_ISCHR(s.st_mode) && harmless_chardev(&s))) {
        *through = 1, *fifo = S_ISFIFO(s.st_mode);
        return RA_OK;
    }
    if (link)
        return rai_fail(RA_ERR_WRITE, "cannot write '%s': a symbolic link; outputs replace only "
                        "regular files, never through links", path);
    if (S_ISDIR(s.st_mode)) return rai_fail(RA_ERR_WRITE, "cannot write '%s': a directory", path);
    if (!S_ISREG(s.st_mode))
        return rai_fail(RA_ERR_WRITE, "cannot write '%s': not a regular file (a %s); it is "
                        "never replaced", path,
                        S_ISCHR(s.st_mode) ? "character device" : S_ISBLK(s.st_mode) ? "block device"
                        : S_ISSOCK(s.st_mode) ? "socket" : "special file");
    /* root may write anything: the mode bits say what the owner meant */
    if (!(s.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) || access(path, W_OK) != 0)
        return rai_fail(RA_ERR_WRITE, "cannot write '%s': the file is read-only", path);
    return RA_OK;
}

/* "-": the bytes to standard output as they come (no temporary file can
 * stand for a stream), never to a terminal. */
static ra_status write_stdout(const void *const *parts, const size_t *sizes, int nparts) {
    if (isatty(1))
        return rai_fail(RA_ERR_WRITE, "cannot write to standard output: it is a terminal "
                        "(redirect it, or give a file name)");
    int err = 0;
    for (int i = 0; !err && i < nparts; i++) err = write_all(1, parts[i], sizes[i]);
    if (err) return rai_fail(RA_ERR_WRITE, "cannot write to standard output: %s", strerror(err));
    return RA_OK;
}

ra_status rai_write_file_atomic(const char *path, const void *const *parts, const size_t *sizes,
                                int nparts) {
    if (!path || !path[0]) return rai_fail(RA_ERR_ARG, "cannot write: NULL or empty path");
    if (strcmp(path, "-") == 0) return write_stdout(parts, sizes, nparts);
    ra_status s = ra_output_check(path);
    if (s) return s;
    int through, fifo;
    s = classify_target(path, &through, &fifo);
    if (s) return s;
    if (through) return write_through(path, parts, sizes, nparts, fifo);
    char *tmp = malloc(strlen(path) + sizeof ".tmp.XXXXXX");
    if (!tmp) return rai_fail(RA_ERR_NOMEM, "out of memory saving '%s'", path);
    sprintf(tmp, "%s.tmp.XXXXXX", path);
    int fd = make_temp(tmp, strlen(path) + 5);
    if (fd < 0) {
        s = rai_fail(RA_ERR_WRITE, "cannot create a temporary file for '%s': %s", path,
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
    if (err) {
        unlink(tmp);
        s = rai_fail(RA_ERR_WRITE, "cannot write '%s' (%s): %s", path, step, strerror(err));
    }
    if (tempfile_hook) tempfile_hook(NULL);
    free(tmp);
    return s;
}
