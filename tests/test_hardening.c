/* test_hardening.c - the findings of a hardening review of everything
 * that comes from outside, each
 * a case that failed before its fix: inputs that do not fit the model,
 * resized tables, flop counts that overflow, outputs that would destroy
 * files, bytes from files on the terminal, limits. Runs the relattn binary
 * in a temporary directory of its own; nothing outside it is written.
 *   test_hardening FIXTURES_DIR RELATTN_BINARY */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "relattn.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *fixtures, *relattn;
static char tmp[256];            /* this run's directory */
static char err[8192], out[8192];   /* stderr and stdout of the last run */
static long fsize_limit;            /* RLIMIT_FSIZE of the next runs, 0 for none */
static long as_limit;               /* RLIMIT_AS of the next runs, 0 for none */
static const char *kernel_env;      /* RELATTN_KERNEL of the next runs, NULL for none */

/* dir/name in one of 12 rotating buffers of a ring: a path lives for the
 * next 11 of its ring's calls. */
static const char *join(int ring, const char *dir, const char *name) {
    static char buf[2][12][512];
    static int k[2];
    char *b = buf[ring][k[ring]++ % 12];
    snprintf(b, sizeof buf[0][0], "%s/%s", dir, name);
    return b;
}

/* A path in the temporary directory, and a fixture (two rings: the
 * fixtures a test holds outlive many temporary paths). */
static const char *T(const char *name) { return join(0, tmp, name); }
static const char *F(const char *name) { return join(1, fixtures, name); }

static void slurp(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "rb");
    size_t k = f ? fread(buf, 1, n - 1, f) : 0;
    buf[k] = 0;
    if (f) fclose(f);
}

/* relattn ARGS... (NULL-terminated): the exit code (128 + signal if
 * killed); stdout and stderr land in out and err. */
