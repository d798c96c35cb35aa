/* The routing kind of a config (model/routing_kind.h). */
#include "model/routing_kind.h"

#include "pipeline/base/log.h"

const MoeutRouting *moeut_routing_of(const ModelConfig *c) {
    static const MoeutRouting *const kinds[] = {
        [ROUTING_TOPK] = &moeut_routing_topk,
        [ROUTING_EXPERT_CHOICE] = &moeut_routing_expert_choice,
        [ROUTING_HASH] = &moeut_routing_hash,
    };
    if ((int)c->routing < 0 || (size_t)c->routing >= sizeof kinds / sizeof kinds[0] || !kinds[c->routing])
        die("moeut: invalid model.routing %d", (int)c->routing);
    return kinds[c->routing];
}
