/* Verdict rules (the definitions are in verdict.h, where the report's readers are pointed). */
#include "pipeline/report/verdict.h"

#include <math.h>

const char *verdict_label(Verdict v) {
    switch (v) {
    case VERDICT_CONSISTENT: return "consistent";
    case VERDICT_CONTRADICTED: return "contradicted";
    case VERDICT_SMALLER_THAN_PAPER: return "smaller than the paper's effect";
    case VERDICT_NOT_COMPARABLE: return "not comparable";
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

bool verdict_below_paper_effect(double lo, double hi, double paper_effect) {
    if (!isfinite(lo) || !isfinite(hi) || lo > hi || !isfinite(paper_effect) || paper_effect == 0) return false;
    return paper_effect > 0 ? hi < paper_effect : lo > paper_effect;
}

bool verdict_off_floor(const double *levels, int n) {
    if (n < 1) return false;
    for (int i = 0; i < n; i++)
        if (!(levels[i] >= VERDICT_FLOOR_ACCURACY && levels[i] <= 1 - VERDICT_FLOOR_ACCURACY)) return false;
    return true;
}

Verdict verdict_effect(double lo, double hi, int n_seeds, double paper_effect, bool off_floor) {
    const Verdict v = verdict_direction(lo, hi, n_seeds, paper_effect >= 0 ? +1 : -1);
    if (v != VERDICT_NOT_RESOLVED) return v;
    if (n_seeds >= VERDICT_MIN_SEEDS && off_floor && verdict_below_paper_effect(lo, hi, paper_effect))
        return VERDICT_SMALLER_THAN_PAPER;
    return VERDICT_NOT_RESOLVED;
}

const char *verdict_why_label(VerdictWhy w) {
    switch (w) {
    case VERDICT_WHY_RESOLVED: return "resolved";
    case VERDICT_WHY_NO_DATA: return "not computed";
    case VERDICT_WHY_SIZE: return "below the paper's scale";
    case VERDICT_WHY_ONE_SEED: return "one seed";
    case VERDICT_WHY_FLOOR: return "accuracy on the floor";
    default: return "the interval contains 0";
    }
}

VerdictWhy verdict_direction_why(double lo, double hi, int n_seeds, int direction) {
    if (verdict_direction(lo, hi, n_seeds, direction) != VERDICT_NOT_RESOLVED) return VERDICT_WHY_RESOLVED;
    return n_seeds < VERDICT_MIN_SEEDS ? VERDICT_WHY_ONE_SEED : VERDICT_WHY_INTERVAL;
}

VerdictWhy verdict_effect_why(double lo, double hi, int n_seeds, double paper_effect, bool off_floor) {
    if (verdict_effect(lo, hi, n_seeds, paper_effect, off_floor) != VERDICT_NOT_RESOLVED) return VERDICT_WHY_RESOLVED;
    if (n_seeds < VERDICT_MIN_SEEDS) return VERDICT_WHY_ONE_SEED;
    return off_floor ? VERDICT_WHY_INTERVAL : VERDICT_WHY_FLOOR;
}

VerdictWhy verdict_paper_number_why(double lo, double hi, double paper_value, bool at_paper_scale) {
    if (!at_paper_scale) return VERDICT_WHY_SIZE;
    return verdict_paper_number(lo, hi, paper_value, at_paper_scale) != VERDICT_NOT_RESOLVED ? VERDICT_WHY_RESOLVED
                                                                                             : VERDICT_WHY_INTERVAL;
}
