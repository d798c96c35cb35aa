/* Routing statistics of an FFN router (MoEUT's σ-MoE and the variants of model.router/balance): how the token-to-expert
 * selections spread over the experts, per layer application. The one definition of these numbers and of their JSON
 * object, written by bin/train into metrics.jsonl (the logged step's batch), by bin/evaluate into result.json (each
 * evaluation set) and read back strictly by the report.
 *
 * Input: counts[A, E], the number of selections (token, slot) each expert e got in layer application a (the backend's
 * expert_count), and the number of routed positions. Derived, per application with c = sum_e counts[a, e] > 0:
 *   load_e          = counts[a, e] / c                    the share of the selections (sums to 1; 1/E when balanced)
 *   max_over_mean   = max_e load_e * E                    1 balanced .. E (one expert takes every selection)
 *   unused_fraction = |{e : counts[a, e] = 0}| / E        experts that got no token at all
 *   entropy         = -sum_e load_e ln(load_e) / ln(E)    1 balanced .. 0 (one expert); the routing entropy of the
 *                                                         load, normalised so that router sizes compare
 * An application with c = 0 (no routed position) has load 0, max_over_mean 0, unused_fraction 1 and entropy 0.
 *
 * JSON: {"n_experts": E, "k": k, "tokens": n, "first_application": a0, "applications": [{"counts": [E ints],
 *        "max_over_mean": x, "unused_fraction": x, "entropy": x}, ... A of them]}
 * The applications are the model's routed ones, a0 .. a0 + A - 1 (a0 = model.n_dense_first: the dense prefix routes
 * nothing); "first_application" may be absent in records written before it existed (then 0).
 * Expert capacity (model.ff_capacity_factor > 0, training only): every application also has "dropped", the token-expert
 * assignments over capacity (not in its counts: the counts are the kept ones); then the derived figures describe the
 * kept load, and counts + dropped <= k * tokens. Optional: absent without capacity (and in older records), but then
 * absent in every application.
 * A model whose layers have different expert counts (model.ff_n_experts_per_layer, a pyramid) writes "n_experts" =
 * the largest E and, in every application, its own "n_experts": E_a and E_a counts; E_a replaces E in the derived
 * fields above. Records without the per-application key (every older one) mean E_a = E.
 * The counts are the record (exact integers); the reader recomputes the derived fields from them and refuses a
 * record whose written ones disagree, so that the file cannot say two things. */
#ifndef PIPELINE_ROUTING_STATS_H
#define PIPELINE_ROUTING_STATS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct {
    int64_t selections;      /* sum of the counts */
    double max_over_mean, unused_fraction, entropy;
} RoutingApp;

typedef struct {
    int first_app;           /* model application of apps[0] */
    int n_apps, n_experts, k;
    int64_t tokens;          /* routed positions (each makes k selections, fewer where expert dropout left fillers) */
    int64_t *counts;         /* [n_apps, n_experts] */
    RoutingApp *apps;        /* [n_apps] */
    int64_t *dropped;        /* [n_apps] assignments dropped over expert capacity, NULL = not recorded (no capacity) */
    int *app_experts;        /* [n_apps] E_a <= n_experts of each application (a pyramid; counts[a, e >= E_a] = 0), or
                              * NULL: n_experts for every application */
} RoutingStats;

/* Copies counts[n_apps * n_experts] (applications first_app ..) and derives the per-application figures. */
void routing_stats_from_counts(RoutingStats *s, const int64_t *counts, int first_app, int n_apps, int n_experts,
                               int k, int64_t tokens);
/* Records dropped[n_apps] (expert capacity) beside the counts (a copy). */
void routing_stats_set_dropped(RoutingStats *s, const int64_t *dropped);
/* The dropped share of application a's assignments, dropped / (selections + dropped); 0 without them. */
double routing_stats_dropped_fraction(const RoutingStats *s, int a);
/* As routing_stats_from_counts, application a with its own app_experts[a] <= n_experts experts (its first ones of
 * the n_experts counts of its row); app_experts NULL or all n_experts gives the uniform record. */
void routing_stats_from_counts_per_app(RoutingStats *s, const int64_t *counts, int first_app, int n_apps,
                                       int n_experts, const int *app_experts, int k, int64_t tokens);
/* E_a of application a. */
int routing_stats_app_experts(const RoutingStats *s, int a);
/* load_e of application a (0 when the application routed nothing). */
double routing_stats_load(const RoutingStats *s, int a, int e);
/* The mean over applications of max_over_mean, unused_fraction and entropy (a run's one-line summary). */
void routing_stats_mean(const RoutingStats *s, double *max_over_mean, double *unused_fraction, double *entropy);

cJSON *routing_stats_to_json(const RoutingStats *s);
/* Strict reader: unknown or missing keys, wrong types, negative counts, a counts array of the wrong length, more
 * selections than k * tokens, or derived fields that disagree with the counts (beyond 1e-9) give -1 with
 * "<source>: <path>.<key>: <problem>" in err. path names the object, e.g. "evaluation.sets.interpolate.routing". */
int routing_stats_from_json(RoutingStats *s, const cJSON *obj, const char *source, const char *path, char *err,
                            size_t errlen);
void routing_stats_free(RoutingStats *s); /* frees the arrays; the struct is the caller's */

#endif
