/* The activation planner and arena (see activation_arena.h): offsets are assigned as requests arrive, so a plan is
 * a deterministic function of its requests; a commit allocates at most once. */
#include "model/activation_arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

void plan_init(ActivationPlan *p) { memset(p, 0, sizeof *p); }

void plan_free(ActivationPlan *p) {
    free(p->req);
    memset(p, 0, sizeof *p);
}

/* Appends a request; the destination is filled in by the typed callers. */
static ArenaRequest *push(ActivationPlan *p, size_t bytes) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->req = xrealloc(p->req, (size_t)p->cap * sizeof *p->req);
    }
    ArenaRequest *r = &p->req[p->n++];
    memset(r, 0, sizeof *r);
    r->bytes = bytes;
    if (bytes == 0) return r; /* NULL buffer, no space */
    /* [offset, offset + bytes) then padding (+ the redzone) up to the next ARENA_ALIGN boundary */
    const size_t span = bytes + ARENA_REDZONE + (ARENA_ALIGN - 1);
    if (span < bytes || SIZE_MAX - p->total < span) die("activation plan: %zu more bytes overflow size_t", bytes);
    r->offset = p->total;
    p->total += span / ARENA_ALIGN * ARENA_ALIGN;
    return r;
}

static size_t checked_mul(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) die("activation plan: %zu elements of %zu bytes overflow size_t", count, size);
    return count * size;
}

void plan_add(ActivationPlan *p, void **dst, size_t bytes) {
    ArenaRequest *r = push(p, bytes);
    r->kind = ARENA_DST_VOID;
    r->dst.v = dst;
}

void plan_scalars(ActivationPlan *p, scalar_t **dst, size_t count) {
    ArenaRequest *r = push(p, checked_mul(count, sizeof(scalar_t)));
    r->kind = ARENA_DST_SCALAR;
    r->dst.s = dst;
}

void plan_int32(ActivationPlan *p, int32_t **dst, size_t count) {
    ArenaRequest *r = push(p, checked_mul(count, sizeof(int32_t)));
    r->kind = ARENA_DST_INT32;
    r->dst.i = dst;
}

void plan_u8(ActivationPlan *p, uint8_t **dst, size_t count) {
    ArenaRequest *r = push(p, count);
    r->kind = ARENA_DST_U8;
    r->dst.u = dst;
}

void arena_init(ActivationArena *a, Backend *be) {
    memset(a, 0, sizeof *a);
    a->be = be;
}

/* ASan bookkeeping (CPU backend only: other backends' blocks are device memory the host must not touch). */
#if defined(__SANITIZE_ADDRESS__)
static int host_memory(const ActivationArena *a) { return a->block && strcmp(a->be->name, "cpu") == 0; }
static void unpoison_block(const ActivationArena *a) {
    if (host_memory(a)) ASAN_UNPOISON_MEMORY_REGION(a->block, a->capacity);
}
/* Poisons every byte of the block no request owns: padding, redzones, the unused tail of a reused block. */
static void poison_gaps(const ActivationArena *a, const ActivationPlan *p) {
    if (!host_memory(a)) return;
    char *base = a->block;
    size_t end = 0; /* end of the previous buffer; offsets increase in request order */
    for (int i = 0; i < p->n; i++) {
        const ArenaRequest *r = &p->req[i];
        if (r->bytes == 0) continue;
        if (r->offset > end) ASAN_POISON_MEMORY_REGION(base + end, r->offset - end);
        end = r->offset + r->bytes;
    }
    if (a->capacity > end) ASAN_POISON_MEMORY_REGION(base + end, a->capacity - end);
}
#else
static void unpoison_block(const ActivationArena *a) { (void)a; }
static void poison_gaps(const ActivationArena *a, const ActivationPlan *p) {
    (void)a;
    (void)p;
}
#endif

void arena_commit(ActivationArena *a, const ActivationPlan *p) {
    if (p->total > a->capacity) {
        arena_free(a); /* first: the old and the new block never coexist */
        a->block = a->be->alloc(a->be, p->total); /* dies with a message when out of memory */
        a->capacity = p->total;
    }
    unpoison_block(a);
    a->used = p->total;
    char *base = a->block;
    for (int i = 0; i < p->n; i++) {
        const ArenaRequest *r = &p->req[i];
        void *buf = r->bytes ? base + r->offset : NULL;
        switch (r->kind) {
        case ARENA_DST_VOID: *r->dst.v = buf; break;
        case ARENA_DST_SCALAR: *r->dst.s = buf; break;
        case ARENA_DST_INT32: *r->dst.i = buf; break;
        case ARENA_DST_U8: *r->dst.u = buf; break;
        }
    }
    poison_gaps(a, p);
}

void arena_free(ActivationArena *a) {
    if (a->block) {
        unpoison_block(a);
        a->be->free(a->be, a->block);
    }
    a->block = NULL;
    a->capacity = a->used = 0;
}
