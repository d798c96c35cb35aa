/* Hash routing: the token -> expert table and the ids of the positions the layers route (see hash_routing.h). */
#include "model/hash_routing.h"

#include <stdlib.h>

#include "pipeline/base/log.h"
#include "pipeline/base/rng.h"

struct HashRouting {
    int V, E;
    int32_t *table; /* [V] expert of token id v */
    int32_t *sel;   /* [cap] host staging of the experts of one layer call's positions */
    size_t cap;
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

void hash_routing_upload(HashRouting *h, Backend *be, int32_t *sel_dev, const int32_t *tokens, int n) {
    if (!h || !tokens) die("model: routing \"hash\": a layer call without its positions' token ids");
    if (n < 1) die("hash routing: %d positions", n);
    if ((size_t)n > h->cap) {
        h->sel = xrealloc(h->sel, (size_t)n * sizeof *h->sel);
        h->cap = (size_t)n;
    }
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= h->V) die("hash routing: token[%d] = %d outside [0, %d)", i, tokens[i], h->V);
        h->sel[i] = h->table[tokens[i]];
    }
    be->to_device(be, sel_dev, h->sel, (size_t)n * sizeof(int32_t));
}
