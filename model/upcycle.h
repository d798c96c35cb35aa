/* Sparse upcycling: the initial weights of a routed-MoE model converted from a trained dense checkpoint.
 *
 * Sources: Komatsuzaki et al. 2023, "Sparse Upcycling" (arXiv 2212.05055) §3 (method "copy": every expert a copy of
 * the dense MLP, the router new and random, every other weight copied); Qwen1.5-MoE-A2.7B (Qwen team 2024, its model
 * card and blog "Qwen1.5-MoE: Matching 7B Model Performance with 1/3 Activated Parameters") for the fine-grained
 * conversion (method "split": the FFN's hidden units shuffled and split into small experts, with added randomness).
 *
 * Target: the "moe" architecture (a dense pre-LN Transformer whose FFN is routed; experiments/README.md), one
 * distinct layer per application, so each dense layer a maps one to one onto the target's application a: dense
 * layers of the target's dense prefix (model.n_dense_first) take every tensor of dense layer a; a MoE layer takes the
 * attention and LayerNorm tensors of dense layer a, and its experts are made from the dense FFN
 *   W1 = ffn.linear1.weight [F, C], b1 = ffn.linear1.bias [F], W2 = ffn.linear2.weight [C, F],
 *   b2 = ffn.linear2.bias [C]:
 *
 *   copy  (S = F):             keys[e] = W1^T + n,  keys_bias[e] = b1,  values[e] = W2^T + n',  values_bias[e] = b2
 *   split (F = G*S, E = R*G):  expert e = piece g = e mod G of replica r = e div G; pi_r a permutation of the F hidden
 *                              units (one per replica, seeded); P = pi_r[g*S .. (g+1)*S):
 *                              keys[e] = W1[P, :]^T + n,  keys_bias[e] = b1[P],  values[e] = W2[:, P]^T + n',
 *                              values_bias[e] = b2 / G
 *   noise n, n': i.i.d. N(0, (noise * std(W))^2) per element, std(W) the unbiased std of the whole dense W1 (keys) or
 *   W2 (values); biases are never perturbed. noise = 0 copies the values exactly.
 *
 * Why values_bias = b2 / G: the G pieces of one replica, each with gate 1, compute the dense FFN exactly
 * (sum over the pieces of ReLU(u W1[P]^T + b1[P]) W2[:, P]^T + b2 / G); with copy (G = 1) and gates summing to 1
 * (model.router_renorm) the MoE FFN computes the dense FFN's function. The router (ffn.expert_sel) and any tensor
 * not named above are the target architecture's own initialisation (model_init_weights with the upcycle seed);
 * the permutations and the noise come from an Rng seeded with seed + 1.
 */
#ifndef MODEL_UPCYCLE_H
#define MODEL_UPCYCLE_H

#include <stddef.h>

#include "model/model.h"
#include "pipeline/base/safetensors.h"

typedef enum { UPCYCLE_COPY = 0, UPCYCLE_SPLIT = 1 } UpcycleMethod;

/* The run config's optional top-level "upcycle" object: {"from": "dense_qa", "method": "copy" | "split",
 * "seed": 1, "noise": 0.0}. from = the dense run of the same experiment whose final checkpoint is converted. */
typedef struct {
    char from[128];
    UpcycleMethod method;
    long seed;      /* >= 0 */
    double noise;   /* relative std of the added noise, >= 0 (default 0) */
} UpcycleOptions;

struct cJSON;
/* Strict: 0 or -1 with "<source>: upcycle.<key>: <problem>". */
int upcycle_options_from_json(UpcycleOptions *o, const struct cJSON *obj, const char *source, char *err,
                              size_t errlen);
const char *upcycle_method_name(UpcycleMethod m);

/* 0 when target's arch can take dense layers one to one ("moe"), else -1 with one line saying why. */
int upcycle_check_target_arch(const ModelConfig *target, const char *target_source, char *err, size_t errlen);

/* Whether the dense config converts into target under o: 0, or -1 with one line "<target_source>: <why>" (a target
 * that is not "moe" -- MoEUT's shared layers and SwitchHead attention cannot take a dense layer one to one --, a
 * source that is not dense, shapes that differ). */
int upcycle_check(const ModelConfig *dense, const ModelConfig *target, const UpcycleOptions *o,
                  const char *target_source, char *err, size_t errlen);

/* Fills target (created from a config upcycle_check accepted) from the dense tensors of src: the target's init with
 * o->seed, then every converted tensor. 0, or -1 with "<src_name>: <tensor>: <problem>" (a missing tensor, a wrong
 * shape, an unexpected tensor: not a dense checkpoint of the checked config). */
int upcycle_convert(Model *target, const StFile *src, const ModelConfig *dense, const UpcycleOptions *o,
                    const char *src_name, char *err, size_t errlen);

/* The whole stage: reads the dense checkpoint dense_path, converts it into a model of target_cfg (checked first) on
 * the CPU backend and writes out_path atomically: the tensors and __metadata__.config as model_save_safetensors
 * writes them, plus __metadata__.upcycle = {"from", "method", "seed", "noise", "source", "source_sha256"}. */
int upcycle_run(const char *dense_path, const ModelConfig *target_cfg, const UpcycleOptions *o,
                const char *target_source, const char *out_path, char *err, size_t errlen);

#endif
