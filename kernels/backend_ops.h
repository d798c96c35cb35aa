/* The backend's ops, each declared once: BACKEND_OP(return type, name, (parameters)) with its contract (the
 * conventions are in kernels/backend.h). The list has no include guard: a file defines BACKEND_OP, includes it,
 * and gets one line per op:
 *   kernels/backend.h              the members of struct Backend     ret (*name)(parameters);
 *   kernels/cpu/cpu_internal.h     the CPU implementations           ret cpu_name(parameters);
 *   kernels/cuda/cuda_common.cuh   the CUDA implementations          ret cuda_name(parameters);
 *   kernels/cpu/cpu_backend.c, kernels/cuda/cuda_backend.cu   the tables    be->name = cpu_name / cuda_name;
 * So adding an op is one entry here plus cpu_<name> (kernels/cpu/) and cuda_<name> (kernels/cuda/); a backend that
 * lacks one fails to link. The backend's memory and lifecycle members (alloc ... register_weights) are not ops and
 * are written out in struct Backend. */
#ifndef BACKEND_OP
#error "define BACKEND_OP(ret, name, params) before including kernels/backend_ops.h"
#endif

/* ---- dense linear algebra ----
 * C[M,N] = alpha * op(A) @ op(B) + beta * C, op(A) is [M,K], op(B) is [K,N].
 * transA: A is stored as [K,M]; transB: B is stored as [N,K] (e.g. a PyTorch Linear weight [out,in]).
 * beta = 0 must overwrite C even if it holds NaN. */
BACKEND_OP(void, matmul, (Backend *be, scalar_t *C, const scalar_t *A, const scalar_t *B, int M, int N, int K,
                          int transA, int transB, scalar_t alpha, scalar_t beta))

/* The backward of n_terms linear maps of one input X [N, C], y_i = alpha_i X W_i^T (LinearTerm: W_i [m_i, C],
 * dY_i [N, m_i]; a layer's projections and routers reading one LayerNorm output), where a term with a rope takes
 * R_i^T dY_i for dY_i (R_i^T: its rope with inverse = 1; dY_i itself is not written):
 *   dW_i[m_i, C] += alpha_i dY_i^T X           for each term with a dw, then
 *   dX[N, C] = beta dX + sum_i alpha_i dY_i W_i  (beta = 0 overwrites NaN).
 * Exactly rope on a copy of dY_i and the matmuls in that order on the CPU backend. A backend may make the sum one product over the
 * concatenated dY_i (K = sum m_i: dX written once, not read and written once per term); the CUDA backend does in
 * bf16 mode, rounding dY_i and alpha_i W_i to bf16 (matmul rounds dY_i and W_i). X may be in matmul's narrow form
 * (layernorm_forward_narrow). Operands as linear_backward_check_args (kernels/backend.h). */
BACKEND_OP(void, linear_backward, (Backend *be, scalar_t *dX, const scalar_t *X, const LinearTerm *terms, int n_terms,
                                   int N, int C, scalar_t beta))

/* x[n] will be read again as a whole operand of matmul or cvmm after many other ops, while nothing writes it (MoEUT's
 * layer input and x1: by the forward's experts and again by the backward's weight gradients). A backend that converts
 * operands for its GEMMs (CUDA in bf16 mode) keeps the converted copy it makes next (or a producer of x writes) until
 * x is written, in memory of its own (n bf16 values, reused by the next copy while x's allocation lives); others
 * ignore it. A hint: results are the same with or without it. */
BACKEND_OP(void, keep_operand, (Backend *be, const scalar_t *x, size_t n))

