/* arena.c - the networks' reusable workspace (base/arena.h). */
#include "base/arena.h"

#include <threads.h>

#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN ((size_t)64)

/* In front of a spill, within its first ARENA_ALIGN bytes. */
typedef struct spill_head {
    void *next;     /* the spill made before it */
    size_t depth;   /* the stack's depth when it was made */
} spill_head;

static size_t align_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1); }

rai_arena *rai_arena_begin(rai_arena_cache *c, rai_arena *local) {
    memset(local, 0, sizeof *local);
    for (int i = 0; c && i < RA_ARENA_SLOTS; i++)
        if (!atomic_exchange(&c->busy[i], 1)) {
            rai_arena *a = &c->arena[i];
            a->used = a->peak = 0;
            a->spill = NULL;
            return a;
        }
    return local;
}

/* The slot of a in c, or -1 for a private arena. */
static int slot_of(const rai_arena_cache *c, const rai_arena *a) {
    for (int i = 0; c && i < RA_ARENA_SLOTS; i++)
        if (a == &c->arena[i]) return i;
    return -1;
}

void rai_arena_reset(rai_arena *a, size_t mark) {
    /* spills are made in stack order: every one made since mark lies at a
     * depth >= mark, every older one below it */
    while (a->spill && ((spill_head *)a->spill)->depth >= mark) {
        void *next = ((spill_head *)a->spill)->next;
        rai_free(a->spill);
        a->spill = next;
    }
    a->used = mark;
}

void rai_arena_end(rai_arena_cache *c, rai_arena *a) {
    rai_arena_reset(a, 0);
    const int slot = slot_of(c, a), cached = slot >= 0;
    if (cached && a->peak > a->cap) {   /* grow to what this run needed */
        rai_free(a->base);
        a->base = rai_alloc(a->peak, 1);
        a->cap = a->base ? a->peak : 0;
    }
    if (!cached) {
        rai_free(a->base);
        memset(a, 0, sizeof *a);
    }
    a->used = a->peak = 0;
    if (cached) atomic_store(&c->busy[slot], 0);
}

void rai_arena_cache_free(rai_arena_cache *c) {
    for (int i = 0; c && i < RA_ARENA_SLOTS; i++) {
        rai_free(c->arena[i].base);
        memset(&c->arena[i], 0, sizeof c->arena[i]);
    }
}

void *rai_arena_bytes(rai_arena *a, size_t bytes) {
    const size_t n = align_up(bytes ? bytes : 1);
    if (n < bytes || a->used > SIZE_MAX - ARENA_ALIGN || n > SIZE_MAX - ARENA_ALIGN - a->used)
        return NULL;
    char *p;
    if (a->base && a->used <= a->cap && n <= a->cap - a->used) {
        p = a->base + a->used;
    } else {   /* does not fit: its own block, its head in front */
        char *s = rai_alloc(n + ARENA_ALIGN, 1);
        if (!s) return NULL;
        *(spill_head *)s = (spill_head){.next = a->spill, .depth = a->used};
        a->spill = s;
        p = s + ARENA_ALIGN;
    }
    a->used += n;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

float *rai_arena_floats(rai_arena *a, size_t n) {
    size_t bytes;
    if (!rai_mul_size(&bytes, n, sizeof(float))) return NULL;
    return rai_arena_bytes(a, bytes);
}

/* ---- per-thread buffers ---------------------------------------------------- */

typedef struct thread_buffers {
    void *p[RAI_THREAD_BUFFERS];
    size_t cap[RAI_THREAD_BUFFERS];
} thread_buffers;

static tss_t buffers_key;
static once_flag buffers_once = ONCE_FLAG_INIT;
static _Atomic int buffers_key_ok;   /* atomic: what call_once publishes, as TSan sees it */

static void buffers_free(void *v) {
    thread_buffers *t = v;
    for (int i = 0; t && i < RAI_THREAD_BUFFERS; i++) rai_free(t->p[i]);
    free(t);
}

static void buffers_key_init(void) {
    buffers_key_ok = tss_create(&buffers_key, buffers_free) == thrd_success;
}

void *rai_thread_buffer(int slot, size_t bytes) {
    if (slot < 0 || slot >= RAI_THREAD_BUFFERS) return NULL;
    call_once(&buffers_once, buffers_key_init);
    if (!buffers_key_ok) return NULL;
    thread_buffers *t = tss_get(buffers_key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t))) return NULL;
        if (tss_set(buffers_key, t) != thrd_success) return free(t), NULL;
    }
    if (bytes > t->cap[slot]) {
        rai_free(t->p[slot]);
        t->p[slot] = rai_alloc(bytes, 1);
        t->cap[slot] = t->p[slot] ? bytes : 0;
    }
    return t->p[slot];
}
