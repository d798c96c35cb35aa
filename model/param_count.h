/* Parameter counting shared by model_count_params and the config validation (which needs the count before any
 * integer arithmetic could overflow, hence the double variant). */
#ifndef MODEL_PARAM_COUNT_H
#define MODEL_PARAM_COUNT_H

#include "model/model.h"

double model_count_params_double(const ModelConfig *cfg); /* same formula as model_count_params, in double */

#endif
