/* One backend allocation for many activation buffers: a planner (a list of requests, each a size and the pointer
 * that receives the buffer) and an arena (the allocation the requests are carved from).
 *
 * Why: on the CUDA backend every be->alloc is a cudaMalloc + memset, a synchronising call that costs milliseconds
 * and fragments device memory; a Model used to make one for each of its dozens of per-token buffers (and again
 * whenever a batch grew). With the planner a Model makes ONE (model/model.c: model_reserve_activations): its wrapper
 * and its LayerImpl add their requests to one plan, arena_commit allocates once and writes every pointer.
 *
 * Protocol:
 *   ActivationPlan p;  plan_init(&p);
 *   plan_scalars(&p, &buf_a, n * C);       // [N, C]      (the pointer is written by arena_commit, not here)
 *   plan_int32(&p, &buf_b, n);             // [N]
 *   arena_commit(&arena, &p);              // one allocation (or none: the existing block is big enough)
 *   plan_free(&p);
 * A commit only hands out memory: the contents of a reused block are whatever the previous plan left there (a new
 * block is zero-filled, like every be->alloc). So nothing that must survive may live in an arena across a re-plan.
 */
#ifndef MODEL_ACTIVATION_ARENA_H
#define MODEL_ACTIVATION_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Every buffer starts at a multiple of this many bytes from the block (whose base the backend aligns at least as
 * much: cudaMalloc 256, the CPU backend 64, and 256 is a multiple of both): what cuBLAS and vectorised kernels want,
 * and what separate allocations used to give. */
#define ARENA_ALIGN 256

/* Bytes of unused space after every buffer in AddressSanitizer builds, poisoned on the CPU backend (with the alignment
 * padding) so that an overrun into the next buffer is still reported as it was with separate allocations. 0 otherwise. */
#if defined(__SANITIZE_ADDRESS__)
#define ARENA_REDZONE ARENA_ALIGN
#else
#define ARENA_REDZONE 0
#endif

typedef enum { ARENA_DST_VOID, ARENA_DST_SCALAR, ARENA_DST_INT32, ARENA_DST_U8 } ArenaDstKind;

/* One buffer of a plan. The destination is kept with its own type (no void ** punning of a scalar_t *). */
typedef struct {
    ArenaDstKind kind;
    union {
        void **v;
        scalar_t **s;
        int32_t **i;
        uint8_t **u;
    } dst;
    size_t bytes;   /* 0: the destination receives NULL and the request takes no space */
    size_t offset;  /* bytes from the start of the block, a multiple of ARENA_ALIGN */
} ArenaRequest;

typedef struct {
    ArenaRequest *req; /* [n] host array, in request order */
    int n, cap;
    size_t total;      /* bytes the block needs (end of the last buffer, rounded up to ARENA_ALIGN) */
} ActivationPlan;

void plan_init(ActivationPlan *p);
void plan_free(ActivationPlan *p);
/* Adds a request of `bytes` bytes; *dst is written by arena_commit. Dies on size overflow. */
void plan_add(ActivationPlan *p, void **dst, size_t bytes);
/* Typed forms: count elements of scalar_t / int32_t / uint8_t. */
void plan_scalars(ActivationPlan *p, scalar_t **dst, size_t count);
void plan_int32(ActivationPlan *p, int32_t **dst, size_t count);
void plan_u8(ActivationPlan *p, uint8_t **dst, size_t count);
static inline size_t plan_total_bytes(const ActivationPlan *p) { return p->total; }

typedef struct {
    Backend *be;
    void *block;      /* the one backend allocation (NULL until a plan needs bytes) */
    size_t capacity;  /* bytes of block */
    size_t used;      /* bytes of the last committed plan (<= capacity) */
} ActivationArena;

void arena_init(ActivationArena *a, Backend *be);
/* Gives every request of p its buffer. If p needs more than the block holds, the block is freed FIRST and then one
 * block of exactly plan_total_bytes(p) is allocated (peak memory = the new block only, never old + new); otherwise
 * the block is reused as is. */
void arena_commit(ActivationArena *a, const ActivationPlan *p);
/* Bytes of backend memory the arena holds. */
static inline size_t arena_capacity(const ActivationArena *a) { return a->capacity; }
/* Frees the block (the pointers handed out dangle; re-commit a plan before using them). */
void arena_free(ActivationArena *a);

#endif