static int run(const char *arg0, ...) {
    const char *argv[32] = {relattn, arg0};
    int n = 2;
    va_list ap;
    va_start(ap, arg0);
    while (n < 31 && (argv[n] = va_arg(ap, const char *))) n++;
    va_end(ap);
    argv[n] = NULL;
    const char *eo = T("stdout.txt"), *ee = T("stderr.txt");
    pid_t pid = fork();
    if (pid == 0) {
        if (fsize_limit) setrlimit(RLIMIT_FSIZE, &(struct rlimit){fsize_limit, fsize_limit});
        if (as_limit) setrlimit(RLIMIT_AS, &(struct rlimit){as_limit, as_limit});
        if (kernel_env) setenv("RELATTN_KERNEL", kernel_env, 1);
        else unsetenv("RELATTN_KERNEL");
        int in = open("/dev/null", O_RDONLY), o = open(eo, O_WRONLY | O_CREAT | O_TRUNC, 0644),
            e = open(ee, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(in, 0), dup2(o, 1), dup2(e, 2);
        execv(relattn, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    slurp(eo, out, sizeof out);
    slurp(ee, err, sizeof err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int exists(const char *path) {
    struct stat s;
    return lstat(path, &s) == 0;
}

/* One line on stderr, starting with "relattn". */
static int one_line(void) {
    const char *nl = strchr(err, '\n');
    return strncmp(err, "relattn", 7) == 0 && nl && nl[1] == 0;
}

static int dim_of(const char *model) {
    ra_model *m;
    if (ra_model_load(&m, model)) return -1;
    int d = atoi(ra_model_meta(m, "dim"));
    ra_model_free(m);
    return d;
}

/* A file of float tensors (zeros but for a ramp): name, ndim, shape... per
 * tensor, a NULL name ending the list. */
static void write_input(const char *path, ...) {
    ra_st_writer *w = ra_st_writer_new();
    va_list ap;
    va_start(ap, path);
    const char *name;
    float *bufs[8];
    int nb = 0;
    while ((name = va_arg(ap, const char *))) {
        int nd = va_arg(ap, int);
        int64_t shape[8], numel = 1;
        for (int i = 0; i < nd; i++) shape[i] = va_arg(ap, int), numel *= shape[i];
        float *d = calloc((size_t)numel, sizeof *d);
        for (int64_t i = 0; i < numel; i++) d[i] = (float)(i % 7) / 7 - 0.4f;
        bufs[nb++] = d;
        CHECK(ra_st_writer_add(w, name, RA_DTYPE_F32, nd, shape, d) == RA_OK, "%s",
              ra_last_error());
    }
    va_end(ap);
    CHECK(ra_st_writer_save(w, path) == RA_OK, "%s", ra_last_error());
    ra_st_writer_free(w);
    while (nb) free(bufs[--nb]);
}

/* ---- 1. swin_block_3d: x and kv against the model ----------------------- */

static void swin3d_shapes(void) {
    const char *self = F("net3d_self_clamp.model.safetensors");
    const char *cross = F("net3d_cross_d3d2.model.safetensors");   /* D1 3, D2 2 */
    const int C = dim_of(self), Cx = dim_of(cross);
    CHECK(C > 0 && Cx > 0, "fixture models load");
    write_input(T("x_ok.st"), "x", 5, 1, 2, 4, 5, C, (char *)NULL);
    write_input(T("x_wide.st"), "x", 5, 1, 2, 4, 5, C + 5, (char *)NULL);
    write_input(T("x_narrow.st"), "x", 5, 2, 2, 4, 5, 1, (char *)NULL);
    CHECK(run("forward", self, T("x_ok.st"), "-o", T("y.st"), NULL) == 0, "%s", err);
    remove(T("y.st"));
    CHECK(run("forward", self, T("x_wide.st"), "-o", T("y.st"), NULL) == 65 && one_line() &&
          strstr(err, "channels") && !exists(T("y.st")), "x with C + 5 channels: %s", err);
    CHECK(run("forward", self, T("x_narrow.st"), "-o", T("y.st"), NULL) == 65 && one_line() &&
          !exists(T("y.st")), "x with 1 channel: %s", err);
    write_input(T("kv_self.st"), "x", 5, 1, 2, 4, 5, C, "kv", 5, 1, 2, 4, 5, C, (char *)NULL);
    CHECK(run("forward", self, T("kv_self.st"), "-o", T("y.st"), NULL) == 65 && one_line(),
          "kv for a self block: %s", err);

    write_input(T("c_ok.st"), "x", 5, 2, 3, 5, 7, Cx, "kv", 5, 2, 2, 5, 7, Cx, (char *)NULL);
    write_input(T("c_frames.st"), "x", 5, 2, 3, 5, 7, Cx, "kv", 5, 2, 9, 5, 7, Cx, (char *)NULL);
    write_input(T("c_kvc.st"), "x", 5, 2, 3, 5, 7, Cx, "kv", 5, 2, 2, 5, 7, Cx + 3, (char *)NULL);
    write_input(T("c_xc.st"), "x", 5, 2, 3, 5, 7, Cx + 3, "kv", 5, 2, 2, 5, 7, Cx + 3,
                (char *)NULL);
    write_input(T("c_nokv.st"), "x", 5, 2, 3, 5, 7, Cx, (char *)NULL);
    CHECK(run("forward", cross, T("c_ok.st"), "-o", T("y.st"), NULL) == 0, "%s", err);
    remove(T("y.st"));
    const char *bad[] = {"c_frames.st", "c_kvc.st", "c_xc.st", "c_nokv.st"};
    for (int i = 0; i < 4; i++)
        CHECK(run("forward", cross, T(bad[i]), "-o", T("y.st"), NULL) == 65 && one_line() &&
              !exists(T("y.st")), "cross block, %s: exit not 65 or output left: %s", bad[i], err);

    /* the library's check itself */
    ra_model *m;
    if (ra_model_load(&m, cross) == RA_OK) {
        const int64_t x[5] = {2, 3, 5, 7, Cx}, kv[5] = {2, 2, 5, 7, Cx}, kv9[5] = {2, 9, 5, 7, Cx};
        CHECK(ra_swin_block_3d_check(m, 5, x, 5, kv) == RA_OK, "%s", ra_last_error());
        CHECK(ra_swin_block_3d_check(m, 5, x, 5, kv9) == RA_ERR_SHAPE, "kv of 9 frames");
        CHECK(ra_swin_block_3d_check(m, 5, x, 0, NULL) == RA_ERR_SHAPE, "no kv");
        const int64_t huge[5] = {65536, 3, 65536, 65536, Cx};
        CHECK(ra_swin_block_3d_check(m, 5, huge, 5, (int64_t[]){65536, 2, 65536, 65536, Cx}) ==
              RA_ERR_SHAPE, "2^48 values");
        ra_model_free(m);
    }
}

/* ---- 2. resize: sizes from the tables, windows the loader takes --------- */

static void resize_tables(void) {
    /* a 7-window block on a 5x5 map: the loader clamped its window to 5 and
     * its table has 81 rows, not 169 */
    const char *clamped = F("net_block_clamp_5x5_w7.model.safetensors");
    CHECK(run("resize", clamped, "--window", "7", "-o", T("r7.st"), NULL) == 0, "%s", err);
    CHECK(run("forward", T("r7.st"), F("net_block_clamp_5x5_w7.input.safetensors"), "-o",
              T("r7y.st"), NULL) == 0, "the resized clamped block does not run: %s", err);
    ra_st_file *a = NULL, *b = NULL;
    if (ra_st_open(&a, clamped) == RA_OK && ra_st_open(&b, T("r7.st")) == RA_OK) {
        const char *nm = "attn.relative_position_bias_table";
        const ra_st_tensor *ta = ra_st_find(a, nm), *tb = ra_st_find(b, nm);
        CHECK(ta && tb && ta->numel == tb->numel && ta->dtype == RA_DTYPE_F32 &&
              tb->dtype == RA_DTYPE_F32, "resized clamped table: another size");
        if (ta && tb && ta->numel == tb->numel)   /* the same window: the same table */
            CHECK_CLOSE((const float *)tb->data, (const float *)ta->data, ta->numel, 1e-6, 1e-6,
                        "clamped table resized to its own window");
    }
    ra_st_close(a), ra_st_close(b);
    /* shrinking it below the map: 3x3, with the shift the block keeps (3)
     * refused as the loader refuses it; 4 is fine */
    CHECK(run("resize", clamped, "--window", "3", "-o", T("r3.st"), NULL) == 65 && one_line() &&
          !exists(T("r3.st")), "window 3 with shift 3: %s", err);
    CHECK(run("resize", clamped, "--window", "4", "-o", T("r4.st"), NULL) == 0, "%s", err);
    CHECK(run("forward", T("r4.st"), F("net_block_clamp_5x5_w7.input.safetensors"), "-o",
              T("r4y.st"), NULL) == 0, "window 4: %s", err);
    /* windows the loader refuses are refused, nothing written */
    const char *layer = F("swin_7x7.model.safetensors");
    const char *big[] = {"200", "4096"};
    for (int i = 0; i < 2; i++)
        CHECK(run("resize", layer, "--window", big[i], "-o", T("rbig.st"), NULL) == 65 &&
              one_line() && !exists(T("rbig.st")), "--window %s: %s", big[i], err);
}

/* ---- 3. flop counts that do not fit int64 ------------------------------- */

static void flop_overflow(void) {
    ra_model *m;
    if (ra_model_load(&m, F("vit_n17_h4.model.safetensors")) == RA_OK) {
        CHECK(ra_model_flops(m, 65536, 65536) == -1, "2^64 tokens: %lld",
              (long long)ra_model_flops(m, 65536, 65536));
        CHECK(ra_model_flops(m, 46341, 1) > 0 && ra_model_flops(m, 100000, 1) > 0,
              "long sequences count");
        ra_model_free(m);
    }
    CHECK(run("inspect", F("vit_n17_h4.model.safetensors"), "--size", "65536x65536", "--json",
              NULL) == 0 && strstr(out, "\"flops\": null"), "inspect --json: %s", out);
    const char *nets[] = {"net_swin_official.model.safetensors", "net3d_self_clamp.model.safetensors",
                          "net_block_w4.model.safetensors"};
    for (int i = 0; i < 3; i++) {
        CHECK(run("inspect", F(nets[i]), "--size", "65536x65536", "--json", NULL) == 0 &&
              !strstr(out, "\"flops\": -"), "%s: %s", nets[i], out);
    }
}

/* ---- 5. outputs never destroy anything ------------------------------------ */

static long file_size(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 ? (long)s.st_size : -1;
}

static int same_bytes(const char *a, const char *b) {
    static char x[1 << 16], y[1 << 16];
    slurp(a, x, sizeof x);
    slurp(b, y, sizeof y);
    return file_size(a) == file_size(b) && memcmp(x, y, sizeof x) == 0;
}

static int is_link(const char *path) {
    struct stat s;
    return lstat(path, &s) == 0 && S_ISLNK(s.st_mode);
}

/* A temporary file of an output (NAME.tmp.XXXXXX) in the directory. */
static int temp_left(void) {
    DIR *d = opendir(tmp);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));) found |= strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return found;
}

static void outputs(void) {
    char model[512], in[512], cp[2048];
    snprintf(model, sizeof model, "%s", T("m.st"));
    snprintf(in, sizeof in, "%s", T("in.st"));
    snprintf(cp, sizeof cp, "cp '%s' '%s' && cp '%s' '%s'", F("vit_n17_h4.model.safetensors"),
             model, F("vit_n17_h4.input.safetensors"), in);
    CHECK(system(cp) == 0, "copy the fixtures");
    /* the output is an input, by name, by another name, through a link */
    CHECK(run("forward", model, in, "-o", model, NULL) == 73 && one_line() &&
          same_bytes(model, F("vit_n17_h4.model.safetensors")), "-o MODEL: %s", err);
    CHECK(run("backward", model, in, "-o", in, NULL) == 73 &&
          same_bytes(in, F("vit_n17_h4.input.safetensors")), "-o INPUT: %s", err);
    CHECK(symlink(model, T("to_model")) == 0, "symlink");
    CHECK(run("forward", model, in, "-o", T("to_model"), NULL) == 73 && one_line() &&
          is_link(T("to_model")) && same_bytes(model, F("vit_n17_h4.model.safetensors")),
          "-o a link to MODEL: %s", err);
    CHECK(link(model, T("hard_model")) == 0, "hard link");
    CHECK(run("forward", model, in, "-o", T("hard_model"), NULL) == 73 &&
          same_bytes(model, F("vit_n17_h4.model.safetensors")), "-o a hard link to MODEL: %s", err);
    CHECK(run("resize", model, "--window", "5", "-o", model, NULL) == 73 &&
          same_bytes(model, F("vit_n17_h4.model.safetensors")), "resize -o MODEL: %s", err);

    /* a link to another regular file: refused, both left as they were */
    write_input(T("other.st"), "z", 1, 3, (char *)NULL);
    const long other_size = file_size(T("other.st"));
    CHECK(symlink(T("other.st"), T("to_other")) == 0, "symlink");
    CHECK(run("forward", model, in, "-o", T("to_other"), NULL) == 73 && one_line() &&
          is_link(T("to_other")) && file_size(T("other.st")) == other_size,
          "-o a link to a file: %s", err);
    CHECK(symlink(T("nothing_here"), T("dangling")) == 0, "symlink");
    CHECK(run("forward", model, in, "-o", T("dangling"), NULL) == 73 && is_link(T("dangling")) &&
          !exists(T("nothing_here")), "-o a dangling link: %s", err);
    /* a read-only file and a directory are not replaced */
    write_input(T("ro.st"), "z", 1, 3, (char *)NULL);
    const long ro_size = file_size(T("ro.st"));
    chmod(T("ro.st"), 0444);
    CHECK(run("forward", model, in, "-o", T("ro.st"), NULL) == 73 && one_line() &&
          file_size(T("ro.st")) == ro_size, "-o a 0444 file: %s", err);
    mkdir(T("dir.st"), 0755);
    CHECK(run("forward", model, in, "-o", T("dir.st"), NULL) == 73 && one_line(),
          "-o a directory: %s", err);
    /* /dev/null through a link in our directory: written through, the link stays */
    CHECK(symlink("/dev/null", T("null")) == 0, "symlink");
    CHECK(run("forward", model, in, "-o", T("null"), NULL) == 0 && is_link(T("null")),
          "-o a link to /dev/null: %s", err);
    /* a FIFO: without a reader refused at once, with one written through */
    CHECK(mkfifo(T("fifo"), 0644) == 0, "mkfifo");
    CHECK(run("forward", model, in, "-o", T("fifo"), NULL) == 73 && one_line(),
          "-o a FIFO without a reader: %s", err);
    pid_t reader = fork();
    if (reader == 0) {   /* cat FIFO > fifo.out */
        int fi = open(T("fifo"), O_RDONLY), fo = open(T("fifo.out"), O_WRONLY | O_CREAT, 0644);
        char b[4096];
        for (ssize_t k; (k = read(fi, b, sizeof b)) > 0;)
            if (write(fo, b, (size_t)k) != k) _exit(1);
        _exit(0);
    }
    int rc = 73;
    for (int i = 0; i < 200 && rc == 73; i++) {   /* until the reader has opened it */
        rc = run("forward", model, in, "-o", T("fifo"), NULL);
        if (rc == 73) nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    if (rc != 0) kill(reader, SIGKILL);   /* it may wait for a writer forever */
    waitpid(reader, NULL, 0);
    struct stat sf;
    CHECK(rc == 0 && lstat(T("fifo"), &sf) == 0 && S_ISFIFO(sf.st_mode) &&
          file_size(T("fifo.out")) > 8, "-o a FIFO with a reader: exit %d, %s", rc, err);
    CHECK(!temp_left(), "temporary files left");
    /* -o -: standard output (here a file) gets the whole file */
    ra_st_file *so = NULL;
    CHECK(run("forward", model, in, "-o", "-", NULL) == 0 &&
          ra_st_open(&so, T("stdout.txt")) == RA_OK && ra_st_find(so, "y"), "-o -: %s", err);
    ra_st_close(so);

    /* a file-size limit: a write error (73), the temporary file removed */
    fsize_limit = 100;
    CHECK(run("forward", model, in, "-o", T("limited.st"), NULL) == 73 && one_line() &&
          !exists(T("limited.st")) && !temp_left(), "RLIMIT_FSIZE: exit 73, no leftovers: %s",
          err);
    fsize_limit = 0;

    /* SIGTERM while the output is written: the temporary file goes too */
    ra_model *m;
    if (ra_model_load(&m, model) == RA_OK) {
        const int C = atoi(ra_model_meta(m, "dim"));
        ra_model_free(m);
        write_input(T("big.st"), "x", 3, (96 << 20) / (16 * C * 4), 16, C, (char *)NULL);
        int seen = 0, tries = 0;
        for (; tries < 5 && !seen; tries++) {
            const char *argv[] = {relattn, "forward", model, T("big.st"), "-o", T("big.out"),
                                  "--threads", "1", NULL};
            pid_t pid = fork();
            if (pid == 0) {
                int e = open("/dev/null", O_WRONLY);
                dup2(e, 2);
                execv(relattn, (char *const *)argv);
                _exit(127);
            }
            for (int i = 0; i < 40000 && !seen; i++) {   /* up to 20 s */
                if ((seen = temp_left())) kill(pid, SIGTERM);
                else if (waitpid(pid, NULL, WNOHANG) == pid) { pid = 0; break; }
                else nanosleep(&(struct timespec){0, 500000}, NULL);
            }
            int status = 0;
            if (pid) waitpid(pid, &status, 0);
            /* (the rename may have come first: then the output is whole) */
            if (seen)
                CHECK(((WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) ||
                       (WIFEXITED(status) && WEXITSTATUS(status) == 0)) && !temp_left(),
                      "SIGTERM while writing: a temporary file is left");
            remove(T("big.out"));
        }
        if (!seen) printf("note: no temporary file was seen in %d runs: SIGTERM not tested\n", tries);
    }
}

/* ---- 6. bytes from files and arguments never reach the terminal raw ----- */

/* Printable ASCII or valid UTF-8 without C1 controls, newlines only where
 * lines end. */
/* ---- 3b. outputs over the files a model folder read (issue 33) --------- */

/* A timm folder: config.json, preprocessor_config.json and model.safetensors,
 * the state dict of a fixture without relattn's metadata. */
static void write_folder(const char *dir) {
    ra_st_file *f = NULL;
    ra_st_writer *w = ra_st_writer_new();
    char path[600];
    CHECK(mkdir(dir, 0755) == 0 && w, "mkdir %s", dir);
    CHECK(ra_st_open(&f, F("net_swin_timm.model.safetensors")) == RA_OK, "%s", ra_last_error());
    for (int i = 0; f && w && i < ra_st_count(f); i++) {
        const ra_st_tensor *t = ra_st_at(f, i);
        CHECK(ra_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data) == RA_OK, "add");
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(w && ra_st_writer_save(w, path) == RA_OK, "%s", ra_last_error());
    ra_st_writer_free(w);
    ra_st_close(f);
    static const char *const files[][2] = {
        {"config.json", "{\"architecture\": \"swin_tiny_patch4_window7_224\", \"num_classes\": "
                        "10, \"pretrained_cfg\": {\"input_size\": [3, 32, 32]}}\n"},
        {"preprocessor_config.json", "{\"image_mean\": [0.5, 0.5, 0.5], \"image_std\": "
                                     "[0.25, 0.25, 0.25]}\n"}};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i][0]);
        FILE *c = fopen(path, "w");
        CHECK(c && fputs(files[i][1], c) >= 0 && fclose(c) == 0, "write %s", path);
    }
}

