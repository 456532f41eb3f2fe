/*
 * dropout.h - Dropout's parameters, shared by dropout.c and dropout.cu.
 */
#ifndef MX_OPS_DROPOUT_H
#define MX_OPS_DROPOUT_H

#include "base/base.h"
#include "params/params.h"

#include <stdbool.h>
#include <stdint.h>

enum { DROP_TRAINING, DROP_ALWAYS };

typedef struct dropout_params {
    double p;
    int mode;
    mx_tuple axes;
    bool cudnn_off;
} dropout_params;

#endif /* MX_OPS_DROPOUT_H */
