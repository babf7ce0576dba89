/* arena.h - a reusable workspace for the forwards and backwards of the
 * networks (src/base/arena.c); private to the library. */
#ifndef RA_ARENA_H
#define RA_ARENA_H

#include "base/internal.h"

#include <stdatomic.h>

/* An arena: allocations are carved from one block, 64-byte aligned, and
 * released stack-wise (ra_arena_mark / ra_arena_reset). A request that does
 * not fit is served by its own allocation, which takes its place on the
 * stack and is freed when the stack unwinds past it; the deepest the stack
 * went is remembered, so the next run gets one block of the right size:
 * after the first forward of a given shape nothing is allocated, and the
 * pages are already mapped (first-touch page faults of fresh large
 * allocations cost as much as the element-wise layers). The first run
 * itself holds no more memory at once than that depth. */
typedef struct ra_arena {
    char *base;
    size_t cap;           /* bytes of the block */
    size_t used;          /* depth of the stack, in the block or in spills */
    size_t peak;          /* the deepest it went */
    void *spill;          /* allocations that did not fit, the newest first */
} ra_arena;

/* A model's cached arenas: up to RA_ARENA_SLOTS forwards at a time (threads
 * sharing the model) each keep one between calls; one more gets a private
 * arena (plain allocations). */
#define RA_ARENA_SLOTS 8
typedef struct ra_arena_cache {
    atomic_int busy[RA_ARENA_SLOTS];
    ra_arena arena[RA_ARENA_SLOTS];
} ra_arena_cache;

/* Take a free arena of the cache (or a fresh one if all are taken). */
ra_arena *ra_arena_begin(ra_arena_cache *c, ra_arena *local);
/* Free the spills; give the cache's arena back, grown to the peak. */
void ra_arena_end(ra_arena_cache *c, ra_arena *a);
void ra_arena_cache_free(ra_arena_cache *c);
/* n floats (64-byte aligned), NULL if out of memory. */
float *ra_arena_floats(ra_arena *a, size_t n);
void *ra_arena_bytes(ra_arena *a, size_t bytes);
static inline size_t ra_arena_mark(const ra_arena *a) { return a->used; }
/* Release what was allocated since mark (spills are freed). */
void ra_arena_reset(ra_arena *a, size_t mark);

#endif
