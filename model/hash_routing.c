/* Hash routing: the token -> expert table and the ids of the positions the layers route (see hash_routing.h). */
#include "model/hash_routing.h"

#include <stdlib.h>

#include "pipeline/base/log.h"
#include "pipeline/base/rng.h"

struct HashRouting {
    int V, E;
    int32_t *table; /* [V] expert of token id v */
    int32_t *sel;   /* [B*T] experts of the positions recorded last (host), capacity cap */
    size_t cap;
    int B, T;       /* shape of the recorded positions; B = 0: none yet */
};

void hash_routing_table(int32_t *table, int V, int E, uint64_t seed) {
    if (V < 1 || E < 1) die("hash_routing_table: V = %d, E = %d", V, E);
    for (int v = 0; v < V; v++) table[v] = v; /* perm, built in place */
    uint64_t s = seed;
    for (int i = V - 1; i >= 1; i--) {
        int j = (int)(splitmix64_next(&s) % (uint64_t)(i + 1));
        int32_t t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
    for (int v = 0; v < V; v++) table[v] %= E;
}

HashRouting *hash_routing_create(const ModelConfig *cfg) {
    if (cfg->arch != ARCH_MOEUT || cfg->routing != ROUTING_HASH) return NULL;
    HashRouting *h = xcalloc(1, sizeof *h);
    h->V = cfg->n_tokens;
    h->E = cfg->ff_n_experts;
    h->table = xmalloc((size_t)h->V * sizeof *h->table);
    hash_routing_table(h->table, h->V, h->E, (uint64_t)cfg->hash_seed);
    return h;
}

void hash_routing_free(HashRouting *h) {
    if (!h) return;
    free(h->table);
    free(h->sel);
    free(h);
}

void hash_routing_set_tokens(HashRouting *h, const int32_t *tokens, int B, int T) {
    if (B < 1 || T < 1) die("hash routing: empty batch %dx%d", B, T);
    const size_t n = (size_t)B * (size_t)T;
    if (n > h->cap) {
        h->sel = xrealloc(h->sel, n * sizeof *h->sel);
        h->cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= h->V) die("hash routing: token[%zu] = %d outside [0, %d)", i, tokens[i], h->V);
        h->sel[i] = h->table[tokens[i]];
    }
    h->B = B;
    h->T = T;
}

void hash_routing_upload(const HashRouting *h, Backend *be, int32_t *sel_dev, int B, int T) {
    if (!h || h->B == 0)
        die("model: routing \"hash\": the layers ran before any token ids were given (model_embed, model_train_step)");
    if (T != h->T || B < 1 || B % h->B != 0)
        die("model: routing \"hash\": the layers run on %d x %d positions, but the token ids given last are %d x %d "
            "(a layer call must repeat them)",
            B, T, h->B, h->T);
    const size_t n = (size_t)h->B * (size_t)h->T;
    for (int r = 0; r < B / h->B; r++) /* [B / B_recorded] copies of the recorded [B_recorded, T] */
        be->to_device(be, sel_dev + (size_t)r * n, h->sel, n * sizeof(int32_t));
}
