/* arena.h - a reusable workspace for the forwards and backwards of the
 * networks (src/base/arena.c); private to the library. */
#ifndef RA_ARENA_H
#define RA_ARENA_H

#include "base/internal.h"

#include <stdatomic.h>

/* An arena: allocations are carved from one block, 64-byte aligned, and
 * released stack-wise (rai_arena_mark / rai_arena_reset). A request that does
 * not fit is served by its own allocation, which takes its place on the
 * stack and is freed when the stack unwinds past it; the deepest the stack
 * went is remembered, so the next run gets one block of the right size:
 * after the first forward of a given shape nothing is allocated, and the
 * pages are already mapped (first-touch page faults of fresh large
 * allocations cost as much as the element-wise layers). The first run
 * itself holds no more memory at once than that depth. */
typedef struct rai_arena {
    char *base;
    size_t cap;           /* bytes of the block */
    size_t used;          /* depth of the stack, in the block or in spills */
    size_t peak;          /* the deepest it went */
    void *spill;          /* allocations that did not fit, the newest first */
} rai_arena;

/* A model's cached arenas: up to RA_ARENA_SLOTS forwards at a time (threads
 * sharing the model) each keep one between calls; one more gets a private
 * arena (plain allocations). */
#define RA_ARENA_SLOTS 8
typedef struct rai_arena_cache {
    atomic_int busy[RA_ARENA_SLOTS];
    rai_arena arena[RA_ARENA_SLOTS];
} rai_arena_cache;

/* Take a free arena of the cache (or a fresh one if all are taken). */
rai_arena *rai_arena_begin(rai_arena_cache *c, rai_arena *local);
/* Free the spills; give the cache's arena back, grown to the peak. */
void rai_arena_end(rai_arena_cache *c, rai_arena *a);
void rai_arena_cache_free(rai_arena_cache *c);
/* n floats (64-byte aligned), NULL if out of memory. */
float *rai_arena_floats(rai_arena *a, size_t n);
void *rai_arena_bytes(rai_arena *a, size_t bytes);
static inline size_t rai_arena_mark(const rai_arena *a) { return a->used; }
/* Release what was allocated since mark (spills are freed). */
void rai_arena_reset(rai_arena *a, size_t mark);

/* n floats at *off floats of base, *off moved past them in 64-byte steps;
 * NULL base: only counting (a tape's layout sized before its buffer is). */
static inline float *rai_carve(float *base, size_t *off, size_t n) {
    float *p = base ? base + *off : NULL;
    *off += (n + 15) & ~(size_t)15;
    return p;
}

/* A buffer of the calling thread, one per slot, kept and grown between
 * calls (a fresh large buffer per call would take its page faults every
 * time) and freed when the thread ends (OpenMP's pool threads keep theirs);
 * 64-byte aligned; NULL without memory. A slot is one user's: the packed
 * panels of a product, say. */
enum { RAI_BUFFER_GEMM, RAI_BUFFER_GEMM512_PACK, RAI_BUFFER_GEMM512_TN, RAI_BUFFER_PRECISION,
       RAI_BUFFER_BF16, RAI_BUFFER_BF16_W, RAI_BUFFER_BF16_TN, RAI_BUFFER_PRECISION_W,
       RAI_THREAD_BUFFERS };
void *rai_thread_buffer(int slot, size_t bytes);

#endif
