/* Hash routing (model.routing "hash"; Roller et al. 2021, "Hash Layers For Large Sparse Models", arXiv 2106.04426
 * §3): the FFN expert of a position is a fixed function of the position's INPUT token id, the same in every layer
 * application; one expert (k = 1) with gate 1, no router parameters (no ffn.expert_sel, and no ln2: in MoEUT the
 * second LayerNorm feeds only the router), no balancing loss (model.balance "none"; the config's rules:
 * model/switch_rules.c).
 *
 * The hash is the paper's random lookup table made balanced over ids: expert(v) = perm[v] mod E, perm a permutation
 * of the vocabulary 0..V-1 drawn from model.hash_seed, so every expert owns floor(V/E) or ceil(V/E) token ids. The
 * table is recomputed from the config (model.n_tokens, model.ff_n_experts, model.hash_seed, all in a checkpoint's
 * config), not stored as a tensor; its definition, fixed for good (a checkpoint routes by it):
 *   s = hash_seed (as uint64); next() = splitmix64: s += 0x9E3779B97F4A7C15; z = s;
 *     z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31)
 *   perm = [0, 1, .., V-1]; for i = V-1 down to 1: j = next() mod (i + 1); swap(perm[i], perm[j])   (Fisher-Yates)
 *   expert(v) = perm[v] mod E
 *
 * The ids come with every layer call (model_train_step's inputs through train_begin, model_run_layers's tokens,
 * the decoder's), and the MoEUT FFN of each application uploads their experts as its selection
 * (hash_routing_upload). The depth analysis runs erased copies of one prompt with the prompt's ids repeated: the
 * erasure changes the residual stream, not the input tokens. */
#ifndef MODEL_HASH_ROUTING_H
#define MODEL_HASH_ROUTING_H

#include <stdint.h>

#include "model/model.h"

/* table[V] = the expert of every token id (the definition above). */
void hash_routing_table(int32_t *table, int V, int E, uint64_t seed);

typedef struct HashRouting HashRouting;
/* NULL unless cfg routes by hash. */
HashRouting *hash_routing_create(const ModelConfig *cfg);
void hash_routing_free(HashRouting *h);
/* sel_dev[n] (backend memory) = the experts of the token ids tokens[n] (host) of a layer call's positions. Dies when
 * the caller gave no ids or an id is outside the vocabulary. */
void hash_routing_upload(HashRouting *h, Backend *be, int32_t *sel_dev, const int32_t *tokens, int n);

#endif