/* Every file a model folder's loading read is an input: no output replaces
 * one, by its name, through a hard link, another spelling or the target of
 * the folder's symlink (73, one line naming both; the bytes unchanged). On
 * df86b5e all of these were written (exit 0). */
static void folder_outputs(void) {
    char hf[256], keep[256], target[600], kept[600];
    snprintf(hf, sizeof hf, "%s", T("hf"));
    snprintf(keep, sizeof keep, "%s", T("hf_keep"));
    write_folder(hf);
    write_folder(keep);
    CHECK(run("inspect", hf, NULL) == 0 && strstr(out, "swin"), "the folder loads: %s", err);
    static const char *const members[] = {"model.safetensors", "config.json",
                                          "preprocessor_config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(target, sizeof target, "%s/%s", hf, members[i]);
        snprintf(kept, sizeof kept, "%s/%s", keep, members[i]);
        CHECK(run("convert", hf, "-o", target, NULL) == 73 && one_line() &&
              strstr(err, "an input") && same_bytes(target, kept), "convert -o %s: %s",
              members[i], err);
        snprintf(target, sizeof target, "%s/../hf/./%s", hf, members[i]);
        const int code = run("convert", hf, "-o", target, NULL);
        snprintf(target, sizeof target, "%s/%s", hf, members[i]);
        CHECK(code == 73 && one_line() && same_bytes(target, kept), "convert -o ../%s: %s",
              members[i], err);
    }
    /* forward: refused before the work, the weights kept */
    write_input(T("x.st"), "x", 4, 1, 3, 32, 32, (char *)NULL);
    snprintf(target, sizeof target, "%s/model.safetensors", hf);
    CHECK(run("forward", hf, T("x.st"), "-o", target, NULL) == 73 && one_line() &&
          same_bytes(target, T("hf_keep/model.safetensors")), "forward -o weights: %s", err);
    CHECK(link(target, T("hard_weights")) == 0, "hard link");
    CHECK(run("convert", hf, "-o", T("hard_weights"), NULL) == 73 && one_line() &&
          strstr(err, "hard_weights") && strstr(err, "model.safetensors") &&
          same_bytes(target, T("hf_keep/model.safetensors")),
          "convert -o a hard link of the weights: %s", err);
    /* the weights a symlink in the folder: its target is an input */
    CHECK(mkdir(T("hf_link"), 0755) == 0 && mkdir(T("elsewhere"), 0755) == 0, "mkdir");
    CHECK(rename(T("hf_keep/model.safetensors"), T("elsewhere/w.safetensors")) == 0, "mv");
    CHECK(symlink(T("elsewhere/w.safetensors"), T("hf_link/model.safetensors")) == 0 &&
          symlink(T("hf_keep/config.json"), T("hf_link/config.json")) == 0, "symlinks");
    CHECK(run("convert", T("hf_link"), "-o", T("elsewhere/w.safetensors"), NULL) == 73 &&
          one_line() && same_bytes(T("elsewhere/w.safetensors"), target),
          "convert -o the folder's symlink target: %s", err);
    CHECK(run("convert", T("hf_link"), "-o", T("hf_keep/config.json"), NULL) == 73 &&
          one_line(), "convert -o the target of the folder's config.json link: %s", err);
    /* a new file beside them is written; it loads as the folder does */
    CHECK(run("convert", hf, "-o", T("hf/relattn.safetensors"), NULL) == 0, "%s", err);
    CHECK(run("inspect", T("hf/relattn.safetensors"), NULL) == 0, "%s", err);

    /* the C API: a writer refuses what ra_model_open read, until forgotten */
    ra_model *m = NULL;
    CHECK(ra_model_open(&m, hf, NULL) == RA_OK, "%s", ra_last_error());
    snprintf(target, sizeof target, "%s/config.json", hf);
    CHECK(m && ra_model_save(m, target, RA_DTYPE_F32) == RA_ERR_WRITE &&
          strstr(ra_last_error(), "config.json") &&
          same_bytes(target, T("hf_keep/config.json")), "ra_model_save over config.json: %s",
          ra_last_error());
    CHECK(ra_output_check(T("hard_weights")) == RA_ERR_WRITE, "ra_output_check of a hard link");
    CHECK(ra_output_check(T("hf/nothing_yet.st")) == RA_OK, "%s", ra_last_error());
    ra_input_forget(NULL);
    CHECK(ra_output_check(target) == RA_OK && ra_output_check(T("hard_weights")) == RA_OK,
          "forgotten: %s", ra_last_error());
    ra_model_free(m);
}

