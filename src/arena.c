/* arena.c - the networks' reusable workspace (infer.h). */
#include "infer.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN ((size_t)64)

static size_t align_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1); }

ra_arena *ra_arena_begin(ra_arena_cache *c, ra_arena *local) {
    memset(local, 0, sizeof *local);
    for (int i = 0; c && i < RA_ARENA_SLOTS; i++)
        if (!atomic_exchange(&c->busy[i], 1)) {
            ra_arena *a = &c->arena[i];
            a->used = a->peak = a->spilled = 0;
            a->spill = NULL;
            return a;
        }
    return local;
}

/* The slot of a in c, or -1 for a private arena. */
static int slot_of(const ra_arena_cache *c, const ra_arena *a) {
    for (int i = 0; c && i < RA_ARENA_SLOTS; i++)
        if (a == &c->arena[i]) return i;
    return -1;
}

void ra_arena_end(ra_arena_cache *c, ra_arena *a) {
    while (a->spill) {   /* each spill starts with the pointer to the next */
        void *next = *(void **)a->spill;
        ra_free(a->spill);
        a->spill = next;
    }
    const int slot = slot_of(c, a), cached = slot >= 0;
    if (cached && a->peak > a->cap) {   /* grow to what this run needed */
        ra_free(a->base);
        a->base = ra_alloc(a->peak, 1);
        a->cap = a->base ? a->peak : 0;
    }
    if (!cached) {
        ra_free(a->base);
        memset(a, 0, sizeof *a);
    }
    a->used = a->peak = a->spilled = 0;
    if (cached) atomic_store(&c->busy[slot], 0);
}

void ra_arena_cache_free(ra_arena_cache *c) {
    for (int i = 0; c && i < RA_ARENA_SLOTS; i++) {
        ra_free(c->arena[i].base);
        memset(&c->arena[i], 0, sizeof c->arena[i]);
    }
}

void *ra_arena_bytes(ra_arena *a, size_t bytes) {
    const size_t n = align_up(bytes ? bytes : 1);
    if (n < bytes) return NULL;
    if (a->base && n <= a->cap - a->used) {
        void *p = a->base + a->used;
        a->used += n;
        if (a->used + a->spilled > a->peak) a->peak = a->used + a->spilled;
        return p;
    }
    /* does not fit: its own block, with the list link in front */
    if (n > SIZE_MAX - ARENA_ALIGN) return NULL;
    char *p = ra_alloc(n + ARENA_ALIGN, 1);
    if (!p) return NULL;
    *(void **)p = a->spill;
    a->spill = p;
    a->spilled += n;
    if (a->used + a->spilled > a->peak) a->peak = a->used + a->spilled;
    return p + ARENA_ALIGN;
}

float *ra_arena_floats(ra_arena *a, size_t n) {
    size_t bytes;
    if (!ra_mul_size(&bytes, n, sizeof(float))) return NULL;
    return ra_arena_bytes(a, bytes);
}
