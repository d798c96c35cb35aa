/* The backend interface: every numerical op the models need, behind one table of function pointers.
 * The ops and their contracts are listed once, in kernels/backend_ops.h; this file holds the conventions, the
 * types they use and the backend's memory and lifecycle members.
 *
 * Model code calls only these ops (never #ifdef CUDA). The CPU implementation (kernels/cpu/) is the readable
 * definition of each op; the CUDA implementation (kernels/cuda/) must agree with it in a test.
 *
 * Conventions
 *  - All tensors are row-major, contiguous, and live in the backend's memory (host for CPU, device for CUDA).
 *  - scalar_t is float, or double when built with -DSCALAR_F64 (the CPU-only build used by gradient checks).
 *  - "+=" in a comment means the op accumulates into its output; "=" means it overwrites.
 *  - Shapes are written in comments as [dim, dim, ...]; N is a number of rows (tokens), C a width.
 *  - Ops that return a double (reductions) return it on the host; the CUDA backend synchronises for them.
 */
#ifndef KERNELS_BACKEND_H
#define KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef SCALAR_F64
typedef double scalar_t;
#define SCALAR_NAME "f64"
#else
typedef float scalar_t;
#define SCALAR_NAME "f32"
#endif

/* Numeric precision used by a backend for its matmuls (CUDA only honours bf16; CPU is always exact scalar_t). */
typedef enum { PRECISION_FP32 = 0, PRECISION_BF16 = 1 } Precision;

/* Gating transform of a router (router_gates). */
typedef enum { ROUTER_SIGMOID = 0, ROUTER_SOFTMAX = 1 } RouterKind;
/* The order in which capacity_drop lets an expert's assignments in (kernels/backend_ops.h). */
typedef enum { CAPACITY_POSITION = 0, CAPACITY_SCORE = 1 } CapacityOrder;

/* The routing plan of one routing decision (routing_plan fills it; cvmm_forward/cvmm_backward read it). The caller
 * provides the memory and sets the pointers and capacities; routing_plan sets the rest. Backend memory holds what
 * the kernels read; host_offset is what the host needs to size per-expert work (the CUDA backend copies the offsets
 * there once, when the plan is built, where its cvmm sizes GEMMs on the host; where its cvmm reads the device offsets
 * (the tensor-core path) it copies nothing and sets host_pending, and routing_plan_to_host fills host_offset for a
 * caller that needs it). */
typedef struct {
    int max_entries, max_experts; /* capacity of the memory below (set by the caller) */
    int32_t *perm;         /* [max_entries] backend: sorted position m -> entry p (ascending expert, then p) */
    int32_t *inv;          /* [max_entries] backend: entry p -> sorted position */
    int32_t *offset;       /* [max_experts + 1] backend: expert e owns sorted positions [offset[e], offset[e+1]) */
    int32_t *group_expert; /* [max_experts] backend: the non-empty experts, ascending, [0, n_groups) */
    int32_t *host_offset;  /* [max_experts + 1] HOST memory: a copy of offset */
    int M, n_experts;      /* set by routing_plan: entries and experts of the decision */
    int n_groups;          /* set by routing_plan: number of non-empty experts (unset while host_pending) */
    int host_pending;      /* set by routing_plan: 1 = host_offset and n_groups not filled (kept on the device) */
} RoutingPlan;

/* cvmm's order flags (see cvmm_forward): the row orders, the ReLU fused on either side of the FFN's expert
 * activations (CVMM_RELU_Y forward only, CVMM_DX_THROUGH_RELU backward only), plan-order tensors kept in cvmm's
 * narrow operand form between the calls of one plan (CVMM_IN_NARROW, CVMM_OUT_NARROW), and the backward's dX written
 * rather than accumulated (CVMM_DX_OVERWRITE). */
enum {
    CVMM_ENTRY_ORDER = 0,
    CVMM_IN_SORTED = 1,
    CVMM_OUT_SORTED = 2,
    CVMM_RELU_Y = 4,
    CVMM_DX_THROUGH_RELU = 8,
    CVMM_IN_NARROW = 16,
    CVMM_OUT_NARROW = 32,
    CVMM_DX_OVERWRITE = 64
};

/* The rotation rope applies (kernels/backend_ops.h: x [B, T, H, D], the first n_rot dims of each head rotated at
 * positions pos_offset + t, frequencies from base). */
typedef struct {
    int B, T, H, D, n_rot, pos_offset;
    scalar_t base;
} RopeSpec;

/* One linear map of linear_backward (kernels/backend_ops.h): y = alpha X W^T with W [m, C] (a PyTorch Linear weight),
 * its output gradient dy [N, m], and where its weight gradient goes (dw [m, C], accumulated; NULL: none wanted).
 * rope (NULL: none): the map's output is rotated, y = rope(alpha X W^T) (a layer's queries and keys), so dy is the
 * rotated output's gradient and the map's own is its inverse rotation (rope with inverse = 1): [B, T, H, D] = [N, m]. */
typedef struct {
    const scalar_t *dy; /* [N, m] */
    const scalar_t *w;  /* [m, C] */
    scalar_t *dw;       /* [m, C] or NULL */
    int m;
    scalar_t alpha;
    const RopeSpec *rope;
} LinearTerm;
/* The most maps one linear_backward call takes (a layer's projections and routers reading one input). */
#define LINEAR_TERMS_MAX 8

/* The most doubles one read_values call brings back (a training step's sums: loss and regularizers). */
#define BACKEND_READ_VALUES_MAX 8