/* ---- elementwise ---- */
/* y[n] += x[n] */
BACKEND_OP(void, add_inplace, (Backend *be, scalar_t *y, const scalar_t *x, size_t n))
/* y[n] *= s */
BACKEND_OP(void, scale_inplace, (Backend *be, scalar_t *y, scalar_t s, size_t n))
/* y[N,C] += bias[C] */
BACKEND_OP(void, add_bias, (Backend *be, scalar_t *y, const scalar_t *bias, int N, int C))
/* dbias[C] += sum_n dy */
BACKEND_OP(void, bias_backward, (Backend *be, scalar_t *dbias, const scalar_t *dy, int N, int C))
/* y = max(x,0); y may equal x */
BACKEND_OP(void, relu_forward, (Backend *be, scalar_t *y, const scalar_t *x, size_t n))
/* dx = dy * (pre > 0), overwrite; pre is the ReLU input. dx may alias dy. */
BACKEND_OP(void, relu_backward, (Backend *be, scalar_t *dx, const scalar_t *dy, const scalar_t *pre, size_t n))

/* ---- embedding ---- */
/* h[N,C] = table[tokens[n]] */
BACKEND_OP(void, embedding_forward, (Backend *be, scalar_t *h, const int32_t *tokens, const scalar_t *table, int N,
                                     int C))
/* dtable[tokens[n]] += dh[n]; dtable [V, C], tokens in [0, V): V bounds the rows the op may write (a backend that
 * cannot see the ids on the host reports all V rows as written) */
BACKEND_OP(void, embedding_backward, (Backend *be, scalar_t *dtable, const scalar_t *dh, const int32_t *tokens, int N,
                                      int C, int V))

/* ---- LayerNorm over the last dim, biased variance, eps inside the sqrt ----
 * y[N,C] = (x - mean) * rstd * w + b; w and b may be NULL (no affine: w=1, b=0).
 * mean[N], rstd[N] are saved for the backward. */
BACKEND_OP(void, layernorm_forward, (Backend *be, scalar_t *y, scalar_t *mean, scalar_t *rstd, const scalar_t *x,
                                     const scalar_t *w, const scalar_t *b, int N, int C, scalar_t eps))
/* layernorm_forward for a y that is read only as an operand of matmul (A or B: a layer's projections and routers):
 * the same mean, rstd and values, y kept in matmul's narrow operand form. Where the backend's matmul rounds its
 * operands to bf16 (CUDA in bf16 mode under DMMATH_CUDA_MATMUL=auto) that form is y's values rounded to bf16, packed
 * in the first half of y's memory, the operand a conversion at the matmul would make; elsewhere it is the exact fp32
 * y. It holds until y is written again; read it through matmul only, on the same backend and precision. */
BACKEND_OP(void, layernorm_forward_narrow, (Backend *be, scalar_t *y, scalar_t *mean, scalar_t *rstd,
                                            const scalar_t *x, const scalar_t *w, const scalar_t *b, int N, int C,
                                            scalar_t eps))
/* dx[N,C] += ..., dw[C] += ..., db[C] += ... (dw/db ignored when w/b are NULL). */
BACKEND_OP(void, layernorm_backward, (Backend *be, scalar_t *dx, scalar_t *dw, scalar_t *db, const scalar_t *dy,
                                      const scalar_t *x, const scalar_t *w, const scalar_t *mean, const scalar_t *rstd,
                                      int N, int C))

/* ---- RoPE, NeoX rotate-half layout, in place on x[B,T,H,D] ----
 * Rotates dims [0,n_rot) of every head (n_rot even), half = n_rot/2, theta_i = base^(-2i/n_rot) computed in fp32,
 * position of row t = pos_offset + t:
 *   y[i] = x[i] cos - x[i+half] sin ;  y[i+half] = x[i+half] cos + x[i] sin   (i < half)
 * inverse != 0 applies the transpose (rotation by -angle): the backward of the forward rotation. */
BACKEND_OP(void, rope, (Backend *be, scalar_t *x, int B, int T, int H, int D, int n_rot, int pos_offset, scalar_t base,
                        int inverse))

/* ---- causal softmax attention ----
 * q[B,Tq,H,D], k[B,Tk,H,D], v[B,Tk,H,D] (Tk >= Tq; query i sits at absolute position Tk-Tq+i and sees keys
 * j <= Tk-Tq+i), out[B,Tq,H,D], lse[B,H,Tq] = logsumexp of the scaled scores (saved for the backward).
 * scores = scale * q.k (MoEUT and the DM-math dense model pre-scale q and k and pass scale = 1). */
