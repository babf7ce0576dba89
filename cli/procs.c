/* procs.c - the processes of a data-parallel `relattn train`:
 * under mpirun, the MPI ranks; otherwise one process. The library knows
 * nothing of MPI: it takes the collectives as an ra_train_comm, which this
 * file fills with MPI's. Built without MPI (RA_HAVE_MPI undefined), a run
 * started by a launcher with several processes is refused. */
#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef RA_HAVE_MPI
#include <mpi.h>
#endif

/* The launchers' environment: Open MPI's mpirun, or a PMI/PMIx one
 * (MPICH's hydra, srun). A plain run never starts MPI. */
static int launched_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return getenv("PMIX_RANK") ? 2 : 0;   /* PMIx without a size: assume several */
}

static double comm_seconds;   /* spent in the trainer's collectives */

#ifdef RA_HAVE_MPI
static int mpi_on;

/* MPI's int counts: a buffer is sent in pieces of at most 2^30 floats. */
enum { PIECE = 1 << 30 };

static ra_status mpi_allreduce_sum(float *buf, int64_t n, void *ctx) {
    (void)ctx;
    const double t0 = MPI_Wtime();
    ra_status st = RA_OK;
    for (int64_t i = 0; i < n && !st; i += PIECE) {
        const int k = (int)(n - i < PIECE ? n - i : PIECE);
        if (MPI_Allreduce(MPI_IN_PLACE, buf + i, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD))
            st = RA_ERR_IO;
    }
    comm_seconds += MPI_Wtime() - t0;
    return st;
}

/* The processes' counts and offsets as MPI's ints, or 0 if one is too big. */
static int int_parts(int *cnt, int *dsp, const int64_t *off, const int64_t *count, int n) {
    for (int r = 0; r < n; r++) {
        if (count[r] > INT32_MAX || off[r] > INT32_MAX) return 0;
        cnt[r] = (int)count[r], dsp[r] = (int)off[r];
    }
    return 1;
}

static ra_status mpi_parts(float *buf, const int64_t *off, const int64_t *count, int scatter) {
    const double t0 = MPI_Wtime();
    int n, me;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int *cnt = malloc((size_t)n * sizeof *cnt), *dsp = malloc((size_t)n * sizeof *dsp);
    ra_status st = RA_OK;
    /* the library reports a failure as a failed collective; the reason
     * goes to stderr here */
    if (!cnt || !dsp) {
        st = RA_ERR_NOMEM;
    } else if (!int_parts(cnt, dsp, off, count, n)) {
        fprintf(stderr, "%s: ZeRO-1: a process's part exceeds 2^31 floats\n", cmd);
        st = RA_ERR_ARG;
    } else if (scatter) {
        /* in place, MPI leaves this process's sum at the start of buf; the
         * parts are contiguous in rank order from offset 0 */
        if (MPI_Reduce_scatter(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD))
            st = RA_ERR_IO;
        else if (dsp[me])
            memmove(buf + dsp[me], buf, (size_t)cnt[me] * sizeof *buf);
    } else if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dsp, MPI_FLOAT,
                              MPI_COMM_WORLD)) {
        st = RA_ERR_IO;
    }
    free(cnt), free(dsp);
    comm_seconds += MPI_Wtime() - t0;
    return st;
}

static ra_status mpi_reduce_scatter(float *buf, const int64_t *off, const int64_t *count,
                                    void *ctx) {
    (void)ctx;
    return mpi_parts(buf, off, count, 1);
}

static ra_status mpi_allgather(float *buf, const int64_t *off, const int64_t *count, void *ctx) {
    (void)ctx;
    return mpi_parts(buf, off, count, 0);
}
#endif

int procs_start(procs *p, int *argc, char ***argv) {
    memset(p, 0, sizeof *p);
    p->size = p->local = 1;
    const int want = launched_size();
#ifdef RA_HAVE_MPI
    if (want < 1) return EX_OK;
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return fail(EX_SOFTWARE, "MPI_Init failed");
    mpi_on = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &p->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p->size);
    MPI_Comm node;   /* the processes sharing this machine share its cores */
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &p->local);
        MPI_Comm_free(&node);
    }
    return EX_OK;
#else
    (void)argc, (void)argv;
    if (want > 1)
        return fail(EX_USAGE, "started as one of %d processes, but this relattn was built "
                    "without MPI (install libopenmpi-dev and build again)", want);
    return EX_OK;
#endif
}

void procs_end(const procs *p) {
    (void)p;
#ifdef RA_HAVE_MPI
    if (mpi_on) MPI_Finalize();
    mpi_on = 0;
#endif
}

int procs_abort(const procs *p, int code) {
#ifdef RA_HAVE_MPI
    /* the others would wait for this process at their next collective */
    if (mpi_on && p->size > 1) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
#endif
    (void)p;
    return code;
}

ra_train_comm procs_comm(const procs *p) {
    ra_train_comm c = {.rank = p->rank, .size = p->size};
#ifdef RA_HAVE_MPI
    c.allreduce_sum = mpi_allreduce_sum;
    c.reduce_scatter_sum = mpi_reduce_scatter;
    c.allgather = mpi_allgather;
#endif
    return c;
}

int procs_sum_i64(const procs *p, int64_t *v, int n) {
#ifdef RA_HAVE_MPI
    if (mpi_on && p->size > 1 &&
        MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return 0;
#endif
    (void)p, (void)v, (void)n;
    return 1;
}

int procs_any(const procs *p, int flag) {
#ifdef RA_HAVE_MPI
    if (mpi_on && p->size > 1)
        MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
#endif
    (void)p;
    return flag;
}

double procs_comm_seconds(void) { return comm_seconds; }

int procs_default_threads(const procs *p) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const long t = (cores > 0 ? cores : 1) / (p->local > 0 ? p->local : 1);
    return t < 1 ? 1 : (int)t;
}