static int terminal_safe(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p == '\n' || (*p >= 0x20 && *p < 0x7f)) { p++; continue; }
        int n = *p >= 0xc2 && *p < 0xe0 ? 2 : *p >= 0xe0 && *p < 0xf0 ? 3 : *p >= 0xf0 && *p < 0xf5 ? 4 : 0;
        if (!n || (*p == 0xc2 && p[1] < 0xa0)) return 0;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xc0) != 0x80) return 0;
        p += n;
    }
    return 1;
}

/* A safetensors file with header json and n zero bytes of data. */
static void write_raw(const char *path, const char *json, int n) {
    FILE *f = fopen(path, "wb");
    const uint64_t len = strlen(json);
    unsigned char h[8];
    for (int i = 0; i < 8; i++) h[i] = (unsigned char)(len >> (8 * i));
    fwrite(h, 1, 8, f);
    fwrite(json, 1, len, f);
    for (int i = 0; i < n; i++) fputc(0, f);
    fclose(f);
}

static void messages(void) {
    const char *model = F("vit_n17_h4.model.safetensors");
    /* a tensor name and metadata with escape sequences and C1 controls */
    write_raw(T("esc.st"), "{\"x\\u001b[31mred\\u0007\":{\"dtype\":\"F32\",\"shape\":[1],"
              "\"data_offsets\":[0,4]},\"__metadata__\":{\"k\\u0001\\u001b\":\"v\\u009b\"}}", 4);
    CHECK(run("forward", model, T("esc.st"), "-o", T("o.st"), NULL) == 65 && one_line() &&
          terminal_safe(err) && strstr(err, "\\x1b[31mred\\x07"), "tensor name: %s", err);
    CHECK(run("show", T("esc.st"), NULL) == 0 && terminal_safe(out) && strstr(out, "\\x1b"),
          "show: %s", out);
    /* invalid UTF-8 in the header, through jansson's message */
    write_raw(T("utf8.st"), "{\"x\xc3\x28\xff\":{\"dtype\":\"F32\",\"shape\":[1],"
              "\"data_offsets\":[0,4]}}", 4);
    CHECK(run("show", T("utf8.st"), NULL) == 65 && one_line() && terminal_safe(err),
          "invalid UTF-8: %s", err);
    /* arguments: a path and an option value */
    char path[600];
    snprintf(path, sizeof path, "%s/a\x1b]0;title\x07\n\x9b" "b.st", tmp);
    CHECK(run("forward", path, model, "-o", T("o.st"), NULL) == 66 && one_line() &&
          terminal_safe(err) && strstr(err, "\\x1b]0;title\\x07\\x0a\\x9b"), "path: %s", err);
    CHECK(run("index", "--window", "\x1b[2J", NULL) == 64 && one_line() && terminal_safe(err),
          "option value: %s", err);
    CHECK(run("index", "--\x1b[2J", NULL) == 64 && one_line() && terminal_safe(err),
          "option name: %s", err);
    /* a long path does not cut the reason off */
    char lpath[8192] = "";
    snprintf(lpath, sizeof lpath, "%s", tmp);
    while (strlen(lpath) < 6000) strcat(lpath, "/.");
    strcat(lpath, "/missing.safetensors");
    CHECK(run("forward", lpath, model, "-o", T("o.st"), NULL) == 66 && one_line() &&
          strstr(err, "missing.safetensors") && (strstr(err, "No such file") ||
          strstr(err, "too long")), "long path: %s", err);
    /* inspect --json escapes control characters in keys (and is JSON) */
    ra_st_file *f;
    if (ra_st_open(&f, model) == RA_OK) {
        ra_st_writer *w = ra_st_writer_new();
        for (int i = 0; i < ra_st_meta_count(f); i++)
            ra_st_writer_meta(w, ra_st_meta_key(f, i), ra_st_meta(f, ra_st_meta_key(f, i)));
        ra_st_writer_meta(w, "note\x01\x1b[1m\"", "v\x02");
        for (int i = 0; i < ra_st_count(f); i++) {
            const ra_st_tensor *t = ra_st_at(f, i);
            ra_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
        }
        CHECK(ra_st_writer_save(w, T("keys.st")) == RA_OK, "%s", ra_last_error());
        ra_st_writer_free(w);
        ra_st_close(f);
        CHECK(run("inspect", T("keys.st"), "--json", NULL) == 0 && terminal_safe(out) &&
              strstr(out, "\"note\\u0001\\u001B[1m\\\"\": \"v\\u0002\""), "inspect --json: %s",
              out);
        CHECK(run("inspect", T("keys.st"), NULL) == 0 && terminal_safe(out), "inspect: %s", out);
    }
    /* the library's reason and its escaping */
    char b[64];
    CHECK(ra_escape_text(b, sizeof b, "a\x1b\n\xc3\xa9\xe2\x82\xac\xff") == 18 &&
          !strcmp(b, "a\\x1b\\x0a\xc3\xa9\xe2\x82\xac\\xff"), "ra_escape_text: %s", b);
    char twice[64];
    ra_escape_text(twice, sizeof twice, b);
    CHECK(!strcmp(b, twice), "escaping twice changes nothing");
    CHECK(ra_escape_text(b, 4, "ab\xc3\xa9") == 4 && !strcmp(b, "ab"), "no half sequence: %s", b);
}