typedef struct Backend Backend;
struct Backend {
    const char *name;      /* "cpu" or "cuda" */
    char device_name[128]; /* human-readable hardware description, e.g. CPU model or GPU name */
    Precision precision;   /* set by the caller before use; CPU ignores it */
    void *impl;            /* backend-private state (cuBLAS handle, workspaces, ...) */
    /* What the large allocations being made are for, in the words of the config keys that size them ("" = not
     * said); set by the model around them, quoted by alloc's out-of-memory message so that it names what to change. */
    char alloc_purpose[320];

    /* ---- memory and lifecycle: not ops (kernels/backend_ops.h); each backend defines them privately, beside the
     * state they manage (host allocations, the CUDA allocator, the bf16 weight copy) ---- */
    void *(*alloc)(Backend *be, size_t bytes); /* zero-filled; dies with a message on failure */
    void (*free)(Backend *be, void *p);
    void (*to_device)(Backend *be, void *dst, const void *src_host, size_t bytes);
    void (*to_host)(Backend *be, void *dst_host, const void *src, size_t bytes);
    /* dst_host[n] = the doubles src[n] of backend memory (n <= BACKEND_READ_VALUES_MAX): a training step's sums
     * (the *_add ops of kernels/backend_ops.h), read in the one copy that also brings back a device's error record
     * (one host synchronisation; dies with the message of a bad input found on the device). */
    void (*read_values)(Backend *be, double *dst_host, const double *src, size_t n);
    void (*copy)(Backend *be, void *dst, const void *src, size_t bytes); /* device to device */
    void (*zero)(Backend *be, void *p, size_t bytes);
    void (*synchronize)(Backend *be);
    void (*destroy)(Backend *be);
    /* The model's weights p[n] (one backend buffer) are registered so that a backend may keep derived copies of
     * them: every op that writes into [p, p + n) marks such a copy stale and its next use refreshes it. CUDA keeps
     * the bf16 copy that bf16-mode matmul and cvmm read for operands inside the range (converted once after each
     * change, e.g. once per optimizer step, instead of in every call). p = NULL (or freeing the buffer) forgets the
     * registration. The CPU keeps nothing. */
    void (*register_weights)(Backend *be, const scalar_t *p, size_t n);
    /* Fills plan->host_offset and n_groups where routing_plan left the offsets on the device (plan->host_pending,
     * cleared here: one synchronisation, and a bad expert id of the plan dies here if nothing reported it before);
     * nothing otherwise. */
    void (*routing_plan_to_host)(Backend *be, RoutingPlan *plan);

    /* ---- the ops: one member per entry of kernels/backend_ops.h (each op's contract is there) ---- */
#define BACKEND_OP(ret, name, params) ret(*name) params;
#include "kernels/backend_ops.h"
#undef BACKEND_OP
};

/* Creates a backend by name: "cpu" always works; "cuda" works when built with nvcc and a usable GPU is present.
 * On failure returns NULL and writes one line into err. */
Backend *backend_create(const char *name, char *err, size_t errlen);
/* The backend names there are (whether or not this build or machine can run them), as a message lists them. */
#define BACKEND_NAMES "cpu or cuda"
/* Whether name is one of BACKEND_NAMES: make's BACKEND is checked against it while planning (bin/runs), before any
 * stage is written. */
bool backend_name_known(const char *name);
/* The out-of-memory end of alloc: "<backend> backend: out of memory allocating X GiB (N bytes) for <purpose>". */
__attribute__((noreturn)) void backend_die_out_of_memory(const Backend *be, size_t bytes, const char *detail);
/* The argument checks every backend's routing_plan and cvmm_forward/cvmm_backward make first (one definition, one
 * set of messages): the plan's memory fits M entries of n_experts experts; the plan was built and the call's
 * divisors and row-order flags fit it (reduced: w given). Each dies with one line naming the problem. */
void routing_plan_check_args(const RoutingPlan *pl, int M, int n_experts);
/* (cvmm: the ReLU flags too, each on its own direction's op; the forward's residual against Y [rows, Nout] and the
 * backward's dX_base against dX [rows, Kin]: given only where allowed, equal or disjoint) */
void cvmm_forward_check_args(const RoutingPlan *pl, int in_div, int out_div, int reduced, int order,
                             const scalar_t *Y, const scalar_t *residual, int Nout);
void cvmm_backward_check_args(const RoutingPlan *pl, int in_div, int out_div, int reduced, int order,
                              const scalar_t *dX, const scalar_t *dX_base, int Kin);
/* linear_backward's: 1 <= n_terms <= LINEAR_TERMS_MAX, sizes >= 0 (m >= 1), dX, X and every dy and w given, and
 * dX disjoint from every operand (dw included) and the dw disjoint from each other and from the operands; a term's
 * rope with B T = N, H D = m and an even n_rot in [0, D], every rotated term with the same n_rot and base. */
void linear_backward_check_args(const scalar_t *dX, const scalar_t *X, const LinearTerm *terms, int n_terms, int N,
                                int C);
/* linear_backward's definition after the rotations, through be->matmul: the weight gradients, then the sum into dX, in
 * term order, reading dy[i] for term i's output gradient (its dY, or the caller's rotated copy of it). */
void linear_backward_matmuls(Backend *be, scalar_t *dX, const scalar_t *X, const LinearTerm *terms,
                             const scalar_t *const *dy, int n_terms, int N, int C, scalar_t beta);
void backend_destroy(Backend *be);

/* Implementations (backend_create dispatches to these). */
Backend *backend_cpu_create(void);
#ifdef HAVE_CUDA
Backend *backend_cuda_create(char *err, size_t errlen);
#endif

#endif
