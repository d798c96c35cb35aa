/* The selection of expert-choice routing (backend_ops.h, expert_choice_select) on the host: the CPU backend's, the
 * reference of the CUDA backend's selection on the device (cuda_expert_choice.cu, the same scores and tie-break). */
#ifndef KERNELS_EXPERT_CHOICE_PICK_H
#define KERNELS_EXPERT_CHOICE_PICK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* score[N,E] = softmax over each row of logits[N,E], in double (max-subtracted, the routing_key.h way). */
void expert_choice_scores_f(double *score, const float *logits, int N, int E);
void expert_choice_scores_d(double *score, const double *logits, int N, int E);

/* pos[E*c]: for each expert e, the c positions n with valid[n] != 0 (NULL = all) of largest score[n,e], in
 * descending score, ties to the earlier position; pos[e*c + j] = the j-th. expert[E*c] = e of each entry (may be
 * NULL). Dies unless 1 <= c <= the number of valid positions. */
void expert_choice_pick(int32_t *pos, int32_t *expert, const double *score, const uint8_t *valid, int N, int E,
                        int c);

#ifdef __cplusplus
}
#endif

#endif
