/* cli.h - what the subcommands of the relattn command share
 * (docs/reference.md, sections 4 and 5).
 *
 * Each subcommand (cmd_NAME.c) parses its arguments, calls the library and
 * turns a failing status into one line on stderr and an exit code:
 *   0 ok, 64 usage, 65 bad data, 66 input missing, 73 cannot write, 70 bug.
 * Outputs are written atomically by the library's writer: on failure no
 * output file exists.
 *
 * A new command is a file cmd_NAME.c with `int cmd_NAME(int argc, char **argv)`
 * (argv holds the arguments after the command's name), its line below, its
 * line in the table of main.c and its source in CMakeLists.txt. */
#ifndef RELATTN_CLI_H
#define RELATTN_CLI_H

#include "relattn.h"

#include <jansson.h>

enum { EX_OK = 0, EX_USAGE = 64, EX_DATAERR = 65, EX_NOINPUT = 66, EX_SOFTWARE = 70,
       EX_CANTCREAT = 73 };

/* ---- the commands (main.c's table) -------------------------------------- */

int cmd_index(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_backward(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_classify(int argc, char **argv);
int cmd_resize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_plot(int argc, char **argv);

/* ---- messages and exit codes (args.c) ----------------------------------- */

extern const char *cmd;   /* "relattn", then "relattn index", ... for messages */

/* "CMD: message" on stderr; returns code. */
int fail(int code, const char *fmt, ...);
/* The same with a pointer to --help; returns EX_USAGE. */
int usage_error(const char *fmt, ...);
/* A failed library call: its reason, and the exit code of its status
 * (out of memory: 65, "too large"). */
int lib_fail(ra_status st);
/* The exit code of a status whose message was already printed. */
int status_exit(ra_status st);

/* ---- outputs (args.c) ---------------------------------------------------- */

/* EX_OK if out is none of the n inputs (compared as files: device and
 * inode, through links); else EX_CANTCREAT after a message. */
int output_not_input(const char *out, const char *const *inputs, int n);
/* EX_OK if out is none of the files the library has read so far (model
 * folders' members, checkpoints, datasets, images: ra_output_check), else
 * EX_CANTCREAT after a message naming both. Called once the inputs are
 * read, before the work; the writers check again as they write. */
int output_ok(const char *out);
/* Signals that end the command (SIGINT, SIGTERM, SIGHUP) remove the
 * temporary file of an output being written, then end it as they would
 * have; SIGXFSZ is ignored, so that a file-size limit is a write error. */
void cleanup_on_signals(void);

/* ---- arguments (args.c) -------------------------------------------------- */

/* A whole decimal integer in [lo, hi]; 0 if malformed (a usage error). */
int parse_int(int *out, const char *s, int lo, int hi);
/* Why s is not an int in [lo, hi]: "not an integer" or "out of range lo..hi"
 * (a static buffer). */
const char *int_problem(const char *s, int lo, int hi);
/* "7", "7x7", "3x5" (also "3,5"). */
int parse_window(int w[2], const char *s);

/* Options of a subcommand: "--name" with or without a value. Positional
 * arguments are gathered in order. "--name=value" is accepted too. A table
 * ends with {0, 0, 0}. takes_value 2: an optional value, "--name=value" or
 * "--name LIST" where LIST is "all" or integers, commas and minus signs
 * (else "" when given without one). */
typedef struct {
    const char *name;
    int takes_value;
    const char *value;   /* set when given (flags: "1") */
} opt;

/* Model sources (docs/reference.md, section 2): --key PATH, --set
 * KEY=VALUE (repeatable) and --precision P are taken out of argv (*argc updated) into
 * model_options, for the commands that open a model with open_model.
 * 1 on success; 0 after printing a usage error. */
int take_model_options(int *argc, char **argv);
/* The same with precision 0: --precision left to the command (train's own). */
int take_model_options_as(int *argc, char **argv, int precision);
extern ra_load_options model_options;
ra_status open_model(ra_model **m, const char *path);
/* The lines of help every such command shows. */
#define MODEL_OPTIONS_HELP                                                                    \
    "MODEL is a relattn model file, a safetensors state_dict, a PyTorch checkpoint\n"         \
    "(.pth, .bin, .pth.tar) or a timm / Hugging Face model folder.\n"                          \
    "  --key PATH       the state dict inside a checkpoint (default: found)\n"                 \
    "  --set KEY=VALUE  set a hyperparameter or metadata value (repeatable)\n"       \
    "  --precision P    fp32 (default), bf16 or int8: the networks' products\n"

/* 1 on success; 0 after printing a usage error. */
int parse_args(int argc, char **argv, opt *opts, const char **pos, int maxpos, int *npos);
/* The value of an option, NULL when not given. */
const char *get(const opt *opts, const char *name);
/* Applies --threads N if given; 0 after printing a usage error. */
int threads_option(const opt *opts);
/* MODEL INPUT -o OUT [--threads N] and the subcommand's flags: -1 to go on,
 * else the exit code (help printed, or a usage error). */
int model_input_args(int argc, char **argv, opt *opts, const char *help,
                     const char *pos[2], const char **outp);

/* The input normalisation of a grey classifier: a checkpoint's train.mean
 * and train.std, else the metadata's mean and std (one number each), else
 * Fashion-MNIST's. 0 (and a message) if they are unusable. */
int model_norm(const ra_model *m, float *mean, float *std);

/* "step value step value ..." (a checkpoint's train.log.*): up to max
 * pairs into v (2 * max doubles); returns how many. */
int parse_pairs(double *v, int max, const char *s);

/* s escaped for a terminal (ra_escape_text: control characters, C1
 * controls and invalid UTF-8 as \xHH), whole, in one of 8 rotating
 * buffers (valid until 8 more calls): the one way a name, label, path or
 * metadata value from a file or an argument reaches stdout in the human
 * output. NULL gives "". */
const char *safe_text(const char *s);

/* ---- --json output (json.c) ----------------------------------------------- */

/* A JSON document on stdout, written in order: the writer puts the
 * separators (", ", ": ") and keeps the nesting; every string (keys
 * included) is a jansson string dumped with JSON_ENSURE_ASCII, never
 * pasted; numbers in the command's printf format. */
#define JW_MAX_DEPTH 32
typedef struct {
    int depth, after_key;
    int count[JW_MAX_DEPTH];   /* values so far at each open level */
} jw;

void jw_object(jw *w);                  /* { */
void jw_array(jw *w);                   /* [ */
void jw_end(jw *w, char close);         /* } or ] */
void jw_key(jw *w, const char *k);      /* "k": */
void jw_string(jw *w, const char *s);   /* a string (json_text); NULL: null */
void jw_int(jw *w, long long v);
void jw_real(jw *w, const char *fmt, double v);   /* printf(fmt, v); not finite: null */
void jw_null(jw *w);
void jw_value(jw *w, const json_t *v);  /* any jansson value, ASCII */
void jw_line(jw *w);                    /* the newline ending the document */

/* s as a jansson string (NULL: null): text that is not UTF-8 (a file
 * name, an argument) has each byte outside a valid sequence replaced by
 * U+FFFD, which JSON can hold; valid UTF-8 is kept exactly. A new
 * reference (NULL out of memory). */
json_t *json_text(const char *s);

/* ---- timed runs of forward and backward (repeat.c) ---------------------- */

/* --repeat R and --json. R timed runs follow one warm-up run; --json alone
 * means --repeat 1; without either there is one untimed run and no report. */
typedef struct {
    int runs;                  /* R; 0: one plain run */
    int json;                  /* report on stdout as JSON, else a line on stderr */
    double flops;              /* of one run; < 0 unknown */
    double median_ms, min_ms;  /* the timed runs' */
} repeat;

/* Reads --repeat and --json: 1, or 0 after a usage error. */
int repeat_option(repeat *r, const opt *opts);

/* Multiply-adds of one forward of m over an input x of that shape, as
 * ra_model_flops counts them, times the windows, sequences, images or clips
 * of x; -1 where there is no count. Forward runs are 2 flops each, forward
 * plus backward 6 (backward = twice the forward, the usual convention). */
double run_macs(const ra_model *m, int ndim, const int64_t *shape);

/* One run of the compute being timed: EX_OK, or the exit code of a failure
 * whose message is printed. A run must leave its outputs complete. */
typedef int (*run_fn)(void *ctx);

/* run(ctx) once; with r->runs, a warm-up and r->runs timed runs, their
 * median and minimum kept in r (flops: of one run, < 0 unknown). Returns
 * the first failure's exit code, else EX_OK. */
int repeat_run(repeat *r, run_fn run, void *ctx, double flops);

/* The report of timed runs: one JSON line on stdout
 * {"median_ms": M, "min_ms": m, "gflops": G or null}, or one human line on
 * stderr. Nothing without --repeat / --json. */
void repeat_report(const repeat *r);

/* ---- forward and backward (job.c) ---------------------------------------- */

/* Load MODEL, read INPUT's tensors, run the model on them (ra_run_*: the
 * checks of the inputs and the names of the outputs are the library's)
 * with r's timing, and write OUT with the model's arch as metadata: the
 * exit code, after a message on failure. */
int job_run(const char *model, const char *input, const char *outp, ra_run_mode mode,
            repeat *r);
/* The same for a RA_RUN_FEATURES run with the maps of fo (forward --features). */
int job_run_features(const char *model, const char *input, const char *outp,
                     const ra_features_options *fo, repeat *r);

/* ---- eval of an image folder (eval_folder.c) ------------------------------ */

/* relattn eval MODEL --data DIR for DIR/<class>/... (or DIR/val/<class>/...):
 * top-1, top-5, per-class accuracy and the confusion matrix, in batches of
 * `batch`; skip_bad counts and skips images that do not decode. The exit code. */
int eval_folder(ra_model *m, const char *dir, int json, int skip_bad, int batch);
/* The same for a video model on a video folder (ra_video_folder_scan),
 * each video scored by its probabilities averaged over the views of
 * cs x vt (video_probs), as classify gives them. */
int eval_video_folder(ra_model *m, const char *dir, int json, int skip_bad,
                      const ra_clip_spec *cs, const ra_video_transform *vt, const char *source);

/* ---- a video model's views (video_views.c) -------------------------------- */

/* The softmax of y (k) into p, in double. */
void softmax_probs(double *p, const float *y, int k);
/* The clips and frame transform of a video model (its metadata; *source
 * where they came from, source may be NULL) with the options --clips,
 * --clip-len, --frame-interval, --crops, --frame-rate of opts and crop /
 * resize (0: the model's): EX_OK or the exit code after a message. */
int video_options(ra_clip_spec *cs, ra_video_transform *vt, const char **source, const ra_model *m,
                  const opt *opts, int crop, int resize);
/* The video at path through m: every view (clip x crop) run one at a time,
 * their softmax probabilities averaged (mmaction's average_clips='prob')
 * into *probs (k; free()). EX_OK, or the exit code after a message; with
 * bad, a video that does not open or decode (RA_ERR_FORMAT, RA_ERR_IO) sets
 * *bad = 1 and returns EX_OK, silently, with no probabilities. */
int video_probs(double **probs, int *k, ra_model *m, const char *path, const ra_clip_spec *cs,
                const ra_video_transform *vt, int *bad);

/* ---- the data of relattn train (train_data.c) ------------------------------ */

typedef struct {
    ra_dataset train, test;   /* streamed: n, size, classes and 3 channels only */
    int folder;          /* an image folder (else IDX files) */
    int stream;          /* the folder's images decoded for every batch (loaders) */
    char *labels;        /* a folder's class names, a JSON array (free) */
    float mean, std;     /* a folder's training bytes / 255: mean and deviation */
    int64_t skipped;     /* images left out (--skip-bad) */
    ra_image_folder tf, vf;   /* streamed: the training and evaluation folders */
    int64_t *idx;        /* streamed: the images of each part (NULL: all, in order) */
    int64_t *tidx, *vidx;
} train_set;
/* Whether dir is an image folder: a directory without the IDX images file
 * of split ("train", "t10k"); a missing dir is not (the IDX reader says
 * why). For train and eval. */
int is_image_folder(const char *dir, const char *split);
/* The training and evaluation data of dir: IDX files, or an image folder
 * (DIR/train + DIR/val, or DIR with val_split > 0 held out by seed) at
 * size x size, decoded once (stream 0) or listed for loaders (stream 1);
 * with video, a video folder (ra_video_folder_scan) listed for loaders.
 * The exit code; on failure nothing is held. */
int train_data(train_set *ts, const char *dir, int size, double val_split, uint64_t seed,
               int skip_bad, int stream, int video);
void train_data_free(train_set *ts);

/* ---- the processes of a data-parallel run (procs.c) ---------------------- */
typedef struct {
    int rank, size;   /* this process, how many (1 without a launcher) */
    int local;        /* how many share this machine */
} procs;

/* MPI_Init when started by mpirun (or another MPI launcher), else one
 * process; EX_OK or an exit code after a message. */
int procs_start(procs *p, int *argc, char ***argv);
void procs_end(const procs *p);
/* After a failure in one process: end every process (MPI_Abort), since
 * the others would wait at their next collective; returns code. */
int procs_abort(const procs *p, int code);
ra_train_comm procs_comm(const procs *p);
/* n integers summed over the processes in place; 0 on failure. */
int procs_sum_i64(const procs *p, int64_t *v, int n);
/* Whether flag is set in any process. */
int procs_any(const procs *p, int flag);
/* Seconds this process spent in the trainer's collectives so far. */
double procs_comm_seconds(void);
/* The cores of this machine shared by the processes on it (at least 1). */
int procs_default_threads(const procs *p);

#endif