/* ---- 7. limits: checked before the allocation, 65 and the limit named ---- */

static void limits(void) {
    const char *shaw = F("shaw_both_k2.model.safetensors");
    const int C = dim_of(shaw);
    CHECK(C > 0, "shaw fixture");
    /* Shaw's (N, N) index: one token over the limit is refused at once */
    write_input(T("long.st"), "x", 3, 1, RA_MAX_SHAW_TOKENS + 1, C, (char *)NULL);
    CHECK(run("forward", shaw, T("long.st"), "-o", T("o.st"), NULL) == 65 && one_line() &&
          strstr(err, "too large") && strstr(err, "16384") && !exists(T("o.st")),
          "shaw beyond its limit: %s", err);
    /* --attn: the map is bounded before it is allocated */
    const char *vit = F("vit_n17_h4.model.safetensors");
    const int Cv = dim_of(vit);
    write_input(T("seq.st"), "x", 3, 1, 20000, Cv, (char *)NULL);
    CHECK(run("forward", vit, T("seq.st"), "-o", T("o.st"), "--attn", NULL) == 65 &&
          one_line() && strstr(err, "too large") && strstr(err, "limit") && !exists(T("o.st")),
          "--attn of 4 x 20000^2 floats: %s", err);
    /* out of memory (an address-space limit) is 65, "too large": Shaw's
     * index is linear in N, its attention map (2 heads x N^2 floats, 2 GB,
     * under RA_MAX_ATTN_MAP) is what does not fit */
    if (!getenv("RELATTN_SANITIZED")) {
        write_input(T("mid.st"), "x", 3, 1, RA_MAX_SHAW_TOKENS, C, (char *)NULL);
        as_limit = 512L << 20;
        const int rc = run("forward", shaw, T("mid.st"), "-o", T("o.st"), "--threads", "1",
                           "--attn", NULL);
        as_limit = 0;
        CHECK(rc == 65 && one_line() && strstr(err, "too large") && !exists(T("o.st")),
              "out of memory: exit %d: %s", rc, err);
    }
}

