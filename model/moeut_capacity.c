/* Expert capacity of MoEUT's FFN router (model.ff_capacity_factor; Switch Transformer, Fedus et al. 2021 §2.2;
 * GShard, Lepikhin et al. 2020, Algorithm 1). The dropping itself is the backend's capacity_drop. */
#include <limits.h>
#include <math.h>

#include "model/moeut_internal.h"

/* EC = max(1, floor(CF * K * N / E + 1/2)): the expected assignments per expert K*N/E times CF, rounded half up. */
int moeut_capacity(const ModelConfig *c, int N) {
    const double ec = floor(c->ff_capacity_factor * (double)c->ff_k * (double)N / (double)c->ff_n_experts + 0.5);
    return ec < 1.0 ? 1 : ec > (double)INT_MAX ? INT_MAX : (int)ec;
}