BACKEND_OP(void, attention_forward, (Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                     const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale))
/* dq, dk, dv = gradients (same shapes as q, k, v; overwritten, never read). Requires Tq == Tk. */
BACKEND_OP(void, attention_backward, (Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                                      const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                      const scalar_t *v, int B, int T, int H, int D, scalar_t scale))

/* ---- routing primitives: selection, gating transform, balancing losses (moe-variants.md) ----
 * logits[N,G,E] (G independent groups, e.g. attention heads; G=1 for the FFN).
 *
 * topk_select: for each (n,g) the k experts with the largest key (ties: lower index first), excluding experts
 * whose drop mask entry is nonzero (drop[N,G,E], may be NULL; expert dropout). Slot order: descending key.
 * sel[N,G,k] = g*E + e (GLOBAL expert id, ready for cvmm). If fewer than k experts survive the mask, the remaining
 * slots take the lowest-index dropped experts, in index order; router_gates gives those slots gate 0 (the
 * reference sets dropped scores to -inf before top-k, so such an entry contributes nothing).
 * The key (kernels/routing_key.h): without a bias (bias == NULL) the logit itself: selecting on the logits equals
 * selecting on sigmoid or softmax scores, which are increasing functions of them. With bias[G*E] (balance "bias",
 * DeepSeek-V3 eq. 16): score_e + bias[g*E+e], score = the gating transform `score` of the logits (sigmoid, or
 * softmax over the group's E logits), computed in double; the bias moves the selection only, never a gate.
 * Group-limited routing (DeepSeek-V3 §2.1.2; n_group > 1, topk_group < n_group): the E experts of a row form n_group
 * contiguous groups of E/n_group (>= 2); a group's score = the sum of the two largest of score_e (+ bias_e when bias
 * != NULL) over its experts not dropped (score = sigmoid or softmax as above, in double; one survivor: its value, none:
 * -inf); the experts of the topk_group best groups (ties: lower group first) are the only candidates, and the filler
 * slots come from the dropped experts of those groups. n_group = topk_group = 1 (or topk_group = n_group): no limit,
 * the selection above bit for bit. Requires E % n_group == 0, 1 <= topk_group <= n_group <= ROUTING_MAX_GROUPS (64)
 * and k <= topk_group * E / n_group. Attention calls it with 1, 1.
 * Both backends select with kernels/routing_topk.h. */
BACKEND_OP(void, topk_select, (Backend *be, int32_t *sel, const scalar_t *logits, const uint8_t *drop,
                               const scalar_t *bias, RouterKind score, int N, int G, int E, int k, int n_group,
                               int topk_group))
/* router_gates: gate[N,G,k] at the selected experts (sel from topk_select):
 *   ROUTER_SIGMOID: s_j = sigmoid(l[sel_j])                   (MoEUT's sigma-MoE)
 *   ROUTER_SOFTMAX: s_j = softmax over the group's E logits, at sel_j (all E experts, dropped or not)
 *   renorm == 0: gate_j = s_j;  renorm != 0: gate_j = s_j / sum_i s_i over the k slots
 * A slot whose expert is dropped (drop[n,g,e] != 0; only the filler slots of topk_select) gets gate 0 and is
 * left out of the sum. */
BACKEND_OP(void, router_gates, (Backend *be, scalar_t *gate, const scalar_t *logits, const int32_t *sel,
                                const uint8_t *drop, int N, int G, int E, int k, RouterKind kind, int renorm))
/* dlogits[N,G,E] += the gradient of sum_j dgate_j * gate_j through router_gates (same arguments; gate is its
 * output). Sigmoid without renorm touches only the selected logits; softmax touches every logit of the group. */