/* ---- 8. the small items of the same review --------------------------------- */

static void small_items(void) {
    CHECK(run("index", "--length", "99999999999", "--clip", "1", NULL) == 64 && one_line() &&
          strstr(err, "out of range"), "--length 99999999999: %s", err);
    CHECK(run("index", "--length", "5x", "--clip", "1", NULL) == 64 &&
          strstr(err, "not an integer"), "--length 5x: %s", err);
    CHECK(run("index", "--length", "5", "--clip", "-1", NULL) == 65 && one_line() &&
          strstr(err, "clip -1") && !strstr(err, "length"), "--clip -1 blames --clip only: %s",
          err);
    kernel_env = "fast";
    CHECK(run("index", "--window", "2", NULL) == 64 && one_line() && strstr(err, "RELATTN_KERNEL"),
          "an unknown RELATTN_KERNEL: %s", err);
    kernel_env = "ref";
    CHECK(run("index", "--window", "2", NULL) == 0, "RELATTN_KERNEL=ref: %s", err);
    kernel_env = NULL;
    CHECK(run("forward", "--help", NULL) == 0 && !strstr(out, "%%") && strstr(out, "B_ % nW"),
          "forward --help: %s", out);
    CHECK(run("classify", F("vit_n17_h4.model.safetensors"), F("img_wide.png"), NULL) == 65 &&
          one_line() && !strstr(err, "classify: classify"), "classify repeats itself: %s", err);
}

