/* KV-cache decoding (batch 1): one LayerKV per layer APPLICATION (shared MoEUT layers still see different inputs at
 * each application, so their keys/values differ). Queries are rotated at their true positions
 * (pos_offset = cache length; moeut-spec.md §3.8 with the reference bug fixed), so decoding n tokens and then one at a
 * time gives the same logits as a full forward pass.
 *
 * Memory: the keys and values of all applications are ONE backend allocation of their own, carved with the
 * activation planner, and not part of the model's activation arena: the cache is state that must survive from one
 * model_decode call to the next, while the arena may be re-planned (its contents lost) at the start of any call that
 * brings more tokens; and its size follows max_T, not the tokens of a call. model_decode itself allocates nothing:
 * its residual stream and logits are the arena's eval buffers.
 */
#include <stdlib.h>

#include "model/model_internal.h"
#include "pipeline/base/log.h"

KVCache *kv_cache_create(Model *m, int max_T) {
    if (max_T < 1) die("kv_cache_create: max_T must be >= 1 (got %d)", max_T);
    KVCache *c = xcalloc(1, sizeof *c);
    c->m = m;
    c->max_T = max_T;
    c->len = 0;
    const int L = m->cfg.n_layers;
    // For both archs the attention op reads [T, H, D] with H = n_heads and D = d_head.
    const size_t per = (size_t)max_T * (size_t)m->cfg.n_heads * (size_t)m->cfg.d_head;
    c->apps = xcalloc((size_t)L, sizeof *c->apps);
    ActivationPlan plan;
    plan_init(&plan);
    for (int a = 0; a < L; a++) {
        plan_scalars(&plan, &c->apps[a].k, per); /* [max_T, H, D] */
        plan_scalars(&plan, &c->apps[a].v, per); /* [max_T, H, D] */
    }
    arena_init(&c->mem, m->be);
    arena_commit(&c->mem, &plan);
    plan_free(&plan);
    return c;
}

void kv_cache_free(KVCache *c) {
    if (!c) return;
    arena_free(&c->mem);
    free(c->apps);
    free(c);
}

void kv_cache_reset(KVCache *c) { c->len = 0; }
int kv_cache_length(const KVCache *c) { return c->len; }

void model_decode(Model *m, KVCache *c, const int32_t *tokens, int n, float *logits_host) {
    if (c->m != m) die("model_decode: the KV cache belongs to another model");
    if (n < 1) die("model_decode: need at least one token (got %d)", n);
    if (c->len + n > c->max_T)
        die("model_decode: %d cached + %d new tokens exceed the cache size %d", c->len, n, c->max_T);
    Backend *be = m->be;
    const int V = m->cfg.n_tokens;
    model_reserve_activations(m, 0, n); /* the only place this call may re-plan: before h points into the arena */
    m->arena_busy++;
    scalar_t *h = m->eval_h;      // [1, n, C]
    scalar_t *logits = m->logits; // [n, V]
    model_embed(m, h, tokens, 1, n);
    for (int a = 0; a < m->cfg.n_layers; a++)
        model_app_impl(m, a)->forward_infer(m, a, h, 1, n, tokens, &c->apps[a], c->len);
    model_head(m, logits, h, 1, n);
    c->len += n;
#ifdef SCALAR_F64
    scalar_t *tmp = xmalloc((size_t)n * V * sizeof(scalar_t));
    be->to_host(be, tmp, logits, (size_t)n * V * sizeof(scalar_t));
    for (size_t i = 0; i < (size_t)n * V; i++) logits_host[i] = (float)tmp[i];
    free(tmp);
#else
    be->to_host(be, logits_host, logits, (size_t)n * V * sizeof(scalar_t));
#endif
    m->arena_busy--;
}