BACKEND_OP(void, router_gates_backward, (Backend *be, scalar_t *dlogits, const scalar_t *dgate, const scalar_t *gate,
                                         const scalar_t *logits, const int32_t *sel, const uint8_t *drop, int N,
                                         int G, int E, int k, RouterKind kind, int renorm))
/* switch_balance: the Switch Transformer load-balancing loss (Fedus et al. 2021, eqs. 4-6) of ONE routing
 * decision, logits[B,T,G,E] with its selection sel[B,T,G,k] (global ids g*E+e), over the positions with
 * valid[B,T] != 0 (NULL = all), n of them:
 *   f_{g,i} = (number of slots of group g selecting expert i) / (k n)     (sums to 1; not differentiated)
 *   P_{g,i} = (1/n) sum_t softmax(l_{t,g})_i
 *   value   = (1/G) sum_g E sum_i f_{g,i} P_{g,i}                    (1 for a uniform router)
 * Returns value (unscaled; 0 when n = 0). If dlogits != NULL: dlogits = coef * d(value)/d(logits) (overwrite),
 * i.e. coef * E / (G n) * p_e (f_e - sum_i f_i p_i) at valid positions, 0 elsewhere.
 * One op, not composed in model code from softmax sums, expert_count and a per-row gradient op: the CPU could keep
 * its sums and their order, but on CUDA that form needs a second log-sum-exp pass over the logits (this op shares one
 * between the statistics and the gradient) and a separate counting kernel and copy: more work per call, no gain. */
BACKEND_OP(double, switch_balance, (Backend *be, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                                    const uint8_t *valid, int B, int T, int G, int E, int k, scalar_t coef))
/* seq_balance: DeepSeek-V3's sequence-wise balance loss (arXiv 2412.19437 §2.1.2, eqs. 17-20) of ONE routing decision,
 * logits[B,T,E] with its selection sel[B,T,k] (expert ids e, one group), per sequence b over its positions with
 * valid[b,t] != 0 (NULL = all), n_b of them:
 *   s'_{t,i} = the scores normalised over all E experts: sigmoid(l_{t,i}) / sum_j sigmoid(l_{t,j}) (kind
 *              ROUTER_SIGMOID) or softmax(l_t)_i (ROUTER_SOFTMAX)
 *   f_{b,i}  = E / (k n_b) * (number of slots of b's counted positions selecting i)   (not differentiated)
 *   P_{b,i}  = (1/n_b) sum_t s'_{t,i}
 *   value    = (1/B_c) sum_b sum_i f_{b,i} P_{b,i}, the mean over the B_c sequences with n_b > 0 (V3 sums it per
 *              sequence; a micro-batch averages its sequences); 1 for a uniform s'; 0 when B_c = 0
 * Returns value (unscaled). If dlogits != NULL: dlogits += coef * d(value)/d(logits) (ACCUMULATES: it adds to the
 * gradient of the balance model.balance chooses), i.e. at a counted position of b
 *   coef / (B_c n_b) * w_e (f_{b,e} - sum_i f_{b,i} s'_i),  w_e = s'_e (softmax) or sigmoid'(l_e) / sum_j sigmoid(l_j),
 * nothing elsewhere. Filler slots of topk_select count like any slot (as in switch_balance). */
BACKEND_OP(double, seq_balance, (Backend *be, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                                 const uint8_t *valid, int B, int T, int E, int k, RouterKind kind, scalar_t coef))
/* expert_count: counts[g*E + e] += the number of slots j of the positions n with valid[n] != 0 (valid[N], NULL =
 * all) whose selection sel[N,G,k] is g*E + e (global ids, as topk_select writes them), leaving out the slots
 * whose expert is dropped (drop[N,G,E] != 0, may be NULL: the filler slots of topk_select carry gate 0 and route
 * nothing). counts[G*E] is int64 so that it stays exact over any number of calls. Feeds the routing statistics
 * (model_routing_counts) and, later, load-based balancing. */
BACKEND_OP(void, expert_count, (Backend *be, int64_t *counts, const int32_t *sel, const uint8_t *drop,
                                const uint8_t *valid, int N, int G, int E, int k))