/* ---- 9. sizes from shapes: zero and huge dimensions (issue 33) ----------- */

#define I64MAX INT64_C(9223372036854775807)

/* A state dict without metadata: name, ndim, then the int64 dims, per
 * tensor, a NULL name ending the list; F32 zeros (no byte when a dim is 0). */
static void write_dict(const char *path, ...) {
    ra_st_writer *w = ra_st_writer_new();
    va_list ap;
    va_start(ap, path);
    const char *name;
    while ((name = va_arg(ap, const char *))) {
        const int nd = va_arg(ap, int);
        int64_t shape[8], numel = 1;
        for (int i = 0; i < nd; i++) shape[i] = va_arg(ap, int64_t), numel = shape[i] ? numel * shape[i] : 0;
        float *d = numel ? calloc((size_t)numel, sizeof *d) : NULL;
        CHECK(ra_st_writer_add(w, name, RA_DTYPE_F32, nd, shape, d) == RA_OK, "%s", ra_last_error());
        free(d);
    }
    va_end(ap);
    CHECK(ra_st_writer_save(w, path) == RA_OK, "%s", ra_last_error());
    ra_st_writer_free(w);
}
#define D(x) ((int64_t)(x))

/* path refused by the library (RA_ERR_FORMAT, the reason naming `names`)
 * and by `relattn inspect` (65, one line naming it, no negative number). */
static void refused(const char *path, const char *names, const char *what) {
    ra_model *m = NULL;
    const ra_status st = ra_model_open(&m, path, NULL);
    CHECK(st == RA_ERR_FORMAT && !m && strstr(ra_last_error(), names), "%s: library: %d %s", what,
          (int)st, ra_last_error());
    ra_model_free(m);
    const int rc = run("inspect", path, NULL);
    CHECK(rc == 65 && one_line() && strstr(err, names) && !strstr(err, "= -"),
          "%s: inspect: exit %d: %s", what, rc, err);
}

