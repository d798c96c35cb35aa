/* Verdict rules (the definitions are in verdict.h, where the report's readers are pointed). */
#include "pipeline/verdict.h"

#include <math.h>

const char *verdict_label(Verdict v) {
    switch (v) {
    case VERDICT_CONSISTENT: return "consistent";
    case VERDICT_CONTRADICTED: return "contradicted";
    default: return "not resolved at this size";
    }
}

Verdict verdict_direction(double lo, double hi, int n_seeds, int direction) {
    if (n_seeds < VERDICT_MIN_SEEDS || !isfinite(lo) || !isfinite(hi) || lo > hi) return VERDICT_NOT_RESOLVED;
    /* Map to "paper says positive" so one test serves both directions. */
    const double plo = direction >= 0 ? lo : -hi, phi = direction >= 0 ? hi : -lo;
    if (plo > 0) return VERDICT_CONSISTENT;
    if (phi < 0) return VERDICT_CONTRADICTED;
    return VERDICT_NOT_RESOLVED;
}

bool verdict_at_paper_scale(double n_params, double train_tokens) {
    return n_params >= VERDICT_SCALE_FRACTION * PAPER_PARAMS && train_tokens >= VERDICT_SCALE_FRACTION * PAPER_TOKENS;
}

Verdict verdict_paper_number(double lo, double hi, double paper_value, bool at_paper_scale) {
    if (!at_paper_scale || !isfinite(lo) || !isfinite(hi) || lo > hi) return VERDICT_NOT_RESOLVED;
    return lo <= paper_value && paper_value <= hi ? VERDICT_CONSISTENT : VERDICT_CONTRADICTED;
}