/* ---- expert-choice routing (Zhou et al. 2022, arXiv 2202.09368 §3.1; model.routing "expert_choice") ----
 * logits[N,E]: one routing decision's router logits; S[n,e] = softmax over the E experts of row n, in double.
 * expert_choice_select: each expert e takes the c positions n with valid[n] != 0 (valid[N], NULL = all) of largest
 * S[n,e], in descending score, ties to the earlier position, a NaN score before every number as torch.topk ranks it
 * (a position whose logits hold a NaN: its whole softmax row is NaN, and its gates NaN) (the CPU's
 * kernels/expert_choice_pick.c; the CUDA backend selects on the device in the same order): entry p = e*c + j holds pos[p] = n, expert[p] = e and
 * gate[p] = S[n,e] (pos, expert, gate: [E*c]). The entries are grouped by expert, so routing_plan over expert[] is
 * the identity permutation. Needs 1 <= c <= the number of valid positions (every entry a distinct real position of
 * its expert); dies otherwise (CUDA dies on c > N at once; a c above the valid positions, which it finds on the
 * device without a copy back, gives those entries pos and expert -1, which the routing_plan over expert[] that
 * follows the selection dies on). A position may be taken by 0..E experts. */
BACKEND_OP(void, expert_choice_select, (Backend *be, int32_t *pos, int32_t *expert, scalar_t *gate,
                                        const scalar_t *logits, const uint8_t *valid, int N, int E, int c))
/* expert_choice_gates_backward: dlogits[N,E] += the gradient of sum_p dgate[p] * gate[p] through the softmax, for the
 * entries pos[E*c] of expert_choice_select (an (n,e) pair occurs at most once): with q[n,e] = dgate of the entry
 * (n,e), 0 where e did not take n,  dl[n,e] += S[n,e] (q[n,e] - sum_i q[n,i] S[n,i]).  dscore[N,E] is scratch
 * (overwritten with q). */
BACKEND_OP(void, expert_choice_gates_backward, (Backend *be, scalar_t *dlogits, scalar_t *dscore, const scalar_t *dgate,
                                                const int32_t *pos, const scalar_t *logits, int N, int E, int c))

/* ---- routing plan: the entries of one routing decision sorted by expert, built once, read by every cvmm ----
 * routing_plan fills plan (memory provided by the caller, see RoutingPlan) from sel[M], values in
 * [0, n_experts): perm/inv/offset are the stable counting sort of the entries by expert (sorted position m holds
 * entry perm[m]; expert e's entries are the sorted positions [offset[e], offset[e+1]), in entry order), and the
 * non-empty experts in increasing order. An id outside [0, n_experts) dies naming the first such entry (a backend
 * that finds it on its device may die at its next wait instead: CUDA's read_values, a value an op returns, to_host
 * or synchronize; the plan's reads stay in bounds until then). One
 * routing decision (e.g. the FFN's sel[N,K]) is planned once per forward and its plan serves the forward's and
 * the backward's cvmm calls of that decision (route once, sort once: ScatterMoE, MegaBlocks). */
BACKEND_OP(void, routing_plan, (Backend *be, RoutingPlan *plan, const int32_t *sel, int M, int n_experts))

