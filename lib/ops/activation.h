/*
 * activation.h - Activation's parameters, shared by activation.c and activation.cu.
 */
#ifndef MX_OPS_ACTIVATION_H
#define MX_OPS_ACTIVATION_H

#include "base/base.h"
#include "params/params.h"

#include <stdbool.h>
#include <stdint.h>

enum { ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_SOFTRELU, ACT_SOFTSIGN };

typedef struct act_params {
    int act_type;
} act_params;

#endif /* MX_OPS_ACTIVATION_H */
