/* arena.c - the networks' reusable workspace (base/arena.h). */
#include "base/arena.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN ((size_t)64)

/* In front of a spill, within its first ARENA_ALIGN bytes. */
typedef struct spill_head {
    void *next;     /* the spill made before it */
    size_t depth;   /* the stack's depth when it was made */
} spill_head;

static size_t align_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1); }

ra_arena *ra_arena_begin(ra_arena_cache *c, ra_arena *local) {
    memset(local, 0, sizeof *local);
    for (int i = 0; c && i < RA_ARENA_SLOTS; i++)
        if (!atomic_exchange(&c->busy[i], 1)) {
            ra_arena *a = &c->arena[i];
            a->used = a->peak = 0;
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

void ra_arena_reset(ra_arena *a, size_t mark) {
    /* spills are made in stack order: every one made since mark lies at a
     * depth >= mark, every older one below it */
    while (a->spill && ((spill_head *)a->spill)->depth >= mark) {
        void *next = ((spill_head *)a->spill)->next;
        ra_free(a->spill);
        a->spill = next;
    }
    a->used = mark;
}

void ra_arena_end(ra_arena_cache *c, ra_arena *a) {
    ra_arena_reset(a, 0);
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
    a->used = a->peak = 0;
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
    if (n < bytes || a->used > SIZE_MAX - ARENA_ALIGN || n > SIZE_MAX - ARENA_ALIGN - a->used)
        return NULL;
    char *p;
    if (a->base && a->used <= a->cap && n <= a->cap - a->used) {
        p = a->base + a->used;
    } else {   /* does not fit: its own block, its head in front */
        char *s = ra_alloc(n + ARENA_ALIGN, 1);
        if (!s) return NULL;
        *(spill_head *)s = (spill_head){.next = a->spill, .depth = a->used};
        a->spill = s;
        p = s + ARENA_ALIGN;
    }
    a->used += n;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

float *ra_arena_floats(ra_arena *a, size_t n) {
    size_t bytes;
    if (!ra_mul_size(&bytes, n, sizeof(float))) return NULL;
    return ra_arena_bytes(a, bytes);
}