/* ---- cvmm: conditional (expert-selected) vector-matrix multiply ----
 * The M entries p = 0..M-1 of plan (M = plan->M), expert sel[p], weights W[n_experts, Kin, Nout].
 *   y_p = X[p / in_div, :] @ W[sel[p]]                        (X has M/in_div rows of Kin)
 * Without reduction (w == NULL): Y[p, :] = y_p                (Y[M, Nout], overwritten)
 * With reduction weights w[M]:   Y[r, :] = sum_{p: p/out_div == r} w[p] * y_p   (Y[M/out_div, Nout], overwritten)
 * order (CvmmOrder flags) lets rows stay in plan order between calls that share a plan:
 *   CVMM_IN_SORTED:  X (and the backward's dX) row m is entry perm[m]'s row; needs in_div == 1
 *   CVMM_OUT_SORTED: Y (and the backward's dY) row m is y_{perm[m]}; needs w == NULL (no reduction)
 * and one flag fuses the FFN's ReLU into the up projection (its backward's flag is below):
 *   CVMM_RELU_Y:     Y[p, :] = ReLU(y_p) = (y_p > 0 ? y_p : 0) per element, relu_forward's select on the same
 *                    product, so the same bits as cvmm_forward then relu_forward; needs w == NULL
 * and two flags keep a plan-order tensor that only cvmm reads in cvmm's narrow operand form (the FFN's A and dU):
 *   CVMM_OUT_NARROW: (needs CVMM_OUT_SORTED) Y is written, and the backward's dY read, in the narrow form
 *   CVMM_IN_NARROW:  (needs CVMM_IN_SORTED) X is read, and the backward's dX written, in the narrow form
 *   The narrow form of a backend whose cvmm products round their operands to bf16 (CUDA in bf16 mode on its
 *   tensor-core path) is the values rounded to bf16, packed in the first half of the tensor's bytes, as autocast's
 *   cvmm stores its outputs: the products read exactly the values they read before; the gate weights of dW and dw
 *   and the ReLU mask (bf16(A) > 0) see the rounded values. Every other backend keeps the exact fp32 tensor. A
 *   narrow tensor is read by nothing but cvmm calls with the matching flag on the same backend and precision.
 * The four MoE call patterns (spec §4.3):
 *   FFN up   : X=x[N,C],       sel[N,K],      in_div=K,    w=NULL          -> U[N*K, S]  (MoEUT: OUT_SORTED|NARROW)
 *   FFN down : X=A[N*K,S],     sel[N,K],      in_div=1,    w[N*K], out_div=K     -> f[N, C]  (MoEUT: IN_SORTED|NARROW)
 *   Att V    : X=x[N,C],       sel[N,H,KA],   in_div=H*KA, w[N*H*KA], out_div=KA -> v[N*H, D]
 *   Att O    : X=r[N*H,D],     sel[N,H,KA],   in_div=KA,   w[N*H*KA], out_div=H*KA -> out[N, C]
 * residual (NULL = none) fuses a layer's residual add into the reduction, so the output is not read again:
 *   Y[r, :] = (sum_{p: p/out_div == r} w[p] * y_p) + residual[r, :]   (residual [M/out_div, Nout])
 * the sum first, then one add per element: the same bits as cvmm_forward without it followed by
 * add_inplace(Y, residual). Needs w (a reduction, so entry order). residual is Y itself (in place: each element is
 * read before it is written) or does not overlap Y; anything else dies. */
BACKEND_OP(void, cvmm_forward, (Backend *be, scalar_t *Y, const scalar_t *X, const scalar_t *W, const RoutingPlan *plan,
                                const scalar_t *w, int in_div, int out_div, int Kin, int Nout, int order,
                                const scalar_t *residual))
