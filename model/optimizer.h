/* Optimisation pieces of a training step (moeut-spec.md §6.3-6.5, dm-math-training-code.md §C.7):
 * the learning-rate schedule, global-norm gradient clipping, and AdamW over the model's contiguous buffers.
 * Everything runs through the backend, so the same code drives the CPU and CUDA backends. */
#ifndef MODEL_OPTIMIZER_H
#define MODEL_OPTIMIZER_H

#include <stddef.h>

#include "kernels/backend.h"

/* Linear warmup then cosine (CosineAnnealingLR with T_max = steps, NOT steps - warmup), for i = completed steps:
 *   i <  warmup: lr * (i+1) / warmup
 *   i >= warmup: lr_min + (lr - lr_min) * (1 + cos(pi * (i - warmup) / steps)) / 2,   lr_min = min_lr_multiplier*lr */
typedef struct {
    double lr;
    double min_lr_multiplier;
    long warmup;
    long steps;
} LrSchedule;

double lr_at(const LrSchedule *s, long i);

/* Global L2 norm of g[n] (sum of squares accumulated in double). */
double grad_global_norm(Backend *be, const scalar_t *g, size_t n);
/* clip_grad_norm_'s coefficient for a gradient of global norm `norm`: min(1, max_norm / (norm + 1e-6)); 1 when
 * max_norm <= 0 (clipping off) or the norm is not finite (the caller stops on that). The training step hands it to
 * adamw_update, which scales the gradient as it reads it. */
double grad_clip_coef(double norm, double max_norm);
/* clip_grad_norm_: scales g in place by grad_clip_coef of its global norm; returns the norm before clipping. */
double clip_grad_norm(Backend *be, scalar_t *g, size_t n, double max_norm);

/* PyTorch AdamW with one parameter group (weight decay on every parameter). m and v live in backend memory, same
 * layout as the parameters. t = number of updates applied so far (the next update uses bias-correction step t+1). */
typedef struct {
    Backend *be;
    size_t n;
    scalar_t *m;   /* [n] first moment (exp_avg) */
    scalar_t *v;   /* [n] second moment (exp_avg_sq) */
    double beta1, beta2, eps, weight_decay;
    long t;
} AdamW;

void adamw_init(AdamW *o, Backend *be, size_t n, double beta1, double beta2, double eps, double weight_decay);
void adamw_free(AdamW *o);
/* One update of params[n] from grads[n] * grad_scale (gradient clipping's coefficient, 1 for none; grads itself is
 * not written) at learning rate lr; increments t first (PyTorch's step count). */
void adamw_update(AdamW *o, scalar_t *params, const scalar_t *grads, double lr, double grad_scale);

#endif
