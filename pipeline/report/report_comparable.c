/* Comparable pairs of run configurations (report_comparable.h). */
#include "pipeline/report/report_comparable.h"

#include <stdio.h>
#include <string.h>

#include "pipeline/records/config_diff.h"

/* The architecture's own train keys (its whole model section aside). */
static const char *const ARCH_TRAIN_KEYS[] = {"train.n_microbatch", NULL};

static bool is_arch_key(const char *key) {
    if (strncmp(key, "model.", 6) == 0) return true;
    for (int i = 0; ARCH_TRAIN_KEYS[i]; i++)
        if (strcmp(key, ARCH_TRAIN_KEYS[i]) == 0) return true;
    return false;
}

bool report_key_may_differ(const RunGroup *a, const RunGroup *b, const char *key) {
    if (strcmp(key, "train.seed") == 0 || config_key_is_analysis_only(key)) return true;
    if (strcmp(a->arch, b->arch) != 0 && is_arch_key(key)) return true;
    return strcmp(a->loss_mode, b->loss_mode) != 0 && strcmp(key, REPORT_LOSS_MODE_KEY) == 0;
}

static const cJSON *group_config(const RunGroup *g) { return g->n > 0 ? g->runs[0]->res.config : NULL; }

int report_pair_confounds(const RunGroup *a, const RunGroup *b, char *out, size_t cap) {
    const cJSON *cfg[2] = {group_config(a), group_config(b)};
    ConfigDiff diff;
    config_diff(cfg, 2, NULL, &diff);
    int n = 0;
    size_t len = 0;
    if (cap) out[0] = '\0';
    for (int r = 0; r < diff.n_rows; r++) {
        const ConfigDiffRow *row = &diff.rows[r];
        if (report_key_may_differ(a, b, row->key)) continue;
        if (len < cap) {
            /* a value of at most 40 characters: an array or a long string is named, not quoted whole */
            const char *va = row->values[0] ? row->values[0] : "absent", *vb = row->values[1] ? row->values[1] : "absent";
            int w = snprintf(out + len, cap - len, "%s%s differs (%s %.40s%s / %s %.40s%s)", n ? "; " : "", row->key,
                             a->label, va, strlen(va) > 40 ? "..." : "", b->label, vb, strlen(vb) > 40 ? "..." : "");
            len = w < 0 ? cap : len + (size_t)w;
        }
        n++;
    }
    config_diff_free(&diff);
    return n;
}

bool report_claim_comparable(const RunGroup *const *groups, int n, char *why, size_t cap) {
    /* neighbours first (for four: the loss-mode pairs 0-1, 2-3, then the architecture pairs 0-2, 1-3), then the rest */
    static const int FOUR[6][2] = {{0, 1}, {2, 3}, {0, 2}, {1, 3}, {0, 3}, {1, 2}};
    int pairs[64][2], n_pairs = 0;
    if (n == 4) {
        memcpy(pairs, FOUR, sizeof FOUR);
        n_pairs = 6;
    } else
        for (int i = 0; i < n && i < 8; i++)
            for (int j = i + 1; j < n && j < 8; j++) {
                pairs[n_pairs][0] = i;
                pairs[n_pairs++][1] = j;
            }
    if (cap) why[0] = '\0';
    for (int p = 0; p < n_pairs; p++) {
        const RunGroup *a = groups[pairs[p][0]], *b = groups[pairs[p][1]];
        if (!a || !b || !group_config(a) || !group_config(b)) continue;
        if (report_pair_confounds(a, b, why, cap) > 0) return false;
    }
    return true;
}