/* Backward of cvmm_forward, given dY (shape and order of Y), same plan, order and divisors:
 *   G_p = (w ? w[p] * dY[p/out_div] : dY[p])
 *   dX[p/in_div] += G_p @ W[sel[p]]^T      (dX may be NULL)
 *   dW[sel[p]]   += X[p/in_div]^T (x) G_p  (dW may be NULL)
 *   dw[p]         = <dY[p/out_div], y_p>   (overwrite; only when w and dw are non-NULL)
 * CVMM_DX_THROUGH_RELU (the FFN's down projection, X = A = ReLU(U), so A > 0 iff U > 0): dX receives the gradient
 * through that ReLU, and is OVERWRITTEN, not accumulated (no zero fill before):
 *   dX[p] = (X[p] > 0 ? 0 + G_p @ W[sel[p]]^T : 0) per element (needs dX and in_div = 1)
 * the same bits as zeroing dX, cvmm_backward without the flag, then relu_backward(dX, dX, X): a select, so a masked
 * element is +0 as relu_backward makes it. dw (the gate gradients) and dW are those without the flag.
 * CVMM_IN_NARROW in the backward needs dX and CVMM_DX_THROUGH_RELU (a narrow dX is written, never accumulated).
 * dX_base (NULL = none; the shape and order of dX) makes dX's sum start from dX_base instead of dX's contents, so a
 * residual path's gradient is not copied into dX first:
 *   dX[i] = dX_base[i] + the terms of dX[i] above, in their order (the accumulator starts at dX_base[i])
 * the same bits as copy(dX <- dX_base) then cvmm_backward without it. Needs dX and not CVMM_DX_THROUGH_RELU (which
 * overwrites dX: a base has no meaning there); dX_base is dX itself (then the same as NULL) or does not overlap dX
 * (it may be dY: both are only read); anything else dies.
 * CVMM_DX_OVERWRITE (the attention output projection's dX, which nothing else adds to): dX is WRITTEN, not
 * accumulated; its old contents are never read (they may be anything, NaN included):
 *   dX[i] = 0 + the terms of dX[i] above, in their order (the accumulator starts at +0)
 * the same bits as zeroing dX then cvmm_backward without it, without the zero fill's pass over dX and the sum's read
 * of it. Needs dX and no dX_base (a sum starts at one or the other; a dX_base of zeros would still be read);
 * CVMM_DX_THROUGH_RELU overwrites dX already (with it the flag changes nothing). */
BACKEND_OP(void, cvmm_backward, (Backend *be, scalar_t *dX, scalar_t *dW, scalar_t *dw, const scalar_t *dY,
                                 const scalar_t *X, const scalar_t *W, const RoutingPlan *plan, const scalar_t *w,
                                 int in_div, int out_div, int Kin, int Nout, int order, const scalar_t *dX_base))

/* ---- entropy ("perplexity") regularizer, masked [B,B]-broadcast form of the DM-math training code ----
 * logits[R,B,T,G,E]: the raw router logits of the R applications of ONE module (history in application order).
 * valid[B,T] (uint8): 1 where the position has a real target; NULL means all valid.
 * p = softmax over E per (r,b,t,g); cnt_b = R * (valid positions of b); pbar_{b,g} = mean of p over the valid
 * (r,t) of b; H_{b,g} = -sum_e pbar log pbar.
 * value = -(1/(B*B*G)) sum_{i,j,g} r_ij (H_{j,g} - log r_ij),   r_ij = cnt_j / cnt_i
 * (with all positions valid this is -mean_{b,g} H_{b,g}, the spec's layers_time form).
 * Returns value (unscaled). If dlogits != NULL: dlogits = coef * d(value)/d(logits) (overwrite), i.e. for a
 * valid position of sequence j: coef * p (log pbar_j - sum_e p log pbar_j) * mean_i(1/cnt_i) / (B*G); 0 elsewhere.
 * Sequences with no valid position are left out of B entirely.
 * One op for the reason switch_balance is: composed from per-sequence softmax sums and a per-row gradient op, the CUDA
 * form needs a second log-sum-exp pass over the logits and sends log pbar [B,G,E] to the host and back (this op
 * returns only H [B,G]). */
BACKEND_OP(double, entropy_reg, (Backend *be, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid, int R,
                                 int B, int T, int G, int E, scalar_t coef))

/* ---- the values of a training step, kept on the device ----
 * Each *_add op is its namesake above with the value, instead of returned, added to *sum: one double of backend
 * memory, in call order (a sum over calls is made in the order the host would have made it). A backend with a device
 * reads nothing back for them; the caller reads its sums once per step with read_values (kernels/backend.h), the
 * host synchronisation that also brings back the device's error record. */
BACKEND_OP(void, entropy_reg_add, (Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits,
                                   const uint8_t *valid, int R, int B, int T, int G, int E, scalar_t coef))
BACKEND_OP(void, switch_balance_add, (Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits,
                                      const int32_t *sel, const uint8_t *valid, int B, int T, int G, int E, int k,
                                      scalar_t coef))