static void shape_sizes(void) {
    /* a channel count of 0: put_ratio divided by it (SIGFPE) */
    write_dict(T("vit0.st"), "patch_embed.proj.weight", 4, D(0), D(3), D(8), D(8),
               "blocks.0.norm1.weight", 1, D(16), "blocks.0.attn.qkv.weight", 2, D(48), D(16),
               "blocks.0.mlp.fc1.weight", 2, D(32), D(16), (char *)NULL);
    refused(T("vit0.st"), "patch_embed.proj.weight", "vit of embed_dim 0");
    write_dict(T("swin0.st"), "patch_embed.proj.weight", 4, D(0), D(3), D(4), D(4),
               "layers.0.blocks.0.norm1.weight", 1, D(16),
               "layers.0.blocks.0.attn.relative_position_bias_table", 2, D(169), D(2),
               "layers.0.blocks.0.mlp.fc1.weight", 2, D(64), D(16), (char *)NULL);
    refused(T("swin0.st"), "patch_embed.proj.weight", "swin of embed_dim 0");
    write_dict(T("blk0.st"), "norm1.weight", 1, D(0), "attn.relative_position_bias_table", 2,
               D(169), D(2), "mlp.fc1.weight", 2, D(64), D(16), (char *)NULL);
    refused(T("blk0.st"), "norm1.weight", "swin_block of dim 0");
    /* the same through torchvision's names, a patch of 0, heads of 0, an MLP of 0 */
    write_dict(T("tv0.st"), "features.0.0.weight", 4, D(16), D(3), D(0), D(0),
               "features.1.0.norm1.weight", 1, D(16),
               "features.1.0.attn.relative_position_bias_table", 2, D(169), D(2), (char *)NULL);
    refused(T("tv0.st"), "features.0.0.weight", "torchvision swin of patch 0");
    write_dict(T("heads0.st"), "norm1.weight", 1, D(16), "attn.relative_position_bias_table", 2,
               D(169), D(0), (char *)NULL);
    refused(T("heads0.st"), "attn.relative_position_bias_table", "swin_block of 0 heads");
    write_dict(T("mlp0.st"), "patch_embed.proj.weight", 4, D(16), D(3), D(8), D(8),
               "blocks.0.norm1.weight", 1, D(16), "blocks.0.attn.qkv.weight", 2, D(48), D(16),
               "blocks.0.mlp.fc1.weight", 2, D(0), D(16), (char *)NULL);
    refused(T("mlp0.st"), "blocks.0.mlp.fc1.weight", "vit of MLP width 0");

    /* squares near 2^63 (signed overflow: UBSan halts on these before the fix) */
    write_dict(T("table.st"), "norm1.weight", 1, D(16), "attn.relative_position_bias_table", 2,
               I64MAX, D(0), (char *)NULL);
    refused(T("table.st"), "attn.relative_position_bias_table", "a table of 2^63-1 rows");
    write_dict(T("pos.st"), "patch_embed.proj.weight", 4, D(16), D(3), D(8), D(8),
               "blocks.0.norm1.weight", 1, D(16), "blocks.0.attn.qkv.weight", 2, D(48), D(16),
               "pos_embed", 3, D(1), I64MAX, D(0), (char *)NULL);
    ra_model *m = NULL;
    ra_load_options o = {0};
    const char *set[] = {"num_heads=2", "img_size=32", "mlp_ratio=4"};
    o.set = set, o.nset = 3;
    CHECK(ra_model_open(&m, T("pos.st"), &o) == RA_ERR_SHAPE && strstr(ra_last_error(), "pos_embed"),
          "pos_embed of 2^63-1 rows: %s", ra_last_error());
    ra_model_free(m);
    write_dict(T("ape.st"), "patch_embed.proj.weight", 4, D(16), D(3), D(4), D(4),
               "layers.0.blocks.0.norm1.weight", 1, D(16),
               "layers.0.blocks.0.attn.relative_position_bias_table", 2, D(169), D(2),
               "absolute_pos_embed", 3, D(1), I64MAX, D(0), (char *)NULL);
    CHECK(run("inspect", T("ape.st"), NULL) == 65 && one_line() && strstr(err, "absolute_pos_embed"),
          "absolute_pos_embed of 2^63-1 rows: %s", err);
    /* SwinV2's window from a relative_coords_table of (0, 2^63-1, 2^63-1, 2): (n + 1) / 2 */
    write_dict(T("coords.st"), "patch_embed.proj.weight", 4, D(16), D(3), D(4), D(4),
               "layers.0.blocks.0.norm1.weight", 1, D(16),
               "layers.0.blocks.0.attn.cpb_mlp.0.weight", 2, D(512), D(2),
               "layers.0.blocks.0.attn.cpb_mlp.2.weight", 2, D(2), D(512),
               "layers.0.blocks.0.attn.relative_coords_table", 4, D(0), I64MAX, I64MAX, D(2),
               (char *)NULL);
    CHECK(ra_model_open(&m, T("coords.st"), NULL) == RA_ERR_FORMAT && !m, "coords: %s",
          ra_last_error());
    CHECK(run("inspect", T("coords.st"), NULL) == 65 && one_line(), "coords: %s", err);
    /* the saved mask's windows times the window in int: "input_resolution
     * = -1257966798" (heads 0 are now refused first) */
    write_dict(T("mask.st"), "norm1.weight", 1, D(16), "attn.relative_position_bias_table", 2,
               D(3037000497) * D(3037000497), D(0), "attn_mask", 3, D(4), D(0), D(0), (char *)NULL);
    refused(T("mask.st"), "attn.relative_position_bias_table", "a table of 3037000497^2 rows");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_hardening FIXTURES_DIR RELATTN_BINARY\n");
        return 2;
    }
    fixtures = argv[1], relattn = argv[2];
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmp, sizeof tmp, "%s/relattn_hardening.XXXXXX", base);
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 2;
    swin3d_shapes();
    resize_tables();
    flop_overflow();
    outputs();
    folder_outputs();
    messages();
    limits();
    small_items();
    shape_sizes();
    char rm[512];
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmp);
    if (system(rm) != 0) fprintf(stderr, "note: could not remove %s\n", tmp);
    return check_done();
}
