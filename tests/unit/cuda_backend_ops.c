/* Every backend op of kernels/backend_ops.h, case by case from one table, on the CUDA backend against the CPU
 * reference: each case builds its inputs from its own seed, runs on the CPU backend once and on each CUDA backend
 * variant it names (kernel paths forced through DMMATH_CUDA_*, the emulator's cuBLAS fault injection) in fp32 and,
 * where the CUDA backend has a bf16 path, in bf16, and every output is compared by NMSE against the reference with
 * the thresholds of tests/unit/backend_op_harness.h (integer outputs exactly). Cases may also require bit-identical
 * results on a second run, and DMMATH_CUDA_ATTENTION=auto to reproduce the path it must choose bit for bit.
 * test_every_op_has_a_case fails, listing them, when an op of kernels/backend_ops.h has no row.
 * The checks that are not one op against the reference are in tests/unit/cuda_backend_checks.h.
 * `--op NAME` runs only that op's rows (the rest of the table counts as passed), for work on one kernel.
 * Without a usable GPU the program prints "SKIP: no usable CUDA GPU (<reason>)" and exits 77 before the suite.
 * Runs without fork (CK_NOFORK): a CUDA context does not survive fork(). */
#include "tests/unit/backend_op_drivers.h"
#include "tests/unit/cuda_backend_checks.h"

#define DT_BOTH (DT_FP32 | DT_BF16)
#define DEF VB(V_DEFAULT)
#define CVMM_REPEATED (VB(V_CVMM_LOOP) | VB(V_CVMM_GROUPED) | VB(V_CVMM_MMA))
#define INV_SQRT_82 0.11043152607484653 /* 1/sqrt(82): the usual attention scale of a head of 82 */
enum { PLAN_CHUNK = CUDA_CVMM_PLAN_CHUNK };

/* matmul: every transpose pair of one shape, fp32 and bf16, on the default path and the plain one (no split-K, no
 * conversion cache); repeat: DEF where the rows must repeat bit for bit */
