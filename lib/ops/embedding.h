/*
 * embedding.h - Embedding's parameters, shared by the CPU kernels
 * (embedding.c) and the CUDA kernels (embedding.cu).
 */
#ifndef MX_OPS_EMBEDDING_H
#define MX_OPS_EMBEDDING_H

#include <stdbool.h>
#include <stdint.h>

typedef struct emb_params {
    int64_t input_dim;
    int64_t output_dim;
    int dtype;
    bool sparse_grad;
} emb_params;

#endif /* MX_OPS_EMBEDDING_H */
