/* Validation of arch "moe" (a dense pre-LN Transformer whose FFN is a routed mixture of experts; model/moe_layer.c). */
#ifndef MODEL_MOE_CONFIG_H
#define MODEL_MOE_CONFIG_H

#include <stddef.h>

#include "model/model.h"

/* The "moe"-specific checks of model_config_validate (the common sizes and dropout are checked by the caller):
 * 0, or -1 with "model.<key>: <problem>" in err. */
int moe_config_validate(const ModelConfig *cfg, char *err, size_t errlen);

#endif