#define MATMUL_PATHS (DEF | VB(V_MATMUL_PLAIN))
#define MATMUL_ROWS_R(M, N, K, repeat)                                                                                 \
    {"matmul", #M "x" #N "x" #K ", A B", &drv_matmul, {M, N, K, 0, 0}, 0, 0, DT_BOTH, MATMUL_PATHS, repeat, 0},        \
    {"matmul", #M "x" #N "x" #K ", A B^T", &drv_matmul, {M, N, K, 0, 1}, 0, 0, DT_BOTH, MATMUL_PATHS, repeat, 0},      \
    {"matmul", #M "x" #N "x" #K ", A^T B", &drv_matmul, {M, N, K, 1, 0}, 0, 0, DT_BOTH, MATMUL_PATHS, repeat, 0},      \
    {"matmul", #M "x" #N "x" #K ", A^T B^T", &drv_matmul, {M, N, K, 1, 1}, 0, 0, DT_BOTH, MATMUL_PATHS, repeat, 0}
#define MATMUL_ROWS(M, N, K) MATMUL_ROWS_R(M, N, K, 0)
/* attention: the forward of one shape, and its backward when Tq == Tk (which runs the forward first) */
#define ATT_FWD_AUTO(name, B, Tq, Tk, H, Dh, scale, variants, repeat, auto_is)                                        \
    {"attention_forward", name, &drv_attention, {B, Tq, Tk, H, Dh}, scale, 0, DT_BOTH, variants, repeat, auto_is}
#define ATT_ROWS_AUTO(name, B, T, H, Dh, scale, variants, repeat, auto_is)                                            \
    ATT_FWD_AUTO(name, B, T, T, H, Dh, scale, variants, repeat, auto_is),                                             \
    {"attention_backward", name, &drv_attention, {B, T, T, H, Dh}, scale, 0, DT_BOTH, variants, repeat, auto_is}
/* rows whose auto path (if checked) is the same in both dtypes */
#define ATT_FWD(name, B, Tq, Tk, H, Dh, scale, variants, repeat, auto_is)                                             \
    ATT_FWD_AUTO(name, B, Tq, Tk, H, Dh, scale, variants, repeat, AUTO_IS(auto_is, auto_is))
#define ATT_ROWS(name, B, T, H, Dh, scale, variants, repeat, auto_is)                                                 \
    ATT_ROWS_AUTO(name, B, T, H, Dh, scale, variants, repeat, AUTO_IS(auto_is, auto_is))
/* router gates: both kinds, with and without renormalisation (routing shape N=200 G=3 E=11 k=4) */
#define GATES_ROWS(op, drop, dname)                                                                                   \
    {op, "sigmoid" dname, &drv_router_gates, {200, 3, 11, 4, ROUTER_SIGMOID, 0}, 0, drop, DT_FP32, DEF, 0, 0},         \
    {op, "sigmoid, renorm" dname, &drv_router_gates, {200, 3, 11, 4, ROUTER_SIGMOID, 1}, 0, drop, DT_FP32, DEF, 0, 0}, \
    {op, "softmax" dname, &drv_router_gates, {200, 3, 11, 4, ROUTER_SOFTMAX, 0}, 0, drop, DT_FP32, DEF, 0, 0},         \
    {op, "softmax, renorm" dname, &drv_router_gates, {200, 3, 11, 4, ROUTER_SOFTMAX, 1}, 0, drop, DT_FP32, DEF, 0, 0}
/* cvmm: forward and backward of one pattern (dims pattern N H K E Kin Nout reduce) */
#define CVMM_ROWS(name, pat, N, H, K, E, Kin, Nout, reduce, flags, variants, repeat)                                  \
    {"cvmm_forward", name, &drv_cvmm, {pat, N, H, K, E, Kin, Nout, reduce}, 0, flags, DT_BOTH, variants, repeat, 0},  \
    {"cvmm_backward", name, &drv_cvmm, {pat, N, H, K, E, Kin, Nout, reduce}, 0, flags, DT_BOTH, variants, repeat, 0}

/* The table. Each op's rows stay together, so adding or dropping an op is one block. Rows run in this order, each on
 * the same backend per variant (the rope rows rely on it). */
static const OpCase op_cases[] = {
    /* ---- dense: four shapes (with 1x1x1 and sizes off every tile), each transpose pair; every row also checks
     * beta = 0 over a C full of NaN */
    MATMUL_ROWS(7, 13, 5), MATMUL_ROWS(1, 1, 1), MATMUL_ROWS(33, 17, 65), MATMUL_ROWS(128, 96, 64),
    /* split-K (cuda_dense.cu: few output tiles, a long K): 1 tile, K = 4096 in 4 chunks; 2 tiles (M off the tile
     * size), K = 2048 in 2; K = 4100, whose chunks would not be multiples of 8: one GEMM. Bit-identical when repeated */
    MATMUL_ROWS_R(40, 24, 4096, DEF), MATMUL_ROWS_R(130, 20, 2048, DEF), MATMUL_ROWS(9, 30, 4100),
    /* bf16 operands from the conversion cache (cuda_bf16_cache.cu) */
    {"matmul", "cache: one input read by 6 matmuls", &drv_matmul_cache, {37, 19, 29}, 0, F_CACHE_SHARED, DT_BOTH,
     MATMUL_PATHS, DEF, 0},
    {"matmul", "cache: the input rewritten by each write path", &drv_matmul_cache, {37, 19, 29}, 0, F_CACHE_REWRITE,
     DT_BOTH, DEF, 0, 0},
    {"matmul", "cache: the input freed, a buffer of its size allocated", &drv_matmul_cache, {37, 19, 29}, 0,
     F_CACHE_REALLOC, DT_BOTH, DEF, 0, 0},

    /* the backward of several maps of one input: one map; four, one without dW; eight of a narrow X; a long N (the
     * weight gradients split in K); dW adjacent; rotated maps */
    {"linear_backward", "1 map", &drv_linear_backward, {130, 33, 1}, 0, 0, DT_BOTH, MATMUL_PATHS, DEF, 0},
    {"linear_backward", "4 maps, one without dW", &drv_linear_backward, {300, 70, 4}, 0, 0, DT_BOTH, MATMUL_PATHS,
     DEF, 0},
    {"linear_backward", "8 maps of a narrow X", &drv_linear_backward, {200, 48, 8}, 0, F_NARROW, DT_BOTH,
     MATMUL_PATHS, DEF, 0},
    {"linear_backward", "2 maps, N 4096 (dW split in K)", &drv_linear_backward, {4096, 40, 2}, 0, 0, DT_BOTH,
     MATMUL_PATHS, DEF, 0},
    /* the dW_i one after the other, alphas in pairs: the weight gradients joined in pairs (and all, for 2 maps) */
    {"linear_backward", "5 maps, dW adjacent", &drv_linear_backward, {300, 70, 5}, 0, F_ADJACENT, DT_BOTH,
     MATMUL_PATHS, DEF, 0},
    {"linear_backward", "2 maps, dW adjacent, N 4096", &drv_linear_backward, {4096, 40, 2}, 0, F_ADJACENT, DT_BOTH,
     MATMUL_PATHS, DEF, 0},
    /* two rotated maps (a layer's q and k): rotated back as they are read */
    {"linear_backward", "4 maps, two rotated", &drv_linear_backward, {300, 70, 4}, 0, F_ROPE, DT_BOTH, MATMUL_PATHS,
     DEF, 0},

    /* a kept operand copy (kernels/cuda/cuda_bf16_cache.cu): its life */
    {"keep_operand", "read after other operands, a rewrite, a LayerNorm, a free", &drv_keep_operand, {37, 19, 29}, 0,
     0, DT_BOTH, MATMUL_PATHS, DEF, 0},

    /* ---- elementwise, embedding, LayerNorm (fp32 only: the CUDA backend has no bf16 path for them) */
    {"add_inplace", "300x70", &drv_elementwise, {300, 70}, 0, 0, DT_FP32, DEF, 0, 0},
    {"scale_inplace", "300x70 by 0.37", &drv_elementwise, {300, 70}, 0.37, 0, DT_FP32, DEF, 0, 0},
    {"add_bias", "300x70", &drv_elementwise, {300, 70}, 0, 0, DT_FP32, DEF, 0, 0},
    {"bias_backward", "300x70", &drv_elementwise, {300, 70}, 0, 0, DT_FP32, DEF, 0, 0},
    {"relu_forward", "300x70", &drv_elementwise, {300, 70}, 0, 0, DT_FP32, DEF, 0, 0},
    {"relu_forward", "in place (y = x)", &drv_elementwise, {300, 70}, 0, F_ALIAS, DT_FP32, DEF, 0, 0},
    {"relu_backward", "300x70", &drv_elementwise, {300, 70}, 0, 0, DT_FP32, DEF, 0, 0},
    {"relu_backward", "in place (dx = dy)", &drv_elementwise, {300, 70}, 0, F_ALIAS, DT_FP32, DEF, 0, 0},
    {"embedding_forward", "300 tokens of 13", &drv_embedding, {300, 70, 13}, 0, 0, DT_FP32, DEF, 0, 0},
    {"embedding_backward", "300 tokens of 13 (repeated rows)", &drv_embedding, {300, 70, 13}, 0, 0, DT_FP32, DEF, DEF,
     0},
    /* ids up to 3 bytes wide: the device's grouping sorts by every byte of the id */
    {"embedding_backward", "300 tokens of 100000", &drv_embedding, {300, 3, 100000}, 0, 0, DT_FP32, DEF, DEF, 0},
    {"layernorm_forward", "affine", &drv_layernorm, {300, 70}, 0, 0, DT_FP32, DEF, 0, 0},
    {"layernorm_forward", "no affine (w, b NULL)", &drv_layernorm, {300, 70}, 0, F_NO_AFFINE, DT_FP32, DEF, 0, 0},
    /* y read through matmul (its only reader), on both matmul paths (plain keeps the exact fp32 y) */
    {"layernorm_forward_narrow", "read by matmul", &drv_layernorm_narrow, {300, 70, 24}, 0, 0, DT_BOTH, MATMUL_PATHS,
     DEF, 0},
    {"layernorm_backward", "affine", &drv_layernorm, {300, 70}, 0, 0, DT_FP32, DEF, 0, 0},
    /* 132 row blocks of the fused backward (the last one of 4 rows) in 44 groups of 3; 300 columns: two per thread */
    {"layernorm_backward", "affine, many row blocks", &drv_layernorm, {2100, 300}, 0, 0, DT_FP32, DEF, 0, 0},
    {"layernorm_backward", "no affine (w, b, dw, db NULL)", &drv_layernorm, {300, 70}, 0, F_NO_AFFINE, DT_FP32, DEF, 0,
     0},

    /* ---- RoPE: the CUDA backend keeps the frequencies of the last (n_rot, base) on the device, so these rows, one
     * after the other on one backend, change one, the other, and back: every change must be seen */
    {"rope", "n_rot 40 base 10000", &drv_rope, {2, 37, 3, 82, 40, 7}, 10000, 0, DT_FP32, DEF, 0, 0},
    {"rope", "n_rot 82 (all dims) base 500", &drv_rope, {2, 37, 3, 82, 82, 7}, 500, 0, DT_FP32, DEF, 0, 0},
    {"rope", "n_rot 40 base 500 (n_rot changed)", &drv_rope, {2, 37, 3, 82, 40, 7}, 500, 0, DT_FP32, DEF, 0, 0},
    {"rope", "n_rot 40 base 10000 (base changed)", &drv_rope, {2, 37, 3, 82, 40, 7}, 10000, 0, DT_FP32, DEF, 0, 0},

    /* ---- attention, each shape on every path forced (fused kernels, cuBLAS GEMMs, tensor-core flash kernels) */
    ATT_ROWS("small", 2, 37, 3, 16, 0.25, V_ATT_PATHS, 0, 0),
    ATT_ROWS("1x1x1x1", 1, 1, 1, 1, 1.0, V_ATT_PATHS, 0, 0),
    ATT_ROWS("D = 82, not a multiple of 32", 2, 70, 4, 82, INV_SQRT_82, V_ATT_PATHS, 0, 0),
    ATT_FWD("KV cache: Tq < Tk", 2, 5, 41, 2, 32, 0.3, V_ATT_PATHS, 0, 0),
    ATT_FWD("one query (decode step)", 1, 1, 9, 3, 8, 0.5, V_ATT_PATHS, 0, 0),
    /* head dims above the fused kernels' 256: auto must take the GEMM path even for short sequences */
    ATT_ROWS("D = 264 under auto", 1, 6, 2, 264, 0.06, VB(V_ATT_AUTO), 0, 0),
    /* the flash kernels' tiles of 32 rows: several query and key tiles, partial ones, the causal offset Tk - Tq not a
     * multiple of 32, D = 24 padded to 32; their widest head (128); a head past it takes auto's path */
    ATT_FWD("flash: Tq < Tk over several tiles", 1, 45, 77, 2, 24, 0.2, VB(V_ATT_FLASH), VB(V_ATT_FLASH), 0),
    ATT_ROWS("flash: D = 128, 3 tiles", 1, 66, 1, 128, 0.09, VB(V_ATT_FLASH), VB(V_ATT_FLASH), 0),
    ATT_ROWS("flash: D = 136 takes auto's path", 1, 20, 1, 136, 0.09, VB(V_ATT_FLASH), 0, 0),
    /* the GEMM path with (b,h) pairs in chunks of 3: several full chunks, a last partial one, Tq < Tk */
    ATT_ROWS("9 pairs in chunks of 3", 3, 37, 3, 16, 0.25, VB(V_ATT_GEMM_CHUNK3), 0, 0),
    ATT_ROWS("4 pairs in chunks of 3 + 1", 1, 70, 4, 82, INV_SQRT_82, VB(V_ATT_GEMM_CHUNK3), 0, 0),
    ATT_FWD("8 pairs in chunks of 3 + 3 + 2, Tq < Tk", 2, 5, 41, 4, 82, 0.3, VB(V_ATT_GEMM_CHUNK3), 0, 0),
    /* auto takes the GEMM path from ATTN_GEMM_MIN_T = 64 query rows on (cuda_attention.cu; update the shapes here
     * if that is tuned), except in bf16 with heads up to 128 wide, where it takes the flash kernels, and the fused
     * kernels below, KV-cache decode included; every forced path (the GEMM path also one pair per chunk) repeats bit
     * for bit */
#define ATT_AUTO V_ATT_PATHS | VB(V_ATT_AUTO) | VB(V_ATT_GEMM_CHUNK1)
#define ATT_REPEAT V_ATT_PATHS | VB(V_ATT_GEMM_CHUNK1)
    ATT_ROWS_AUTO("Tq = 70: auto is gemm, flash in bf16", 2, 70, 4, 82, 0.11, ATT_AUTO, ATT_REPEAT,
                  AUTO_IS(V_ATT_GEMM, V_ATT_FLASH)),
    ATT_ROWS_AUTO("Tq = 64, the threshold: auto is gemm, flash in bf16", 2, 64, 1, 16, 0.25, ATT_AUTO, ATT_REPEAT,
                  AUTO_IS(V_ATT_GEMM, V_ATT_FLASH)),
    ATT_ROWS("Tq = 70, D = 136 (past the flash kernels' heads): auto is gemm", 1, 70, 2, 136, 0.09, ATT_AUTO,
             ATT_REPEAT, V_ATT_GEMM),
    ATT_ROWS("Tq = 37: auto is fused", 2, 37, 3, 16, 0.25, ATT_AUTO, ATT_REPEAT, V_ATT_FUSED),
    ATT_FWD("decode against a long cache: auto is fused", 2, 1, 70, 2, 32, 0.3, ATT_AUTO, ATT_REPEAT, V_ATT_FUSED),

    /* ---- routing (N=200 positions, G=3 groups of E=11 experts, k=4; every 9th logit tied at 0.25) */
    {"topk_select", "unbiased", &drv_topk, {200, 3, 11, 4}, 0, 0, DT_FP32, DEF, 0, 0},
    {"topk_select", "unbiased, drop mask", &drv_topk, {200, 3, 11, 4}, 0, F_DROP, DT_FP32, DEF, 0, 0},
    {"topk_select", "bias on sigmoid scores", &drv_topk, {200, 3, 11, 4, ROUTER_SIGMOID}, 0, F_BIAS, DT_FP32, DEF, 0,
     0},
    {"topk_select", "bias on softmax scores", &drv_topk, {200, 3, 11, 4, ROUTER_SOFTMAX}, 0, F_BIAS, DT_FP32, DEF, 0,
     0},
    {"topk_select", "bias on sigmoid scores, drop mask", &drv_topk, {200, 3, 11, 4, ROUTER_SIGMOID}, 0, F_BIAS | F_DROP,
     DT_FP32, DEF, 0, 0},
    {"topk_select", "bias on softmax scores, drop mask", &drv_topk, {200, 3, 11, 4, ROUTER_SOFTMAX}, 0, F_BIAS | F_DROP,
     DT_FP32, DEF, 0, 0},
    /* group-limited (DeepSeek-V3): E=12 in 4 groups of 3, the 2 best kept; the group score on the score scale */
    {"topk_select", "group-limited, sigmoid scores", &drv_topk, {200, 3, 12, 4, ROUTER_SIGMOID, 4, 2}, 0, 0, DT_FP32,
     DEF, 0, 0},
    {"topk_select", "group-limited, softmax scores, drop mask", &drv_topk, {200, 3, 12, 4, ROUTER_SOFTMAX, 4, 2}, 0,
     F_DROP, DT_FP32, DEF, 0, 0},
    {"topk_select", "group-limited, bias on sigmoid scores, drop mask", &drv_topk, {200, 3, 12, 4, ROUTER_SIGMOID, 4, 2},
     0, F_BIAS | F_DROP, DT_FP32, DEF, 0, 0},
    {"expert_count", "all positions", &drv_expert_count, {200, 3, 11, 4}, 0, 0, DT_FP32, DEF, 0, 0},
    {"expert_count", "valid mask", &drv_expert_count, {200, 3, 11, 4}, 0, F_VALID, DT_FP32, DEF, 0, 0},
    {"expert_count", "drop mask", &drv_expert_count, {200, 3, 11, 4}, 0, F_DROP, DT_FP32, DEF, 0, 0},
    {"expert_count", "drop and valid masks", &drv_expert_count, {200, 3, 11, 4}, 0, F_DROP | F_VALID, DT_FP32, DEF, 0,
     0},
    GATES_ROWS("router_gates", 0, ""), GATES_ROWS("router_gates", F_DROP, ", drop mask"),
    GATES_ROWS("router_gates_backward", 0, ""), GATES_ROWS("router_gates_backward", F_DROP, ", drop mask"),

    /* ---- switch_balance: the selection with a drop mask, B=8 x T=25 positions, coef 0.01 */
    {"switch_balance", "all positions", &drv_switch_balance, {8, 25, 3, 11, 4}, 0.01, F_DROP, DT_FP32, DEF, 0, 0},
    {"switch_balance", "valid mask", &drv_switch_balance, {8, 25, 3, 11, 4}, 0.01, F_DROP | F_VALID, DT_FP32, DEF, 0,
     0},
    {"switch_balance", "valid mask, dlogits NULL", &drv_switch_balance, {8, 25, 3, 11, 4}, 0.01,
     F_DROP | F_VALID | F_NO_GRAD, DT_FP32, DEF, 0, 0},
    /* B=8 x T=70: 560 positions, the statistics' partial sums in 3 chunks of 256 (the last one partly filled) */
    {"switch_balance", "valid mask, 3 position chunks", &drv_switch_balance, {8, 70, 3, 11, 4}, 0.01,
     F_DROP | F_VALID, DT_FP32, DEF, 0, 0},

    /* ---- seq_balance (DeepSeek-V3): B=8 sequences x T=25, E=11, k=4, coef 0.3; the sigmoid and the softmax form */
    {"seq_balance", "sigmoid, all positions", &drv_seq_balance, {8, 25, 11, 4, ROUTER_SIGMOID}, 0.3, 0, DT_FP32, DEF,
     0, 0},
    {"seq_balance", "softmax, valid mask (one sequence empty)", &drv_seq_balance, {8, 25, 11, 4, ROUTER_SOFTMAX}, 0.3,
     F_VALID, DT_FP32, DEF, 0, 0},
    {"seq_balance", "sigmoid, valid mask, dlogits NULL", &drv_seq_balance, {8, 25, 11, 4, ROUTER_SIGMOID}, 0.3,
     F_VALID | F_NO_GRAD, DT_FP32, DEF, 0, 0},
    /* B=4 x T=300: each sequence's statistics in 2 chunks of 256 positions */
    {"seq_balance", "softmax, valid mask, 2 position chunks", &drv_seq_balance, {4, 300, 11, 4, ROUTER_SOFTMAX}, 0.3,
     F_VALID, DT_FP32, DEF, 0, 0},

    /* ---- the *_add ops: each its namesake's value added to a sum on the backend (0.75), read with read_values */
    {"switch_balance_add", "valid mask", &drv_switch_balance, {8, 25, 3, 11, 4}, 0.01, F_DROP | F_VALID, DT_FP32, DEF,
     DEF, 0},
    {"seq_balance_add", "softmax, valid mask (one sequence empty)", &drv_seq_balance, {8, 25, 11, 4, ROUTER_SOFTMAX},
     0.3, F_VALID, DT_FP32, DEF, DEF, 0},
    {"entropy_reg_add", "all positions", &drv_entropy_reg, {3, 4, 9, 2, 7}, 0.01, 0, DT_FP32, DEF, DEF, 0},
    {"entropy_reg_add", "valid mask: unequal counts, one empty sequence", &drv_entropy_reg, {3, 4, 9, 2, 7}, 0.01,
     F_VALID, DT_FP32, DEF, DEF, 0},
    {"entropy_reg_add", "valid mask, dlogits NULL", &drv_entropy_reg, {3, 4, 9, 2, 7}, 0.01, F_VALID | F_NO_GRAD,
     DT_FP32, DEF, DEF, 0},
    {"entropy_reg_add", "valid mask, 2 position chunks", &drv_entropy_reg, {3, 4, 100, 2, 7}, 0.01, F_VALID, DT_FP32,
     DEF, DEF, 0},
    {"cross_entropy_add", "losses and dlogits", &drv_cross_entropy, {150, 77}, 0.5, 0, DT_FP32, DEF, DEF, 0},
    {"cross_entropy_add", "dlogits in place of the logits", &drv_cross_entropy, {150, 77}, 0.5, F_ALIAS, DT_FP32, DEF,
     DEF, 0},

    /* ---- entropy_reg: R=3 applications, B=4 x T=9, G=2 groups of E=7, coef 0.01 */
    {"entropy_reg", "all positions", &drv_entropy_reg, {3, 4, 9, 2, 7}, 0.01, 0, DT_FP32, DEF, 0, 0},
    {"entropy_reg", "valid mask: unequal counts, one empty sequence", &drv_entropy_reg, {3, 4, 9, 2, 7}, 0.01, F_VALID,
     DT_FP32, DEF, 0, 0},
    {"entropy_reg", "valid mask, dlogits NULL", &drv_entropy_reg, {3, 4, 9, 2, 7}, 0.01, F_VALID | F_NO_GRAD, DT_FP32,
     DEF, 0, 0},
    /* R=3 x T=100: 300 (application, position) pairs per sequence, the softmax sums in 2 chunks of 256 */
    {"entropy_reg", "valid mask, 2 position chunks", &drv_entropy_reg, {3, 4, 100, 2, 7}, 0.01, F_VALID, DT_FP32, DEF,
     0, 0},

    /* ---- routing plan (dims M, E, ids: 0 uniform, 1 experts 0, 4, E-1 empty, 2 one expert, 3 90% on one); each
     * also equals the host counting sort, and a second build repeats the first */
    {"routing_plan", "M = 0: all offsets 0, no groups", &drv_routing_plan, {0, 5, IDS_UNIFORM}, 0, 0, DT_FP32, DEF, DEF,
     0},
    {"routing_plan", "E = 1", &drv_routing_plan, {1, 1, IDS_UNIFORM}, 0, 0, DT_FP32, DEF, DEF, 0},
    {"routing_plan", "E = 1 over six chunks", &drv_routing_plan, {5 * PLAN_CHUNK + 123, 1, IDS_UNIFORM}, 0, 0, DT_FP32,
     DEF, DEF, 0},
    {"routing_plan", "part of one chunk", &drv_routing_plan, {777, 13, IDS_UNIFORM}, 0, 0, DT_FP32, DEF, DEF, 0},
    {"routing_plan", "exactly four chunks", &drv_routing_plan, {4 * PLAN_CHUNK, 16, IDS_UNIFORM}, 0, 0, DT_FP32, DEF,
     DEF, 0},
    {"routing_plan", "empty experts: the first, one inside, the last", &drv_routing_plan,
     {3 * PLAN_CHUNK + 17, 11, IDS_SKIP_SOME}, 0, 0, DT_FP32, DEF, DEF, 0},
    {"routing_plan", "one group holding every entry", &drv_routing_plan, {2 * PLAN_CHUNK + 1, 9, IDS_ONE_EXPERT}, 0, 0,
     DT_FP32, DEF, DEF, 0},
    {"routing_plan", "90% on one expert", &drv_routing_plan, {3 * PLAN_CHUNK - 1, 40, IDS_SKEWED}, 0, 0, DT_FP32, DEF,
     DEF, 0},
    {"routing_plan", "the paper's FFN expert count over eleven chunks", &drv_routing_plan,
     {10 * PLAN_CHUNK + 500, 387, IDS_UNIFORM}, 0, 0, DT_FP32, DEF, DEF, 0},
    {"routing_plan", "more experts than one shared window (2048): mostly empty", &drv_routing_plan,
     {2 * PLAN_CHUNK + 452, 5000, IDS_UNIFORM}, 0, 0, DT_FP32, DEF, DEF, 0},
    /* > 128 chunks per thread of the offsets kernel; the [E, chunks] scan (1,090,800 cells) takes three levels */
    {"routing_plan", "201 chunks, 5400 experts", &drv_routing_plan, {200 * PLAN_CHUNK + 3, 5400, IDS_UNIFORM}, 0, 0,
     DT_FP32, DEF, DEF, 0},

    /* ---- cvmm: the four MoE call patterns on every expert-GEMM path (auto must resolve to one; on the emulator its
     * probe must choose grouped, and fall back to the loop where the emulator's grouped GEMM is made to refuse bf16,
     * refuse everything, or compute wrongly) */
    CVMM_ROWS("FFN up", PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0, 0, V_CVMM_ALL | V_CVMM_FAULTS, 0),
    CVMM_ROWS("FFN down", PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1, 0, V_CVMM_ALL, 0),
    CVMM_ROWS("FFN down, no reduction", PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0, 0, V_CVMM_ALL, 0),
    CVMM_ROWS("att V", PAT_ATT_V, 200, 4, 2, 40, 33, 17, 1, 0, V_CVMM_ALL, 0),
    CVMM_ROWS("att O", PAT_ATT_O, 200, 4, 2, 40, 17, 33, 1, 0, V_CVMM_ALL | V_CVMM_FAULTS, 0),
    CVMM_ROWS("att O, one slot, zero-row experts", PAT_ATT_O, 13, 2, 1, 60, 9, 11, 1, 0, V_CVMM_ALL, 0),
    /* several row, column and depth tiles of the tensor-core kernels (64 x 64 outputs, 32 deep), sizes off them */
    CVMM_ROWS("FFN up, wide: several tiles each way", PAT_FFN_UP, 100, 1, 3, 5, 100, 130, 0, 0, V_CVMM_ALL, 0),
    /* rows in plan order (MoEUT's FFN: up OUT_SORTED, down IN_SORTED) */
    CVMM_ROWS("FFN up, OUT_SORTED", PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0, F_OUT_SORTED, V_CVMM_ALL, 0),
    CVMM_ROWS("FFN down, IN_SORTED", PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1, F_IN_SORTED, V_CVMM_ALL, 0),
    CVMM_ROWS("FFN down, IN_SORTED | OUT_SORTED", PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0, F_IN_SORTED | F_OUT_SORTED,
              V_CVMM_ALL, 0),
    CVMM_ROWS("att O, OUT_SORTED, zero-row experts", PAT_ATT_O, 13, 2, 1, 60, 9, 11, 0, F_OUT_SORTED, V_CVMM_ALL, 0),
    /* the FFN's ReLU fused (CVMM_RELU_Y on the up projection, with negative products; CVMM_DX_THROUGH_RELU on the down
     * projection's backward, X a ReLU's output with exact zeros, dX overwritten), both row orders; several tiles */
#define CVMM_RELU_ROW(op, name, pat, N, K, E, Kin, Nout, reduce, flags)                                                \
    {op, name, &drv_cvmm, {pat, N, 1, K, E, Kin, Nout, reduce}, 0, (flags) | F_RELU, DT_BOTH, V_CVMM_ALL, 0, 0}
    CVMM_RELU_ROW("cvmm_forward", "FFN up, ReLU", PAT_FFN_UP, 300, 4, 16, 40, 50, 0, 0),
    CVMM_RELU_ROW("cvmm_forward", "FFN up, OUT_SORTED, ReLU", PAT_FFN_UP, 300, 4, 16, 40, 50, 0, F_OUT_SORTED),
    CVMM_RELU_ROW("cvmm_forward", "FFN up, wide, ReLU", PAT_FFN_UP, 100, 3, 5, 100, 130, 0, 0),
    CVMM_RELU_ROW("cvmm_backward", "FFN down, dX through ReLU", PAT_FFN_DOWN, 300, 4, 16, 50, 40, 1, 0),
    CVMM_RELU_ROW("cvmm_backward", "FFN down, IN_SORTED, dX through ReLU", PAT_FFN_DOWN, 300, 4, 16, 50, 40, 1,
                  F_IN_SORTED),
    CVMM_RELU_ROW("cvmm_backward", "FFN down, wide, IN_SORTED, dX through ReLU", PAT_FFN_DOWN, 100, 3, 5, 300, 70, 1,
                  F_IN_SORTED),
    CVMM_RELU_ROW("cvmm_backward", "FFN down, no reduction, dX through ReLU", PAT_FFN_DOWN, 30, 3, 7, 19, 37, 0, 0),
    CVMM_RELU_ROW("cvmm_backward", "FFN down, no reduction, IN_SORTED | OUT_SORTED, dX through ReLU", PAT_FFN_DOWN, 30,
                  3, 7, 19, 37, 0, F_IN_SORTED | F_OUT_SORTED),
#undef CVMM_RELU_ROW
    /* the residual fused into the forward's reduction (reduced patterns), dX_base into the backward's dX: disjoint
     * and in place, every path and row order; each also bit for bit against the unfused sequence on its backend */
#define CVMM_FUSED_ROWS(name, pat, N, H, K, E, Kin, Nout, reduce, flags)                                               \
    CVMM_ROWS(name ", fused residual", pat, N, H, K, E, Kin, Nout, reduce, (flags) | F_RESIDUAL, V_CVMM_ALL, 0),     \
    CVMM_ROWS(name ", fused residual in place", pat, N, H, K, E, Kin, Nout, reduce, (flags) | F_RESIDUAL | F_IN_PLACE, \
              V_CVMM_ALL, 0)
    CVMM_FUSED_ROWS("FFN down", PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1, 0),
    CVMM_FUSED_ROWS("FFN down, IN_SORTED", PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1, F_IN_SORTED),
    CVMM_FUSED_ROWS("att V", PAT_ATT_V, 200, 4, 2, 40, 33, 17, 1, 0),
    CVMM_FUSED_ROWS("att O", PAT_ATT_O, 200, 4, 2, 40, 17, 33, 1, 0),
    CVMM_FUSED_ROWS("att O, wide", PAT_ATT_O, 60, 2, 2, 5, 70, 130, 1, 0),
#undef CVMM_FUSED_ROWS
    /* dX_base alone (no reduction, so no forward residual): the FFN up projection's backward, both row orders */
    {"cvmm_backward", "FFN up, dX_base", &drv_cvmm, {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, 0, F_RESIDUAL, DT_BOTH,
     V_CVMM_ALL, 0, 0},
    {"cvmm_backward", "FFN up, OUT_SORTED, dX_base", &drv_cvmm, {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, 0,
     F_OUT_SORTED | F_RESIDUAL, DT_BOTH, V_CVMM_ALL, 0, 0},
    {"cvmm_backward", "FFN up, OUT_SORTED, dX_base in place", &drv_cvmm, {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, 0,
     F_OUT_SORTED | F_RESIDUAL | F_IN_PLACE, DT_BOTH, V_CVMM_ALL, 0, 0},
    {"cvmm_backward", "FFN up, wide, dX_base", &drv_cvmm, {PAT_FFN_UP, 100, 1, 3, 5, 100, 130, 0}, 0, F_RESIDUAL,
     DT_BOTH, V_CVMM_ALL, 0, 0},
    /* dX written over NaN (CVMM_DX_OVERWRITE): every pattern, both row orders of the inputs, with and without the
     * gate gradients beside it, through the ReLU too; each also bit for bit against zero fill + accumulation */
#define CVMM_OVERWRITE_ROW(name, pat, N, H, K, E, Kin, Nout, reduce, flags)                                            \
    {"cvmm_backward", name ", dX overwritten", &drv_cvmm, {pat, N, H, K, E, Kin, Nout, reduce}, 0,                    \
     (flags) | F_DX_OVERWRITE, DT_BOTH, V_CVMM_ALL, 0, 0}
    CVMM_OVERWRITE_ROW("att O", PAT_ATT_O, 200, 4, 2, 40, 17, 33, 1, 0),
    CVMM_OVERWRITE_ROW("att O, wide", PAT_ATT_O, 60, 2, 2, 5, 70, 130, 1, 0),
    CVMM_OVERWRITE_ROW("att O, unreduced", PAT_ATT_O, 13, 2, 1, 60, 9, 11, 0, 0),
    CVMM_OVERWRITE_ROW("att V", PAT_ATT_V, 200, 4, 2, 40, 33, 17, 1, 0),
    CVMM_OVERWRITE_ROW("FFN up", PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0, 0),
    CVMM_OVERWRITE_ROW("FFN up, OUT_SORTED", PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0, F_OUT_SORTED),
    CVMM_OVERWRITE_ROW("FFN down", PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1, 0),
    CVMM_OVERWRITE_ROW("FFN down, IN_SORTED", PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1, F_IN_SORTED),
    CVMM_OVERWRITE_ROW("FFN down, no reduction, IN_SORTED | OUT_SORTED", PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0,
                       F_IN_SORTED | F_OUT_SORTED),
    CVMM_OVERWRITE_ROW("FFN down, IN_SORTED, through ReLU", PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1,
                       F_IN_SORTED | F_RELU),
#undef CVMM_OVERWRITE_ROW
    /* repeated runs are bit-identical (no atomics), plan rebuilt in each */
    CVMM_ROWS("FFN down, 2000 entries, repeated", PAT_FFN_DOWN, 500, 1, 4, 16, 64, 48, 1, 0, CVMM_REPEATED,
              CVMM_REPEATED),
    /* bf16 copies shared with matmul and LayerNorm through the conversion cache (cuda_bf16_cache.cu) */
    {"cvmm_forward", "cache: X shared with matmul and LayerNorm", &drv_cvmm_cache, {60, 4, 9, 40, 24}, 0, 0, DT_BOTH,
     V_CVMM_ALL | VB(V_MATMUL_PLAIN), 0, 0},
    {"cvmm_forward", "cache: X and dY in plan order shared", &drv_cvmm_cache, {60, 4, 9, 40, 24}, 0,
     F_IN_SORTED | F_OUT_SORTED, DT_BOTH, V_CVMM_ALL | VB(V_MATMUL_PLAIN), 0, 0},
    /* MoEUT's FFN on one plan: rows in plan order between the calls, against the same chain in entry order */
    {"cvmm_backward", "FFN chain on one plan, plan order", &drv_ffn_chain, {150, 4, 16, 24, 20}, 0, 0, DT_BOTH,
     DEF | VB(V_CVMM_MMA), 0, 0},

    /* ---- loss, argmax, optimizer */
    {"cross_entropy", "losses and dlogits", &drv_cross_entropy, {150, 77}, 0.5, 0, DT_FP32, DEF, 0, 0},
    {"cross_entropy", "dlogits in place of the logits", &drv_cross_entropy, {150, 77}, 0.5, F_ALIAS, DT_FP32, DEF, 0,
     0},
    {"cross_entropy", "losses NULL", &drv_cross_entropy, {150, 77}, 0.5, F_NO_LOSSES, DT_FP32, DEF, 0, 0},
    {"cross_entropy", "dlogits NULL", &drv_cross_entropy, {150, 77}, 0.5, F_NO_GRAD, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "all positions", &drv_expert_choice, {150, 11, 27}, 0, 0, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "valid mask", &drv_expert_choice, {150, 11, 27}, 0, F_VALID, DT_FP32, DEF, 0, 0},
    /* the CUDA selection (cuda_expert_choice.cu) sorts each expert's positions in one block up to 2048 positions
     * (the rows above and: ties across positions, 2048 = a full block, more experts than a byte's 256 buckets, c = 1
     * and c = N, one expert (every score 1), one position), and beyond that the N*E (expert, position) pairs by a
     * chain of stable counting sorts over many plan chunks of 1024 (2049 positions and more) */
    {"expert_choice_select", "tied rows", &drv_expert_choice, {150, 11, 27}, 0, F_TIED_ROWS, DT_FP32, DEF, DEF, 0},
    {"expert_choice_select", "tied rows, valid mask", &drv_expert_choice, {150, 11, 40}, 0, F_TIED_ROWS | F_VALID,
     DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "2048 positions, tied rows, valid mask", &drv_expert_choice, {2048, 6, 500}, 0,
     F_TIED_ROWS | F_VALID, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "300 experts", &drv_expert_choice, {40, 300, 5}, 0, 0, DT_FP32, DEF, 0, 0},
    /* a NaN logit makes its position's softmax row NaN: it ranks before every number (as torch.topk) on both backends,
     * whatever the NaN's sign (one block per expert, and KeySort past 2048 positions) */
    {"expert_choice_select", "NaN rows", &drv_expert_choice, {150, 11, 20}, 0, F_NAN_ROWS, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "NaN rows, 2100 positions", &drv_expert_choice, {2100, 3, 30}, 0, F_NAN_ROWS, DT_FP32,
     DEF, 0, 0},
    {"expert_choice_select", "c = N", &drv_expert_choice, {150, 11, 150}, 0, 0, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "c = 1", &drv_expert_choice, {150, 11, 1}, 0, F_TIED_ROWS, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "one expert", &drv_expert_choice, {150, 1, 20}, 0, F_VALID, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "one position", &drv_expert_choice, {1, 5, 1}, 0, 0, DT_FP32, DEF, 0, 0},
    {"expert_choice_select", "sorts: 2049 positions, tied rows, valid mask", &drv_expert_choice, {2049, 5, 300}, 0,
     F_TIED_ROWS | F_VALID, DT_FP32, DEF, DEF, 0},
    {"expert_choice_select", "sorts: 3000 positions x 13 experts, c = N", &drv_expert_choice, {3000, 13, 3000}, 0, 0,
     DT_FP32, DEF, 0, 0},
    {"expert_choice_gates_backward", "sorts: 2049 positions, valid mask", &drv_expert_choice, {2049, 5, 300}, 0,
     F_VALID, DT_FP32, DEF, 0, 0},
    {"expert_choice_gates_backward", "all positions", &drv_expert_choice, {150, 11, 27}, 0, 0, DT_FP32, DEF, 0, 0},
    {"expert_choice_gates_backward", "valid mask", &drv_expert_choice, {150, 11, 27}, 0, F_VALID, DT_FP32, DEF, 0,
     0},
    {"argmax_rows", "ties", &drv_argmax, {150, 77}, 0, 0, DT_FP32, DEF, 0, 0},
    {"adamw_step", "three steps", &drv_adamw, {100003, 3}, 0, 0, DT_FP32, DEF, 0, 0},
    {"adamw_step", "three steps, the gradient scaled by 0.37", &drv_adamw, {100003, 3}, 0.37, 0, DT_FP32, DEF, 0, 0},
    {"sum_squares", "100003 values", &drv_sum_squares, {100003}, 0, 0, DT_FP32, DEF, 0, 0},
    {"all_finite", "finite, Inf, NaN", &drv_all_finite, {100003, 777}, 0, 0, DT_FP32, DEF, 0, 0},

    /* ---- expert capacity (N=200 positions, E=11 experts, k=4; gates of 6 values, so the score order has ties) */
    {"capacity_drop", "position order", &drv_capacity_drop, {200, 11, 4, 60, CAPACITY_POSITION}, 0, 0, DT_FP32, DEF,
     0, 0},
    {"capacity_drop", "score order", &drv_capacity_drop, {200, 11, 4, 60, CAPACITY_SCORE}, 0, 0, DT_FP32, DEF, 0, 0},
    {"capacity_drop", "score order, valid mask, cap 1", &drv_capacity_drop, {200, 11, 4, 1, CAPACITY_SCORE}, 0,
     F_VALID, DT_FP32, DEF, 0, 0},
    {"capacity_drop", "position order, valid mask", &drv_capacity_drop, {200, 11, 4, 73, CAPACITY_POSITION}, 0,
     F_VALID, DT_FP32, DEF, 0, 0},
    {"capacity_drop", "capacity above every load", &drv_capacity_drop, {200, 11, 4, 200, CAPACITY_SCORE}, 0, 0,
     DT_FP32, DEF, 0, 0},
    /* the CUDA decision is a chain of stable counting sorts (cuda_capacity.cu): assignments over several of the
     * plan's chunks of 1024, more experts than a byte's 256 buckets, gates of both signs with -0 equal to +0 */
    {"capacity_drop", "score order, 4000 assignments over four plan chunks", &drv_capacity_drop,
     {1000, 40, 4, 90, CAPACITY_SCORE}, 0, F_VALID, DT_FP32, DEF, 0, 0},
    {"capacity_drop", "position order, 4000 assignments over four plan chunks", &drv_capacity_drop,
     {1000, 40, 4, 90, CAPACITY_POSITION}, 0, 0, DT_FP32, DEF, 0, 0},
    {"capacity_drop", "score order, 300 experts, signed gates and -0", &drv_capacity_drop,
     {700, 300, 3, 3, CAPACITY_SCORE}, 0, F_SIGNED, DT_FP32, DEF, 0, 0},
    {"capacity_drop", "position order, 300 experts", &drv_capacity_drop, {700, 300, 3, 3, CAPACITY_POSITION}, 0, 0,
     DT_FP32, DEF, 0, 0},
    {"capacity_drop", "score order, gates 1 ulp apart", &drv_capacity_drop, {300, 11, 4, 50, CAPACITY_SCORE}, 0,
     F_ULP_GATES, DT_FP32, DEF, 0, 0},
    /* most of 300 experts empty (300 assignments), capacity 1; a capacity above all M assignments */
    {"capacity_drop", "score order, empty experts, cap 1", &drv_capacity_drop, {100, 300, 3, 1, CAPACITY_SCORE}, 0, 0,
     DT_FP32, DEF, DEF, 0},
    {"capacity_drop", "position order, empty experts, cap 1", &drv_capacity_drop, {100, 300, 3, 1, CAPACITY_POSITION},
     0, F_VALID, DT_FP32, DEF, 0, 0},
    {"capacity_drop", "capacity above M", &drv_capacity_drop, {200, 11, 4, 801, CAPACITY_POSITION}, 0, F_VALID,
     DT_FP32, DEF, 0, 0},
    {"mask_zero", "100003 values", &drv_mask_zero, {100003}, 0, 0, DT_FP32, DEF, 0, 0},
};
enum { N_OP_CASES = sizeof op_cases / sizeof op_cases[0] };

/* ---------------------------------------------------------------- every op has a case */
static const char *const backend_op_names[] = {
#define BACKEND_OP(ret, name, params) #name,
#include "kernels/backend_ops.h"
#undef BACKEND_OP
};

START_TEST(test_every_op_has_a_case) {
    char missing[2048] = "";
    size_t at = 0;
    for (size_t i = 0; i < sizeof backend_op_names / sizeof backend_op_names[0]; i++) {
        int found = 0;
        for (size_t k = 0; k < N_OP_CASES && !found; k++) found = !strcmp(op_cases[k].op, backend_op_names[i]);
        if (!found && at < sizeof missing)
            at += (size_t)snprintf(missing + at, sizeof missing - at, " %s", backend_op_names[i]);
    }
    ck_assert_msg(at == 0,
                  "ops of kernels/backend_ops.h without a case in the table of tests/unit/cuda_backend_ops.c:%s",
                  missing);
    for (size_t k = 0; k < N_OP_CASES; k++) {
        int found = 0;
        for (size_t i = 0; i < sizeof backend_op_names / sizeof backend_op_names[0] && !found; i++)
            found = !strcmp(op_cases[k].op, backend_op_names[i]);
        ck_assert_msg(found, "case '%s' names op '%s', which kernels/backend_ops.h does not declare", op_cases[k].name,
                      op_cases[k].op);
    }
}
END_TEST

/* ---------------------------------------------------------------- the runner */
static Backend *reference;                     /* the CPU backend */
static Backend *variant_backend[N_VARIANTS];   /* made on first use, kept until the end */
static int variant_refused[N_VARIANTS];        /* emulator-only variant on a GPU: said once, not run */
static char *variant_saved_env[N_VARIANTS][3]; /* the caller's values while a variant runs */
static int emulator;                           /* the cuda backend is the CUDA emulator */
static const char *only_op;                    /* --op NAME: run only that op's rows */

/* Sets the variant's environment (kept while it runs) and returns its backend, NULL when it does not run here. */
static Backend *variant_enter(int v) {
    const CudaVariant *cv = &cuda_variants[v];
    if (variant_refused[v]) return NULL;
    if (cv->emulator_only && !emulator) {
        variant_refused[v] = 1;
        printf("cuda variant '%s' not run: not on the CUDA emulator (its fault injection is what it uses)\n", cv->name);
        return NULL;
    }
    for (int i = 0; i < 3 && cv->env[i][0]; i++)
        variant_saved_env[v][i] = cuda_test_swap_env(cv->env[i][0], cv->env[i][1]);
    if (!variant_backend[v]) {
        char err[256];
        Backend *be = backend_create("cuda", err, sizeof err);
        ck_assert_msg(be != NULL, "cuda backend '%s': %s", cv->name, err);
        variant_backend[v] = be;
        for (int bf16 = 0; bf16 < 2; bf16++) { /* the expert-GEMM path it takes */
            const char *want = emulator && cv->emu_cvmm_path[bf16] ? cv->emu_cvmm_path[bf16] : cv->cvmm_path[bf16];
            if (!want && v != V_CVMM_AUTO) continue;
            const char *path = cuda_cvmm_path(be, bf16);
            printf("cuda variant '%s', %s operands: cvmm takes the %s path\n", cv->name, bf16 ? "bf16" : "fp32", path);
            if (want) ck_assert_msg(!strcmp(path, want), "cuda variant '%s', %s operands: cvmm path %s, want %s",
                                    cv->name, bf16 ? "bf16" : "fp32", path, want);
            else ck_assert_msg(!strcmp(path, "loop") || !strcmp(path, "grouped") || (bf16 && !strcmp(path, "mma")),
                               "auto cvmm path %s", path);
        }
    }
    return variant_backend[v];
}
/* Whether the variant forces the grouped path for an operand type that cuBLAS refuses in the grouped call (an H100's
 * CUDA 13.0 cuBLAS refuses bf16 A/B with an fp32 C): said once per variant and type, and the rows of that type are
 * not run on it, since there the forced path cannot run at all; auto's probe then takes the loop, and the loop
 * variant runs the rows. A grouped call that cuBLAS takes but computes wrongly is not excused: the rows compare it. */
static int grouped_refused(int v, Backend *be, int bf16) {
    static int known[N_VARIANTS][2]; /* 0 unknown, 1 taken, 2 refused */
    if (strcmp(cuda_cvmm_path(be, bf16), "grouped") != 0 || v == V_CVMM_AUTO) return 0;
    if (!known[v][bf16]) {
        char why[256] = "";
        known[v][bf16] = cuda_cvmm_grouped_refused(be, bf16, why, sizeof why) ? 2 : 1;
        if (known[v][bf16] == 2)
            printf("cuda variant '%s', %s operands not run: cuBLAS refuses the grouped GEMM here (%s); recorded, "
                   "not a failure: auto takes the loop for them\n",
                   cuda_variants[v].name, bf16 ? "bf16" : "fp32", why);
        /* the emulator's cuBLAS takes every grouped call unless its fault injection refuses bf16 */
        if (emulator)
            ck_assert_msg((known[v][bf16] == 2) == (v == V_CVMM_GROUPED_FAULT_BF16 && bf16),
                          "cuda variant '%s', %s operands: the emulator's grouped GEMM was %s", cuda_variants[v].name,
                          bf16 ? "bf16" : "fp32", known[v][bf16] == 2 ? "refused" : "taken");
    }
    return known[v][bf16] == 2;
}

static void variant_leave(int v) {
    const CudaVariant *cv = &cuda_variants[v];
    for (int i = 0; i < 3 && cv->env[i][0]; i++) {
        free(cuda_test_swap_env(cv->env[i][0], variant_saved_env[v][i]));
        free(variant_saved_env[v][i]);
        variant_saved_env[v][i] = NULL;
    }
}

/* One row: the CPU reference once, then each dtype and variant, compared with it; the repeats and the auto check. */
START_TEST(test_op_case) {
    const OpCase *c = &op_cases[_i];
    if (only_op && strcmp(c->op, only_op) != 0) return; /* left out by --op */
    char shape[160];
    case_shape(c, shape, sizeof shape);
    OpRun ref;
    case_run(&ref, reference, c, 1, 0, "cpu");
    int bad = 0, compared = 0;
    double worst = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        if (!(c->dtypes & (bf16 ? DT_BF16 : DT_FP32))) continue;
        const char *dt = bf16 ? "bf16" : "fp32";
        static OpRun runs[N_VARIANTS];
        int ran[N_VARIANTS] = {0};
        for (int v = 0; v < N_VARIANTS; v++) {
            if (!(c->variants & VB(v))) continue;
            Backend *be = variant_enter(v);
            if (!be) continue;
            if (grouped_refused(v, be, bf16)) {
                variant_leave(v);
                continue;
            }
            case_run(&runs[v], be, c, 0, bf16, cuda_variants[v].name);
            bad += case_compare(&runs[v], &ref, &worst);
            compared++;
            if (c->repeat & VB(v)) {
                OpRun again;
                case_run(&again, be, c, 0, bf16, cuda_variants[v].name);
                if (!runs_equal_bits(&again, &runs[v])) {
                    printf("FAIL %s, case '%s' [cuda %s, %s] %s: a second run gave different bits\n", c->op, c->name,
                           cuda_variants[v].name, dt, shape);
                    bad++;
                }
                run_release(&again);
            }
            variant_leave(v);
            ran[v] = 1;
        }
        const int auto_is = AUTO_IS_OF(c->auto_is, bf16);
        const int other = auto_is == V_ATT_GEMM ? V_ATT_FUSED : V_ATT_GEMM;
        if (auto_is && ran[V_ATT_AUTO] && ran[auto_is] && ran[other]) {
            if (!runs_equal_bits(&runs[V_ATT_AUTO], &runs[auto_is])) {
                printf("FAIL %s, case '%s' [%s] %s: auto's results are not the %s path's bit for bit\n", c->op, c->name,
                       dt, shape, cuda_variants[auto_is].name);
                bad++;
            }
            if (runs_equal_bits(&runs[auto_is], &runs[other])) {
                printf("FAIL %s, case '%s' [%s] %s: the %s and %s paths gave identical bits; the auto check proves "
                       "nothing\n", c->op, c->name, dt, shape, cuda_variants[auto_is].name, cuda_variants[other].name);
                bad++;
            }
        }
        for (int v = 0; v < N_VARIANTS; v++)
            if (ran[v]) run_release(&runs[v]);
    }
    run_release(&ref);
    ck_assert_msg(bad == 0, "%s, case '%s' (%s): %d check(s) failed (the FAIL lines above)", c->op, c->name, shape,
                  bad);
    printf("ok   %s, case '%s': %d backend run(s), worst NMSE %.2g of its threshold\n", c->op, c->name, compared,
           worst);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("cuda_backend_ops");
    TCase *table = tcase_create("op table");
    tcase_add_test(table, test_every_op_has_a_case);
    tcase_add_loop_test(table, test_op_case, 0, N_OP_CASES);
    suite_add_tcase(s, table);
    if (only_op) return s;
    TCase *checks = tcase_create("backend checks");
    tcase_add_checked_fixture(checks, checks_setup, checks_teardown);
    tcase_add_test(checks, test_attention_options_rejected);
    tcase_add_test(checks, test_routing_plan_bad_expert_dies);
    tcase_add_test(checks, test_capacity_bad_expert_dies);
    tcase_add_test(checks, test_step_bad_inputs_die_at_read_values);
    tcase_add_test(checks, test_balance_grid_limit_dies);
    tcase_add_test(checks, test_expert_choice_c_over_valid);
    tcase_add_test(checks, test_weights_bf16_copy_follows_writes);
    tcase_add_test(checks, test_weights_bf16_copy_stale_is_caught);
    tcase_add_test(checks, test_bf16_cache_stale_is_caught);
    suite_add_tcase(s, checks);
    return s;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--cvmm-bad-expert") == 0) return cvmm_bad_expert_child(argc, argv);
    if (argc == 3 && strcmp(argv[1], "--balance-grid") == 0) return balance_grid_child(argv[2]);
    if (argc == 2 && strcmp(argv[1], "--capacity-bad") == 0) return capacity_bad_expert_child();
    if (argc == 3 && strcmp(argv[1], "--step-bad") == 0) return step_bad_input_child(argv[2]);
    if (argc > 1 && strcmp(argv[1], "--stale-weights") == 0) return stale_weights_child(0);
    if (argc > 1 && strcmp(argv[1], "--stale-weights-nccl") == 0) return stale_weights_child(1);
    if (argc > 1 && strcmp(argv[1], "--stale-cache") == 0) return stale_cache_child();
    setvbuf(stdout, NULL, _IOLBF, 0); /* FAIL lines before Check's summary of the case */
    if (argc == 3 && strcmp(argv[1], "--op") == 0) {
        only_op = argv[2];
        int known = 0;
        for (size_t i = 0; i < sizeof backend_op_names / sizeof backend_op_names[0]; i++)
            known |= !strcmp(only_op, backend_op_names[i]);
        if (!known) {
            printf("--op %s: not an op of kernels/backend_ops.h\n", only_op);
            return EXIT_FAILURE;
        }
        printf("only the rows of op %s (the others count as passed)\n", only_op);
    } else if (argc > 1) {
        printf("usage: %s [--op NAME]   (NAME: an op of kernels/backend_ops.h)\n", argv[0]);
        return EXIT_FAILURE;
    }
    cuda_test_require_gpu();
    char err[256];
    reference = backend_create("cpu", err, sizeof err);
    if (!reference) {
        printf("FAIL: the cpu backend could not be created: %s\n", err);
        return EXIT_FAILURE;
    }
    Backend *probe = backend_create("cuda", err, sizeof err);
    if (!probe) {
        printf("FAIL: the cuda backend could not be created: %s\n", err);
        return EXIT_FAILURE;
    }
    emulator = on_emulator(probe);
    backend_destroy(probe);
    int status = run_cuda_test_suite(suite());
    for (int v = 0; v < N_VARIANTS; v++)
        if (variant_backend[v]) backend_destroy(variant_backend[v]);
    backend_destroy(reference);
    return status;
}
