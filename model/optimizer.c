/* LR schedule, gradient clipping and AdamW state (see optimizer.h). The per-element math is the backend's
 * adamw_step; this file owns the state and the order of operations. */
#include "model/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

double lr_at(const LrSchedule *s, long i) {
    if (i < s->warmup) return s->lr * (double)(i + 1) / (double)s->warmup;
    double lr_min = s->min_lr_multiplier * s->lr;
    double progress = s->steps > 0 ? (double)(i - s->warmup) / (double)s->steps : 0.0;
    return lr_min + (s->lr - lr_min) * (1.0 + cos(M_PI * progress)) / 2.0;
}

double grad_global_norm(Backend *be, const scalar_t *g, size_t n) { return sqrt(be->sum_squares(be, g, n)); }

double grad_clip_coef(double norm, double max_norm) {
    if (max_norm <= 0.0 || !isfinite(norm)) return 1.0;
    const double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? coef : 1.0;
}

double clip_grad_norm(Backend *be, scalar_t *g, size_t n, double max_norm) {
    const double norm = grad_global_norm(be, g, n), coef = grad_clip_coef(norm, max_norm);
    if (coef < 1.0) be->scale_inplace(be, g, (scalar_t)coef, n);
    return norm;
}

void adamw_init(AdamW *o, Backend *be, size_t n, double beta1, double beta2, double eps, double weight_decay) {
    memset(o, 0, sizeof *o);
    o->be = be;
    o->n = n;
    /* backend alloc zero-fills (and dies with a message on failure): m = v = 0 as in PyTorch. */
    snprintf(be->alloc_purpose, sizeof be->alloc_purpose, "the AdamW moments of %zu parameters (the model config)", n);
    o->m = be->alloc(be, n * sizeof(scalar_t));
    o->v = be->alloc(be, n * sizeof(scalar_t));
    be->alloc_purpose[0] = '\0';
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    o->t = 0;
}

void adamw_free(AdamW *o) {
    if (!o->be) return;
    o->be->free(o->be, o->m);
    o->be->free(o->be, o->v);
    o->m = o->v = NULL;
}

void adamw_update(AdamW *o, scalar_t *params, const scalar_t *grads, double lr, double grad_scale) {
    o->t++;
    o->be->adamw_step(o->be, params, grads, o->m, o->v, o->n, lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->t,
                      (scalar_t)grad_scale);
}