BACKEND_OP(void, seq_balance_add, (Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits,
                                   const int32_t *sel, const uint8_t *valid, int B, int T, int E, int k,
                                   RouterKind kind, scalar_t coef))
BACKEND_OP(void, cross_entropy_add, (Backend *be, double *sum, scalar_t *dlogits, scalar_t *losses,
                                     const scalar_t *logits, const int32_t *targets, int N, int V,
                                     scalar_t grad_scale))

/* ---- cross-entropy ----
 * logits[N,V], targets[N] with -1 = not counted. Returns sum over counted rows of -log softmax[target].
 * losses[N] (may be NULL) = per-row loss (0 for uncounted rows).
 * dlogits (may be NULL, may alias logits) = grad_scale * (softmax - onehot) on counted rows, 0 on the others. */
BACKEND_OP(double, cross_entropy, (Backend *be, scalar_t *dlogits, scalar_t *losses, const scalar_t *logits,
                                   const int32_t *targets, int N, int V, scalar_t grad_scale))
/* argmax[N] over the last dim of x[N,V] (ties: lowest index). */
BACKEND_OP(void, argmax_rows, (Backend *be, int32_t *argmax, const scalar_t *x, int N, int V))

/* ---- optimizer ----
 * PyTorch AdamW, step t >= 1: p *= (1 - lr*wd); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). m and v are fp32 state the same size as p. g is taken as
 * g * grad_scale, rounded to scalar_t (gradient clipping's coefficient, 1 when it does not clip): the values a
 * scale_inplace of g by grad_scale before the step would give, without writing g. */
BACKEND_OP(void, adamw_step, (Backend *be, scalar_t *p, const scalar_t *g, scalar_t *m, scalar_t *v, size_t n,
                              double lr, double beta1, double beta2, double eps, double wd, long t,
                              scalar_t grad_scale))
/* sum x^2, accumulated in double */
BACKEND_OP(double, sum_squares, (Backend *be, const scalar_t *x, size_t n))
/* 1 if no NaN/Inf */
BACKEND_OP(int, all_finite, (Backend *be, const scalar_t *x, size_t n))

/* ---- expert capacity (Switch Transformer, Fedus et al. 2021 §2.2; GShard, Lepikhin et al. 2020, Algorithm 1) ----
 * capacity_drop: ONE routing decision sel[N,k] (experts 0..E-1, G = 1; without filler slots: the model's expert
 * dropout always leaves k experts) with its gates gate[N,k]. Each expert keeps at most cap >= 1 of its assignments
 * (n,j); the others are dropped: dropped[n*k+j] = 1 and gate[n,j] = 0 (in place); a kept one: dropped = 0, gate as is.
 * An expert keeps the first cap of its assignments in the order
 *   CAPACITY_POSITION: (j, n) ascending: all positions' first choices in position order, then all second choices, ...
 *                      (GShard Algorithm 1; for k = 1 Switch's position order)
 *   CAPACITY_SCORE:    gate descending (the gates as passed in), ties: the lower position first (a token holds an
 *                      expert in at most one slot) (batch-prioritised routing, Riquelme et al. 2021 §3.1, per assignment)
 * counts[E] (may be NULL) += the KEPT assignments of the positions with valid[n] != 0 (valid[N], NULL = all), as
 * expert_count would count them; n_dropped[1] (may be NULL) += the dropped assignments of those positions. The decision
 * itself covers all N positions. Both backends give the same decision for the same gates. */
BACKEND_OP(void, capacity_drop, (Backend *be, uint8_t *dropped, scalar_t *gate, int64_t *counts, int64_t *n_dropped,
                                 const int32_t *sel, const uint8_t *valid, int N, int E, int k, int cap,
                                 CapacityOrder order))
/* mask_zero: x[i] = 0 where mask[i] != 0, i < n (e.g. the gate gradients of the slots capacity_drop dropped). */
BACKEND_OP(void, mask_zero, (Backend *be, scalar_t *x, const uint8_t *mask, size_t n))
